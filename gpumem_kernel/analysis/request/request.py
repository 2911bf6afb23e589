"""One analysis' options, as one frozen value: `analyze(model, request)`. The magic and the terminal build it from
their option table (magics.shared_options), a script from analyze()'s keywords; the scalar options are checked
once, here, each bad one a ValueError with a one-line message."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Dict, Optional, Union

from gpumem_kernel.analysis.request.arguments import STRATEGIES, amp_mode_of, check_choice, positive_int

SEARCHES = ("batch", "seq")  # what analyze searches besides the analysed step: the batch picks, or also the sequence


@dataclass(frozen=True)
class AnalysisRequest:
    """Every option of analyze() (its docstring says what each does), checked when built."""

    batch_size: int
    input: Any = None
    loss: Optional[Callable[[Any, Any], Any]] = None
    optimizer: Any = "adamw"
    amp: Any = None  # checked: None, "fp16" or "bf16"
    grad_accum: int = 1
    checkpointing: bool = False
    device: Any = None
    target: Optional[str] = None
    memory: Any = None
    world_size: int = 1
    strategy: Optional[str] = None
    multiple: Optional[int] = None
    effective_batch: Optional[int] = None
    reserve: Union[None, int, float] = None
    vocab_size: Optional[int] = None
    rounding: Any = None
    eval_batch: Optional[int] = None
    step: Optional[Callable[[Any, Any, Any], Any]] = None
    keep_grads: bool = False
    torch_version: Optional[str] = None
    cuda_version: Optional[str] = None
    size_hints: Any = None
    seq: Optional[int] = None
    search: str = "batch"
    seq_batches: Any = None
    seq_multiple: Optional[int] = None
    lora: Any = None
    quantize: Any = None
    # a PEFT adapter config (adapter_config.json's path or text, a dict, a PeftConfig) for the planning copy
    peft: Any = None
    # plan quantize= for this bitsandbytes ('0.41'): its rules (analysis.model.bnb_rules); None: as 0.43.2+ runs it
    bnb_version: Optional[str] = None
    # the built-in token batch padded as a fine-tuning loop pads it: an attention_mask with padding, labels -100 there
    # (analysis.request.inputs.padded_tokens)
    padded: bool = False
    # the JupyterLab settings "Batch-size rounding" and "Sequence-length multiple" as the front end passed them on:
    # the defaults of `rounding` and `seq_multiple` when the call gives none
    rounding_setting: Any = None
    seq_multiple_setting: Optional[int] = None
    # False: every trace of the search runs its own optimizer steps instead of replaying the first one's (the
    # benchmark of that replay compares both)
    replay_optimizer: bool = True
    # True: the analysis of one row of what makes it fit (pipeline.advice), which reads the analysed batch's peak
    # and status and the maximum batch only: where batch 1 is analysed and does not fit, the maximum is 0 without
    # searching from the first batch of the search (no larger batch fits either), and the AMP saving and the
    # evaluation step are not traced
    advice_row: bool = False
    # the caching allocator traced with expandable segments, as PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
    # runs it (False: as the environment says)
    expandable_segments: bool = False
    # the predicted timeline's hooks (timeline.predicted): stack_hook at each storage birth of the trace of
    # batch_size, on_trace with that trace, its events kept
    stack_hook: Optional[Callable[[], Any]] = field(default=None, compare=False)
    on_trace: Optional[Callable[[Any], None]] = field(default=None, compare=False)
    # called with a Progress (analysis.request.progress) at each phase and trace: a front end's progress line
    on_progress: Optional[Callable[[Any], None]] = field(default=None, compare=False)
    # the traces of this step another analysis ran (analysis.search.engines.TraceMemo), by batch: what makes it fit
    # passes them on to the rows that change only what a trace does not read (the sharding, the sequence search)
    traces: Any = field(default=None, compare=False)

    def __post_init__(self) -> None:
        for name in ("batch_size", "grad_accum", "world_size"):
            self._set(name, positive_int(getattr(self, name), name))
        for name in ("multiple", "effective_batch", "eval_batch"):
            if getattr(self, name) is not None:
                self._set(name, positive_int(getattr(self, name), name))
        self._set("strategy", check_choice(self.strategy, STRATEGIES, "strategy"))
        self._set("amp", amp_mode_of(self.amp))
        if self.step is not None and not callable(self.step):
            raise ValueError("step must be a callable (model, optimizer, batch) that runs one training step")
        if self.loss is not None and not callable(self.loss):
            raise ValueError("loss must be a callable (output, batch) -> scalar")
        if self.seq is not None:
            self._set("seq", positive_int(self.seq, "seq"))
        check_choice(self.search, SEARCHES, "search")

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)  # frozen: the checked value replaces the given one while built

    @property
    def seq_search(self) -> bool:
        return str(self.search).lower() == "seq"

    def options(self) -> Dict[str, Any]:
        """{field: value} of the options, as analyze()'s keywords take them (the timeline's hooks left out: a
        caller that passes keywords on adds its own)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.compare}


def request_of(request: Optional[AnalysisRequest], keywords: Dict[str, Any]) -> AnalysisRequest:
    """The request a call passed, or the one its keywords build (analyze(model, batch_size=32, ...)); a few
    keywords over a request replace those fields."""
    if request is None:
        if "batch_size" not in keywords:
            raise TypeError("analyze() needs a request or batch_size=")
        return AnalysisRequest(**keywords)
    return replace(request, **keywords) if keywords else request
