"""A real ipykernel driven the way JupyterLab drives it: bootstrap by silent execute, a `gpumem` comm, iopub.

Reused by every test that needs a live kernel (live sampling, clearing memory, OOM handling).
The kernel runs the Python in $GPUMEM_TEST_KERNEL_PYTHON (default: this one) with the repository on
PYTHONPATH, so `gpumem_kernel` imports without being installed.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager

REPO_ROOT = Path(__file__).resolve().parents[1]
BOOTSTRAP = "__import__('gpumem_kernel')._bootstrap()"
KERNEL_NAME = "gpumem-test"


def kernel_python() -> str:
    return os.environ.get("GPUMEM_TEST_KERNEL_PYTHON") or sys.executable


_HAS_TORCH = "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)"


@functools.lru_cache(maxsize=None)
def torch_in_kernel_python() -> bool:
    """Whether the kernel's Python has torch installed. Asked without importing it (a test module asks at
    collection, in every pytest process): here when the kernel runs this Python, else in a short subprocess."""
    python = kernel_python()
    if python == sys.executable:
        return importlib.util.find_spec("torch") is not None
    return subprocess.run([python, "-c", _HAS_TORCH], capture_output=True, timeout=60).returncode == 0


def plain_lines(traceback: List[str]) -> List[str]:
    """A traceback's lines as the user reads them: IPython colours tokens (how, depends on its version)."""
    return [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in traceback]


@dataclass
class Received:
    """One iopub message with the monotonic time the test received it."""

    at: float
    msg: Dict[str, Any]

    @property
    def msg_type(self) -> str:
        return self.msg["header"]["msg_type"]

    @property
    def parent_id(self) -> Optional[str]:
        return self.msg.get("parent_header", {}).get("msg_id")

    @property
    def content(self) -> Dict[str, Any]:
        return self.msg["content"]

    def comm_data(self, comm_id: str) -> Optional[Dict[str, Any]]:
        """The gpumem message body if this is a comm_msg on `comm_id`."""
        if self.msg_type == "comm_msg" and self.content.get("comm_id") == comm_id:
            return self.content.get("data")
        return None


