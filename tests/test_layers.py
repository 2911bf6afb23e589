"""Dependencies point down: no import circle between gpumem_kernel's modules or folders (scripts/check_imports.py),
counting imports inside functions too."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path
from typing import Any, Dict

ROOT = Path(__file__).resolve().parents[1]


def _checker() -> Any:
    spec = importlib.util.spec_from_file_location("check_imports", ROOT / "scripts" / "check_imports.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules.setdefault("check_imports", module)  # dataclasses look their module up while it loads
    spec.loader.exec_module(sys.modules["check_imports"])
    return sys.modules["check_imports"]


def _package(tmp_path: Path, files: Dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / "gpumem_kernel" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path


def test_gpumem_kernel_has_no_import_circle(capsys):
    report = _checker().check(ROOT)
    print(report.text())  # the layer order, shown with -s or on failure
    assert report.ok, report.text()
    folders = [folder for layer in report.folder_layers for folder in layer]
    # the layering the README draws: measuring and rendering at the bottom, the user's commands near the top
    assert folders.index("probe") < folders.index("clear") < folders.index("magics") < folders.index("extension")
    assert folders.index("analysis") < folders.index("autobatch") and folders.index("analysis") < folders.index(
        "benchmark"
    )


def test_a_circle_through_a_function_level_relative_import_is_found(tmp_path):
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "low/__init__.py": "",
            "low/a.py": "def f():\n    from ..high import b  # only to dodge the circle\n",
            "high/__init__.py": "",
            "high/b.py": "from gpumem_kernel.low.a import f\n",
        },
    )
    report = _checker().check(root)
    assert not report.ok
    assert report.module_cycles == [["gpumem_kernel.high.b", "gpumem_kernel.low.a", "gpumem_kernel.high.b"]]
    assert report.folder_cycles == [["high", "low", "high"]]
    assert "import circle between modules: high.b -> low.a -> high.b" in report.text()


def test_a_circle_between_folders_only_is_found(tmp_path):
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "x/__init__.py": "",
            "x/one.py": "import gpumem_kernel.y.two\n",
            "x/three.py": "",
            "y/__init__.py": "",
            "y/two.py": "",
            "y/four.py": "from gpumem_kernel.x import three\n",
        },
    )
    report = _checker().check(root)
    assert report.module_cycles == [] and report.folder_cycles == [["x", "y", "x"]]


def test_layers_put_each_module_above_what_it_imports(tmp_path):
    root = _package(
        tmp_path,
        {"__init__.py": "", "a.py": "", "b.py": "from . import a\n", "c.py": "from .b import name\nimport json\n"},
    )
    report = _checker().check(root)
    assert report.ok
    assert report.module_layers == [["gpumem_kernel", "gpumem_kernel.a"], ["gpumem_kernel.b"], ["gpumem_kernel.c"]]


def test_an_analysis_stage_importing_a_stage_above_it_is_reported(tmp_path):
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "analysis/__init__.py": "",
            "analysis/trace/__init__.py": "",
            "analysis/trace/plan.py": "from gpumem_kernel.analysis.search.engines import Point\n",
            "analysis/search/__init__.py": "",
            "analysis/search/engines.py": "Point = 1\n",
        },
    )
    report = _checker().check(root)
    assert report.module_cycles == [] and not report.ok
    assert report.stage_breaches == [
        "analysis.trace.plan -> analysis.search.engines: stage trace imports search, above it"
    ]
    assert "analysis stage order broken: analysis.trace.plan -> analysis.search.engines" in report.text()


def test_a_private_name_imported_by_another_module_is_reported(tmp_path):
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "def _helper():\n    return 1\n\ndef helper():\n    return 2\n",
            "b.py": "from gpumem_kernel.a import _helper, helper\nfrom gpumem_kernel.a import helper as _mine\n",
        },
    )
    report = _checker().check(root)
    assert report.module_cycles == [] and not report.ok
    assert report.private_breaches == ["gpumem_kernel/b.py:1: _helper from gpumem_kernel.a"]
    assert "a private name imported by another module: gpumem_kernel/b.py:1: _helper" in report.text()


def test_a_benchmark_reaching_past_the_analysis_entry_point_is_reported_but_a_hidden_folder_is_not_read(tmp_path):
    root = _package(tmp_path, {"__init__.py": "", "analysis/__init__.py": "", "analysis/trace.py": ""})
    reach = "from gpumem_kernel.analysis.trace import run\n"
    (tmp_path / "benchmarks" / "zoo" / ".packages" / "other").mkdir(parents=True)
    (tmp_path / "benchmarks" / "zoo" / ".packages" / "other" / "mod.py").write_text(reach)  # installed, not ours
    (tmp_path / "benchmarks" / "speed.py").write_text(reach)
    report = _checker().check(root)
    assert report.entry_breaches == [
        "benchmarks/speed.py:1: from gpumem_kernel.analysis.trace import ... "
        "(import from gpumem_kernel.analysis instead)"
    ]
    assert not report.ok
