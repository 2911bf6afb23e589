"""The workspace oneDNN's RNN layers keep for backward, which fake (meta) kernels leave out of a trace.

torch is imported inside functions only: the kernel shim must load without it."""

from __future__ import annotations

import functools
from typing import Any, Sequence, Tuple


def with_rnn_workspace(args: Sequence[Any], out: Any) -> Any:
    """The meta kernel of `mkldnn_rnn_layer` returns an empty workspace; the real kernel keeps one for backward
    whose size depends on this CPU's oneDNN (bf16 kernels where the CPU has them, fp32 elsewhere). Ask the real
    kernel (rnn_workspace_bytes)."""
    import torch

    output, hy, cy, workspace = out
    if workspace.numel() > 0:
        return out
    size = rnn_workspace_bytes(tuple(_shape_key(a) for a in args))
    return output, hy, cy, torch.empty(size, dtype=torch.uint8, device=workspace.device)


def _shape_key(arg: Any) -> Any:
    import torch

    if isinstance(arg, torch.Tensor):
        return ("tensor", tuple(arg.shape), arg.dtype)
    if isinstance(arg, list):
        return ("list", tuple(arg))
    return arg


# A real call at the layer's own shape below this many multiply-adds takes a few milliseconds: its workspace is
# the exact figure. Above it, four small calls and the workspace's shape (below) give it within a few pages.
RNN_EXACT_MACS = 100_000_000


_PAGE = 4096


@functools.lru_cache(maxsize=64)
def rnn_workspace_bytes(key: Tuple[Any, ...]) -> int:
    """The bytes oneDNN's RNN layer keeps for backward, for `mkldnn_rnn_layer`'s arguments given as shape keys.

    oneDNN's workspace is a row of page-aligned parts (gates, layer and iteration states, c states ...), each
    T or T + 1 time steps of B rows of a 64-byte-aligned width, plus parts that depend on neither. At batches 64
    and 128 every step-dependent part fills whole pages, so four calls there (steps 1 and 2) give the affine
    form const + B * (p * T + q) exactly; at any other batch each part rounds up to its page, so the figure is
    that form rounded up, at most a page per part low. A small layer is measured at its own shape instead."""
    # args: input, w0..w3, hx, cx, reverse, batch_sizes, mode, hidden_size, num_layers, has_biases,
    # bidirectional, batch_first, train. The input arrives time-major whatever batch_first says.
    steps, batch = key[0][1][0], key[0][1][1]
    gates, inputs = key[1][1][0], key[1][1][1]
    hidden = key[2][1][1]
    if steps * batch * gates * (inputs + hidden) <= RNN_EXACT_MACS:
        return measured_rnn_workspace(key, steps, batch)
    at = {(t, b): measured_rnn_workspace(key, t, b) for t in (1, 2) for b in (64, 128)}
    per_row = {t: (at[t, 128] - at[t, 64]) / 64 for t in (1, 2)}
    const = 2 * at[1, 64] - at[1, 128]
    row = per_row[1] + (per_row[2] - per_row[1]) * (steps - 1)
    return int(-(-round(const + batch * row) // _PAGE) * _PAGE)


def measured_rnn_workspace(key: Tuple[Any, ...], steps: int, batch: int) -> int:
    import torch
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    def real(k: Any, index: int) -> Any:
        if isinstance(k, tuple) and k and k[0] == "tensor":
            shape = list(k[1])
            if index == 0:
                shape[0], shape[1] = steps, batch
            elif index in (5, 6) and len(shape) == 2:  # hx, cx: (B, H)
                shape[0] = batch
            return torch.zeros(shape, dtype=k[2])
        if isinstance(k, tuple) and k and k[0] == "list":
            return list(k[1])
        return k

    with unset_fake_temporarily():  # not under no_grad: the kernel then skips the workspace
        out = torch.ops.aten.mkldnn_rnn_layer.default(*[real(k, i) for i, k in enumerate(key)])
    return int(out[3].untyped_storage().nbytes())
