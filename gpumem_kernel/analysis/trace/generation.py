"""The traced generation: `model.generate()`'s memory at its two extremes, the prefill and the last decode step.

generate() runs a prefill (the whole prompt through the model, the KV cache filled) and then one decode step per new
token, each one token through the model against the cache. Its peak is at the prefill (the prompt's activations and
logits) or at the last decode step (the longest cache). Both are traced here, in one event stream on one copy of the
model: the prefill at `prompt` tokens, the cache then grown to the length the last step meets (the positions
appended as zeros, not computed by `new - 2` decode steps: an 8B plan takes seconds), and that last step. Tensors
are fake (shapes, no memory) or, for the tests, real CPU tensors through the same loop.

The loop is generate()'s greedy one (transformers' GenerationMixin._sample): under torch.no_grad(), the logits of
the last position copied to fp32 (`outputs.logits[:, -1].to(copy=True, dtype=float32)`), argmax, the ids grown by
`torch.cat`, the outputs dropped; the previous step's fp32 logits stay bound through the next forward, as there.
Sampling adds a softmax of that fp32 row per step (batch x vocab x 4 bytes, freed at once): not traced.

Version differences it follows (read from the model's forward and the cache classes, not from a version number;
tested on transformers 4.57 and 5.24: the same model plans within a few hundred bytes in both, but for GPT-2, whose
4.x attention holds a causal-mask buffer per layer (n_positions squared bytes) that 5.x dropped):
- logits kept by the prefill: generate() passes `logits_to_keep=1` (transformers >= 4.50; `num_logits_to_keep=1`
  in 4.45-4.49) when the forward takes it: only the last position's logits exist. A model whose forward takes
  neither computes logits for every prompt position (batch x prompt x vocab), as generate() of those versions did.
- the cache argument: `past_key_values` (4.x) or `cache` (5.x); `cache_position` is passed where the forward takes
  it (4.x: the static cache writes at those positions; 5.x has no such argument: its StaticCache layers count their
  length in a `cumulative_length` tensor of their own). Growing the cache to the last step's length goes through the
  cache's own update(), so each version's bookkeeping is its own.
- both make the cache as generate() does: DynamicCache(config=text config) (per-layer sliding windows included), and
  StaticCache(config=, max_cache_len=max_length - 1) whose layers allocate at their first update.
- DynamicCache grows each layer by `torch.cat([old, new], dim=-2)`: the old and the grown tensor coexist while each
  layer's keys (then values) are concatenated, one layer at a time. StaticCache allocates every layer at the full
  length generate() gives it (max_length - 1 = prompt + new - 1) at its first update, in the prefill, and writes in
  place (index_copy_) after that.

No attention mask is passed: one prompt length for the whole batch, no padding. generate() builds a mask of ones
(batch x length int64) that attention with SDPA drops; it, cache_position and the stopping criteria's flags are left
out (a real generate() of the tests' small models peaks under 16 KiB above the traced loop, at batch 3).

torch and transformers are imported inside functions only: the kernel shim must load without them.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional

from gpumem_kernel.analysis.allocator.caching_allocator import AllocatorResult
from gpumem_kernel.analysis.allocator.import_guard import interrupts_deferred, interrupts_held, tracer_imports
from gpumem_kernel.analysis.trace.model_copy import TensorCopier, copy_model
from gpumem_kernel.analysis.trace.plan import TraceError, TracePlan
from gpumem_kernel.analysis.trace.summary import replay_device
from gpumem_kernel.analysis.trace.tracker import heap_frozen, trace_tracker_class

CACHES = ("dynamic", "static")
PREFILL, GROW, DECODE = "prefill", "grow", "decode"
_STEP = {PREFILL: 1, GROW: 2, DECODE: 3}  # each phase's step number in the tracker's spans


@dataclass
class GenerationTrace:
    """The byte figures of one traced generation: live storage bytes as the CPU sees them, and the allocator replay."""

    prompt: int
    new: int
    batch_size: int
    cache: str
    weights_bytes: int  # parameters and buffers
    kv_cache_bytes: int  # the cache's keys and values at their longest (after the last decode step)
    cache_length: int  # positions each layer's cache holds at its longest: prompt + new - 1, dynamic or static
    prefill_peak_bytes: int  # live at the prefill's peak, weights included
    decode_peak_bytes: int  # live at the last decode step's peak, weights and cache included (prefill's if new == 1)
    logits_bytes: int  # the prefill's logits as the forward returns them (model dtype)
    logits_positions: int  # the positions they cover: 1 with logits_to_keep, else the prompt
    vocab: int  # values per position of the logits
    device: AllocatorResult  # the whole stream replayed through the caching-allocator model, workspaces included
    notes: List[str] = field(default_factory=list)

    @property
    def peak_bytes(self) -> int:
        return max(self.prefill_peak_bytes, self.decode_peak_bytes)


def trace_generation(
    model: Any,
    *,
    prompt: int,
    new: int,
    batch_size: int = 1,
    cache: str = "dynamic",
    fake: bool = True,
    workspaces: Optional[Dict[str, int]] = None,
    expandable_segments: bool = False,
) -> GenerationTrace:
    """generate()'s prefill at `prompt` tokens and its last decode step (`new` tokens in all), on a copy of `model`
    (fake tensors, or real CPU ones with fake=False); the user's model is never touched. `workspaces`: the cuBLAS
    fields of a TracePlan (gpus.blas_workspaces' plan_fields) for the allocator replay."""
    if cache not in CACHES:
        raise ValueError(f"cache {cache!r}: use one of {', '.join(CACHES)}")
    for name, value in (("prompt", prompt), ("new", new), ("batch_size", batch_size)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive whole number, got {value!r}")
    with interrupts_deferred():
        return _trace(model, prompt, new, batch_size, cache, fake, workspaces or {}, expandable_segments)


def _trace(
    model: Any,
    prompt: int,
    new: int,
    batch_size: int,
    cache: str,
    fake: bool,
    workspaces: Dict[str, int],
    expandable_segments: bool,
) -> GenerationTrace:
    import torch

    rng = torch.get_rng_state()
    tracker = trace_tracker_class()(fake=fake)
    with heap_frozen():  # the trace's collections walk its own objects only
        try:
            mode: Any = tracer_imports()(allow_non_fake_inputs=True) if fake else contextlib.nullcontext()
            with mode, _quiet_fake_tensor_log():
                # copied before the tracker starts: the copy's detach() of each weight is no allocation of the step
                copy, _, _ = copy_model(model, TensorCopier(fake=fake))
                with tracker:
                    weights = _register_weights(tracker, copy)
                    try:
                        facts = _generate(copy, tracker, prompt, new, batch_size, cache)
                    except TraceError:
                        raise
                    except Exception as exc:
                        raise TraceError(
                            f"generation could not be traced: {type(exc).__name__}: {_first_line(exc)}"
                        ) from None
                del copy
                gc.collect()
            plan = TracePlan(model=None, optimizer=None, make_batch=_no_batch, loss_fn=_no_batch, **workspaces)
            plan.expandable_segments = expandable_segments
            device, _, _ = replay_device(tracker, plan)
            return GenerationTrace(
                prompt=prompt,
                new=new,
                batch_size=batch_size,
                cache=cache,
                weights_bytes=weights,
                kv_cache_bytes=facts["kv_bytes"],
                cache_length=facts["cache_length"],
                prefill_peak_bytes=_span_peak(tracker, PREFILL),
                decode_peak_bytes=_span_peak(tracker, DECODE if new > 1 else PREFILL),
                logits_bytes=facts["logits_bytes"],
                logits_positions=facts["logits_positions"],
                vocab=facts["vocab"],
                device=device,
                notes=facts["notes"],
            )
        finally:
            with interrupts_held():
                tracker.close()
                torch.set_rng_state(rng)


def _no_batch(*_: Any) -> Any:
    raise AssertionError("a generation trace makes its own inputs")


def _register_weights(tracker: Any, model: Any) -> int:
    params, buffers = list(model.parameters()), list(model.buffers())
    tracker.register(params, "parameter")
    tracker.register(buffers, "buffer")
    return tracker.live


def _span_peak(tracker: Any, phase: str) -> int:
    """The most bytes live inside the span `phase` (its start counted: what it inherits)."""
    start, end = tracker.spans[(_STEP[phase], 0, phase)]
    live = 0
    peak = 0
    for index, (kind, sid) in enumerate(tracker.events[:end]):
        live += tracker.records[sid].nbytes if kind == "alloc" else -tracker.records[sid].nbytes
        if index + 1 >= start:
            peak = max(peak, live)
    return peak


@contextlib.contextmanager
def _quiet_fake_tensor_log() -> Iterator[None]:
    """FakeTensorMode logs a traceback before re-raising a failed meta kernel; the trace says it in one line."""
    import logging

    logger = logging.getLogger("torch._subclasses.fake_tensor")
    previous = logger.disabled
    try:
        logger.disabled = True
        yield
    finally:
        logger.disabled = previous


# --- generate()'s loop ------------------------------------------------------------------------------------------


def _generate(model: Any, tracker: Any, prompt: int, new: int, batch_size: int, cache_kind: str) -> Dict[str, Any]:
    """The prefill, the cache grown to the last step's length, and that step, each in its span."""
    import torch

    model.eval()
    notes: List[str] = []
    arguments = _forward_arguments(model)
    vocab = _vocabulary(model)
    with torch.no_grad():
        with tracker.span("input", 0, 0):
            ids = torch.zeros((batch_size, prompt), dtype=torch.long)
            tracker.register(ids, "input")
        # generate() sizes a static cache at max_length - 1: the last new token is never fed back
        cache = _new_cache(model, cache_kind, prompt + new - 1)
        with tracker.span(PREFILL, 1, 0):
            out = model(**_inputs(arguments, ids, cache, 0))
            logits_shape = tuple(out.logits.shape)
            logits_bytes = out.logits.untyped_storage().nbytes()
            next_logits = out.logits[:, -1].to(copy=True, dtype=torch.float32)
            next_tokens = torch.argmax(next_logits, dim=-1)
            ids = torch.cat([ids, next_tokens[:, None]], dim=-1)
            del out
        length = prompt  # positions in the cache
        if new > 1:
            with tracker.span(GROW, 2, 0):
                ids = _grow(cache, ids, prompt, prompt + new - 2)
            length = prompt + new - 2
            with tracker.span(DECODE, 3, 0):
                out = model(**_inputs(arguments, next_tokens[:, None], cache, length))
                next_logits = out.logits[:, -1].to(copy=True, dtype=torch.float32)
                next_tokens = torch.argmax(next_logits, dim=-1)
                ids = torch.cat([ids, next_tokens[:, None]], dim=-1)
                del out
            length += 1
        kv_bytes, cache_length = _cache_bytes(cache)
    if "logits_to_keep" not in arguments and "num_logits_to_keep" not in arguments:
        notes.append(
            f"{type(model).__name__}.forward takes no logits_to_keep: the prefill's logits cover every prompt position"
        )
    if vocab is not None and logits_shape[-1] != vocab:
        notes.append(f"logits of {logits_shape[-1]} values per position")
    del ids, next_logits, next_tokens, cache
    return {
        "kv_bytes": kv_bytes,
        "cache_length": cache_length if cache_kind == "static" else length,
        "logits_bytes": logits_bytes,
        "logits_positions": int(logits_shape[1]) if len(logits_shape) == 3 else 1,
        "vocab": int(logits_shape[-1]),
        "notes": notes,
    }


def _forward_arguments(model: Any) -> Dict[str, str]:
    """The keywords generate() passes that this model's forward takes: {what: the keyword's name}."""
    try:
        names = set(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        names = set()
    found: Dict[str, str] = {}
    for key in ("logits_to_keep", "num_logits_to_keep"):
        if key in names:
            found[key] = key
            break
    if "past_key_values" in names:
        found["cache"] = "past_key_values"
    elif "cache" in names:
        found["cache"] = "cache"
    else:
        raise TraceError(f"{type(model).__name__}.forward takes no KV cache (past_key_values): not a causal LM")
    if "cache_position" in names:
        found["cache_position"] = "cache_position"
    return found


def _inputs(arguments: Dict[str, str], ids: Any, cache: Any, start: int) -> Dict[str, Any]:
    """The forward's keywords at one step: the ids, the cache, where they go, and logits of the last position only."""
    import torch

    inputs: Dict[str, Any] = {"input_ids": ids, arguments["cache"]: cache, "use_cache": True, "return_dict": True}
    for key in ("logits_to_keep", "num_logits_to_keep"):
        if key in arguments:
            inputs[key] = 1
    if "cache_position" in arguments:
        inputs["cache_position"] = torch.arange(start, start + ids.shape[1])
    return inputs


def _vocabulary(model: Any) -> Optional[int]:
    config = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    vocab = getattr(text, "vocab_size", None)
    return vocab if isinstance(vocab, int) else None


def _new_cache(model: Any, kind: str, max_length: int) -> Any:
    """The cache generate() makes: DynamicCache(config=...) by default, StaticCache at max_length with
    cache_implementation="static"."""
    try:
        import transformers
    except ImportError:
        raise TraceError("planning generation needs transformers (its cache classes)") from None
    config = model.config.get_text_config(decoder=True)
    if kind == "static":
        return transformers.StaticCache(config=config, max_cache_len=max_length)
    return transformers.DynamicCache(config=config)


def _grow(cache: Any, ids: Any, prompt: int, length: int) -> Any:
    """The cache from `prompt` to `length` positions (zeros appended through the cache's own update, layer by layer,
    as decode steps would), and the ids generate() holds before the step that makes position `length`."""
    import torch

    extra = length - prompt
    if extra > 0:
        positions = torch.arange(prompt, length)
        for index, layer in enumerate(cache.layers):
            keys, values = layer.keys, layer.values
            shape_k = (keys.shape[0], keys.shape[1], extra, keys.shape[-1])
            shape_v = (values.shape[0], values.shape[1], extra, values.shape[-1])
            new_keys, new_values = keys.new_zeros(shape_k), values.new_zeros(shape_v)
            cache.update(new_keys, new_values, index, {"cache_position": positions})
            del new_keys, new_values
        del positions
    if extra <= 0:
        return ids
    tail = ids.new_zeros((ids.shape[0], extra))
    return torch.cat([ids, tail], dim=-1)


def _cache_bytes(cache: Any) -> "tuple[int, int]":
    """Bytes of every layer's keys and values (each storage once), and the longest layer's positions."""
    seen: Dict[int, int] = {}
    storages = []  # held, so that no id is reused while counting
    longest = 0
    for layer in cache.layers:
        for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if t is None or not hasattr(t, "untyped_storage"):
                continue
            storage = t.untyped_storage()
            storages.append(storage)
            seen[id(storage)] = int(storage.nbytes())
            if t.dim() >= 2:
                longest = max(longest, int(t.shape[-2]))
    return sum(seen.values()), longest


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:200] if lines else type(exc).__name__
