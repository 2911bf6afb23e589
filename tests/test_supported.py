"""The supported ranges: README's table is gpumem_kernel/supported.py's, and scripts/check_versions.py says which
installed version lies outside them, one line each."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpumem_kernel import supported

ROOT = Path(__file__).resolve().parent.parent


def test_readme_lists_the_table() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "## Supported versions" in readme
    assert supported.markdown_table() in readme


def test_every_package_the_issue_names_has_a_range() -> None:
    names = {row.name for row in supported.SUPPORTED}
    assert names == {"Python", "torch", "transformers", "peft", "bitsandbytes", "JupyterLab", "Notebook", "ipykernel"}
    for row in supported.SUPPORTED:
        assert supported.parse_strict(row.oldest) <= supported.parse_strict(row.newest), row


@pytest.mark.parametrize(
    ("installed", "inside"),
    [("2.13.0+cpu", True), ("2.8.0", True), ("2.15.1", True), ("2.7.1", False), ("2.16.0", False), ("3.0", False)],
)
def test_a_major_minor_bound_covers_its_patch_releases(installed: str, inside: bool) -> None:
    torch = next(row for row in supported.SUPPORTED if row.distribution == "torch")
    assert (torch.verdict(installed) is None) == inside


def test_a_version_outside_says_which_bound_it_misses() -> None:
    torch = next(row for row in supported.SUPPORTED if row.distribution == "torch")
    assert torch.verdict("2.7.1") == "torch 2.7.1 is older than the oldest supported 2.8 (supported 2.8 to 2.15)"
    assert "newer than the newest tested 2.15" in (torch.verdict("2.16.0") or "")
    assert "not a version" in (torch.verdict("nightly") or "")


def _check(*args: str) -> subprocess.CompletedProcess[str]:
    script = ROOT / "scripts" / "check_versions.py"
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, cwd=ROOT)


def test_check_versions_reads_a_venv_and_fails_on_one_outside(tmp_path: Path) -> None:
    """A venv whose torch is newer than the table: one line naming it, exit status 1; this Python's own venv
    is read as it is (its verdict depends on what is installed here, so only its line is checked)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    # a stand-in venv python that reports a torch 2.99 and nothing else
    fake = venv / "bin" / "python"
    fake.write_text('#!/bin/sh\necho \'{"python": "3.11.7", "torch": "2.99.0"}\'\n')
    fake.chmod(0o755)
    done = _check(str(venv), str(tmp_path / "missing"))
    assert done.returncode == 1
    assert f"{venv}: torch 2.99.0 is newer than the newest tested 2.15 (supported 2.8 to 2.15)" in done.stdout
    assert f"{tmp_path / 'missing'}: no venv yet, not checked" in done.stdout
    own = _check()
    assert own.stdout.startswith(f"{sys.prefix}: python ")
