"""parse_oom_message on real PyTorch OOM messages (tests/oom/messages/, each file names its source), and is_oom."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import pytest

from gpumem_kernel.oom.parse import ProcessUse, parse_oom_message
from gpumem_kernel.oom.classify import is_oom

MESSAGES = Path(__file__).parent / "messages"
KIB, MIB, GIB = 1024, 1024**2, 1024**3


def b(number: float, factor: int) -> int:
    return int(round(number * factor))


def read_message(name: str) -> str:
    """The message without its `# source:` line."""
    lines = (MESSAGES / name).read_text("utf-8").splitlines(keepends=True)
    assert lines[0].startswith("# source: "), f"{name} must start with a '# source:' line"
    return "".join(lines[1:])


EXPECTED: Dict[str, Dict[str, Any]] = {
    "v0_cuda_runtime_error.txt": dict(format="cuda-error", exception="RuntimeError", tried_to_allocate=None),
    "cuda_error_oom.txt": dict(format="cuda-error", exception="RuntimeError", device=None),
    "v1_cached_tiny_free.txt": dict(
        format="1.x",
        exception="RuntimeError",
        tried_to_allocate=b(1.12, MIB),
        device=0,
        total_capacity=b(22.37, GIB),
        allocated_by_pytorch=b(15.87, GIB),
        free=b(3.56, MIB),
        reserved_unallocated=b(787.74, MIB),
    ),
    "v2_hip_app_hint.txt": dict(
        format="2.x",
        exception=None,
        backend="HIP",
        tried_to_allocate=b(432.00, MIB),
        total_capacity=b(15.92, GIB),
        free=b(7.12, GIB),
        allocated_by_pytorch=b(8.08, GIB),
        reserved_unallocated=b(321.96, MIB),
        hint="expandable_segments",
    ),
    "xpu_tensor_larger_than_free.txt": dict(
        format="2.x",
        exception="torch.OutOfMemoryError",
        backend="XPU",
        family="xpu",
        tried_to_allocate=b(8.00, GIB),
        device=0,
        total_capacity=b(15.11, GIB),
        free=None,
        allocated_by_pytorch=0,
        reserved_unallocated=0,
    ),
    "xpu_larger_than_capacity_free.txt": dict(
        format="2.x",
        exception="torch.OutOfMemoryError",
        backend="XPU",
        tried_to_allocate=b(4.66, GIB),
        total_capacity=b(5.65, GIB),
        free=b(5.65, GIB),
        allocated_by_pytorch=b(195.50, KIB),
        reserved_unallocated=b(1.81, MIB),
    ),
    "xpu_title.txt": dict(
        format="2.x", backend="XPU", family="xpu", tried_to_allocate=b(4.00, GIB), total_capacity=b(15.11, GIB)
    ),
    "v1_cached.txt": dict(
        format="1.x",
        exception="RuntimeError",
        tried_to_allocate=b(26.00, MIB),
        device=0,
        total_capacity=b(1024.00, MIB),
        allocated_by_pytorch=b(435.61, MIB),
        free=b(24.17, MIB),
        reserved_unallocated=b(26.39, MIB),
        reserved_total=None,
        hint=None,
    ),
    "v1_reserved.txt": dict(
        format="1.x",
        tried_to_allocate=b(2.87, GIB),
        device=0,
        total_capacity=b(14.76, GIB),
        allocated_by_pytorch=b(8.77, GIB),
        free=b(19.75, MIB),
        reserved_total=b(13.71, GIB),
        reserved_unallocated=None,
        hint=None,
    ),
    "v1_reserved_max_split.txt": dict(
        format="1.x",
        tried_to_allocate=b(74.00, MIB),
        total_capacity=b(11.91, GIB),
        allocated_by_pytorch=b(10.79, GIB),
        free=b(12.94, MIB),
        reserved_total=b(11.21, GIB),
        hint="max_split_size_mb",
    ),
    "v1_allowed_zero_bytes.txt": dict(
        format="1.x",
        tried_to_allocate=b(5.59, GIB),
        total_capacity=b(11.17, GIB),
        allocated_by_pytorch=0,
        free=b(10.91, GIB),
        allowed=b(5.59, GIB),
        reserved_total=0,
    ),
    "v113_cuda_oom_class_zero_free.txt": dict(
        format="1.x",
        exception="torch.cuda.OutOfMemoryError",
        tried_to_allocate=b(10.73, GIB),
        total_capacity=b(8.00, GIB),
        allocated_by_pytorch=b(17.20, GIB),
        free=0,
        reserved_total=b(19.15, GIB),
        hint="max_split_size_mb",
    ),
    "v21_capacty_wrapped.txt": dict(
        format="2.x",
        exception="torch.cuda.OutOfMemoryError",
        tried_to_allocate=b(138.00, MIB),
        device=0,
        total_capacity=b(15.90, GIB),
        free=b(8.44, MIB),
        other_processes=[ProcessUse(1246069, b(577.00, MIB))],
        this_process_total=b(15.32, GIB),
        allocated_by_pytorch=b(14.12, GIB),
        reserved_unallocated=b(410.41, MIB),
        hint="max_split_size_mb",
    ),
    "v21_no_process_lines.txt": dict(
        format="2.x",
        tried_to_allocate=b(1.70, GIB),
        total_capacity=b(6.00, GIB),
        free=0,
        other_processes=[],
        this_process_total=None,
        allocated_by_pytorch=b(2.93, GIB),
        reserved_unallocated=b(2.30, GIB),
    ),
    "v21_one_process_container.txt": dict(
        format="2.x",
        tried_to_allocate=b(496.00, MIB),
        other_processes=[ProcessUse(20398, b(14.52, GIB))],
        this_process_total=None,
        allocated_by_pytorch=b(14.06, GIB),
        reserved_unallocated=b(330.42, MIB),
    ),
    "v2_this_process.txt": dict(
        format="2.x",
        tried_to_allocate=b(22.00, MIB),
        total_capacity=b(23.65, GIB),
        free=b(11.06, MIB),
        this_process_total=b(23.60, GIB),
        other_processes=[],
        allocated_by_pytorch=b(22.90, GIB),
        reserved_unallocated=b(194.87, MIB),
        private_pools=None,
        hint="expandable_segments",
    ),
    "v2_fragmentation.txt": dict(
        format="2.x",
        exception="torch.OutOfMemoryError",
        tried_to_allocate=b(22.78, GIB),
        free=b(12.73, GIB),
        this_process_total=b(18.73, GIB),
        allocated_by_pytorch=b(9.08, GIB),
        reserved_unallocated=b(9.35, GIB),
    ),
    "v2_several_processes.txt": dict(
        format="2.x",
        exception="torch.OutOfMemoryError",
        tried_to_allocate=b(572.00, MIB),
        total_capacity=b(39.49, GIB),
        free=b(321.31, MIB),
        this_process_total=b(37.46, GIB),
        other_processes=[
            ProcessUse(3721648, b(414.00, MIB)),
            ProcessUse(1374765, b(414.00, MIB)),
            ProcessUse(1374763, b(414.00, MIB)),
            ProcessUse(1374764, b(414.00, MIB)),
        ],
        allocated_by_pytorch=b(36.04, GIB),
        reserved_unallocated=b(321.37, MIB),
        hint="expandable_segments",
    ),
    "v2_private_pools.txt": dict(
        format="2.x",
        tried_to_allocate=b(768.00, MIB),
        total_capacity=b(83.05, GIB),
        free=b(140.38, MIB),
        this_process_total=b(23.33, GIB),
        allocated_by_pytorch=b(21.92, GIB),
        private_pools=b(104.00, MIB),
        reserved_unallocated=b(797.79, MIB),
    ),
    "v2_hip_allowed_private_pools.txt": dict(
        format="2.x",
        backend="HIP",
        tried_to_allocate=b(2.00, MIB),
        total_capacity=b(287.98, GIB),
        free=b(275.86, GIB),
        allowed=b(1.05, GIB),
        allocated_by_pytorch=b(1017.01, MIB),
        private_pools=b(17.00, MIB),
        reserved_unallocated=b(54.99, MIB),
    ),
    "v2_hip.txt": dict(
        format="2.x",
        backend="HIP",
        tried_to_allocate=b(3.31, GIB),
        total_capacity=b(128.00, GIB),
        free=b(780.24, MIB),
        allocated_by_pytorch=b(57.70, GIB),
        reserved_unallocated=b(75.82, MIB),
        hint="expandable_segments",
    ),
    "v2_kib_free_truncated.txt": dict(
        format="2.x",
        tried_to_allocate=b(2.00, MIB),
        device=6,
        total_capacity=b(44.53, GIB),
        free=b(448.00, KIB),
        allocated_by_pytorch=None,
        reserved_unallocated=None,
        hint=None,
    ),
    "v2_too_large.txt": dict(
        format="2.x", tried_to_allocate=b(13535.27, GIB), total_capacity=b(79.14, GIB), free=b(61.76, GIB)
    ),
    "v2_docs_url_other_process.txt": dict(
        format="2.x",
        exception="OutOfMemoryError",
        tried_to_allocate=b(20.00, MIB),
        free=b(2.62, MIB),
        other_processes=[ProcessUse(81034, b(30.57, GIB))],
        this_process_total=b(784.00, MIB),
        allocated_by_pytorch=b(179.69, MIB),
        reserved_unallocated=b(12.31, MIB),
    ),
    "v2_windows_bogus_process.txt": dict(
        format="2.x",
        tried_to_allocate=b(2.13, GIB),
        allowed=b(2.63, GIB),
        this_process_total=17179869184 * GIB,
        other_processes=[ProcessUse(9132, 17179869184 * GIB)],
        allocated_by_pytorch=b(954.00, MIB),
        reserved_unallocated=0,
    ),
}


def test_every_message_with_figures_has_expectations_and_a_source() -> None:
    """Every message of the shared corpus (tests/oom/corpus.json) whose figures the parser reads is pinned
    here, figure by figure; which messages are out-of-memory errors at all is test_oom_corpus.py's."""
    corpus = {e["file"] for e in json.loads((Path(__file__).parent / "corpus.json").read_text("utf-8"))["messages"]}
    parsed = {name: parse_oom_message(read_message(name)) for name in sorted(corpus)}
    with_figures = {name for name, info in parsed.items() if info is not None and info.format in ("1.x", "2.x")}
    assert with_figures <= set(EXPECTED) <= corpus
    for name in EXPECTED:
        source = (MESSAGES / name).read_text("utf-8").splitlines()[0]
        assert "http" in source or "source file" in source or "code search" in source, name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_message_parses_to_the_right_numbers(name: str) -> None:
    info = parse_oom_message(read_message(name))
    assert info is not None
    for key, value in EXPECTED[name].items():
        assert getattr(info, key) == value, f"{name}: {key}"
    assert info.backend == EXPECTED[name].get("backend", "CUDA")
    if info.format == "2.x" and info.device is None:
        pytest.fail("2.x messages name the device")
    assert "\n" not in info.message and len(info.message) <= 2000


