"""The zoo: one list of entries, shared by the benchmark (python -m benchmarks.zoo) and the test subset."""

from __future__ import annotations

from typing import Dict, List

from benchmarks.zoo import hf, others, vision
from benchmarks.zoo.entry import Entry


def zoo() -> List[Entry]:
    return [*hf.entries(), *vision.timm_entries(), *vision.torchvision_entries(), *others.entries()]


def by_name() -> Dict[str, Entry]:
    entries = zoo()
    named = {e.name: e for e in entries}
    assert len(named) == len(entries), "zoo names must be unique"
    return named
