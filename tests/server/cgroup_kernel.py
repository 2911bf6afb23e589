"""A kernel launcher for the OOM-killer test: joins a memory cgroup with a limit, then becomes the kernel.

    python cgroup_kernel.py <cgroup directory> -f <connection file>

`exec` keeps the PID, so the process the server started (and watches) is the kernel itself, inside the cgroup.
"""

import os
import sys

if __name__ == "__main__":
    with open(os.path.join(sys.argv[1], "cgroup.procs"), "w") as procs:
        procs.write(str(os.getpid()))
    os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", *sys.argv[2:]])
