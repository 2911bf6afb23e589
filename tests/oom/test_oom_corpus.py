"""The kernel's classifier against the shared corpus of real messages (tests/oom/corpus.json, the same file
src/actions/oom/__tests__/oomcorpus.spec.ts reads): every out-of-memory message gets its family whichever way
it reaches the kernel (IOPub's ename/evalue, a text, a live exception), and no other message is taken for one."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from gpumem_kernel.oom.parse import parse_oom_message
from gpumem_kernel.oom.classify import (
    FAMILIES,
    classify,
    classify_exception,
    classify_text,
    find_message,
    is_oom,
    oom_in_chain,
)

HERE = Path(__file__).parent
MESSAGES = HERE / "messages"
CORPUS: List[Dict[str, Any]] = json.loads((HERE / "corpus.json").read_text("utf-8"))["messages"]
PATTERNS = json.loads((HERE.parents[1] / "gpumem_kernel" / "oom" / "patterns.json").read_text("utf-8"))
FAKE_TORCH_OOM = type("OutOfMemoryError", (RuntimeError,), {"__module__": "torch"})
# The classes the corpus's messages are raised as, defined where their libraries define them (torch need not
# be imported, and jax, tensorflow and numpy are not dependencies).
LIVE_CLASSES = {
    "OutOfMemoryError": FAKE_TORCH_OOM,
    "RuntimeError": RuntimeError,
    "ValueError": ValueError,
    "MemoryError": MemoryError,
    "AssertionError": AssertionError,
    "_ArrayMemoryError": type("_ArrayMemoryError", (MemoryError,), {"__module__": "numpy.core._exceptions"}),
    "XlaRuntimeError": type("XlaRuntimeError", (RuntimeError,), {"__module__": "jaxlib.xla_extension"}),
    "ResourceExhaustedError": type(
        "ResourceExhaustedError", (Exception,), {"__module__": "tensorflow.python.framework.errors_impl"}
    ),
    "DistBackendError": type("DistBackendError", (RuntimeError,), {"__module__": "torch.distributed"}),
    "": RuntimeError,  # a log line: the exception that carried it is unknown
}


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
    assert FAMILIES == ("cuda_allocator", "xpu", "mps", "driver", "cublas", "cudnn", "nccl", "xla", "wrapper", "host")
    assert sum(entry["oom"] for entry in CORPUS) >= 60
    assert sum(not entry["oom"] for entry in CORPUS) >= 15


def test_no_message_that_is_not_an_out_of_memory_error_is_taken_for_one() -> None:
    taken = [e["file"] for e in CORPUS if not e["oom"] and classify_text(message(e["file"])) is not None]
    assert taken == []


@pytest.mark.parametrize("entry", CORPUS, ids=ids(CORPUS))
def test_ename_and_evalue_get_the_listed_family(entry: Dict[str, Any]) -> None:
    assert classify(entry["ename"], evalue_of(entry, message(entry["file"]))) == entry["family"]


@pytest.mark.parametrize("entry", CORPUS, ids=ids(CORPUS))
def test_the_text_gets_the_listed_family(entry: Dict[str, Any]) -> None:
    assert classify_text(message(entry["file"])) == entry["family"]


@pytest.mark.parametrize("entry", CORPUS, ids=ids(CORPUS))
def test_a_live_exception_gets_the_listed_family(entry: Dict[str, Any]) -> None:
    evalue = evalue_of(entry, message(entry["file"]))
    exc = LIVE_CLASSES[entry["ename"]](evalue)
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
    assert info.family == found.family
    figures = found.family in ("cuda_allocator", "xpu")  # the caching allocator's message
    assert info.format in (("1.x", "2.x", "unknown") if figures else ("cuda-error",))


def test_every_pattern_is_exercised_by_a_real_message() -> None:
    texts = [message(entry["file"]) for entry in CORPUS if entry["oom"]]
    for family in PATTERNS["families"]:
        flags = re.ASCII | (re.IGNORECASE if family.get("ignore_case") else 0)
        for pattern in family["patterns"]:
            assert any(re.search(pattern, text, flags) for text in texts), pattern


def test_patterns_stay_in_what_python_and_javascript_read_alike() -> None:
    """No named groups, inline flags, lookarounds or anchors that only one of the two engines has."""
    everything = [n["pattern"] for n in PATTERNS["exception_names"]]
    everything += [p for f in PATTERNS["families"] for p in f["patterns"]]
    for pattern in everything:
        assert re.sub(r"\(\?:", "", pattern).count("(?") == 0, pattern
        assert not re.search(r"\\[AZzG]|\\[pP]\{", pattern), pattern


def test_the_earliest_message_decides() -> None:
    cublas = "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"
    allocator = "CUDA out of memory. Tried to allocate 20.00 MiB"
    assert classify("RuntimeError", f"{cublas}\n{allocator}") == "cublas"
    assert classify("RuntimeError", f"{allocator}\n{cublas}") == "cuda_allocator"


HINT = "if you encounter CUDA out of memory, reduce the batch size"
NUMPY = "Unable to allocate 3.00 GiB for an array with shape (1024, 1024, 384) and data type float64"


@pytest.mark.parametrize(
    "text",
    [
        f'{HINT}\nTraceback (most recent call last):\n  File "a.py", line 1, in <module>\nMemoryError: {NUMPY}\n',
        f"MemoryError: {NUMPY}\n{HINT}\n",
        f"[rank0]: {HINT}\nnumpy.core._exceptions._ArrayMemoryError: {NUMPY}\n",
        f"{HINT}\nRuntimeError: DataLoader worker (pid 31) is killed by signal: Killed.\n",
        f"{HINT}\nRuntimeError: [enforce fail at alloc_cpu.cpp:75] err == 0. DefaultCPUAllocator: can't allocate "
        "memory: you tried to allocate 132426121216 bytes. Error code 12 (Cannot allocate memory)\n",
        f"Caught a RuntimeError: CUDA out of memory. Tried to allocate 2.00 MiB ({HINT})\nMemoryError\n",
    ],
)
def test_the_exception_line_decides_not_the_text_around_it(text: str) -> None:
    """An application's own line about CUDA beside a host failure does not make it a CUDA one."""
    assert classify_text(text) == "host"
    assert find_message(text).family == "host"
    assert parse_oom_message(text).family == "host"


