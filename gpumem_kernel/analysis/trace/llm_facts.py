"""What a language model's step spends on its logits and loss, measured from the trace, and the facts an LLM user
asks about next: the attention implementation, the attention path the trace took (no mask or a 4-D mask, a
grouped-query model's K/V expanded or not: the first attention kernel call of the forward, analysis.fake.attention_path)
and what gradient checkpointing wrapped.

The trace's tracker hands every op's outputs to a LogitsWatch (analysis.trace.tracker). A tensor whose last
dimension is the vocabulary is a logits tensor; which one it is follows from the op that made it: the lm_head's
matmul (the logits), an fp32 `_to_copy` of lower-precision logits (the upcast transformers' loss makes with
`logits.float()`), the cross-entropy's log-softmax, other forward copies (shifts, soft-capping), and the backward's
gradients of all of these. The formula (vocabulary x sequence x batch x bytes per value) is kept beside the
measured figures, for the test that compares them. torch is imported inside functions only."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from gpumem_kernel.analysis.fake.attention_path import AttentionCall, attention_call, grouped_query, path_phrase
from gpumem_kernel.analysis.trace.checkpointing import name_span, repeated_blocks

# ops whose vocabulary-wide output is the lm_head's (nn.Linear reaches the dispatcher as one of these)
_HEAD_OPS = frozenset({"mm", "addmm", "bmm", "matmul", "linear", "baddbmm"})
_LOG_SOFTMAX_OPS = frozenset({"_log_softmax", "log_softmax"})
KINDS = ("logits", "upcast", "log_softmax", "other", "backward")


@dataclass
class _Seen:
    kind: str  # one of KINDS
    step: int
    micro: int
    numel: int
    dtype: str


class LogitsWatch:
    """Sees each op's outputs during a trace and keeps the storages that are vocabulary-wide, by kind."""

    def __init__(self, vocab: int) -> None:
        self.vocab = vocab
        self.seen: Dict[int, _Seen] = {}  # record sid -> what it is
        # (step, micro) -> the first attention kernel call of that forward (analysis.fake.attention_path)
        self.attention: Dict[Any, AttentionCall] = {}

    def see(self, name: str, args: Any, out: Any, tracker: Any, kwargs: Any = None) -> None:
        import torch
        from torch.utils._pytree import tree_leaves

        if tracker.phase not in ("forward", "backward"):
            return
        if tracker.phase == "forward" and (tracker.step, tracker.micro) not in self.attention:
            call = attention_call(name, args, kwargs)
            if call is not None:
                self.attention[(tracker.step, tracker.micro)] = call
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor) or t.dim() < 2 or t.shape[-1] != self.vocab:
                continue
            record = tracker.track(t, check=False)
            if record is None or record.sid in self.seen:  # a view of logits already seen
                continue
            kind = _kind(name, args, t, tracker.phase)
            self.seen[record.sid] = _Seen(kind, tracker.step, tracker.micro, t.numel(), str(t.dtype).split(".")[-1])


def _kind(name: str, args: Any, out: Any, phase: str) -> str:
    import torch

    if phase == "backward":
        return "backward"
    if name in _HEAD_OPS:
        return "logits"
    if name in _LOG_SOFTMAX_OPS:
        return "log_softmax"
    source = args[0] if args else None
    if name == "_to_copy" and out.dtype == torch.float32 and isinstance(source, torch.Tensor):
        if source.dtype in (torch.float16, torch.bfloat16):
            return "upcast"
    return "other"


@dataclass
class LogitsTrace:
    """The vocabulary-wide storages of the last step's last traced micro-batch, in bytes by kind."""

    vocab: int
    values: int  # elements of the lm_head's output: vocabulary x tokens in the batch
    dtype: str  # the logits' dtype
    bytes_by_kind: Dict[str, int]
    held_bytes: int  # the most alive at once during that step
    at_peak_bytes: int  # alive at the step's peak
    attention: Optional[AttentionCall] = None  # that forward's first attention kernel call; None: none seen


def logits_trace(tracker: Any, last: int, micro: int, peak: int) -> Optional[LogitsTrace]:
    """The watched storages of micro-batch `micro` of step `last` (its forward and backward), None when the trace
    saw no lm_head output. `peak` is the stream position of the step's peak (trace_summary)."""
    watch: Optional[LogitsWatch] = getattr(tracker, "logits", None)
    records, events = tracker.records, tracker.events
    if watch is None:
        return None
    mine = {sid: s for sid, s in watch.seen.items() if s.step == last and s.micro == micro}
    heads = [s for s in mine.values() if s.kind == "logits"]
    if not heads:
        return None
    by_kind = {kind: 0 for kind in KINDS}
    for sid, seen in mine.items():
        by_kind[seen.kind] += records[sid].nbytes
    live = held = 0
    for kind, sid in events:
        if sid in mine:
            live += records[sid].nbytes if kind == "alloc" else -records[sid].nbytes
            held = max(held, live)
    at_peak = sum(
        records[sid].nbytes
        for sid in mine
        if records[sid].alloc_index < peak and (records[sid].free_index is None or records[sid].free_index >= peak)
    )
    attention = watch.attention.get((last, micro))
    return LogitsTrace(watch.vocab, heads[0].numel, heads[0].dtype, by_kind, held, at_peak, attention)


