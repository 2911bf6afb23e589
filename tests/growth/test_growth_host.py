"""A cell whose re-runs grow the kernel's resident memory (CPU tensors or arrays appended to a global list) gets the
growth notice with RSS figures, read for real from this process, as a cell that grows GPU memory does."""

from __future__ import annotations

from typing import Iterator, List, Tuple

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from gpumem_kernel.growth import hook, memory, reruns
from gpumem_kernel.growth.report import HOST, Growth
from gpumem_kernel.wire.protocol import validate
from ipython_shell import fresh_shell

torch = pytest.importorskip("torch")

MiB = 1 << 20
STEP = 16 * MiB  # each run keeps a 16 MiB CPU tensor whose pages torch.ones wrote (so they are resident)
KEEP = "kept.append(torch.ones(STEP // 4))"


@pytest.fixture
def shell() -> Iterator[Tuple[InteractiveShell, List[dict]]]:
    with fresh_shell() as sh:
        sent: List[dict] = []
        hooks = hook.install(sh, sent.append)
        sh.user_ns.update(torch=torch, STEP=STEP, kept=[])
        try:
            yield sh, sent
        finally:
            hook.uninstall(hooks)
            sh.user_ns.pop("kept", None)


def run(sh: InteractiveShell, code: str) -> str:
    with capture_output() as captured:
        sh.run_cell(code, store_history=True, cell_id="host-cell")
    return "".join(o.data.get("text/plain", "") for o in captured.outputs)


def test_the_rss_is_read_after_every_cell_without_device_memory_in_use():
    # 64 MiB: over glibc's largest mmap threshold (32 MiB), so the tensor gets fresh pages, never heap pages an
    # earlier test in this process freed (resident already, they would not raise the RSS)
    fresh = 64 * MiB
    before = memory.read()
    kept = torch.ones(fresh // 4)
    after = memory.read()
    assert before is not None and after is not None and HOST in after
    assert after[HOST].allocated - before[HOST].allocated >= fresh * 0.9
    del kept


def test_a_cell_that_keeps_cpu_tensors_in_a_global_list_gets_the_notice_with_rss_figures(shell):
    sh, sent = shell
    shown = [run(sh, KEEP) for _ in range(5)]  # the first run may reuse pages freed earlier

    notices = [text for text in shown if text]
    assert notices, shown
    headline, fix = notices[0].splitlines()[:2]
    assert "grows this kernel's RSS by +1" in headline and "each run (3 runs)" in headline
    assert "at this rate host memory is full" in headline
    assert fix.startswith("  fix: `kept` keeps what every run adds in host memory")
    message = next(m for m in sent if m["rerun"] is not None)
    validate(message)
    rerun = message["rerun"]
    assert rerun["device"] == HOST and rerun["pattern"] is None
    assert 0.9 * STEP <= rerun["step"] <= 1.25 * STEP


def test_runs_that_give_back_what_they_took_get_no_notice():
    # the C allocator reuses or returns freed pages now and then: a cell that frees what it made moves the RSS
    # by a step one run and by nothing the next, which is no consistent growth
    runs = [reruns.Run({HOST: size}, {HOST: size}) for size in (MiB, 15 * MiB, 0, 16 * MiB, 0)]
    assert reruns.growing(runs) is None


def test_a_device_that_grows_is_named_before_the_rss_it_drags_along():
    run_ = reruns.Run({"cuda:0": 8 * MiB, HOST: 32 * MiB}, {"cuda:0": 8 * MiB, HOST: 32 * MiB})
    step = reruns.growing([run_] * 3)
    assert step is not None and step.device == "cuda:0"
    host_only = reruns.Run({"cuda:0": 0, HOST: 32 * MiB}, {"cuda:0": 0, HOST: 32 * MiB})
    step = reruns.growing([host_only] * 3)
    assert step is not None and step.device == HOST
    # the device grows too, not yet consistently (its first run made more): its own notice comes later
    first = reruns.Run({"cuda:0": 40 * MiB, HOST: 32 * MiB}, {"cuda:0": 40 * MiB, HOST: 32 * MiB})
    assert reruns.growing([first, run_, run_]) is None


def test_the_growth_message_with_a_host_notice_fits_the_schema():
    notice = reruns.growing([reruns.Run({HOST: 5 * MiB}, {HOST: 5 * MiB})] * 3)
    assert notice is not None and notice.allocated == 5 * MiB
    assert reruns.growing([reruns.Run({HOST: 2 * MiB}, {HOST: 2 * MiB})] * 3) is None  # below the host's 4 MiB
    assert Growth(time=0.0, running=None, rerun=None).to_dict()["type"] == "growth"