def test_the_exception_name_decides_over_a_message_the_application_added() -> None:
    assert classify("MemoryError", f"{HINT}\n{NUMPY}") == "host"
    assert classify("MemoryError", "CUDA out of memory. Tried to allocate 2.00 MiB") == "host"
    assert classify_exception(MemoryError(f"CUDA out of memory. Tried to allocate 2.00 MiB\n{HINT}")) == "host"
    assert classify("RuntimeError", HINT) is None


def _raised(exc: BaseException, cause: Optional[BaseException] = None, context: Optional[BaseException] = None) -> Any:
    """`exc` as `raise exc from cause` (or raised while handling `context`) leaves it."""
    exc.__cause__, exc.__context__ = cause, context if context is not None else cause
    exc.__suppress_context__ = cause is not None
    return exc


KILLED = "DataLoader worker (pid 25725) is killed by signal: Killed. "
EXITED = "DataLoader worker (pid(s) 25725) exited unexpectedly"


def test_an_error_raised_from_an_out_of_memory_error_is_that_error() -> None:
    """PyTorch's main process raises "exited unexpectedly" from the worker's death; only the cause names SIGKILL."""
    cause = RuntimeError(KILLED)
    top = _raised(RuntimeError(EXITED), cause)
    assert classify("RuntimeError", EXITED) is None  # the final error alone names no signal
    assert classify_exception(top) == "host" and is_oom(top)
    assert oom_in_chain(top) == (cause, "host")
    # Two causes deep, and an error's own family first.
    assert classify_exception(_raised(ValueError("training failed"), top)) == "host"
    own = _raised(RuntimeError("CUDA out of memory. Tried to allocate 2.00 MiB"), cause)
    assert oom_in_chain(own) == (own, "cuda_allocator")


def test_an_error_raised_while_handling_one_or_from_another_signal_is_not() -> None:
    assert classify_exception(_raised(RuntimeError(EXITED), context=RuntimeError(KILLED))) is None
    terminated = RuntimeError("DataLoader worker (pid 7) is killed by signal: Terminated. ")
    assert classify_exception(_raised(RuntimeError(EXITED), terminated)) is None
    assert classify_exception(RuntimeError(EXITED)) is None
    looped = RuntimeError(EXITED)
    looped.__cause__ = _raised(RuntimeError(EXITED), looped)  # a cycle ends
    assert oom_in_chain(looped) is None


def test_the_allocator_models_simulated_oom_is_a_cuda_allocator_message() -> None:
    simulated = "CUDA out of memory (simulated). Tried to allocate 2.00 MiB; 6.00 MiB of the 8.00 MiB simulated cap"
    assert classify("SimulatedOOM", simulated) == "cuda_allocator"
    assert classify_exception(type("SimulatedOOM", (RuntimeError,), {})(simulated)) == "cuda_allocator"


def test_a_log_without_exception_lines_is_searched_as_a_whole() -> None:
    assert classify_text(f"12:00:01 step 3\n{HINT}\nDefaultCPUAllocator: not enough memory: you tried\n") == "host"
    assert classify_text("W0101 ran fine\nCould not create cudnn handle: CUDNN_STATUS_ALLOC_FAILED\n") == "cudnn"


def test_a_class_named_like_torchs_counts_only_from_torch_and_a_message_only_on_a_runtime_error() -> None:
    assert classify("OutOfMemoryError", "anything") == "cuda_allocator"  # the browser sees only the name
    assert classify_exception(type("OutOfMemoryError", (RuntimeError,), {"__module__": "mylib"})("x")) is None
    assert classify_exception(ValueError("CUDA out of memory. Tried to allocate 2.00 MiB")) is None
    assert classify_exception(FAKE_TORCH_OOM) == "cuda_allocator"  # the class itself, as IPython's handler passes it
    assert classify_exception(type("ResourceExhaustedError", (Exception,), {"__module__": "mylib"})("x")) is None
    assert classify_exception(ValueError("No available memory for the cache blocks.")) == "wrapper"
    assert classify_exception(KeyError("No available memory for the cache blocks.")) is None


def test_exception_whose_str_raises_is_not_an_oom() -> None:
    class Broken(RuntimeError):
        def __str__(self) -> str:
            raise ValueError("no text")

    assert classify_exception(Broken()) is None
