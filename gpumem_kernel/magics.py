"""`%gpumem` line magic: a thin dispatcher over the Python API; bad input is one UsageError line."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any, Callable, Dict

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from . import clear as clearing
from . import oom as oom_checklist
from .render import status_bundle
from .status import get_status

USAGE = "usage: %gpumem {status,clear,oom} [options]   (%gpumem --help, %gpumem COMMAND --help)"
NO_OOM = "no CUDA out-of-memory error in this kernel yet"
_HELP_FLAGS = ("--help", "-h")


@magic_arguments("gpumem status")
@argument("--json", action="store_true", help="print the raw sample as JSON instead of a table")
def _status_arguments(line: str) -> None:
    """GPU memory of every device, its processes, and host memory, now."""


@magic_arguments("gpumem clear")
@argument("--vars", nargs="+", default=[], metavar="NAME", help="also delete these variables")
@argument("--all-cuda-vars", action="store_true", help="also delete every variable that holds CUDA memory")
@argument("--list", action="store_true", help="dry run: show what would be dropped, change nothing")
def _clear_arguments(line: str) -> None:
    """Free what pins memory (the last error's traceback, cached outputs holding tensors), gc.collect(), and
    empty the CUDA cache when CUDA is initialised; then list what still holds memory. Variables are deleted
    only when named."""


@magic_arguments("gpumem oom")
def _oom_arguments(line: str) -> None:
    """Show the checklist of the last CUDA out-of-memory error in this kernel again."""


def _parse(spec: Callable[..., Any], command: str, rest: str) -> Any:
    try:
        return parse_argstring(spec, rest)
    except UsageError as error:  # argparse's complaint, e.g. "unrecognized arguments: --bogus"
        raise UsageError(f"gpumem {command}: {error}") from None
    except ValueError as error:  # unbalanced quotes in the line
        raise UsageError(f"gpumem {command}: {error}") from None


def status(shell: Any, rest: str) -> None:
    args = _parse(_status_arguments, "status", rest)
    sample = get_status()
    if args.json:
        print(json.dumps(sample, indent=2))
    else:
        display(status_bundle(sample), raw=True)


def clear(shell: Any, rest: str) -> None:
    args = _parse(_clear_arguments, "clear", rest)
    try:
        report = clearing.clear_gpu_memory(shell, variables=args.vars, all_cuda_vars=args.all_cuda_vars,
                                           dry_run=args.list)
    except ValueError as error:  # an unknown or IPython-owned variable name
        raise UsageError(f"gpumem clear: {error}") from None
    display(clearing.clear_bundle(report), raw=True)


def oom(shell: Any, rest: str) -> None:
    _parse(_oom_arguments, "oom", rest)
    bundle = oom_checklist.last_oom_bundle(shell)
    if bundle is None:
        print(NO_OOM)
    else:
        display(bundle, raw=True)


@dataclass(frozen=True)
class Command:
    run: Callable[[Any, str], None]  # (shell, the rest of the line)
    spec: Callable[..., Any]  # its magic_arguments function: the parser and --help text


COMMANDS: Dict[str, Command] = {
    "status": Command(status, _status_arguments),
    "clear": Command(clear, _clear_arguments),
    "oom": Command(oom, _oom_arguments),
}


def help_text(command: Command) -> str:
    """The parser's help, as argparse would print it, without IPython's reST markup (`::`, a doubled `%`)."""
    lines = (command.spec.__doc__ or "").strip().splitlines()
    if lines and lines[0].strip() == "::":
        lines = lines[1:]
    text = "\n".join(lines).strip()
    return "usage: " + (text[1:] if text.startswith("%%") else text)


def _summary(command: Command) -> str:
    return help_text(command).splitlines()[0][len("usage: "):]


def overview() -> str:
    """`%gpumem --help`: one usage line per command."""
    lines = ["GPU memory of this kernel. Commands:"]
    lines += [f"  {_summary(command)}" for command in COMMANDS.values()]
    lines.append("%gpumem COMMAND --help shows a command's options.")
    return "\n".join(lines)


def _wants_help(rest: str) -> bool:
    try:
        return any(word in _HELP_FLAGS for word in shlex.split(rest))
    except ValueError:
        return False  # unbalanced quotes: the parser reports them


@magics_class
class GpumemMagics(Magics):
    @line_magic
    def gpumem(self, line: str) -> None:
        """GPU memory of this kernel. Commands: status [--json]; clear [--vars NAME ...] [--all-cuda-vars]
        [--list]; oom. `%gpumem --help` lists them, `%gpumem COMMAND --help` explains one."""
        words = line.strip().split(None, 1)
        if not words:
            print(USAGE)
            return
        if words[0] in _HELP_FLAGS:
            print(overview())
            return
        command = COMMANDS.get(words[0])
        if command is None:
            raise UsageError(f"gpumem: unknown command '{words[0]}'; try: {', '.join(COMMANDS)}")
        rest = words[1] if len(words) > 1 else ""
        if _wants_help(rest):
            print(help_text(command))
            return
        command.run(self.shell, rest)
