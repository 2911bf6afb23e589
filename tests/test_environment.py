"""The environments the setup makes are like a user's: importing torch there is quiet (numpy is present)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kernel_harness import kernel_python

pytestmark = pytest.mark.kernel  # also runs against the ipykernel 6 environment


@pytest.mark.parametrize("python", sorted({sys.executable, kernel_python()}))
def test_importing_torch_prints_no_warning(python: str) -> None:
    if subprocess.run([python, "-c", "import torch"], capture_output=True).returncode != 0:
        pytest.skip(f"no torch in {python}")
    done = subprocess.run([python, "-c", "import torch; torch.zeros(1).numpy()"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "Failed to initialize NumPy" not in done.stderr and "UserWarning" not in done.stderr