def test_cached_is_reserved_minus_allocated_in_1x_and_explicit_elsewhere() -> None:
    v1 = parse_oom_message(read_message("v1_reserved.txt"))
    assert v1.cached() == b(13.71, GIB) - b(8.77, GIB)
    old = parse_oom_message(read_message("v1_cached.txt"))
    assert old.cached() == b(26.39, MIB)
    v2 = parse_oom_message(read_message("v2_fragmentation.txt"))
    assert v2.cached() == b(9.35, GIB)
    assert parse_oom_message(read_message("cuda_error_oom.txt")).cached() is None


def test_message_inside_a_traceback_is_found_and_only_the_first_one_is_read() -> None:
    first, second = read_message("v2_this_process.txt"), read_message("v2_fragmentation.txt")
    traceback = (
        'Traceback (most recent call last):\n  File "train.py", line 3, in <module>\n    loss.backward()\n'
        + first
        + "\nDuring handling of the above exception, another exception occurred:\n"
        + second
    )
    info = parse_oom_message(traceback)
    assert info.tried_to_allocate == b(22.00, MIB)
    assert info.this_process_total == b(23.60, GIB)


@pytest.mark.parametrize(
    "garbage",
    [
        "",
        "hello",
        "RuntimeError: Expected all tensors to be on the same device, but found cuda:0 and cpu",
        "RuntimeError: CUDA error: device-side assert triggered",
        "RuntimeError: if you encounter CUDA out of memory, reduce the batch size",
        "Tried to allocate 2.00 MiB",
        "out of memory",
        None,
        42,
        b"CUDA out of memory",
    ],
)
def test_garbage_gives_none(garbage: Any) -> None:
    assert parse_oom_message(garbage) is None


