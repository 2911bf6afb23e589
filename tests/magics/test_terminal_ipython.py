"""`%load_ext gpumem_kernel` and `%gpumem status` in terminal IPython, not a kernel: the README promises the
status table "in any Python kernel, also outside JupyterLab". It failed there with MultipleInstanceError, because
the kernel-identity lookup asked IPKernelApp for an instance while the terminal app held IPython's singleton."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_status_in_terminal_ipython(tmp_path: Path) -> None:
    script = tmp_path / "status.ipy"
    script.write_text("%load_ext gpumem_kernel\n%gpumem status\n")
    done = subprocess.run(
        [sys.executable, "-m", "IPython", "--no-banner", "--HistoryManager.enabled=False", str(script)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "Traceback" not in output and "MultipleInstanceError" not in output, output
    assert "Kernel RSS" in output, output
