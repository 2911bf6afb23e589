"""Planning a LoRA fine-tune imports peft, which imports bitsandbytes: on a CPU with AVX512-BF16 and without the
`kernels` package that import logs a warning about a CPU 4-bit kernel the plan never runs. It must not appear under
the user's cell, and other bitsandbytes records must still get through."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _cpu_flags() -> set:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", "import logging; logging.basicConfig()\n" + code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stderr


@pytest.mark.skipif(importlib.util.find_spec("peft") is None, reason="peft is not installed")
@pytest.mark.skipif(importlib.util.find_spec("bitsandbytes") is None, reason="bitsandbytes is not installed")
@pytest.mark.skipif(importlib.util.find_spec("kernels") is not None, reason="`kernels` is installed: nothing to warn")
@pytest.mark.skipif("avx512_bf16" not in _cpu_flags(), reason="bitsandbytes warns only on a CPU with AVX512-BF16")
def test_the_plans_peft_import_drops_only_the_cpu_kernel_warning() -> None:
    # the same import made by hand warns: the test below proves the analysis drops it, not that it never happens
    assert "gemm_4bit_forward" in _run("import peft")
    stderr = _run(
        "from gpumem_kernel.analysis.model.lora import _peft\n"
        "assert _peft() is not None\n"
        "logging.getLogger('bitsandbytes.backends.cpu.ops').warning('another record')\n"
    )
    assert "gemm_4bit_forward" not in stderr
    assert "another record" in stderr