def test_host_messages_have_no_figures_but_their_family() -> None:
    info = parse_oom_message("MemoryError")
    assert info is not None and info.family == "host" and info.format == "cuda-error"
    assert info.exception == "MemoryError" and info.message == "MemoryError"
    cpu = parse_oom_message("RuntimeError: [enforce fail at alloc_cpu.cpp:83] DefaultCPUAllocator: not enough memory")
    assert cpu.family == "host" and cpu.exception == "RuntimeError"


def test_a_bare_message_has_no_numbers_but_is_recognised() -> None:
    info = parse_oom_message("torch.OutOfMemoryError: CUDA out of memory.")
    assert info is not None and info.format == "unknown" and info.tried_to_allocate is None


def test_is_oom_recognises_the_torch_classes_and_the_old_runtime_error() -> None:
    torch = pytest.importorskip("torch")
    assert is_oom(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 MiB"))
    assert is_oom(torch.cuda.OutOfMemoryError("anything"))
    assert is_oom(torch.OutOfMemoryError)
    assert is_oom(RuntimeError(read_message("v1_reserved.txt")))
    assert is_oom(RuntimeError(read_message("cuda_error_oom.txt")))
    assert is_oom(RuntimeError(read_message("v0_cuda_runtime_error.txt")))
    assert not is_oom(RuntimeError("Expected all tensors to be on the same device"))
    assert not is_oom(ValueError("CUDA out of memory. Tried to allocate 2.00 MiB"))  # only RuntimeErrors carry it
    assert is_oom(MemoryError())  # the host's RAM: a family of its own
    assert not is_oom(None)


def test_is_oom_checks_class_names_without_torch() -> None:
    fake_torch_oom = type("OutOfMemoryError", (RuntimeError,), {"__module__": "torch"})
    unrelated = type("OutOfMemoryError", (RuntimeError,), {"__module__": "mylib"})
    assert is_oom(fake_torch_oom("no message needed"))
    assert not is_oom(unrelated("no CUDA marker"))


def test_importing_and_using_oom_and_clear_never_imports_torch() -> None:
    code = (
        "import sys\n"
        "import gpumem_kernel.oom.handler, gpumem_kernel.clear.reclaim as c\n"
        "from gpumem_kernel.oom.checklist import build_checklist\n"
        "from gpumem_kernel.oom.classify import is_oom\n"
        "from gpumem_kernel.oom.diagnose import diagnose\n"
        "from gpumem_kernel.oom.parse import parse_oom_message\n"
        "assert is_oom(RuntimeError('CUDA out of memory. Tried to allocate 2.00 MiB'))\n"
        "info = parse_oom_message('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB.')\n"
        "build_checklist(info, diagnose(info, sample=None, shell=None))\n"
        "c.clear_gpu_memory(dry_run=True)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert result.returncode == 0, result.stderr
