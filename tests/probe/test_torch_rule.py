"""One place decides whether torch is loaded and CUDA initialised: probe.torchstats. Every other module asks it,
so "never import torch, never create a CUDA context" is written once (with its import-in-progress check)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import List

PACKAGE = Path(__file__).resolve().parents[2] / "gpumem_kernel"
HOME = PACKAGE / "probe" / "torchstats.py"
RULES = {
    "reads torch from sys.modules": re.compile(r"""sys\.modules\s*(?:\.get\s*\(|\[)\s*['"]torch['"]"""),
    # torch.distributed's is_initialized() asks about a process group, not CUDA
    "asks whether CUDA is initialised": re.compile(r"(?<!dist\.)\bis_initialized\b"),
}


def _sources() -> List[Path]:
    return [path for path in sorted(PACKAGE.rglob("*.py")) if "labextension" not in path.parts]


def test_only_torchstats_reads_torch_from_sys_modules_or_asks_about_cuda():
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{number}: {what}: {line.strip()}"
        for path in _sources()
        if path != HOME
        for number, line in enumerate(path.read_text("utf-8").splitlines(), 1)
        for what, pattern in RULES.items()
        if pattern.search(line)
    ]
    assert not found, "use probe.torchstats (loaded_torch, initialised_cuda, cuda_initialised):\n" + "\n".join(found)


def test_the_rule_has_its_home():
    text = HOME.read_text("utf-8")
    assert all(pattern.search(text) for pattern in RULES.values())
