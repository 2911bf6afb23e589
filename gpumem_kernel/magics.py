"""`%gpumem` line magic: a thin dispatcher over the Python API; bad input is one UsageError line."""

from __future__ import annotations

import json
from typing import Any, Callable, Dict

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from .render import status_bundle
from .status import get_status

USAGE = "usage: %gpumem status [--json]"


@magic_arguments()
@argument("--json", action="store_true", help="print the raw sample as JSON instead of a table")
def _status_arguments(line: str) -> None:
    """%gpumem status: GPU memory of every device, its processes, and host memory, now."""


def _parse(spec: Callable[..., Any], command: str, rest: str) -> Any:
    try:
        return parse_argstring(spec, rest)
    except UsageError as error:  # argparse's complaint, e.g. "unrecognized arguments: --bogus"
        raise UsageError(f"gpumem {command}: {error}") from None
    except ValueError as error:  # unbalanced quotes in the line
        raise UsageError(f"gpumem {command}: {error}") from None


def status(rest: str) -> None:
    args = _parse(_status_arguments, "status", rest)
    sample = get_status()
    if args.json:
        print(json.dumps(sample, indent=2))
    else:
        display(status_bundle(sample), raw=True)


COMMANDS: Dict[str, Callable[[str], None]] = {"status": status}


@magics_class
class GpumemMagics(Magics):
    @line_magic
    def gpumem(self, line: str) -> None:
        """GPU memory of this kernel. Commands: status [--json]."""
        words = line.strip().split(None, 1)
        if not words:
            print(USAGE)
            return
        command = words[0]
        handler = COMMANDS.get(command)
        if handler is None:
            raise UsageError(f"gpumem: unknown command '{command}'; try: {', '.join(COMMANDS)}")
        handler(words[1] if len(words) > 1 else "")
