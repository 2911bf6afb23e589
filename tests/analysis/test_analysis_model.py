"""Exact model-state figures: parameters, buffers, gradients, optimizer state; activations; user objects
unchanged; one-line errors. Real torch on the CPU."""

import copy
from typing import Any, Dict, List

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from gpumem_kernel.analysis.pipeline.analyze import analyze  # noqa: E402
from gpumem_kernel.analysis.model.model_states import model_optimizer_state, read_optimizer_state, unique_bytes  # noqa: E402
from gpumem_kernel.analysis.trace.run import run_trace  # noqa: E402
from gpumem_kernel.analysis.trace.plan import TracePlan  # noqa: E402
from gpumem_kernel.analysis.trace.training_loop import default_loss  # noqa: E402


class TiedLM(nn.Module):
    """Embedding and output projection share one weight (counted once)."""

    def __init__(self, vocab: int = 50, dim: int = 16) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens: Any) -> Any:
        return self.head(self.norm(self.embed(tokens)))


def _mlp() -> Any:
    return nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 24), nn.ReLU(), nn.Linear(24, 5))


def test_parameter_buffer_gradient_bytes_are_exact() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
    report = analyze(model, batch_size=2, input=(3, 8, 8))
    params = (4 * 3 * 9 + 4) + (4 + 4) + (144 * 3 + 3)
    assert report.parameters_bytes == params * 4
    assert report.buffers_bytes == 4 * 4 * 2 + 8  # running mean/var fp32 + num_batches_tracked int64
    assert report.gradients_bytes == params * 4
    assert report.parameters_by_dtype == {"float32": params * 4}
    assert report.buffers_by_dtype == {"float32": 32, "int64": 8}


def test_tied_weight_counts_once() -> None:
    model = TiedLM()
    report = analyze(model, batch_size=2, input=(7,))
    params = 50 * 16 + 2 * 16  # embedding (= head) + layer norm
    assert report.parameter_count == params
    assert report.parameters_bytes == params * 4
    assert report.gradients_bytes == params * 4
    assert report.optimizer_bytes == 2 * params * 4  # exp_avg + exp_avg_sq, once for the shared weight
    assert "tokens" in report.settings["input"]


def test_frozen_parameters_have_no_gradient_or_state() -> None:
    model = _mlp()
    for p in model[0].parameters():
        p.requires_grad_(False)
    report = analyze(model, batch_size=4)
    trainable = (32 * 24 + 24 + 24 * 5 + 5) * 4
    assert report.gradients_bytes == trainable
    assert report.optimizer_bytes == 2 * trainable


def _real_state_bytes(optimizer: Any) -> int:
    return unique_bytes([v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)])


@pytest.mark.parametrize(
    "make",
    [
        lambda ps: torch.optim.Adam(ps, lr=1e-3),
        lambda ps: torch.optim.AdamW(ps, lr=1e-3, foreach=True),
        lambda ps: torch.optim.Adam(ps, lr=1e-3, amsgrad=True),
        lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
        lambda ps: torch.optim.SGD(ps, lr=0.1),
    ],
    ids=["adam", "adamw", "adam-amsgrad", "sgd-momentum", "sgd"],
)
def test_modelled_optimizer_state_equals_a_real_step(make: Any) -> None:
    model = _mlp()
    optimizer = make(model.parameters())
    modelled = model_optimizer_state(list(model.parameters()), optimizer)
    model(torch.randn(4, 20)).pow(2).mean().backward()
    optimizer.step()
    assert modelled.state_bytes + modelled.host_bytes == _real_state_bytes(optimizer)
    device, host = read_optimizer_state(optimizer) or (0, 0)
    assert (device, host) == (modelled.state_bytes, modelled.host_bytes)


@pytest.mark.parametrize(
    "kind, make",
    [
        ("adamw", lambda ps: torch.optim.AdamW(ps, foreach=True)),
        ("sgd-momentum", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, foreach=True)),
    ],
)
def test_traced_optimizer_state_and_foreach_temporaries(kind: str, make: Any) -> None:
    model = _mlp()
    real = make(model.parameters())
    model(torch.randn(4, 20)).pow(2).mean().backward()
    real.step()
    report = analyze(model, batch_size=4, optimizer=kind)
    modelled = model_optimizer_state(list(model.parameters()), kind)
    assert report.optimizer_bytes + report.optimizer_host_bytes == _real_state_bytes(real)
    assert report.optimizer_transient_bytes >= modelled.transient_bytes


