"""`--cuda` without `--torch` plans the context for that CUDA runtime with this kernel's torch (its help says so)."""

from __future__ import annotations

import json

import pytest
from IPython.utils.capture import capture_output

torch = pytest.importorskip("torch")

from conftest import gpumem_shell  # noqa: E402
from gpumem_kernel.magics import cli  # noqa: E402


def test_cuda_without_torch_plans_the_context_for_that_runtime():
    with gpumem_shell({"tiny": torch.nn.Linear(8, 8)}) as shell:
        with capture_output() as captured:
            shell.run_line_magic("gpumem", 'analyze tiny -b 2 --input 8 --target "RTX 4090" --cuda 11.2 --json')
    payload = json.loads(captured.stdout)
    basis = json.dumps(payload)
    assert "estimate: CUDA 11.2, eager loading" in basis, basis[:2000]


def test_the_help_says_what_cuda_does_without_torch(capsys):
    with gpumem_shell() as shell:
        with capture_output() as captured:
            shell.run_line_magic("gpumem", "analyze --help")
    text = " ".join(captured.stdout.split())
    assert "--cuda VERSION plan the CUDA context of a --target or --memory GPU for this CUDA runtime" in text
    assert "or of this kernel's torch without it" in text
    assert cli.main(["analyze", "--help"]) == 0
    assert "or of this torch without it" in " ".join(capsys.readouterr().out.split())
