"""A kernel killed by the out-of-memory killer is named as such.

- The counters, read from recorded cgroup files (v2 memory.events, v1 memory.oom_control, /proc/vmstat) in fake
  /sys/fs/cgroup and /proc trees.
- The watch, on real processes ended by real signals, with the recorded counters raised or not.
- For real: a Jupyter server with the extension whose kernel runs in a memory cgroup limited to 256 MiB (the test
  creates it; skipped where this machine lets no one create one, or has swap it cannot limit), a cell that
  allocates more, the kernel's real OOM kill, and the server's answer at POST /gpumem/kernels/<id>/exit with the
  host checklist.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, Iterator, Optional, Tuple

import jsonschema
import psutil
import pytest

from gpumem_kernel.oom.killed import host_reading, killed_payload
from gpumem_kernel.probe.oomkills import count_in, counter_for, machine_count
from gpumem_kernel.server import exits
from gpumem_kernel.server.exits import KERNEL_ACTIONS, ExitWatch
from gpumem_kernel.server.handlers import exit_payload
from gpumem_kernel.wire.protocol import load_payload_schema
from cgroup_kernel import make_memory_cgroup
from server_harness import JupyterServer

HERE = Path(__file__).resolve().parent
SCHEMAS = HERE.parents[1] / "gpumem_kernel" / "wire" / "schemas"
MiB = 1024**2
GiB = 1024**3

# Recorded from a cgroup v2 machine (Linux 6.x) after one kill, and from this machine's cgroup v1 memory controller.
V2_EVENTS = "low 0\nhigh 0\nmax 1843\noom 3\noom_kill {n}\noom_group_kill 0\n"
V1_OOM_CONTROL = "oom_kill_disable 0\nunder_oom 0\noom_kill {n}\n"
VMSTAT = "nr_free_pages 123456\npgfault 99\noom_kill {n}\nnr_unstable 0\n"


def exit_schema_validate(answer: Dict[str, Any]) -> None:
    schema = json.loads((SCHEMAS / "kernel_exit.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(answer)
    if answer["checklist"] is not None:
        jsonschema.Draft202012Validator(load_payload_schema("oom")).validate(answer["checklist"])


class Tree:
    """A fake /sys/fs/cgroup, /proc/<pid>/cgroup and /proc/vmstat for one process."""

    def __init__(self, tmp: Path, version: int, pid: int, limit: Optional[int] = 2 * GiB) -> None:
        self.root, self.proc, self.version, self.pid = tmp / "cgroup", tmp / "proc", version, pid
        (self.proc / str(pid)).mkdir(parents=True)
        if version == 2:
            self.dir = self.root / "user.slice" / "jupyter"
            self.dir.mkdir(parents=True)
            (self.proc / str(pid) / "cgroup").write_text("0::/user.slice/jupyter\n")
            (self.dir / "memory.max").write_text(f"{limit}\n" if limit else "max\n")
            (self.dir / "memory.current").write_text(f"{GiB}\n")
            (self.dir / "memory.peak").write_text(f"{2 * GiB - MiB}\n")
        else:
            self.dir = self.root / "memory" / "docker" / "abc"
            self.dir.mkdir(parents=True)
            (self.proc / str(pid) / "cgroup").write_text("5:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n")
            (self.dir / "memory.limit_in_bytes").write_text(f"{limit or 9223372036854771712}\n")
            (self.dir / "memory.usage_in_bytes").write_text(f"{GiB}\n")
            (self.dir / "memory.max_usage_in_bytes").write_text(f"{2 * GiB - MiB}\n")
        self.kills(0)
        self.machine(7)

    def kills(self, n: int) -> None:
        if self.version == 2:
            (self.dir / "memory.events").write_text(V2_EVENTS.format(n=n))
        else:
            (self.dir / "memory.oom_control").write_text(V1_OOM_CONTROL.format(n=n))

    def machine(self, n: int) -> None:
        (self.proc / "vmstat").write_text(VMSTAT.format(n=n))


# --- the counters ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [1, 2])
def test_the_counter_of_a_process_is_its_memory_cgroups_oom_kill_count_and_limit(tmp_path: Path, version: int) -> None:
    tree = Tree(tmp_path, version, 4242)
    counter = counter_for(4242, 64 * GiB, str(tree.root), str(tree.proc))
    assert counter.cgroup == ("/user.slice/jupyter" if version == 2 else "/docker/abc")
    assert counter.limit == 2 * GiB
    assert count_in(counter.events) == 0
    tree.kills(3)
    assert count_in(counter.events) == 3
    assert machine_count(str(tree.proc / "vmstat")) == 7


def test_without_a_limit_or_a_cgroup_the_counter_says_so(tmp_path: Path) -> None:
    tree = Tree(tmp_path, 2, 4242, limit=None)
    assert counter_for(4242, 64 * GiB, str(tree.root), str(tree.proc)).limit is None
    gone = counter_for(999999, 64 * GiB, str(tree.root), str(tree.proc))  # no /proc/999999/cgroup
    assert (gone.cgroup, gone.events, gone.limit) == (None, None, None)
    assert count_in(tmp_path / "missing") is None


def test_the_hybrid_layout_counts_in_the_v1_memory_controller(tmp_path: Path) -> None:
    # systemd's hybrid layout: memory on v1, an empty cgroup2 tree at unified/ (its "0::/" line leads nowhere)
    (tmp_path / "proc" / "4242").mkdir(parents=True)
    (tmp_path / "proc" / "4242" / "cgroup").write_text("9:name=systemd:/\n4:memory:/job\n0::/\n")
    job = tmp_path / "cgroup" / "memory" / "job"
    job.mkdir(parents=True)
    (job / "memory.limit_in_bytes").write_text(f"{GiB}\n")
    (job / "memory.oom_control").write_text(V1_OOM_CONTROL.format(n=2))
    (tmp_path / "cgroup" / "unified").mkdir()
    counter = counter_for(4242, 64 * GiB, str(tmp_path / "cgroup"), str(tmp_path / "proc"))
    assert (counter.cgroup, counter.limit, count_in(counter.events)) == ("/job", GiB, 2)


@pytest.mark.parametrize("layout", ["v2", "v1", "hybrid", "none"])
def test_the_real_kernels_cgroup_is_made_where_the_memory_controller_is(tmp_path: Path, layout: str) -> None:
    root = tmp_path / "cgroup"
    root.mkdir()
    if layout == "v2":
        (root / "cgroup.subtree_control").write_text("cpu io memory pids\n")
    if layout in ("v1", "hybrid"):
        (root / "memory").mkdir()
    if layout == "hybrid":
        (root / "unified").mkdir()
        (root / "unified" / "cgroup.subtree_control").write_text("\n")
    made = make_memory_cgroup(LIMIT, "t", str(root), str(tmp_path / "no-meminfo"))
    if layout == "none":
        assert made is None
        return
    assert made is not None and made.parent == (root if layout == "v2" else root / "memory")
    limit_file = "memory.max" if layout == "v2" else "memory.limit_in_bytes"
    assert (made / limit_file).read_text() == str(LIMIT)


# --- the watch, on real processes --------------------------------------------------------------------------


class FakeKernelManager:
    """What the watch reads of jupyter_server's MappingKernelManager: kernels whose provisioner holds a Popen."""

    def __init__(self) -> None:
        self.kernels: Dict[str, Any] = {}

    def start(self, kernel_id: str) -> subprocess.Popen:
        code = "import time; print('ready', flush=True); time.sleep(60)"
        process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
        # Running Python before the first look: a loaded machine may still be exec'ing it (RSS in KiB, not MiB).
        assert process.stdout is not None and process.stdout.readline() == b"ready\n"
        self.kernels[kernel_id] = SimpleNamespace(provisioner=SimpleNamespace(process=process))
        return process

    def list_kernel_ids(self) -> list:
        return list(self.kernels)

    def get_kernel(self, kernel_id: str) -> Any:
        return self.kernels[kernel_id]


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[Tuple[FakeKernelManager, ExitWatch, subprocess.Popen, Tree]]:
    manager = FakeKernelManager()
    process = manager.start("k1")
    tree = Tree(tmp_path, 2, process.pid)
    watch = ExitWatch(manager, cgroup_root=str(tree.root), proc=str(tree.proc), vmstat=str(tree.proc / "vmstat"))
    watch.sync()
    yield manager, watch, process, tree
    if process.poll() is None:
        process.kill()
        process.wait()


