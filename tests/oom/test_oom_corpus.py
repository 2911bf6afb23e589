"""The kernel's classifier against the shared corpus of real messages (tests/oom/corpus.json, the same file
src/actions/oom/__tests__/oomcorpus.spec.ts reads): every out-of-memory message gets its family whichever way
it reaches the kernel (IOPub's ename/evalue, a text, a live exception), and no other message is taken for one."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, List

import pytest

from gpumem_kernel.oom.checklist import parse_oom_message
from gpumem_kernel.oom.classify import (
    FAMILIES,
    classify,
    classify_exception,
    classify_text,
    find_message,
    is_oom,
)

HERE = Path(__file__).parent
MESSAGES = HERE / "messages"
CORPUS: List[Dict[str, Any]] = json.loads((HERE / "corpus.json").read_text("utf-8"))["messages"]
PATTERNS = json.loads((HERE.parents[1] / "gpumem_kernel" / "oom" / "patterns.json").read_text("utf-8"))
FAKE_TORCH_OOM = type("OutOfMemoryError", (RuntimeError,), {"__module__": "torch"})


def message(name: str) -> str:
    """The message without its `# source:` line."""
    return "".join((MESSAGES / name).read_text("utf-8").splitlines(keepends=True)[1:])


def evalue_of(entry: Dict[str, Any], text: str) -> str:
    """The IOPub `evalue` of the error: the message after the first `<ename>: `, else the whole message."""
    marker = f"{entry['ename']}: "
    return text.split(marker, 1)[1] if entry["ename"] and marker in text else text


def ids(entries: List[Dict[str, Any]]) -> List[str]:
    return [entry["file"] for entry in entries]


def test_every_message_file_is_listed_once_with_its_source() -> None:
    files = sorted(p.name for p in MESSAGES.glob("*.txt"))
    assert sorted(ids(CORPUS)) == files
    for entry in CORPUS:
        assert (MESSAGES / entry["file"]).read_text("utf-8").startswith("# source: "), entry["file"]
        assert entry["oom"] == (entry["family"] is not None), entry["file"]
        assert entry["family"] is None or entry["family"] in FAMILIES, entry["file"]


def test_every_family_has_real_messages_and_there_are_real_negatives() -> None:
    assert {entry["family"] for entry in CORPUS if entry["oom"]} == set(FAMILIES)
    assert sum(not entry["oom"] for entry in CORPUS) >= 5


@pytest.mark.parametrize("entry", CORPUS, ids=ids(CORPUS))
def test_ename_and_evalue_get_the_listed_family(entry: Dict[str, Any]) -> None:
    assert classify(entry["ename"], evalue_of(entry, message(entry["file"]))) == entry["family"]


@pytest.mark.parametrize("entry", CORPUS, ids=ids(CORPUS))
def test_the_text_gets_the_listed_family(entry: Dict[str, Any]) -> None:
    assert classify_text(message(entry["file"])) == entry["family"]


@pytest.mark.parametrize("entry", CORPUS, ids=ids(CORPUS))
def test_a_live_exception_gets_the_listed_family(entry: Dict[str, Any]) -> None:
    evalue = evalue_of(entry, message(entry["file"]))
    exc = FAKE_TORCH_OOM(evalue) if entry["ename"] == "OutOfMemoryError" else RuntimeError(evalue)
    assert classify_exception(exc) == entry["family"]
    assert is_oom(exc) == entry["oom"]


@pytest.mark.parametrize("entry", CORPUS, ids=ids(CORPUS))
def test_the_parser_reads_exactly_the_messages_the_classifier_finds(entry: Dict[str, Any]) -> None:
    text = message(entry["file"])
    found, info = find_message(text), parse_oom_message(text)
    assert (info is None) == (found is None)
    if found is None:
        return
    assert found.family == entry["family"]
    assert info.format == ("cuda-error" if found.family != "allocator" else info.format)
    assert info.format in (("1.x", "2.x", "unknown") if found.family == "allocator" else ("cuda-error",))


def test_every_pattern_is_exercised_by_a_real_message() -> None:
    texts = [message(entry["file"]) for entry in CORPUS if entry["oom"]]
    for family in PATTERNS["families"]:
        for pattern in family["patterns"]:
            assert any(re.search(pattern, text, re.ASCII) for text in texts), pattern


def test_patterns_stay_in_what_python_and_javascript_read_alike() -> None:
    """No named groups, inline flags, lookarounds or anchors that only one of the two engines has."""
    everything = [PATTERNS["exception_name"]] + [p for f in PATTERNS["families"] for p in f["patterns"]]
    for pattern in everything:
        assert re.sub(r"\(\?:", "", pattern).count("(?") == 0, pattern
        assert not re.search(r"\\[AZzG]|\\[pP]\{", pattern), pattern


def test_the_earliest_message_decides() -> None:
    cublas = "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"
    allocator = "CUDA out of memory. Tried to allocate 20.00 MiB"
    assert classify("RuntimeError", f"{cublas}\n{allocator}") == "cublas-cudnn"
    assert classify("RuntimeError", f"{allocator}\n{cublas}") == "allocator"


def test_a_class_named_like_torchs_counts_only_from_torch_and_a_message_only_on_a_runtime_error() -> None:
    assert classify("OutOfMemoryError", "anything") == "allocator"  # the browser sees only the name
    assert classify_exception(type("OutOfMemoryError", (RuntimeError,), {"__module__": "mylib"})("x")) is None
    assert classify_exception(ValueError("CUDA out of memory. Tried to allocate 2.00 MiB")) is None
    assert classify_exception(FAKE_TORCH_OOM) == "allocator"  # the class itself, as IPython's handler passes it


def test_exception_whose_str_raises_is_not_an_oom() -> None:
    class Broken(RuntimeError):
        def __str__(self) -> str:
            raise ValueError("no text")

    assert classify_exception(Broken()) is None
