"""A kernel launcher for the OOM-killer tests: joins a memory cgroup with a limit, then becomes the kernel.

    python cgroup_kernel.py <cgroup directory> -f <connection file>

`exec` keeps the PID, so the process the server started (and watches) is the kernel itself, inside the cgroup.
`make_memory_cgroup` makes that cgroup (tests/server/test_kernel_exits.py, ui-tests/jupyter_server_test_config.py).
"""

import os
import sys
import uuid
from pathlib import Path
from typing import Optional


def _has_swap(meminfo: str) -> bool:
    """Whether this machine has swap (/proc/meminfo's SwapTotal above 0)."""
    try:
        lines = Path(meminfo).read_text().splitlines()
    except OSError:
        return False
    fields = next((line.split() for line in lines if line.startswith("SwapTotal:")), ["", "0"])
    return fields[1] != "0"


def make_memory_cgroup(
    limit: int, prefix: str, root: str = "/sys/fs/cgroup", meminfo: str = "/proc/meminfo"
) -> Optional[Path]:
    """A new memory cgroup limited to `limit` bytes without swap (cgroup v2, else v1), or None where none can be
    made (no permission, no memory controller) or where its swap cannot be limited on a machine with swap (its
    processes would page out instead of meeting the OOM killer)."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    unified = Path(root)
    candidates = []
    try:
        if "memory" in (unified / "cgroup.subtree_control").read_text().split():
            candidates.append((unified / name, "memory.max", "memory.swap.max"))
    except OSError:
        pass
    candidates.append((unified / "memory" / name, "memory.limit_in_bytes", "memory.memsw.limit_in_bytes"))
    for directory, limit_file, swap_file in candidates:
        try:
            directory.mkdir()
        except OSError:
            continue
        try:
            (directory / limit_file).write_text(str(limit))
        except OSError:
            directory.rmdir()
            continue
        try:  # no swap beyond the limit, where the machine accounts for it
            (directory / swap_file).write_text("0" if swap_file == "memory.swap.max" else str(limit))
        except OSError:  # no swap accounting (v1 without swapaccount=1, v2 without CONFIG_MEMCG_SWAP)
            if _has_swap(meminfo):
                directory.rmdir()
                continue
        return directory
    return None


if __name__ == "__main__":
    with open(os.path.join(sys.argv[1], "cgroup.procs"), "w") as procs:
        procs.write(str(os.getpid()))
    os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", *sys.argv[2:]])
