"""An out-of-memory error raised in evaluation (gradients off) puts "reduce the evaluation batch" first.

The end-to-end tests run real cells in an IPython shell with the OOM handler installed: a CPU model's forward
raises a real torch.OutOfMemoryError when its batch is too large, called from evaluation code (`with
torch.no_grad():`, `@torch.no_grad()`, `torch.inference_mode()`) or from a training step; the checklist the
handler shows is read back from the display."""

from __future__ import annotations

import ast
import json
import sys
from typing import Any, Dict, Iterator, List, Optional

import jsonschema
import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from gpumem_kernel.oom.bundle import OOM_MIME
from gpumem_kernel.oom.handler import install_oom_handler
from gpumem_kernel.oom.order import COST_ORDER, step_key
from gpumem_kernel.oom import grad_mode
from gpumem_kernel.oom.grad_mode import grad_off_evidence, grad_switch
from gpumem_kernel.wire.protocol import load_payload_schema
from ipython_shell import fresh_shell

torch = pytest.importorskip("torch")

OOM = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 15.70 GiB of which 1.10 GiB "
    "is free. Of the allocated memory 13.90 GiB is allocated by PyTorch, and 412.00 MiB is reserved by PyTorch "
    "but unallocated."
)
# A model whose forward runs on the CPU and raises what CUDA's allocator raises when the batch is too large,
# and the training setup the checklist reads from the namespace (a training batch of 16).
SETUP = f"""
import torch
from torch.utils.data import DataLoader, TensorDataset

OOM = {OOM!r}


class Capped(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))

    def forward(self, x):
        hidden = self.layers(x)
        if x.shape[0] > 32:
            raise torch.OutOfMemoryError(OOM)
        return hidden


model = Capped()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
criterion = torch.nn.CrossEntropyLoss()
train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=16)
"""
TRAIN = """
def train_step(inputs, targets):
    model.train()
    optimizer.zero_grad()
    loss = criterion(model(inputs), targets)
    loss.backward()
    optimizer.step()
    return loss
"""
BIG = "torch.randn(256, 8)"
TRAINING_CALL = f"train_step({BIG}, torch.randint(0, 3, (256,)))"


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    with fresh_shell() as sh:
        install_oom_handler(sh, probe=lambda: None)
        run(sh, SETUP)
        yield sh
        torch.set_grad_enabled(True)


def run(sh: InteractiveShell, code: str) -> List[Dict[str, Any]]:
    """Run one cell; the OOM payloads it displayed."""
    with capture_output() as captured:
        result = sh.run_cell(code, store_history=True)
    if result.error_in_exec is not None and not isinstance(result.error_in_exec, (torch.OutOfMemoryError, MemoryError)):
        raise result.error_in_exec
    payloads = [o.data for o in captured.outputs if OOM_MIME in o.data]
    for bundle in payloads:
        jsonschema.Draft202012Validator(load_payload_schema("oom")).validate(json.loads(json.dumps(bundle[OOM_MIME])))
    return payloads


def checklist(sh: InteractiveShell, definition: str, call: str) -> Dict[str, Any]:
    """The bundle of the OOM that `call` raises after `definition` ran (each in a cell of its own)."""
    assert run(sh, definition) == []
    (bundle,) = run(sh, call)
    return bundle


def ids(bundle: Dict[str, Any]) -> List[str]:
    return [step["id"] for step in bundle[OOM_MIME]["steps"]]


def step(bundle: Dict[str, Any], step_id: str) -> Dict[str, Any]:
    return next(s for s in bundle[OOM_MIME]["steps"] if s["id"] == step_id)


def training_order(steps: List[Dict[str, Any]]) -> List[str]:
    """Today's order without a cause: the steps that may help by COST_ORDER, the re-run step where the checklist
    put it, then the folded ones by COST_ORDER."""

    def rank(s: Dict[str, Any]) -> Any:
        return (s["not_applicable"] is not None, COST_ORDER.index(step_key(s["id"])))

    found = [s["id"] for s in steps]
    ranked = [s["id"] for s in sorted((s for s in steps if s["id"] != "timeline-rerun"), key=rank)]
    if "timeline-rerun" not in found:
        return ranked
    at = found.index("timeline-rerun")
    return ranked[:at] + ["timeline-rerun"] + ranked[at:]


def assert_training(bundle: Dict[str, Any]) -> None:
    payload = bundle[OOM_MIME]
    assert payload["diagnosis"]["evaluation"] is None
    assert ids(bundle) == training_order(payload["steps"])
    assert ids(bundle).index("batch-size") < ids(bundle).index("eval-batch-size")
    assert step(bundle, "eval-batch-size")["title"] == "Keep the evaluation batch small"
    assert "In evaluation" not in bundle["text/plain"]


