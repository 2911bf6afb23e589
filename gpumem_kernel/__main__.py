"""`python -m gpumem_kernel info|analyze|autobatch|benchmark ...` (see cli.py)."""

import sys

from gpumem_kernel.cli import main

if __name__ == "__main__":
    sys.exit(main())