# --- the report's section ------------------------------------------------------------------------------------------


@dataclass
class LogitsMemory:
    """The logits and loss line: vocabulary x sequence x batch, and the bytes the trace measured for each copy."""

    vocab: int
    seq: int  # tokens per sample
    batch: int
    dtype: str
    logits_bytes: int  # the lm_head's output
    upcast_bytes: int  # the fp32 copy the loss makes of lower-precision logits (0: none, the logits are fp32)
    log_softmax_bytes: int  # the cross-entropy's log-softmax (kept for backward)
    other_bytes: int  # other forward copies (shifted logits, soft-capping)
    backward_bytes: int  # the gradients of these in backward (transient)
    held_bytes: int  # the most alive at once in the step
    at_peak_bytes: int  # alive at the step's peak
    formula_bytes: int  # vocab x seq x batch x bytes of the logits' dtype


@dataclass
class Checkpointed:
    """What gradient checkpointing wrapped: the repeated blocks (analysis.trace.checkpointing picks them)."""

    blocks: int
    kind: str
    names: str


@dataclass
class LlmFacts:
    attention: Optional[str]  # config._attn_implementation: eager | sdpa | flash_attention_2 | ...
    checkpointing: Optional[Checkpointed]  # None without checkpointing, or when no blocks were found
    logits: Optional[LogitsMemory]
    notes: List[str] = field(default_factory=list)
    # the attention path the trace took, e.g. "SDPA, grouped-query, no mask", "SDPA with a 4-D mask, K/V expanded",
    # "eager" (analysis.fake.attention_path.path_phrase); None when the trace saw no attention kernel
    attention_path: Optional[str] = None


def output_vocabulary(model: Any) -> Optional[int]:
    """The vocabulary of the model's output head: Hugging Face's get_output_embeddings(), else a config's
    vocab_size; None for a model without one (its trace watches nothing)."""
    getter = getattr(model, "get_output_embeddings", None)
    head = getter() if callable(getter) else None
    size = getattr(head, "out_features", None) or getattr(getattr(model, "config", None), "vocab_size", None)
    return size if isinstance(size, int) and size > 1 else None


def attention_implementation(model: Any) -> Optional[str]:
    value = getattr(getattr(model, "config", None), "_attn_implementation", None)
    return value if isinstance(value, str) else None


def checkpointed(model: Any, checkpointing: bool) -> Optional[Checkpointed]:
    """The blocks the trace wrapped: the same repeated_blocks rule on the user's model as on its copy."""
    blocks = repeated_blocks(model) if checkpointing else []
    if not blocks:
        return None
    return Checkpointed(len(blocks), type(blocks[0][1]).__name__, name_span([name for name, _ in blocks]))


def _bytes_per_value(dtype: str) -> int:
    import torch

    return torch.empty((), dtype=getattr(torch, dtype), device="meta").element_size()


def llm_facts(model: Any, trace: Any, batch: int, checkpointing: bool) -> Optional[LlmFacts]:
    """The report's `llm` section; None for a model with neither an attention implementation, logits, nor
    checkpointed blocks."""
    seen: Optional[LogitsTrace] = getattr(trace, "logits", None)
    logits = None
    if seen is not None:
        seq = seen.values // (seen.vocab * batch)
        kinds = seen.bytes_by_kind
        formula = seen.vocab * seq * batch * _bytes_per_value(seen.dtype)
        logits = LogitsMemory(
            seen.vocab,
            seq,
            batch,
            seen.dtype,
            kinds["logits"],
            kinds["upcast"],
            kinds["log_softmax"],
            kinds["other"],
            kinds["backward"],
            seen.held_bytes,
            seen.at_peak_bytes,
            formula,
        )
    facts = LlmFacts(attention_implementation(model), checkpointed(model, checkpointing), logits)
    if seen is not None:
        grouped = grouped_query(getattr(model, "config", None))
        facts.attention_path = path_phrase(facts.attention, grouped, seen.attention)
    if facts.attention is None and facts.checkpointing is None and facts.logits is None:
        return None
    return facts
