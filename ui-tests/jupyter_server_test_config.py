"""Server configuration for the Galata tests (a real JupyterLab on localhost:8888, no token).

Besides the environment's python3 kernel (the default), a kernelspec `gpumem-limited-256m` whose kernel runs in a
memory cgroup limited to 256 MiB, for oomkiller.spec.ts: the cgroup is created here, with a name unique to this
server, and removed with the kernelspec when the server exits (however it exits: Playwright ends its web server
with SIGKILL). Where this machine lets no one create a memory cgroup the kernelspec is not registered, and the
spec skips itself.
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from jupyterlab.galata import configure_jupyter_server

c = get_config()  # noqa: F821 (traitlets' config loader provides it)
configure_jupyter_server(c)

# The kernel the tests use is this environment's python3, where gpumem_kernel is installed.
c.ServerApp.root_dir = "."
# CI and the dev containers run as root.
c.ServerApp.allow_root = True


def _page_config() -> None:
    """The test environment has Notebook 7 (scripts/lab.sh serves /tree from it), whose lab extension adds an
    "Open in Notebook" button to every notebook's toolbar. In Galata's 1024 px window that toolbar then no longer
    fits, and its last button wraps onto the first cell, where it takes the clicks meant for the cell. The specs
    here test JupyterLab with our extension, so Notebook's lab extension is disabled for this server only (its page
    config, read from $JUPYTER_CONFIG_PATH at each page load); the Notebook 7 specs run in an environment of their own.
    """
    config = Path(tempfile.mkdtemp(prefix="gpumem-galata-config-"))
    (config / "labconfig").mkdir()
    disabled = {"disabledExtensions": {"@jupyter-notebook/lab-extension": True}}
    # Nor does each page load ask the server whether JupyterLab's own assets need a rebuild (the server compares its
    # application directory for that, every time): nothing here is ever rebuilt.
    page_config = {**disabled, "buildAvailable": False, "buildCheck": False}
    (config / "labconfig" / "page_config.json").write_text(json.dumps(page_config))
    before = os.environ.get("JUPYTER_CONFIG_PATH")
    os.environ["JUPYTER_CONFIG_PATH"] = os.pathsep.join(filter(None, [str(config), before]))


_page_config()

LIMITED_KERNEL = "gpumem-limited-256m"
LIMIT = 256 * 1024**2
HERE = Path(__file__).resolve().parent
LAUNCHER = HERE.parent / "tests" / "server" / "cgroup_kernel.py"
sys.path.insert(0, str(LAUNCHER.parent))
from cgroup_kernel import make_memory_cgroup  # noqa: E402 (found through the line above)

# Run detached from the server's process group: when the server is gone (the read end of its pipe sees EOF), end
# what is left in the cgroup (only kernels of this server join it), remove the cgroup, then the kernelspec.
_REAPER = """
import os, signal, shutil, sys, time
cgroup, spec = sys.argv[1], sys.argv[2]
sys.stdin.buffer.read()
start = time.monotonic()
while time.monotonic() < start + 60:
    try:
        os.rmdir(cgroup)
    except FileNotFoundError:
        break
    except OSError:  # kernels still in it: 5 s to leave on their own, then ended
        if time.monotonic() > start + 5:
            try:
                with open(os.path.join(cgroup, "cgroup.procs")) as procs:
                    pids = [int(pid) for pid in procs.read().split()]
            except OSError:
                pids = []
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        time.sleep(0.5)
    else:
        break
shutil.rmtree(spec, ignore_errors=True)
"""


def _limited_kernelspec() -> None:
    cgroup = make_memory_cgroup(LIMIT, f"gpumem-galata-{os.getpid()}")
    if cgroup is None:
        print(
            f"jupyter_server_test_config: no memory cgroup could be created; {LIMITED_KERNEL} is not registered",
            file=sys.stderr,
        )
        return
    data = Path(tempfile.mkdtemp(prefix="gpumem-galata-data-"))
    spec = data / "kernels" / LIMITED_KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, str(LAUNCHER), str(cgroup), "-f", "{connection_file}"]
    display = "Python 3 (256 MiB memory cgroup)"
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": display, "language": "python"}))
    read, _write = os.pipe()  # non-inheritable: only this server process holds the write end
    global _reaper
    _reaper = subprocess.Popen(
        [sys.executable, "-c", _REAPER, str(cgroup), str(data)],
        stdin=read,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    os.close(read)  # `_write` is never closed: the reaper reads EOF when this server process is gone
    # jupyter_client's KernelSpecManager looks in $JUPYTER_PATH/kernels too (its kernel_dirs is not configurable);
    # the server reads it when it first lists kernelspecs, after this file. python3 stays the default kernel.
    os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(data), os.environ.get("JUPYTER_PATH")]))


_limited_kernelspec()
