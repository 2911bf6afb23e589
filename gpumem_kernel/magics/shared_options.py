"""Options that `%gpumem analyze` (magics.options, IPython's magic_arguments) and `python -m gpumem_kernel analyze`
(magics.cli, argparse) both take: one definition each, added to either parser as it is."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any, Dict, Tuple

from gpumem_kernel.magics import argcheck


@dataclass(frozen=True)
class Option:
    flags: Tuple[str, ...]
    settings: Dict[str, Any] = field(default_factory=dict)  # add_argument's keywords

    def add_to(self, parser: Any) -> None:
        parser.add_argument(*self.flags, **self.settings)


def memory_size(text: str) -> str:
    """--memory's SIZE, checked as the line is read (one line: "must be positive"), and kept as written."""
    from gpumem_kernel.analysis.gpus import parse_memory  # the GPU table loads only for a command that needs it

    try:
        parse_memory(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


SEQUENCE_OPTIONS = (
    Option(
        ("--seq",),
        dict(
            type=argcheck.count,
            metavar="N",
            help="tokens per sample of a token input (a model by name, a token --input, a sample batch of token ids)",
        ),
    ),
    Option(
        ("--search",),
        dict(
            choices=("batch", "seq"),
            default="batch",
            help="batch (default): the batch picks; seq: also the longest sequence that fits at each of "
            "--seq-batches, with recommended and safe lengths",
        ),
    ),
    Option(
        ("--seq-batches",),
        dict(metavar="N,N", help="with --search seq: the batches to search the sequence length at (default 1,4,8)"),
    ),
    Option(
        ("--seq-multiple",),
        dict(
            type=argcheck.count,
            metavar="N",
            help='with --search seq: lengths in multiples of N tokens; default: the JupyterLab setting "Sequence-'
            'length multiple", else 64',
        ),
    ),
)
