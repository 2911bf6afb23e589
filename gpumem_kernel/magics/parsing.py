"""Reading a `%gpumem` command's line with its magic_arguments parser, and the one UsageError line every bad
input gets (`GPUMEM_DEBUG=1` shows the traceback of a failing training step instead)."""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any, Callable, List, Sequence, Set

from IPython.core.error import UsageError
from IPython.utils.process import arg_split

from gpumem_kernel.render.text import one_line


# the Python API's keyword names, as the magic spells them (in the engines' one-line messages)
_OPTION_NAMES = {
    "input": "input",
    "loss": "loss",
    "target": "target",
    "memory": "memory",
    "device": "device",
    "simulate": "simulate",
    "max_batch": "max",
    "start_batch": "batch",
    "margin": "margin",
    "multiple": "multiple",
    "rounding": "round",
    "steps": "steps",
    "dataset": "dataset",
    "loader_factory": "loader-factory",
    "synthetic_shape": "synthetic",
    "num_classes": "classes",
    "vocab_size": "vocab",
}
_KEYWORD = re.compile(r"\b(" + "|".join(_OPTION_NAMES) + r")=(\S?)")


def split_line(rest: str) -> List[str]:
    """The line's words with shell quoting removed (`--target "RTX 4080 Super"`, `--config 'my cfg.yaml'`).
    IPython's parse_argstring keeps the quotes (non-POSIX split); on Windows backslashes stay as typed."""
    if not sys.platform.startswith("win"):
        return arg_split(rest, posix=True, strict=True)
    words = arg_split(rest, posix=False, strict=True)
    return [w[1:-1] if len(w) >= 2 and w[0] == w[-1] and w[0] in "\"'" else w for w in words]


_NEGATIVE_LOOKING = re.compile(r"-\.?[0-9]")


def _value_options(parser: argparse.ArgumentParser) -> Set[str]:
    """The option strings that take one value, in the parser and its subcommands' parsers."""
    found: Set[str] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= _value_options(sub)
        elif action.option_strings and action.nargs is None:
            found.update(action.option_strings)
    return found


def attach_negative_values(parser: argparse.ArgumentParser, words: Sequence[str]) -> List[str]:
    """`--memory -1GiB` as `--memory=-1GiB`. argparse reads a word that starts with '-' as an option unless it
    is a plain number, and says "expected one argument"; given the value, the option's own check says what is
    wrong with it ("must be positive")."""
    options = _value_options(parser)
    joined: List[str] = []
    index = 0
    while index < len(words):
        word = words[index]
        following = words[index + 1] if index + 1 < len(words) else None
        if word in options and following is not None and _NEGATIVE_LOOKING.match(following):
            joined.append(f"{word}={following}")
            index += 2
        else:
            joined.append(word)
            index += 1
    return joined


def parse(spec: Callable[..., Any], command: str, rest: str) -> Any:
    """The parsed line, or one UsageError line naming the command."""
    try:
        parser = spec.parser
        return parser.parse_args(attach_negative_values(parser, split_line(rest)))
    except UsageError as error:  # argparse's complaint, e.g. "unrecognized arguments: --bogus"
        raise usage_error(command, str(error)) from None
    except ValueError as error:  # unbalanced quotes in the line
        raise usage_error(command, str(error)) from None


def _as_option(match: "re.Match[str]") -> str:
    """`device='cuda'` -> `--device 'cuda'`, `input=,` -> `--input,`."""
    option, after = f"--{_OPTION_NAMES[match.group(1)]}", match.group(2)
    return f"{option} {after}" if after and after not in ",;)" else option + after


def engine_message_line(exc: BaseException) -> str:
    """The first line of an engine's message, its keyword arguments spelled as the magic's options."""
    text = str(exc).strip()
    return _KEYWORD.sub(_as_option, text.splitlines()[0] if text else type(exc).__name__)


def usage_error(command: str, message: str) -> UsageError:
    """The one line a bad input gets; echoed values in it are cut (render.text.one_line)."""
    return UsageError(one_line(f"gpumem {command}: {message}"))


def engine_usage_error(command: str, exc: BaseException) -> UsageError:
    if isinstance(exc, ValueError):
        return usage_error(command, engine_message_line(exc))
    return usage_error(
        command,
        f"a training step failed: {type(exc).__name__}: {engine_message_line(exc)} "
        "(check --input, --loss; GPUMEM_DEBUG=1 shows the traceback)",
    )


def debug_enabled() -> bool:
    return bool(os.environ.get("GPUMEM_DEBUG"))