def test_a_sigkill_with_a_new_kill_in_its_cgroup_is_the_oom_killer(watched) -> None:
    manager, watch, process, tree = watched
    tree.kills(1)
    tree.machine(8)
    process.send_signal(signal.SIGKILL)
    process.wait()  # the provisioner reaps it, as jupyter_client's restarter does
    watch.sync()
    (death,) = watch.exits("k1")
    assert death.oom_killed and death.evidence == "cgroup" and death.kills == 1
    assert (death.pid, death.returncode, death.signal) == (process.pid, -9, "SIGKILL")
    assert death.limit == 2 * GiB and death.peak == 2 * GiB - MiB and death.cgroup == "/user.slice/jupyter"
    assert death.rss and death.rss > MiB  # its RSS at the last look, before it died


def test_an_unreaped_kernels_exit_signal_is_read_without_reaping_it(watched) -> None:
    manager, watch, process, tree = watched
    tree.kills(1)
    process.send_signal(signal.SIGKILL)
    deadline = time.monotonic() + 10
    while psutil.Process(process.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
        time.sleep(0.02)
    watch.sync()  # before the restarter polls: nobody has reaped it yet
    (death,) = watch.exits("k1")
    assert death.oom_killed and (death.returncode, death.signal) == (-9, "SIGKILL")
    assert process.wait(5) == -9  # still the provisioner's to reap


def test_a_kernel_is_watched_from_its_start_event_so_a_kill_before_the_next_sync_is_named(tmp_path: Path) -> None:
    """jupyter_server's kernel action event starts the watch: a cell that fills the cgroup at once can be killed
    before the once-a-second sync, and a process first seen dead has no cgroup left to read."""
    import asyncio

    import jupyter_server
    from jupyter_events import EventLogger

    manager = FakeKernelManager()
    process = manager.start("k1")
    tree = Tree(tmp_path, 1, process.pid)
    watch = ExitWatch(manager, cgroup_root=str(tree.root), proc=str(tree.proc), vmstat=str(tree.proc / "vmstat"))
    events = EventLogger()
    events.register_event_schema(Path(jupyter_server.__file__).parent / "event_schemas" / "kernel_actions" / "v1.yaml")
    watch.follow_starts(events)

    async def start_event() -> None:
        events.emit(
            schema_id=KERNEL_ACTIONS, data={"kernel_id": "k1", "action": "start", "status": "success", "msg": "started"}
        )
        await asyncio.sleep(0.2)  # the listener runs as its own task

    try:
        asyncio.run(start_event())
        tree.kills(1)
        process.send_signal(signal.SIGKILL)
        process.wait()
        watch.check("k1")  # the restarter's callback, or the browser's ask; no sync ever ran
        (death,) = watch.exits("k1")
        assert death.oom_killed and death.evidence == "cgroup" and death.limit == 2 * GiB
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_sigkill_without_a_new_kill_is_not_the_oom_killer(watched) -> None:
    manager, watch, process, tree = watched
    tree.machine(9)  # another container's kill on the same machine
    process.send_signal(signal.SIGKILL)
    process.wait()
    watch.sync()
    (death,) = watch.exits("k1")
    assert not death.oom_killed and death.evidence is None and death.signal == "SIGKILL"


def test_another_signal_is_not_the_oom_killer_even_when_the_cgroup_counted_a_kill(watched) -> None:
    manager, watch, process, tree = watched
    tree.kills(1)  # a DataLoader worker the OOM killer ended; the kernel itself then crashed on its own
    process.send_signal(signal.SIGSEGV)
    process.wait()
    watch.sync()
    (death,) = watch.exits("k1")
    assert not death.oom_killed and death.signal == "SIGSEGV"


def test_a_kill_long_before_the_death_is_not_counted_at_the_death(tmp_path: Path) -> None:
    manager = FakeKernelManager()
    process = manager.start("k1")
    tree = Tree(tmp_path, 1, process.pid)
    now = [1000.0]
    watch = ExitWatch(
        manager, cgroup_root=str(tree.root), proc=str(tree.proc), vmstat=str(tree.proc / "vmstat"), clock=lambda: now[0]
    )
    watch.sync()
    tree.kills(1)  # a worker killed while the kernel lived on for a minute, looked at every second
    for _ in range(60):
        now[0] += 1.0
        watch.sync()
    process.send_signal(signal.SIGKILL)
    process.wait()
    watch.sync()
    (death,) = watch.exits("k1")
    assert not death.oom_killed
    process = manager.start("k1")  # the server's restart: a new process in the same cgroup
    tree.proc.joinpath(str(process.pid)).mkdir()
    tree.proc.joinpath(str(process.pid), "cgroup").write_text("5:memory:/docker/abc\n")
    watch.sync()
    now[0] += 10.0
    watch.sync()
    tree.kills(2)  # the killer picked the kernel; a big process takes a while to exit, seen alive a look later
    now[0] += 1.0
    watch.sync()
    process.send_signal(signal.SIGKILL)
    process.wait()
    now[0] += 1.0
    watch.sync()
    second = watch.exits("k1")[-1]
    assert second.pid == process.pid and second.oom_killed and second.kills == 1


def _watched_where_v1s_root_counts_kills(tmp_path: Path) -> Tuple[subprocess.Popen, Tree, ExitWatch]:
    """A kernel watched in /docker/abc on cgroup v1, whose root memory.oom_control has counted 5 kills of its own."""
    manager = FakeKernelManager()
    process = manager.start("k1")
    tree = Tree(tmp_path, 1, process.pid)
    (tree.root / "memory" / "memory.oom_control").write_text(V1_OOM_CONTROL.format(n=5))
    watch = ExitWatch(manager, cgroup_root=str(tree.root), proc=str(tree.proc), vmstat=str(tree.proc / "vmstat"))
    watch.sync()
    return process, tree, watch


def test_a_victim_seen_exiting_in_the_root_cgroup_is_still_its_cgroups_kill(tmp_path: Path, monkeypatch) -> None:
    """Between releasing its memory and becoming a zombie, a killed process reads as in the root memory cgroup
    (`4:memory:/` on cgroup v1, whose root memory.oom_control counts kills of its own) with no RSS: a look then
    must not take the root's counter for the kernel's, or the OOM kill goes unnamed. This window is too short to
    hit on purpose, so that one look is what psutil reads of such a process; the cgroup files are the fake tree's."""
    process, tree, watch = _watched_where_v1s_root_counts_kills(tmp_path)
    tree.kills(1)  # the killer picks the kernel
    (tree.proc / str(process.pid) / "cgroup").write_text("5:memory:/\n4:cpu,cpuacct:/\n")
    living = exits._look(process.pid, exits.Descendants())
    with monkeypatch.context() as patch:
        patch.setattr(exits, "_look", lambda pid, descendants: exits._Look(living.create_time, 0, 0, 0))
        watch.sync()
    process.send_signal(signal.SIGKILL)
    process.wait()
    watch.sync()
    (death,) = watch.exits("k1")
    assert death.oom_killed and death.evidence == "cgroup" and death.kills == 1 and death.cgroup == "/docker/abc"
    assert death.rss and death.rss > MiB  # its RSS at the last look while it lived, not the exiting one's 0


def test_a_victim_that_leaves_its_cgroup_between_the_look_and_the_cgroup_read_is_still_its_cgroups_kill(
    tmp_path: Path, monkeypatch
) -> None:
    """The look read the kernel's memory just before it began to exit; the cgroup read that follows finds it in the
    root memory cgroup, as an exiting process reads. Its memory is gone by then (a process releases it before it
    leaves its cgroup), so that cgroup is not taken for the kernel's. The look is the living process's, taken
    earlier; the process itself is really killed and left unreaped, as the read after the cgroup finds it."""
    process, tree, watch = _watched_where_v1s_root_counts_kills(tmp_path)
    living = exits._look(process.pid, exits.Descendants())
    tree.kills(1)  # the killer picks the kernel
    (tree.proc / str(process.pid) / "cgroup").write_text("5:memory:/\n4:cpu,cpuacct:/\n")
    process.send_signal(signal.SIGKILL)
    deadline = time.monotonic() + 10
    while psutil.Process(process.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
        time.sleep(0.02)
    with monkeypatch.context() as patch:
        patch.setattr(exits, "_look", lambda pid, descendants: living)
        watch.sync()
    process.wait()
    watch.sync()
    (death,) = watch.exits("k1")
    assert death.oom_killed and death.evidence == "cgroup" and death.kills == 1 and death.cgroup == "/docker/abc"


def test_the_endpoints_answer_names_the_death_of_the_browsers_process_and_carries_the_host_checklist(watched) -> None:
    manager, watch, process, tree = watched
    before = exit_payload(watch, "k1", process.pid, None)
    assert before == {"kernel_id": "k1", "exit": None, "checklist": None}
    tree.kills(2)
    process.send_signal(signal.SIGKILL)
    process.wait()
    host = {
        "rss": 1500 * MiB,
        "total": 64 * GiB,
        "available": 40 * GiB,
        "container_limit": None,
        "container_usage": None,
        "children": {"count": 4, "rss": 2 * GiB, "uss": 400 * MiB, "junk": "<b>"},
        "evil": "<script>",
    }
    answer = exit_payload(watch, "k1", process.pid, host)  # judged on demand, before the once-a-second look
    exit_schema_validate(answer)
    assert answer["exit"]["oom_killed"] and answer["exit"]["kills"] == 2
    checklist = answer["checklist"]
    assert checklist["info"]["family"] == "host"
    assert "out-of-memory killer ended the kernel process" in checklist["summary"][0]
    assert "memory limit 2.00 GiB" in checklist["summary"][0]
    ids = [s["id"] for s in checklist["steps"]]
    assert ids[0] == "fewer-workers" and "host-memory" in ids
    assert not {"clear", "restart", "expandable-segments"} & {i for i in ids if i in ids[:3]}
    assert "clear" not in ids and "restart" not in ids  # the process is gone
    workers = checklist["steps"][0]
    # 4 workers of 100 MiB unique memory each filled the 2 GiB cgroup; with 10 % of it kept free, 1 fits
    # (0.9 × 2048 − (2048 − 400) = 195 MiB): computed from the measurements, not "halve it"
    assert workers["title"] == "Use at most 1 DataLoader worker" and "100.00 MiB" in workers["detail"]
    assert "last seen before it died" in " ".join(checklist["summary"]).lower()
    assert exit_payload(watch, "k1", 12345678, None)["exit"] is None  # another process's death: not this one


def test_a_browsers_host_reading_keeps_only_numbers() -> None:
    assert host_reading("nope") is None
    reading = host_reading({"rss": -5, "total": True, "available": 3, "children": {"count": "4", "uss": 7}})
    assert reading == {
        "rss": None,
        "total": None,
        "available": 3,
        "container_limit": None,
        "container_usage": None,
        "children": {"count": None, "rss": None, "uss": 7},
    }
    payload = killed_payload(
        {"pid": 1, "signal": None, "evidence": "machine", "kills": 1, "cgroup": None, "limit": None, "peak": None},
        None,
    )
    jsonschema.Draft202012Validator(load_payload_schema("oom")).validate(payload)
    assert "machine counted 1 new OOM kill" in payload["summary"][0]


# --- for real: a kernel in a 256 MiB memory cgroup ----------------------------------------------------------

LIMIT = 256 * MiB


@pytest.fixture
def limited_server(tmp_path: Path) -> Iterator[Tuple[JupyterServer, Path]]:
    cgroup = make_memory_cgroup(LIMIT, "gpumem-test")
    if cgroup is None:
        pytest.skip(
            "this machine lets the test create no memory cgroup, or none whose swap it can limit "
            "(the recorded-counter tests above run)"
        )
    spec = tmp_path / "data" / "kernels" / "limited"
    spec.mkdir(parents=True)
    argv = [sys.executable, str(HERE / "cgroup_kernel.py"), str(cgroup), "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "Limited", "language": "python"}))
    server = JupyterServer(tmp_path, {"gpumem_kernel.server": True})
    server.env["JUPYTER_DATA_DIR"] = str(tmp_path / "data")
    try:
        with server:
            yield server, cgroup
    finally:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                cgroup.rmdir()
                break
            except OSError:  # processes of the restarted kernel still leaving
                time.sleep(0.5)


@pytest.mark.timeout(180)
def test_a_kernel_the_oom_killer_ends_is_named_with_its_cgroups_limit(limited_server) -> None:
    server, cgroup = limited_server
    kernel_id = server.json("POST", "/api/kernels", {"name": "limited"})["id"]
    server.wait_idle(kernel_id)
    pid = server.kernel_pid(kernel_id)
    assert str(pid) in (cgroup / "cgroup.procs").read_text()
    status, body = server.request("POST", f"/gpumem/kernels/{kernel_id}/exit", {"pid": pid, "host": None})
    assert status == 200 and json.loads(body)["exit"] is None  # alive: no death to tell

    # The cell fills more RAM than the cgroup allows: the kernel's OOM killer ends the kernel (no reply comes).
    server.start_execute(kernel_id, "x = bytearray(1024 * 1024**2)")
    answer: Dict[str, Any] = {}
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        answer = server.json("POST", f"/gpumem/kernels/{kernel_id}/exit", {"pid": pid, "host": None})
        if answer["exit"] is not None:
            break
        time.sleep(0.5)
    exit_schema_validate(answer)
    death = answer["exit"]
    assert death is not None, f"no death seen:\n{server.log.read_text()[-3000:]}"
    told = json.dumps(answer)  # what a failure shows: the whole answer, the checklist with it
    assert death["oom_killed"] and death["evidence"] == "cgroup" and death["kills"] >= 1, told
    assert death["pid"] == pid and death["limit"] == LIMIT, told
    assert death["signal"] == "SIGKILL" and death["returncode"] == -9, told
    assert answer["checklist"]["info"]["family"] == "host", told
    assert answer["checklist"]["steps"][0]["id"] == "host-memory", told  # no workers: the kernel filled the cgroup
    assert "memory limit 256.00 MiB" in answer["checklist"]["summary"][0], told
    log = server.log.read_text()
    assert "out-of-memory killer ended" in log, log[-3000:]  # the server's log says it too
