"""Ctrl-C (Kernel > Interrupt) during a fresh kernel's first `%gpumem analyze`, while the tracer's first
FakeTensorMode imports torch._dynamo and sympy (some 800 modules), leaves no half-imported module: the next
analysis runs, and so does the user's own `import sympy; sympy.printing`.

The moments are set by how far the import has got, not by the clock: a subshell (ipykernel >= 7) reads the number
of imported modules while the analysis runs, and the interrupt is sent once that many have been added. Without
subshells, the interrupt is sent at a spread of times after the cell starts, every one of them checked the same way.
"""

from __future__ import annotations

import json
import time
from typing import Any, Dict, List, Optional

import pytest

from gpumem_kernel.analysis.report.render import MIME as ANALYSIS_MIME
from kernel_harness import KernelHarness, torch_in_kernel_python


pytestmark = [
    pytest.mark.kernel,
    pytest.mark.skipif(not torch_in_kernel_python(), reason="torch is not installed for the kernel's Python"),
]

SETUP = (
    "import torch\n"
    "torch.set_num_threads(1)\n"
    "model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))\n"
)
ANALYZE = "%gpumem analyze model --input 32 --batch 4"
MODULES = "len(__import__('sys').modules)"
# modules whose package is gone from sys.modules: what an unwound import leaves, and what breaks the next one
HALF_IMPORTED = (
    "sorted(n for n in list(__import__('sys').modules) if any("
    "'.'.join(n.split('.')[:i]) not in __import__('sys').modules for i in range(1, n.count('.') + 1)))"
)
# how far the first analysis's imports have got when the interrupt is sent: the tracer's imports add ~800 modules,
# sympy's core first, then the rest of sympy (printing among them), then torch._dynamo's own
ADDED = (150, 400, 650)
SECONDS = (0.5, 1.2, 2.5)  # without subshells: a spread over the same phase


def _subshell_expression(kernel: KernelHarness, subshell: str, expression: str, timeout: float = 30) -> Any:
    """An expression's value read on a subshell while the main shell is busy. The main shell's replies read here
    are not needed: the test follows that cell on iopub."""
    content = {"code": "", "silent": True, "store_history": False, "user_expressions": {"v": expression}}
    msg = kernel.kc.session.msg("execute_request", {**content, "allow_stdin": False, "stop_on_error": False})
    msg["header"]["subshell_id"] = subshell
    kernel.kc.shell_channel.send(msg)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reply = kernel.kc.get_shell_msg(timeout=max(0.1, deadline - time.monotonic()))
        if reply["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
            value = reply["content"]["user_expressions"]["v"]
            return json.loads(value["data"]["text/plain"]) if value["status"] == "ok" else None
    raise TimeoutError("the subshell did not answer")


def _interrupt_when(kernel: KernelHarness, subshell: Optional[str], baseline: int, added: int, seconds: float) -> str:
    """Interrupt once `added` modules have been imported since `baseline` (or after `seconds`); what was seen."""
    started = time.monotonic()
    if subshell is None:
        time.sleep(seconds)
        kernel.km.interrupt_kernel()
        return f"{seconds} s"
    while time.monotonic() - started < 120:
        count = _subshell_expression(kernel, subshell, MODULES)
        if count is not None and count - baseline >= added:
            kernel.km.interrupt_kernel()
            return f"{count - baseline} modules added"
        time.sleep(0.01)
    kernel.km.interrupt_kernel()
    return "no import seen"


def _run(kernel: KernelHarness, code: str) -> Dict[str, Any]:
    """The cell's outcome as the notebook shows it: its error name, and the MIME types it displayed."""
    content = kernel.execute(code, timeout=300)
    shown = [r.content["data"] for r in kernel.messages() if r.parent_id == content["msg_id"] and "data" in r.content]
    return {"status": content["status"], "ename": content.get("ename"), "mimes": [m for d in shown for m in d]}


def _first_analysis_interrupted(added: int, seconds: float) -> Dict[str, Any]:
    with KernelHarness() as kernel:
        kernel.bootstrap()
        assert kernel.execute(SETUP)["status"] == "ok"
        assert kernel.evaluate("'torch._dynamo' in __import__('sys').modules") is False  # the import is still ahead
        subshell = kernel.create_subshell()
        baseline = kernel.evaluate(MODULES)
        msg_id = kernel.kc.execute(ANALYZE)
        moment = _interrupt_when(kernel, subshell, baseline, added, seconds)
        kernel.wait_idle(msg_id, timeout=300)
        errors = [r.content["ename"] for r in kernel.messages() if r.parent_id == msg_id and r.msg_type == "error"]
        outcome = {"moment": moment, "first": errors[0] if errors else "ok"}
        outcome["half_imported"] = kernel.evaluate(HALF_IMPORTED)
        outcome["again"] = _run(kernel, ANALYZE)
        outcome["sympy"] = _run(kernel, "import sympy\nsympy.printing.pretty")
        return outcome


def _summary(outcomes: List[Dict[str, Any]]) -> List[str]:
    return [
        f"at {o['moment']}: {len(o['half_imported'])} half-imported ({', '.join(o['half_imported'][:3])}...), "
        f"next analysis {o['again']['ename'] or 'ok'}, sympy.printing {o['sympy']['ename'] or 'ok'}"
        for o in outcomes
    ]


def test_ctrl_c_in_the_first_analysis_leaves_no_half_imported_module():
    outcomes: List[Dict[str, Any]] = [_first_analysis_interrupted(a, s) for a, s in zip(ADDED, SECONDS)]

    broken = [
        o
        for o in outcomes
        if o["half_imported"]
        or o["again"]["status"] != "ok"
        or ANALYSIS_MIME not in o["again"]["mimes"]
        or o["sympy"]["status"] != "ok"
    ]
    assert not broken, f"{len(broken)} of {len(outcomes)} interrupts left a broken kernel: {_summary(broken)}"
    # the interrupts did stop analyses: with the magic's one line (magics.progress.AnalysisInterrupted, a
    # KeyboardInterrupt) once the analysis has begun, a bare KeyboardInterrupt before
    assert any(o["first"] in ("KeyboardInterrupt", "AnalysisInterrupted") for o in outcomes)
