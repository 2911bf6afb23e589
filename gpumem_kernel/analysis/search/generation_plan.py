"""The generation plan: will `model.generate()` run, and how long a context or how many sequences fit.

`plan_generation()` traces generate()'s prefill and last decode step (analysis.trace.generation) at the asked prompt,
new tokens and batch, with the cache class generate() would make (DynamicCache by default, StaticCache with
cache="static"), and replays the stream through the caching-allocator model. With a target GPU or a memory size it
also searches:
- `longest`: the longest prompt + new tokens that fit at the asked batch, `new` held fixed (the prompt grows, in
  multiples of LENGTH_MULTIPLE tokens);
- `largest_batch`: the largest batch that fits at the asked prompt + new.
A fit is the allocator's reserved peak plus the CUDA context within the device's memory (no safety reserve).

torch is imported inside functions only: the kernel shim must load without it.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Optional

from gpumem_kernel.analysis.allocator.caching_allocator import settings_from_env
from gpumem_kernel.analysis.fake.torch_rules import resolve as resolve_torch
from gpumem_kernel.analysis.gpus import lookup as gpus
from gpumem_kernel.analysis.model.fine_tune import planned_model
from gpumem_kernel.analysis.model.quantize import parse_quantize
from gpumem_kernel.analysis.trace.generation import CACHES, GenerationTrace, trace_generation
from gpumem_kernel.analysis.trace.plan import TraceError
from gpumem_kernel.render.units import format_bytes

LENGTH_MULTIPLE = 64  # the longest context is searched in multiples of this many prompt tokens
MAX_TOKENS = 1 << 21  # the search's ceiling on prompt + new (2M tokens: past any model's context)
MAX_BATCH = 1 << 16


@dataclass
class GenerationPlan:
    """generate()'s memory at prompt + new tokens and batch_size, and the picks for a device."""

    model: str
    prompt: int
    new: int
    batch_size: int
    cache: str
    weights_bytes: int
    kv_cache_bytes: int  # at the cache's longest: prompt + new - 1 positions (the last token is never fed back)
    kv_bytes_per_token: int  # one position of one sequence, all layers (keys and values)
    prefill_peak_bytes: int
    decode_peak_bytes: int
    peak_bytes: int  # allocated (live tensors), the larger of the two
    peak_reserved_bytes: int  # the caching allocator's reserved peak, workspaces included
    logits_bytes: int
    logits_positions: int
    device: Optional[str] = None
    total_bytes: Optional[int] = None
    context_bytes: int = 0
    fits: Optional[bool] = None
    longest: Optional[int] = None  # prompt + new tokens, new fixed
    longest_prompt: Optional[int] = None
    largest_batch: Optional[int] = None
    model_context: Optional[int] = None  # the config's max_position_embeddings
    quantize: Optional[str] = None
    notes: List[str] = field(default_factory=list)
    elapsed_seconds: float = 0.0

    def to_payload(self) -> Dict[str, Any]:
        return {"kind": "generation_plan", **asdict(self)}


def plan_generation(
    model: Any,
    *,
    prompt: int,
    new: int,
    batch_size: int = 1,
    cache: str = "dynamic",
    quantize: Any = None,
    target: Optional[str] = None,
    memory: Any = None,
    torch_version: Optional[str] = None,
    **more: Any,
) -> GenerationPlan:
    """The memory of `model.generate(ids, max_new_tokens=new)` with ids of batch_size x prompt tokens (greedy),
    traced on fake tensors: no GPU, seconds for an 8B model built on the meta device.

    cache: "dynamic" (DynamicCache, generate()'s default) or "static" (cache_implementation="static").
    quantize: 'nf4' | 'fp4' | 'int8' (as analyze()'s): the Linear layers as bitsandbytes holds them; a model already
    quantised is planned as it is. target / memory: the GPU (or a memory size) planned for: `fits` and the picks.
    torch_version: that torch's cuBLAS workspace and CUDA context. `more`: model_name= (the report's name).
    ValueError (one line) on a bad argument or a model the trace cannot follow.
    """
    started = time.perf_counter()
    name = str(more.pop("model_name", "") or type(model).__name__)
    if more:
        raise ValueError(f"plan_generation: unknown option {sorted(more)[0]!r}")
    _check(model, prompt, new, batch_size, cache)
    spec = parse_quantize(quantize)
    notes: List[str] = []
    if spec is not None:
        fine = planned_model(model, None, spec)
        model = fine.model
        notes += fine.notes
    planned = resolve_torch(torch_version)
    notes += list(planned.notes)
    device = _device(target, memory)
    workspaces = gpus.blas_workspaces(device.cc, planned.text if torch_version else None).plan_fields()
    settings = settings_from_env()

    traces: Dict[tuple, GenerationTrace] = {}

    def run(length_prompt: int, batch: int) -> GenerationTrace:
        # each point traced once: the searches start from the asked one
        if (length_prompt, batch) not in traces:
            traces[(length_prompt, batch)] = _traced(
                model, length_prompt, new, batch, cache, workspaces, settings.expandable_segments
            )
        return traces[(length_prompt, batch)]

    traced = run(prompt, batch_size)
    plan = _plan(name, traced, cache, spec, device, notes, _model_context(model))
    if device.total is not None:
        limit = device.total - device.context
        plan.fits = traced.device.peak_reserved <= limit
        plan.longest_prompt = _longest_prompt(run, prompt, batch_size, limit)
        plan.longest = plan.longest_prompt + new if plan.longest_prompt else None
        plan.largest_batch = _largest_batch(run, prompt, batch_size, limit)
        plan.notes += _pick_notes(plan)
    plan.elapsed_seconds = round(time.perf_counter() - started, 3)
    return plan