def assert_evaluation(bundle: Dict[str, Any], evidence: str) -> Dict[str, Any]:
    payload = bundle[OOM_MIME]
    found = payload["diagnosis"]["evaluation"]
    assert found is not None and evidence in found, found
    assert ids(bundle)[0] == "eval-batch-size"
    assert ids(bundle)[1:] == training_order(payload["steps"][1:])  # the other steps keep today's order
    first = payload["steps"][0]
    assert first["title"] == "Reduce the evaluation batch to at most 20"  # 1.3 × the training batch of 16
    assert "happened in evaluation" in first["detail"]
    assert "training batch of 16 (found in `train_loader.batch_size`): 20" in first["detail"]
    assert f"In evaluation (gradients off): {found}" in bundle["text/plain"]
    assert "Checklist (likely cause first, then cheapest)" in bundle["text/plain"]
    return payload


# --- end to end: the handler in an IPython shell ----------------------------------------------------------------


def test_on_python_3_9_without_match_statements_an_oom_inside_no_grad_still_counts(shell, monkeypatch) -> None:
    """Python 3.9 (supported) has no ast.match_case: looking for one made every frame say nothing there."""
    monkeypatch.setattr(grad_mode, "_MATCH_CASE", None)
    evaluate = """
def evaluate(batch):
    with torch.no_grad():
        return model(batch)
"""
    bundle = checklist(shell, evaluate, f"evaluate({BIG})")
    assert_evaluation(bundle, "the failing line runs inside `with torch.no_grad():`")


def test_an_oom_inside_with_no_grad_puts_the_evaluation_batch_first(shell: InteractiveShell) -> None:
    evaluate = """
def evaluate(batch):
    model.eval()
    with torch.no_grad():
        logits = model(batch)
        return logits.argmax(dim=1)
"""
    bundle = checklist(shell, evaluate, f"evaluate({BIG})")
    payload = assert_evaluation(bundle, "the failing line runs inside `with torch.no_grad():`")
    count = shell.execution_count - 2  # the cell that defined evaluate()
    assert payload["diagnosis"]["evaluation"].endswith(f"(In [{count}], line 4)")  # IPython drops the first newline
    assert "In evaluation (gradients off): the failing line runs inside `with torch.no_grad():`" in bundle["text/html"]


def test_the_same_code_without_no_grad_keeps_the_training_order(shell: InteractiveShell) -> None:
    assert_training(checklist(shell, TRAIN, TRAINING_CALL))
    # the same forward as evaluation, without the context manager
    assert_training(checklist(shell, "def predict(batch):\n    return model(batch).argmax(dim=1)\n", f"predict({BIG})"))


@pytest.mark.parametrize(
    "decorator", ["@torch.no_grad()", "@torch.no_grad", "@torch.inference_mode()", "@torch.inference_mode(True)"]
)
def test_a_function_decorated_to_run_without_gradients(shell: InteractiveShell, decorator: str) -> None:
    evaluate = f"""
{decorator}
def evaluate(batch):
    model.eval()
    return model(batch).softmax(dim=1)
"""
    assert_evaluation(checklist(shell, evaluate, f"evaluate({BIG})"), f"`evaluate` is decorated with `{decorator}`")


@pytest.mark.parametrize("context", ["torch.inference_mode()", "torch.set_grad_enabled(False)", "torch.no_grad()"])
def test_inference_mode_and_grad_switched_off_in_the_cell_itself(shell: InteractiveShell, context: str) -> None:
    cell = f"""
model.eval()
with {context}:
    scores = model({BIG})
"""
    (bundle,) = run(shell, cell)
    count = shell.execution_count - 1
    assert_evaluation(bundle, f"the failing line runs inside `with {context}:` (In [{count}], line 3)")


def test_grad_turned_on_again_nearer_the_line_is_training(shell: InteractiveShell) -> None:
    fine_tune = """
@torch.no_grad()
def adapt(inputs, targets):
    with torch.enable_grad():
        loss = criterion(model(inputs), targets)
        loss.backward()
"""
    assert_training(checklist(shell, fine_tune, f"adapt({BIG}, torch.randint(0, 3, (256,)))"))


def test_without_the_source_the_checklist_keeps_the_training_order(shell: InteractiveShell) -> None:
    """A function compiled from a file that does not exist: linecache has no line of it."""
    missing = """
source = "@torch.no_grad()\\ndef evaluate(batch):\\n    return model(batch)\\n"
exec(compile(source, "/nonexistent/gpumem-evaluate.py", "exec"), globals())
"""
    assert_training(checklist(shell, missing, f"evaluate({BIG})"))


def test_source_changed_since_the_code_ran_says_nothing(shell: InteractiveShell) -> None:
    import linecache

    assert run(shell, "def evaluate(batch):\n    with torch.no_grad():\n        return model(batch)\n") == []
    filename = shell.user_ns["evaluate"].__code__.co_filename
    size, mtime, _, name = linecache.cache[filename]
    linecache.cache[filename] = (size, mtime, ["x = 1\n", "with torch.no_grad():\n", "    y = 2\n"], name)
    (bundle,) = run(shell, f"evaluate({BIG})")
    assert_training(bundle)


