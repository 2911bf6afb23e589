"""The sequence length of token inputs: `--seq N` / analyze(seq=N) sets it, and the sequence search
(analysis.search.max_sequence) asks for the same input at other lengths. One rule, `at_sequence`, says what an input is
at a length, and answers in one line when the input is not token ids; the search's result is here too (the report's
`sequence_search`). torch is imported inside functions only."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, List, Optional, Tuple

from gpumem_kernel.analysis.request.arguments import parse_shape


@dataclass(frozen=True)
class TokenBatches:
    """A batch maker whose sequence length can change: make(batch_size, seq) -> batch. A model built by name trains
    on these (analysis.pipeline.model_source); called with a batch size, as every input function is."""

    make: Callable[[int, int], Any]
    seq: int
    __name__: str = "token_batch"

    def __call__(self, batch_size: int) -> Any:
        return self.make(batch_size, self.seq)

    def at(self, seq: int) -> "TokenBatches":
        return replace(self, seq=seq)


def _first_leaf_kind(model: Any) -> Tuple[bool, str]:
    """(whether the model starts with an Embedding, the first parameterised layer's class for the message)."""
    import torch

    from gpumem_kernel.analysis.request.inputs import first_leaf

    leaf = first_leaf(model)
    return isinstance(leaf, torch.nn.Embedding), type(leaf).__name__ if leaf is not None else "no layer"


def _not_tokens(seq: int, what: str) -> ValueError:
    return ValueError(
        f"seq {seq}: {what}; a sequence length applies to inputs of token ids "
        "(a token count such as input=512, or a sample batch of token ids)"
    )


def sequence_of(model: Any, input: Any, vocab_size: Optional[int] = None) -> Optional[int]:
    """The tokens per sample of a token input; None when the input is not token ids or says no length."""
    if isinstance(input, TokenBatches):
        return input.seq
    if _is_sample(input) or callable(input) or input is None:
        return None
    shape = parse_shape(input)
    tokens = len(shape) == 1 and (vocab_size is not None or _first_leaf_kind(model)[0])
    return shape[0] if tokens else None


def at_sequence(
    model: Any, input: Any, seq: Optional[int], vocab_size: Optional[int] = None, override: bool = False
) -> Any:
    """`input` with `seq` tokens per sample: a token shape (or none, for a model starting with an Embedding) becomes
    (seq,), a TokenBatches is asked at seq, a sample batch of token ids has its sequence dimension cycled to seq.
    seq None: the input as given. A function of the user's, or an input that is not token ids: ValueError, one
    line. A token shape of another length is an error (two lengths asked), unless `override` (the search's)."""
    if seq is None:
        return input
    if isinstance(input, TokenBatches):
        return input.at(seq)
    if _is_sample(input):
        return _sample_at(input, seq)
    if callable(input):
        raise ValueError(
            f"seq {seq}: the input is your function batch_size -> batch, which sets its own sequence length; "
            "pass a token count (input=512) or a sample batch instead"
        )
    if input is None:
        embedding, leaf = _first_leaf_kind(model)
        if not embedding:
            raise _not_tokens(
                seq, f"{type(model).__name__}'s input is not token ids (it starts with a {leaf}, not an Embedding)"
            )
        return (seq,)
    given = sequence_of(model, input, vocab_size)
    if given is None:
        raise _not_tokens(seq, f"the input {tuple(parse_shape(input))} is one sample's shape, not token ids")
    if given != seq and not override:
        raise ValueError(f"input of {given} tokens and seq {seq} disagree: give one of them")
    return (seq,)


def _is_sample(input: Any) -> bool:
    import torch

    if isinstance(input, (torch.Tensor, dict)):
        return True
    return isinstance(input, (tuple, list)) and bool(input) and all(isinstance(t, torch.Tensor) for t in input)


def _sample_at(input: Any, seq: int) -> Any:
    """A sample batch whose token ids (integer tensors of two or more dimensions) have `seq` columns: its ids,
    attention mask and labels cycled along the sequence dimension, other tensors as they are."""
    import torch
    from torch.utils._pytree import tree_leaves, tree_map

    ids = [t for t in tree_leaves(input) if isinstance(t, torch.Tensor) and t.dim() >= 2 and not t.is_floating_point()]
    if not ids:
        raise _not_tokens(seq, "the sample batch holds no integer (batch, sequence) tensor of token ids")
    length = ids[0].shape[1]

    def cycled(t: Any) -> Any:
        if not isinstance(t, torch.Tensor) or t.dim() < 2 or t.shape[1] != length or t.is_floating_point():
            return t
        columns = torch.arange(seq, device=t.device) % length  # real ids, repeated: valid for the embedding
        return t.detach()[:, columns]

    return tree_map(cycled, input)


# --- the sequence search's result (analysis.search.max_sequence) -------------------------------------------------


@dataclass
class SequencePoint:
    seq: int
    peak_bytes: int  # the step's device footprint at this length


@dataclass
class SequenceDip:
    """A shorter length that needs more memory than a longer one (the caching allocator's segments: a request
    just under a size boundary can reserve a whole buffer that a slightly larger one does not)."""

    shorter: int
    longer: int
    shorter_bytes: int  # footprints, as SequencePoint.peak_bytes
    longer_bytes: int

    @property
    def excess(self) -> float:
        """How much more the shorter length needs, as a share of the longer one's footprint."""
        return self.shorter_bytes / self.longer_bytes - 1.0


@dataclass
class VariableLengths:
    """With variable lengths every batch shorter than the longest must fit too: the length up to which every
    multiple fits, the highest peaks over those lengths, and what it cost to know (analysis.search.max_sequence)."""

    every_length: int  # every multiple up to it fits; below `maximum` when a shorter length needs more
    peak_bytes: int  # the highest footprint (reserved + context) over the lengths up to every_length
    allocated_bytes: int  # the highest peak allocated over them
    checked: List[int]  # the lengths traced for the check (the search's and the extra ones), ascending
    extra_traces: int  # traces the check added to the search's
    complete: bool  # False: the check's run budget ended first; every_length is the longest length verified
    dip: Optional[SequenceDip] = None  # the worst shorter length that needs more than a longer one, if any


@dataclass
class SequencePicks:
    """The longest sequence that fits at `batch`, and the recommended and safe lengths below the length up to
    which every length fits (variable.every_length: the same as the maximum unless a shorter length needs more)."""

    batch: int
    maximum: Optional[int]  # None without a device limit; 0: not even one multiple fits
    recommended: Optional[int]
    safe: Optional[int]
    extrapolated: bool
    note: str
    curve: List[SequencePoint] = field(default_factory=list)
    variable: Optional[VariableLengths] = None  # None without a device limit or when no length fits


@dataclass
class SequenceSearch:
    multiple: int
    multiple_source: str  # option | setting | default
    context: Optional[int]  # the model's max_position_embeddings, when its config says
    engine: str  # traced: every length is a trace of the step
    results: List[SequencePicks]
