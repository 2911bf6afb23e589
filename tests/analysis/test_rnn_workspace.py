"""The oneDNN RNN workspace a trace adds where fake kernels leave it out, against the real kernel's."""

from typing import Any, Tuple

import pytest

torch = pytest.importorskip("torch")

from gpumem_kernel.analysis.fake import rnn_workspace  # noqa: E402


def _rnn_key(steps: int, batch: int, hidden: int, inputs: int, dtype: Any) -> Tuple[Any, ...]:
    """mkldnn_rnn_layer's arguments for one LSTM layer, as the trace keys them (shapes, not tensors)."""

    def t(*shape: int) -> Tuple[Any, ...]:
        return ("tensor", shape, dtype)

    gates = 4 * hidden
    weights = (t(gates, inputs), t(gates, hidden), t(gates), t(gates))
    return (t(steps, batch, inputs), *weights, t(batch, hidden), t(batch, hidden), False, ("list", ()), 2, hidden, 1)


def _rnn_dtypes() -> list:
    """fp32, and bf16 where this CPU's oneDNN has a bf16 RNN kernel (read off the machine, not assumed)."""
    from gpumem_kernel.analysis.fake.rnn_workspace import measured_rnn_workspace

    dtypes = [torch.float32]
    try:
        measured_rnn_workspace(_rnn_key(2, 2, 8, 8, torch.bfloat16) + (True, False, True, True), 2, 2)
        dtypes.append(torch.bfloat16)
    except RuntimeError:
        pass
    return dtypes


@pytest.mark.parametrize("steps, batch, hidden, inputs", [(37, 100, 96, 50), (300, 3, 64, 64), (24, 8, 64, 32)])
def test_the_rnn_workspace_of_a_large_layer_comes_from_four_small_calls(
    monkeypatch: pytest.MonkeyPatch, steps: int, batch: int, hidden: int, inputs: int
) -> None:
    """A layer too large to run for real has its oneDNN workspace from calls at batches 64 and 128, steps 1 and
    2: at most a page per workspace part low of what the real kernel keeps, whatever this CPU's kernels are
    (scaling one small call up, as before, was 24 KiB high on a 2-layer LSTM where oneDNN runs bf16)."""
    monkeypatch.setattr(rnn_workspace, "RNN_EXACT_MACS", 0)
    for dtype in _rnn_dtypes():
        key = _rnn_key(steps, batch, hidden, inputs, dtype) + (True, False, True, True)
        rnn_workspace.rnn_workspace_bytes.cache_clear()
        fitted = rnn_workspace.rnn_workspace_bytes(key)
        real = rnn_workspace.measured_rnn_workspace(key, steps, batch)
        assert fitted % 4096 == 0
        assert real - 6 * 4096 <= fitted <= real, (dtype, fitted, real)
    rnn_workspace.rnn_workspace_bytes.cache_clear()
