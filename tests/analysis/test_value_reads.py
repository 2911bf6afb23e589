"""value_reads.describe names the operator a fake trace cannot follow and the user's line that asked for it."""

import pytest

torch = pytest.importorskip("torch")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

from gpumem_kernel.analysis.fake.value_reads import describe  # noqa: E402


def _count_per_image(batch_idx):  # a detector's loss counts its targets per image
    return batch_idx.unique(return_counts=True)


def _raised(fn, *args):
    with FakeTensorMode():
        x = torch.zeros(8)
        try:
            fn(x, *args)
        except Exception as exc:
            return exc
    raise AssertionError("the fake trace followed it")


def test_an_output_size_that_depends_on_values_names_the_operator_and_the_line() -> None:
    line = describe(_raised(_count_per_image))
    assert line.startswith("aten._unique2 (output size depends on tensor values) at ")
    assert "test_value_reads.py:" in line and line.endswith("in _count_per_image")


def test_a_python_value_read_names_item() -> None:
    line = describe(_raised(lambda x: int(x.sum().item())))
    assert line.startswith("aten._local_scalar_dense (a Python value read from a tensor) at ")


def test_other_errors_are_not_described() -> None:
    assert describe(ValueError("shapes do not match")) is None


class _Gated(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        keep = x[:, : int(x.sum() > 0)]  # a slice as long as a value (boolean masks are hinted: size_hints)
        return self.linear(x) + keep.sum()


def test_the_analysis_error_names_the_operator_and_the_users_line() -> None:
    from gpumem_kernel.analysis.pipeline.analyze import analyze

    with pytest.raises(ValueError) as caught:
        analyze(_Gated(), batch_size=4, input=(8,), memory="8GiB")

    message = str(caught.value)
    assert message.startswith("the model's forward depends on tensor values (aten.")
    assert "test_value_reads.py:" in message and "in forward)" in message and "\n" not in message


class _LayerDrop(torch.nn.Module):
    """wav2vec2's and Whisper's LayerDrop: a scalar draw per layer skips the layer below the drop rate."""

    def __init__(self, layerdrop: float) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(64, 64) for _ in range(4))
        self.layerdrop = layerdrop

    def forward(self, x):
        for layer in self.layers:
            if self.training and torch.rand([]) < self.layerdrop:
                continue
            x = torch.relu(layer(x))
        return x


def test_layerdrop_is_traced_with_every_layer_kept() -> None:
    from gpumem_kernel.analysis.pipeline.analyze import analyze

    rand = torch.rand
    dropping = analyze(_LayerDrop(0.5), batch_size=16, input=(64,), memory="8GiB")
    keeping = analyze(_LayerDrop(0.0), batch_size=16, input=(64,), memory="8GiB")

    assert dropping.peak_live_bytes == keeping.peak_live_bytes  # no layer skipped: the step's largest memory
    assert dropping.activations_bytes == keeping.activations_bytes
    assert torch.rand is rand and torch.rand(3).shape == (3,)  # put back after the trace
