"""The attention path a Hugging Face language model's step takes, decided in a trace as real tensors decide it, and
named for the report.

Before attention, transformers' masking_utils decides whether the causal mask can be left to SDPA's `is_causal`
(`_ignore_causal_mask_sdpa`): with no padding mask, or one of all ones, the mask is skipped and SDPA gets none; a
batch with padding gets a 4-D mask (batch x 1 x query x key). With a mask, sdpa_attention_forward also expands a
grouped-query model's K/V to every query head (repeat_kv) instead of SDPA's `enable_gqa`: more memory, kept for
backward in every layer. The decision reads the mask's values, and asks whether it runs under a compiler first:

- 4.57 (`_ignore_causal_mask_sdpa(padding_mask, query_length, kv_length, kv_offset, local_attention_size)`) asks
  `is_torchdynamo_compiling()`, which a trace answers True (analysis.fake.fast_paths): without this module a batch
  with no mask or an all-ones mask would take the 4-D mask and expanded K/V that real tensors do not take;
- 5.x (`_ignore_causal_mask_sdpa(padding_mask, q_length, kv_length, q_offset, kv_offset, local_attention_size)`,
  and `_ignore_bidirectional_mask_sdpa` for encoders) skips a missing mask without reading values, but asks
  `is_tracing(padding_mask)`, True for a fake tensor and under the compile answer: an all-ones mask would be
  materialised, K/V expanded (+0.90 GB, 4 %, on a 3B grouped-query Llama with LoRA r=16 at batch 4 x 560).

Each of these is swapped, for the length of a trace, for one that asks the original with the mask's real values
and the answers an eager run gets (not compiling): a fake trace keeps the values of the masks it can know (the
sample batch's, those made by fills, analysis.fake.size_hints). A fake mask whose values the trace cannot know (a
batch function that built it from data the trace does not see) takes the 4-D mask, the larger path, said in a note.
The real trace takes the same wrapper, so that both follow the path an eager run takes.

No library is imported here: one the user has not loaded cannot be in their model."""

from __future__ import annotations

import contextlib
import functools
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterator, List, Optional, Tuple

from gpumem_kernel.analysis.fake.size_hints import SizeHints

Swap = Tuple[Any, str, Any]  # (owner, attribute, the original to restore)

# (module, function, the position of its padding mask): the mask-skip decisions, in the versions that have them
_DECISIONS = (
    ("transformers.masking_utils", "_ignore_causal_mask_sdpa", 0),  # 4.57 and 5.x
    ("transformers.masking_utils", "_ignore_bidirectional_mask_sdpa", 0),  # 5.x (encoders)
)

_as_run = [0]  # > 0 while a decision asks the original: the compile checks then answer as an eager run does


def answering_as_run() -> bool:
    """Whether a mask decision is being asked as an eager run asks it (analysis.fake.fast_paths reads this)."""
    return _as_run[0] > 0


@contextlib.contextmanager
def _eager_answers() -> Iterator[None]:
    _as_run[0] += 1
    try:
        yield
    finally:
        _as_run[0] -= 1


