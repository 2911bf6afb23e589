"""`--cuda` without `--torch` plans the context for that CUDA runtime with this kernel's torch (its help says so)."""

from __future__ import annotations

import json

import pytest
from IPython.utils.capture import capture_output

torch = pytest.importorskip("torch")

from conftest import gpumem_shell  # noqa: E402
from gpumem_kernel import cli  # noqa: E402


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


def test_cuda_without_a_gpu_to_plan_for_says_it_is_not_used():
    from gpumem_kernel.analysis.pipeline.analyze import analyze

    report = analyze(torch.nn.Linear(8, 8), batch_size=2, input=(8,), device="cpu", cuda_version="11.2")
    assert "--cuda 11.2 not used: no GPU to plan a CUDA context for (add --target GPU or --memory SIZE)" in report.notes
    planned = analyze(torch.nn.Linear(8, 8), batch_size=2, input=(8,), target="RTX 4090", cuda_version="11.2")
    assert not any("--cuda" in note for note in planned.notes)


@pytest.mark.parametrize(
    "source, said",
    [
        ("estimate", None),
        ("none", "no GPU to plan a CUDA context for"),
        ("nvml", "the CUDA context is measured on this GPU"),
        ("in use", "the CUDA context is measured on this GPU"),
    ],
)
def test_cuda_is_said_unused_wherever_no_context_is_estimated(source, said):
    from types import SimpleNamespace

    from gpumem_kernel.analysis.pipeline.device import cuda_notes

    notes = cuda_notes(SimpleNamespace(context_source=source), "11.2")
    if said is None:
        assert notes == []
    else:
        assert len(notes) == 1 and notes[0].startswith("--cuda 11.2 not used: ") and said in notes[0]
    assert cuda_notes(SimpleNamespace(context_source=source), None) == []