def test_grad_mode_left_off_in_the_kernel_is_evaluation(shell: InteractiveShell) -> None:
    run(shell, "torch.set_grad_enabled(False)")
    (bundle,) = run(shell, f"model({BIG})")
    torch.set_grad_enabled(True)
    assert_evaluation(bundle, "gradients are off in this kernel (torch.is_grad_enabled() is False)")


def test_lightning_evaluation_steps_count_and_the_diagnosis_says_why(shell: InteractiveShell) -> None:
    module = """
class Classifier:
    def validation_step(self, batch, batch_idx):
        return criterion(model(batch[0]), batch[1])
"""
    bundle = checklist(shell, module, f"Classifier().validation_step(({BIG}, torch.randint(0, 3, (256,))), 0)")
    assert_evaluation(bundle, "it was raised in `validation_step`, which Lightning runs without gradients")


def test_an_optimizer_switching_gradients_off_is_training(shell: InteractiveShell) -> None:
    optimizer = """
class Sgd(torch.optim.SGD):
    @torch.no_grad()
    def step(self, closure=None):
        raise torch.OutOfMemoryError(OOM)

opt = Sgd(model.parameters(), lr=0.1)
"""
    assert_training(checklist(shell, optimizer, "opt.step()"))


def test_an_evaluation_loader_above_the_cap_is_named(shell: InteractiveShell) -> None:
    run(shell, "val_loader = DataLoader(TensorDataset(torch.randn(300, 8)), batch_size=256)")
    evaluate = "def evaluate(loader):\n    with torch.no_grad():\n        return [model(x) for (x,) in loader]\n"
    bundle = checklist(shell, evaluate, "evaluate(val_loader)")
    assert "In your namespace `val_loader` has batch_size 256." in step(bundle, "eval-batch-size")["detail"]


def test_without_a_training_batch_the_step_gives_the_rule(shell: InteractiveShell) -> None:
    run(shell, "del train_loader")
    (bundle,) = run(shell, f"with torch.no_grad():\n    model({BIG})\n")
    first = bundle[OOM_MIME]["steps"][0]
    assert (first["id"], first["title"]) == ("eval-batch-size", "Reduce the evaluation batch")
    assert "at most 1.3× the training batch; halve it until it fits" in first["detail"]


def test_a_host_memory_error_in_evaluation_puts_the_evaluation_batch_first_too(shell: InteractiveShell) -> None:
    cell = "with torch.no_grad():\n    raise MemoryError('Unable to allocate 3.00 GiB for an array with shape (3,)')\n"
    (bundle,) = run(shell, cell)
    assert bundle[OOM_MIME]["info"]["family"] == "host"
    assert ids(bundle)[:2] == ["eval-batch-size", "host-memory"]  # then the host family's steps (no workers here)


# --- the evidence, in plain Python ---------------------------------------------------------------------------------


def raised(function: Any, *args: Any) -> Any:
    try:
        function(*args)
    except torch.OutOfMemoryError:
        return sys.exc_info()[2]
    raise AssertionError("no out-of-memory error")


def forward(batch: Any) -> Any:
    raise torch.OutOfMemoryError(OOM)


def nested(batch: Any) -> Any:
    with torch.autocast("cpu"), torch.no_grad():
        if batch is not None:
            try:
                return forward(batch)
            finally:
                pass


def defined_in_no_grad() -> Any:
    with torch.no_grad():

        def later(batch: Any) -> Any:
            return forward(batch)

    return later


def test_the_innermost_frame_with_a_switch_decides() -> None:
    evidence = grad_off_evidence(raised(nested, 1))
    assert evidence is not None and evidence.startswith(
        "the failing line runs inside `with torch.no_grad():` (test_oom_grad_mode.py:"
    )
    assert evidence.endswith(" in nested)")


def test_a_function_defined_inside_the_block_but_called_after_it_is_training() -> None:
    assert grad_off_evidence(raised(defined_in_no_grad(), 1)) is None


def test_no_traceback_and_no_torch_grad_switch_say_nothing() -> None:
    assert grad_off_evidence(None) is None or not torch.is_grad_enabled()
    assert grad_off_evidence(raised(forward, 1)) is None


@pytest.mark.parametrize(
    "code, decorator, expected",
    [
        ("torch.no_grad()", False, False),
        ("th.autograd.no_grad()", False, False),
        ("torch.inference_mode()", False, False),
        ("torch.inference_mode(mode=True)", False, False),
        ("torch.inference_mode(False)", False, None),
        ("torch.set_grad_enabled(False)", False, False),
        ("torch.set_grad_enabled(mode=True)", False, True),
        ("torch.set_grad_enabled(training)", False, None),
        ("torch.enable_grad()", False, True),
        ("torch.autocast('cuda')", False, None),
        ("torch.no_grad", True, False),
        ("torch.no_grad", False, None),
        ("open(path)", False, None),
    ],
)
def test_grad_switch(code: str, decorator: bool, expected: Optional[bool]) -> None:
    expr = ast.parse(code, mode="eval").body
    assert grad_switch(expr, decorator=decorator) is expected