def test_traced_activations_of_a_linear_relu_stack_equal_the_saved_tensors() -> None:
    batch = 16
    model = _mlp()
    trace = run_trace(TracePlan(model, "adamw", lambda b, fake: torch.randn(b, 20), default_loss), batch)
    # ReLU saves its outputs (the next Linear's inputs): 32 + 24 floats per sample; the output (5) is kept
    # by the loop and saved by pow; the loss is one float. Linear outputs before a ReLU are freed.
    assert trace.activations == 4 * batch * (32 + 24 + 5) + 4
    assert trace.input == 4 * batch * 20


def _snapshot(model: Any, optimizer: Any) -> Dict[str, Any]:
    return {
        "state": {k: v.clone() for k, v in model.state_dict().items()},
        "ptrs": [p.data_ptr() for p in model.parameters()],
        "grads": [None if p.grad is None else p.grad.clone() for p in model.parameters()],
        "training": model.training,
        "optimizer": copy.deepcopy(optimizer.state_dict()),
        "rng": torch.get_rng_state(),
    }


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def test_user_model_optimizer_and_rng_are_unchanged() -> None:
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(20, 32), nn.BatchNorm1d(32), nn.Dropout(0.5), nn.ReLU(), nn.Linear(32, 5))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(8, 20)).pow(2).mean().backward()
    optimizer.step()  # stepped: state exists, and grads are still set
    model.eval()
    before = _snapshot(model, optimizer)
    report = analyze(model, batch_size=8, optimizer=optimizer, amp="bf16", memory="4GiB")
    after = _snapshot(model, optimizer)
    assert _same(before, after)
    assert not torch.cuda.is_initialized()  # never creates a CUDA context on its own
    assert report.optimizer_bytes == read_optimizer_state(optimizer)[0]  # read from the user's optimizer
    assert any("eval mode" in note for note in report.notes)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda m: analyze([m], batch_size=4), "torch.nn.Module"),
        (lambda m: analyze(m, batch_size=0), "batch_size"),
        (lambda m: analyze(m, batch_size=4, input="3xfoo"), "input shape"),
        (lambda m: analyze(m, batch_size=4, input=(0, 3)), "input shape"),
        (lambda m: analyze(m, batch_size=4, target="RTX 9999"), "unknown GPU"),
        (lambda m: analyze(m, batch_size=4, optimizer="lion"), "optimizer"),
        (lambda m: analyze(m, batch_size=4, amp="fp8"), "amp"),
        (lambda m: analyze(m, batch_size=4, strategy="zero4"), "strategy"),
        (lambda m: analyze(m, batch_size=4, memory="lots"), "memory"),
        (lambda m: analyze(m, batch_size=4, input=(21,)), "training step failed"),
        (lambda m: analyze(nn.Conv2d(3, 3, 3), batch_size=4), "input="),
    ],
)
def test_bad_arguments_raise_one_line_value_errors(call: Any, message: str) -> None:
    with pytest.raises(ValueError) as info:
        call(_mlp())
    text = str(info.value)
    assert message in text and "\n" not in text


def test_real_steps_of_the_measured_engine_leave_the_user_objects_alone() -> None:
    from gpumem_kernel.analysis.request.inputs import batch_maker
    from gpumem_kernel.analysis.measure.real_steps import _preserved_rng, run_real_steps

    torch.manual_seed(2)
    model = nn.Sequential(nn.Linear(20, 32), nn.Dropout(0.2), nn.ReLU(), nn.Linear(32, 5))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model(torch.randn(8, 20)).pow(2).mean().backward()
    optimizer.step()
    before = _snapshot(model, optimizer)
    make_batch, _ = batch_maker(model, (20,))
    seen: List[int] = []
    with _preserved_rng():  # as measure_step_peaks runs it on the GPU
        run_real_steps(TracePlan(model, optimizer, make_batch, default_loss, amp="bf16"), 8, "cpu", on_step=seen.append)
    assert seen == [1, 2, 3]
    assert _same(before, _snapshot(model, optimizer))