def _size_hints() -> Optional[SizeHints]:
    """The running fake trace's SizeHints (its tracker is a dispatch mode on the stack), None in a real trace."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    for mode in reversed(_get_current_dispatch_mode_stack()):
        hints = getattr(mode, "size_hints", None)
        if isinstance(hints, SizeHints):
            return hints
    return None


def _known(mask: Any) -> Tuple[bool, Any]:
    """(whether the mask's values are known, a tensor holding them): a real tensor is its own; a fake one has the
    values the trace kept for it, if any."""
    from torch._subclasses.fake_tensor import FakeTensor

    if mask is None or not isinstance(mask, FakeTensor):
        return True, mask
    hints = _size_hints()
    values = hints.real_values(mask) if hints is not None else None
    return values is not None, values


def _decided_as_run(original: Callable[..., Any], position: int) -> Callable[..., Any]:
    @functools.wraps(original)
    def decide(*args: Any, **kwargs: Any) -> Any:
        given = list(args)
        mask = given[position] if len(given) > position else kwargs.get("padding_mask")
        known, values = _known(mask)
        if not known:
            hints = _size_hints()
            if hints is not None:
                hints.note(
                    "attention mask",
                    original.__name__,
                    "its values are unknown to the trace (made where the trace cannot see them): traced with a "
                    "4-D mask, K/V expanded for grouped-query attention (the larger path; an all-ones mask or none "
                    "skips it)",
                )
            return False
        if len(given) > position:
            given[position] = values
        elif "padding_mask" in kwargs:
            kwargs = {**kwargs, "padding_mask": values}
        with _eager_answers():
            return original(*given, **kwargs)

    return decide


def mask_decisions() -> List[Swap]:
    """Swap in, on each loaded transformers masking module, decisions asked as an eager run asks them; the swaps
    made, for the caller to restore in reverse."""
    swapped: List[Swap] = []
    for module_name, name, position in _DECISIONS:
        owner = sys.modules.get(module_name)
        original = vars(owner).get(name) if owner is not None else None
        if callable(original):
            swapped.append((owner, name, original))
            setattr(owner, name, _decided_as_run(original, position))
    return swapped


# --- naming the path ------------------------------------------------------------------------------------------------

# the fused attention kernels a trace sees (the CPU's, and CUDA's where one is traced on it), and where their mask is
_ATTENTION_OPS = {
    "_scaled_dot_product_flash_attention_for_cpu": "attn_mask",
    "_scaled_dot_product_efficient_attention": 3,
    "_scaled_dot_product_cudnn_attention": 3,
    "_scaled_dot_product_flash_attention": None,
    "_scaled_dot_product_fused_attention_overrideable": 3,
}


@dataclass(frozen=True)
class AttentionCall:
    """What one attention kernel call got: query and key heads, and whether it had a mask (and its dimensions)."""

    query_heads: int
    key_heads: int
    mask_dims: Optional[int]  # None: no mask (causal by is_causal)


def attention_call(name: str, args: Any, kwargs: Any) -> Optional[AttentionCall]:
    """The call's facts when `name` is a fused attention kernel (q, k, v first, batch x heads x seq x dim), else
    None."""
    import torch

    if name not in _ATTENTION_OPS or len(args) < 3:
        return None
    query, key = args[0], args[1]
    if not (isinstance(query, torch.Tensor) and isinstance(key, torch.Tensor)) or query.dim() != 4:
        return None
    where = _ATTENTION_OPS[name]
    mask = None
    if isinstance(where, int):
        mask = args[where] if len(args) > where else None
    elif isinstance(where, str):
        mask = (kwargs or {}).get(where)
    dims = mask.dim() if isinstance(mask, torch.Tensor) else None
    return AttentionCall(int(query.shape[1]), int(key.shape[1]), dims)


def grouped_query(config: Any) -> bool:
    """Whether the model's config has fewer key/value heads than query heads (grouped-query attention)."""
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None)
    return isinstance(heads, int) and isinstance(kv_heads, int) and 0 < kv_heads < heads


def path_phrase(implementation: Optional[str], grouped: bool, call: Optional[AttentionCall]) -> Optional[str]:
    """The attention path in one short phrase: "SDPA, grouped-query, no mask", "SDPA with a 4-D mask, K/V
    expanded", "eager, K/V expanded"...; None when the trace saw no attention kernel of an SDPA model (or the
    implementation is another)."""
    if implementation == "eager":
        return "eager, K/V expanded" if grouped else "eager"
    if call is None:
        return None
    mask = "no mask" if call.mask_dims is None else f"a {call.mask_dims}-D mask"
    if call.key_heads < call.query_heads:
        return f"SDPA, grouped-query, {mask}" if call.mask_dims is None else f"SDPA, grouped-query, with {mask}"
    expanded = ", K/V expanded" if grouped else ""
    return f"SDPA, no mask{expanded}" if call.mask_dims is None else f"SDPA with {mask}{expanded}"
