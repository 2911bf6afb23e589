"""For the length of a trace, the CPU runs functions as CUDA does where the two keep different tensors for backward
(fused attention and dropout, CUDA's autocast policy).

torch is imported inside functions only: the kernel shim must load without it."""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Iterator, Optional, Tuple

from gpumem_kernel.analysis.fake import autocast_policy


class _Rerouted(autocast_policy.Counter):
    attention = 0
    dropout = 0


@contextlib.contextmanager
def cuda_kernels(torch_version: Optional[Tuple[int, int]] = None) -> Iterator[_Rerouted]:
    """For the length of a trace, the CPU runs functions as CUDA does, where the two keep different tensors for
    backward.

    Attention with dropout: CUDA runs scaled_dot_product_attention on a fused kernel (flash for fp16/bf16,
    memory-efficient for fp32 or with a mask), which keeps the output and a row of log-sum-exps and regenerates
    the dropout mask from a seed. The CPU takes the math path and keeps the L x L weights and mask: an error
    quadratic in the sequence. Without dropout the CPU takes its own flash kernel, whose memory has CUDA's shape,
    so attention runs here without its dropout (a trace's values never matter). nn.MultiheadAttention with
    need_weights=False calls the same function; with need_weights=True it takes the math path on CUDA too.

    Dropout: CUDA's fused kernel (native_dropout) keeps a 1-byte mask; the CPU's keeps a mask of the input's
    dtype (4 bytes in fp32). The CPU has native_dropout too. In-place dropout is unfused on CUDA as well.

    Autocast: CUDA's policy, where CPU autocast's keeps other tensors (analysis.fake.autocast_policy: normalisation,
    softmax and reductions, element-wise math and distances in fp32; cross-entropy's cast after log_softmax;
    promotion of mixed arguments).

    The functions are swapped on their Python owners (torch.nn.functional, torch, torch.Tensor), not intercepted by
    a TorchFunctionMode: activation checkpointing recomputes the forward inside backward, where function modes are
    not active. `torch_version`: the torch planned for (autocast's op lists by version), default the running one."""
    import torch
    import torch.nn.functional as F

    fused = (torch.float16, torch.bfloat16, torch.float32)
    attention, dropout = F.scaled_dot_product_attention, F.dropout
    seen = _Rerouted()

    @functools.wraps(attention)
    def fused_attention(*args: Any, **kwargs: Any) -> Any:
        if args and getattr(args[0], "dtype", None) in fused:
            if len(args) > 4 and args[4]:
                args = args[:4] + (0.0,) + args[5:]
                seen.attention += 1
            elif kwargs.get("dropout_p"):
                kwargs = {**kwargs, "dropout_p": 0.0}
                seen.attention += 1
        return attention(*args, **kwargs)

    @functools.wraps(dropout)
    def fused_dropout(input: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Any:
        if training and not inplace and 0 < p < 1 and isinstance(input, torch.Tensor) and input.numel() > 0:
            seen.dropout += 1
            return torch.native_dropout(input, p, True)[0]
        return dropout(input, p, training, inplace)

    swaps = [(F, "scaled_dot_product_attention", fused_attention), (F, "dropout", fused_dropout)]
    with autocast_policy.swapped(swaps + autocast_policy.swaps(seen, torch_version)):
        yield seen