class KernelHarness:
    """Start a kernel, talk to it, and record every iopub message with its arrival time."""

    def __init__(self, python: Optional[str] = None, extra_env: Optional[Dict[str, str]] = None) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="gpumem-kernel-")
        spec_dir = Path(self._tmp.name) / "kernels" / KERNEL_NAME
        spec_dir.mkdir(parents=True)
        env = {
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
            "IPYTHONDIR": str(Path(self._tmp.name) / "ipython"),  # no user startup files or profiles
            "JUPYTER_PLATFORM_DIRS": "1",
        }
        env.update(extra_env or {})
        spec = {
            "argv": [python or kernel_python(), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "gpumem test kernel",
            "language": "python",
            "env": env,
        }
        (spec_dir / "kernel.json").write_text(json.dumps(spec))
        self.km = KernelManager(
            kernel_name=KERNEL_NAME,
            kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(spec_dir.parent)]),
            connection_file=str(Path(self._tmp.name) / f"kernel-{uuid.uuid4()}.json"),
        )
        self.received: List[Received] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._reader: Optional[threading.Thread] = None
        self.kc: Any = None

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self, timeout: float = 60) -> "KernelHarness":
        self.km.start_kernel(cwd=str(REPO_ROOT))
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=timeout)
        self._reader = threading.Thread(target=self._read_iopub, name="test-iopub-reader", daemon=True)
        self._reader.start()
        return self

    def restart(self, now: bool = True, timeout: float = 60) -> None:
        """Kernel > Restart: the same kernel id and connection file, a new process. The iopub reader pauses
        meanwhile: `wait_for_ready` reads iopub too, and two threads on one zmq socket garble its frames."""
        self._stop.set()
        if self._reader is not None:
            self._reader.join(5)
        self.km.restart_kernel(now=now)
        self.kc.wait_for_ready(timeout=timeout)
        self._stop.clear()
        self._reader = threading.Thread(target=self._read_iopub, name="test-iopub-reader", daemon=True)
        self._reader.start()

    def stop(self) -> None:
        self._stop.set()
        if self._reader is not None:
            self._reader.join(5)
        if self.kc is not None:
            self.kc.stop_channels()
        if self.km.has_kernel:
            self.km.shutdown_kernel(now=True)
        self._tmp.cleanup()

    def __enter__(self) -> "KernelHarness":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _read_iopub(self) -> None:
        while not self._stop.is_set():
            try:
                msg = self.kc.get_iopub_msg(timeout=0.2)
            except queue.Empty:
                continue
            except Exception:
                if self._stop.is_set():
                    return
                raise
            with self._lock:
                self.received.append(Received(time.monotonic(), msg))

    # --- iopub -----------------------------------------------------------------------------------

    def messages(self) -> List[Received]:
        with self._lock:
            return list(self.received)

    def wait_for(self, predicate: Callable[[Received], bool], timeout: float = 30, start: int = 0) -> Received:
        """The first message (from index `start` of `received`) matching `predicate`."""
        deadline = time.monotonic() + timeout
        seen = start
        while True:
            batch = self.messages()[seen:]
            for item in batch:
                if predicate(item):
                    return item
            seen += len(batch)
            if time.monotonic() > deadline:
                raise TimeoutError("no matching iopub message")
            time.sleep(0.02)

    def wait_idle(self, msg_id: str, timeout: float = 60) -> Received:
        return self.wait_for(
            lambda r: r.msg_type == "status" and r.parent_id == msg_id and r.content["execution_state"] == "idle",
            timeout,
        )

    # --- shell -----------------------------------------------------------------------------------

    def _shell_reply(self, msg_id: str, timeout: float) -> Dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            reply = self.kc.get_shell_msg(timeout=max(0.1, deadline - time.monotonic()))
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply

    def execute(
        self, code: str, silent: bool = False, user_expressions: Optional[Dict[str, str]] = None, timeout: float = 120
    ) -> Dict[str, Any]:
        """Run code; return the execute_reply content once the kernel is idle again."""
        msg_id = self.kc.execute(code, silent=silent, store_history=not silent, user_expressions=user_expressions or {})
        reply = self._shell_reply(msg_id, timeout)
        self.wait_idle(msg_id, timeout)
        reply["content"]["msg_id"] = msg_id
        return reply["content"]

    def evaluate(self, expression: str, timeout: float = 60) -> Any:
        """The Python value of an expression in the kernel, through user_expressions (as the browser does)."""
        content = self.execute("", silent=True, user_expressions={"value": expression}, timeout=timeout)
        result = content["user_expressions"]["value"]
        if result["status"] != "ok":
            raise RuntimeError(f"{result.get('ename')}: {result.get('evalue')}")
        return ast.literal_eval(result["data"]["text/plain"])

    def bootstrap(self) -> Dict[str, Any]:
        """Exactly what the browser runs after the kernel becomes ready."""
        content = self.execute("", silent=True, user_expressions={"gpumem": BOOTSTRAP})
        result = content["user_expressions"]["gpumem"]
        if result["status"] != "ok":
            raise RuntimeError(f"bootstrap failed: {result.get('ename')}: {result.get('evalue')}")
        return json.loads(ast.literal_eval(result["data"]["text/plain"]))

    # --- comms -----------------------------------------------------------------------------------

    def open_comm(self, data: Dict[str, Any], target_name: str = "gpumem") -> str:
        """Send a comm_open as a frontend does; returns the comm id."""
        comm_id = uuid.uuid4().hex
        msg = self.kc.session.msg("comm_open", {"comm_id": comm_id, "target_name": target_name, "data": data})
        self.kc.shell_channel.send(msg)
        return comm_id

    def send_comm(self, comm_id: str, data: Dict[str, Any], subshell_id: Optional[str] = None) -> None:
        msg = self.kc.session.msg("comm_msg", {"comm_id": comm_id, "data": data})
        if subshell_id is not None:
            msg["header"]["subshell_id"] = subshell_id  # how JupyterLab >= 4.4 sends comm messages
        self.kc.shell_channel.send(msg)

    def create_subshell(self, timeout: float = 10) -> Optional[str]:
        """A subshell id (ipykernel >= 7), or None when the kernel has no subshells."""
        self.kc.kernel_info()
        info = self.kc.get_shell_msg(timeout=timeout)["content"]
        if "kernel subshells" not in info.get("supported_features", []):
            return None
        msg = self.kc.session.msg("create_subshell_request", {})
        self.kc.control_channel.send(msg)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            reply = self.kc.control_channel.get_msg(timeout=timeout)
            if reply["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
                return reply["content"]["subshell_id"]
        return None

    def close_comm(self, comm_id: str) -> None:
        self.kc.shell_channel.send(self.kc.session.msg("comm_close", {"comm_id": comm_id, "data": {}}))

    def comm_messages(self, comm_id: str, kind: Optional[str] = None, start: int = 0) -> List[Received]:
        """Received gpumem messages on one comm (from index `start` of `received`), optionally of one `type`."""
        return [
            r
            for r in self.messages()[start:]
            if (data := r.comm_data(comm_id)) is not None and (kind is None or data.get("type") == kind)
        ]

    def wait_comm(
        self,
        comm_id: str,
        kind: str,
        timeout: float = 30,
        start: int = 0,
        where: Callable[[Dict[str, Any]], bool] = lambda d: True,
    ) -> Dict[str, Any]:
        """The next gpumem message of type `kind` on `comm_id` (searching from index `start`)."""
        found = self.wait_for(
            lambda r: (d := r.comm_data(comm_id)) is not None and d.get("type") == kind and where(d), timeout, start
        )
        return found.comm_data(comm_id)

    def wait_comm_closed(self, comm_id: str, timeout: float = 30) -> Received:
        return self.wait_for(lambda r: r.msg_type == "comm_close" and r.content.get("comm_id") == comm_id, timeout)
