"""The checklist's batch step offers the last analysis's pick only for the model the error failed in: an analysis
of one model (a Llama plan at batch 1) never sets the batch of an unrelated CNN that ran out of memory at 512."""

from __future__ import annotations

import gc
import types
from typing import Any, Dict, Optional

import pytest

from gpumem_kernel.oom.analyzed import AnalyzedModel, failed_model
from gpumem_kernel.oom.bundle import OOM_MIME, checklist_bundle
from gpumem_kernel.probe.holders import torch_kinds

torch = pytest.importorskip("torch")

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 15.70 GiB "
    "of which 1.10 GiB is free. Including non-PyTorch memory, this process has 14.58 GiB memory in use. Of the "
    "allocated memory 13.90 GiB is allocated by PyTorch, and 412.00 MiB is reserved by PyTorch but unallocated."
)


class Raises(torch.nn.Module):
    """A layer whose forward runs out of memory, so the traceback runs through the model that holds it."""

    def forward(self, x: Any) -> Any:
        raise torch.OutOfMemoryError(OOM.split(": ", 1)[1])


def llama_like() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Embedding(100, 16), torch.nn.Linear(16, 100), Raises())


def cnn() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), Raises())


def report(model: Optional[torch.nn.Module], recommended: int, name: str = "", count: Optional[int] = None) -> Any:
    """What AnalyzedModel.of reads of an analysis report."""
    parameters = count if count is not None else sum(p.numel() for p in model.parameters())
    return types.SimpleNamespace(
        model_name=name, parameter_count=parameters, recommendations=types.SimpleNamespace(recommended=recommended)
    )


def failing(model: torch.nn.Module, x: Any) -> BaseException:
    try:
        model(x)
    except torch.OutOfMemoryError as error:
        return error
    raise AssertionError("the model did not fail")


def steps(error: BaseException, ns: Dict[str, Any], analyzed: Optional[AnalyzedModel]) -> Dict[str, Dict[str, Any]]:
    shell = types.SimpleNamespace(user_ns=dict(ns), user_ns_hidden={})
    bundle = checklist_bundle(error, shell, sample={}, tb=error.__traceback__, analyzed=analyzed, env={})
    return {s["id"]: s for s in bundle[OOM_MIME]["steps"]}


def test_an_analysis_of_another_model_gives_none_of_its_numbers():
    llm, conv = llama_like(), cnn()
    analyzed = AnalyzedModel.of(llm, report(llm, 1))
    error = failing(conv, torch.zeros(1, 3, 8, 8))

    by_id = steps(error, {"llm": llm, "conv": conv, "batch_size": 512}, analyzed)

    batch, evaluation = by_id["batch-size"], by_id["eval-batch-size"]
    assert batch["title"] == "Reduce the batch size to 256"  # half of 512, not the Llama plan's 1
    assert "analyze recommendation" not in batch["detail"]
    assert "Run `%gpumem analyze conv --batch 512` to compute the batch size that fits this model." in batch["detail"]
    assert "at most 1)" not in evaluation["detail"] and "at most 332" in evaluation["detail"]  # 1.3 × 256


def test_an_analysis_of_the_model_that_failed_gives_its_batch():
    llm, conv = llama_like(), cnn()
    analyzed = AnalyzedModel.of(llm, report(llm, 3))
    error = failing(llm, torch.zeros(1, 4, dtype=torch.long))

    batch = steps(error, {"llm": llm, "conv": conv, "batch_size": 16}, analyzed)["batch-size"]

    assert batch["title"] == "Reduce the batch size to 3"
    assert "3 is the last %gpumem analyze recommendation" in batch["detail"]
    assert "Run `%gpumem analyze" not in batch["detail"]


def test_the_same_class_and_parameter_count_is_the_same_model_built_again():
    first = llama_like()
    analyzed = AnalyzedModel.of(first, report(first, 4))
    del first
    gc.collect()
    assert analyzed.ref is not None and analyzed.ref() is None  # the record did not keep the model alive
    again = llama_like()
    error = failing(again, torch.zeros(1, 4, dtype=torch.long))

    assert steps(error, {"model": again, "batch_size": 16}, analyzed)["batch-size"]["title"] == (
        "Reduce the batch size to 4"
    )


def test_a_model_analysed_by_name_matches_by_class_and_parameter_count():
    llm = llama_like()
    count = sum(p.numel() for p in llm.parameters())
    error = failing(llm, torch.zeros(1, 4, dtype=torch.long))
    ns = {"llm": llm, "batch_size": 16}

    same = AnalyzedModel.of(None, report(None, 2, name="Sequential", count=count))
    other = AnalyzedModel.of(None, report(None, 2, name="Sequential", count=count + 1))

    assert steps(error, ns, same)["batch-size"]["title"] == "Reduce the batch size to 2"
    assert steps(error, ns, other)["batch-size"]["title"] == "Reduce the batch size to 8"


def test_an_error_outside_any_model_uses_the_analysis_only_when_one_model_is_in_the_namespace():
    llm, conv = llama_like(), cnn()
    analyzed = AnalyzedModel.of(llm, report(llm, 3))
    error = torch.OutOfMemoryError(OOM.split(": ", 1)[1])  # raised by no model (no traceback frames)

    assert steps(error, {"llm": llm, "batch_size": 16}, analyzed)["batch-size"]["title"] == "Reduce the batch size to 3"
    alone = steps(error, {"llm": llm, "conv": conv, "batch_size": 16}, analyzed)["batch-size"]
    assert alone["title"] == "Reduce the batch size to 8"
    assert "Run `%gpumem analyze <model variable> --batch 16`" in alone["detail"]


def test_the_failed_model_is_the_whole_model_not_a_part_the_namespace_also_names():
    llm = llama_like()
    error = failing(llm, torch.zeros(1, 4, dtype=torch.long))
    found = failed_model([("head", llm[2]), ("llm", llm)], error.__traceback__, torch_kinds())
    assert found is not None and found.name == "llm" and found.from_traceback