def _check(model: Any, prompt: Any, new: Any, batch_size: Any, cache: Any) -> None:
    if isinstance(model, str):
        raise ValueError(
            f"plan_generation: {model!r} is a name; build it first (build_named_model(name).model), "
            "or use %gpumem analyze NAME --generate"
        )
    for label, value in (("prompt", prompt), ("new", new), ("batch_size", batch_size)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{label} must be a positive whole number of tokens, got {value!r}")
    if cache not in CACHES:
        raise ValueError(f"cache {cache!r}: use dynamic or static")
    if not hasattr(model, "config") or not hasattr(model, "forward"):
        raise ValueError(f"{type(model).__name__} is not a transformers model: generation plans need one")


@dataclass
class _Device:
    name: Optional[str] = None
    total: Optional[int] = None
    cc: Optional[str] = None
    context: int = 0


def _device(target: Optional[str], memory: Any) -> _Device:
    """The GPU planned for: --memory's size (with --target's generation), or --target's whole memory."""
    spec = gpus.lookup(target) if target else None
    cc = spec.compute_capability if spec else None
    if memory is not None:
        total = gpus.parse_memory(memory)
        size = format_bytes(total, "GiB", 1)
        return _Device(f"{spec.name} with {size}" if spec else f"{size} device", total, cc, gpus.context_estimate(cc))
    if spec is not None:
        return _Device(spec.name, spec.memory_bytes, cc, gpus.context_estimate(cc))
    return _Device()


def _traced(
    model: Any, prompt: int, new: int, batch: int, cache: str, workspaces: Dict[str, int], expandable: bool
) -> GenerationTrace:
    try:
        return trace_generation(
            model,
            prompt=prompt,
            new=new,
            batch_size=batch,
            cache=cache,
            workspaces=workspaces,
            expandable_segments=expandable,
        )
    except TraceError as exc:
        raise ValueError(str(exc)) from None


def _plan(
    name: str,
    traced: GenerationTrace,
    cache: str,
    spec: Any,
    device: _Device,
    notes: List[str],
    context: Optional[int],
) -> GenerationPlan:
    per_token = traced.kv_cache_bytes // max(1, traced.cache_length * traced.batch_size)
    notes = list(notes) + traced.notes + _cache_notes(cache, traced)
    notes.append(
        "greedy decoding (generate()'s default); sampling adds a softmax of the fp32 logits row per step "
        f"({format_bytes(traced.batch_size * traced.vocab * 4, 'fit')}, freed at once): not traced"
    )
    return GenerationPlan(
        model=name,
        prompt=traced.prompt,
        new=traced.new,
        batch_size=traced.batch_size,
        cache=cache,
        weights_bytes=traced.weights_bytes,
        kv_cache_bytes=traced.kv_cache_bytes,
        kv_bytes_per_token=per_token,
        prefill_peak_bytes=traced.prefill_peak_bytes,
        decode_peak_bytes=traced.decode_peak_bytes,
        peak_bytes=traced.peak_bytes,
        peak_reserved_bytes=traced.device.peak_reserved,
        logits_bytes=traced.logits_bytes,
        logits_positions=traced.logits_positions,
        device=device.name,
        total_bytes=device.total,
        context_bytes=device.context,
        model_context=context,
        quantize=spec.text() if spec is not None else None,
        notes=notes,
    )


def _cache_notes(cache: str, traced: GenerationTrace) -> List[str]:
    if cache == "static":
        return [
            f"StaticCache: every layer allocated at {traced.cache_length} positions (prompt + new - 1, generate()'s "
            "max_length - 1) by the prefill, written in place after that"
        ]
    return [
        "DynamicCache: each decode step concatenates each layer's keys, then values, with the new position "
        "(torch.cat): the old and the grown tensor coexist for that layer, the transient in the decode peak; the "
        "cache holds prompt + new - 1 positions at the last step (the last token is never fed back)"
    ]


def _model_context(model: Any) -> Optional[int]:
    config = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    value = getattr(text, "max_position_embeddings", None)
    return value if isinstance(value, int) and value > 0 else None


def _over(run: Callable[[int, int], GenerationTrace], prompt: int, batch: int, limit: int) -> Optional[int]:
    """Bytes over the limit (<= 0: fits); None for a length or batch the trace refuses (it does not fit either)."""
    try:
        return run(prompt, batch).device.peak_reserved - limit
    except ValueError:
        return None


def _largest(over: Callable[[int], Optional[int]], start: int, ceiling: int, step: int) -> int:
    """The largest multiple of `step` up to `ceiling` with over() <= 0, or 0. Memory grows about linearly with the
    prompt and the batch: each probe is the secant's guess between the nearest fitting and failing points (the first
    from `start` and its double), bisection where the guess is not between them; a trace costs seconds at 8B, so the
    search takes a handful, not a bisection's twenty."""
    top = max(1, ceiling // step)
    seen: Dict[int, Optional[int]] = {}

    def value(units: int) -> Optional[int]:
        if units not in seen:
            seen[units] = over(units * step)
        return seen[units]

    first = min(max(1, start // step), top)
    second = min(first * 2, top) if (value(first) or 0) <= 0 and value(first) is not None else max(1, first // 2)
    value(second)
    while True:
        fitting = max((u for u, v in seen.items() if v is not None and v <= 0), default=0)
        failing = min((u for u, v in seen.items() if v is None or v > 0), default=top + 1)
        if failing - fitting <= 1:
            return fitting * step
        guess = _secant(seen, fitting, failing, top)
        if guess is not None and guess <= fitting and failing > top:
            guess = fitting + 1  # the line puts the boundary at the largest fit: its neighbour settles it
        elif guess is None or not fitting < guess < failing or guess in seen:
            guess = (fitting + failing) // 2 if failing <= top else min(top, max(fitting * 2, fitting + 1))
        value(guess)


def _secant(seen: Dict[int, Optional[int]], fitting: int, failing: int, top: int) -> Optional[int]:
    """Where the line through the two known points nearest the boundary crosses the limit, in whole units."""
    known = sorted((u, v) for u, v in seen.items() if v is not None)
    near = [p for p in known if p[0] in (fitting, failing)]
    if len(near) < 2:
        near = known[-2:] if fitting > 0 else known[:2]
    if len(near) < 2 or near[1][0] == near[0][0] or near[1][1] == near[0][1]:
        return None
    (u0, v0), (u1, v1) = near
    slope = (v1 - v0) / (u1 - u0)
    if slope <= 0:
        return None
    crossing = int(u0 - v0 / slope)
    return max(1, min(top, crossing))


def _longest_prompt(run: Callable[[int, int], GenerationTrace], prompt: int, batch: int, limit: int) -> int:
    return _largest(lambda p: _over(run, p, batch, limit), prompt, MAX_TOKENS, LENGTH_MULTIPLE)


def _largest_batch(run: Callable[[int, int], GenerationTrace], prompt: int, batch: int, limit: int) -> int:
    return _largest(lambda b: _over(run, prompt, b, limit), batch, MAX_BATCH, 1)


def _pick_notes(plan: GenerationPlan) -> List[str]:
    notes = [
        f"fits: the reserved peak plus the CUDA context ({format_bytes(plan.context_bytes, 'fit')}, estimated) "
        f"within {format_bytes(plan.total_bytes or 0, 'fit')}; no safety reserve"
    ]
    if plan.longest is not None:
        notes.append(
            f"longest: prompt + new at batch {plan.batch_size} with new = {plan.new} held fixed, the prompt in "
            f"multiples of {LENGTH_MULTIPLE} tokens"
        )
        if plan.model_context is not None and plan.longest > plan.model_context:
            notes.append(
                f"the longest that fits ({plan.longest} tokens) is past the model's context "
                f"({plan.model_context}, max_position_embeddings)"
            )
    else:
        notes.append(f"no prompt of {LENGTH_MULTIPLE} tokens or more fits at batch {plan.batch_size}")
    return notes
