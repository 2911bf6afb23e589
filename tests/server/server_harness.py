"""A real Jupyter server in a subprocess for the tests: its own config, runtime and root directories, a token,
a free port; kernels started through its REST API."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import psutil

HERE = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class JupyterServer:
    def __init__(self, tmp: Path, extensions: Dict[str, bool], config: Optional[Dict[str, Any]] = None) -> None:
        self.tmp = tmp
        self.token = uuid.uuid4().hex
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.root = tmp / "root"
        (tmp / "config").mkdir(parents=True, exist_ok=True)
        self.root.mkdir(parents=True, exist_ok=True)
        server_config = {
            "ServerApp": {
                "port": self.port,
                "allow_root": True,
                "ip": "127.0.0.1",
                "open_browser": False,
                "root_dir": str(self.root),
                "jpserver_extensions": extensions,
            },
            "IdentityProvider": {"token": self.token},
            **(config or {}),
        }
        (tmp / "config" / "jupyter_server_config.json").write_text(json.dumps(server_config))
        self.env = {
            **os.environ,
            "JUPYTER_CONFIG_DIR": str(tmp / "config"),
            "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
            "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")]),
        }
        self.process: Optional[subprocess.Popen] = None
        self.log = tmp / "server.log"

    def __enter__(self) -> "JupyterServer":
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "jupyter_server"], env=self.env, stdout=out, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"jupyter server exited:\n{self.log.read_text()[-4000:]}")
            try:
                if self.get("/api/status")[0] == 200:
                    return self
            except (urllib.error.URLError, ConnectionError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"jupyter server did not answer:\n{self.log.read_text()[-4000:]}")

    def __exit__(self, *exc: Any) -> None:
        if self.process is not None:
            self.process.terminate()  # the server shuts its kernels down on SIGTERM
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def request(self, method: str, path: str, body: Any = None, token: bool = True) -> Tuple[int, bytes]:
        headers = {"Authorization": f"token {self.token}"} if token else {}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def get(self, path: str, token: bool = True) -> Tuple[int, bytes]:
        return self.request("GET", path, token=token)

    def json(self, method: str, path: str, body: Any = None) -> Any:
        status, data = self.request(method, path, body)
        assert 200 <= status < 300, (status, data[:500])
        return json.loads(data)

    def kernel_pid(self, kernel_id: str, timeout: float = 30) -> int:
        """The kernel's process, found the way an administrator would: the server's child whose command
        line names the kernel's connection file (independent of how the extension maps it)."""
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for child in psutil.Process(self.process.pid).children(recursive=True):
                try:
                    if any(f"kernel-{kernel_id}.json" in arg for arg in child.cmdline()):
                        return child.pid
                except psutil.Error:
                    continue
            time.sleep(0.1)
        raise AssertionError(f"no process for kernel {kernel_id}")

    def say_hello(self, kernel_id: str, timeout: float = 60) -> None:
        """Connect to the kernel as a browser does and ask for its kernel info: the server calls a kernel
        "starting" until a client talks to it."""
        asyncio.run(self._talk(kernel_id, [("kernel_info_request", {}, "kernel_info_reply")], timeout))

    def execute(self, kernel_id: str, code: str, timeout: float = 60) -> None:
        request = {"code": code, "silent": False, "store_history": True, "user_expressions": {}, "allow_stdin": False}
        asyncio.run(self._talk(kernel_id, [("execute_request", request, "execute_reply")], timeout))

    def start_execute(self, kernel_id: str, code: str, timeout: float = 15) -> None:
        """Send a cell and return once the kernel says it is busy with it: for a cell that never replies (it ends
        the kernel), where waiting for execute_reply would only wait out the timeout. A kernel killed at once may
        never get its busy status out (IOPub is sent from a thread): then this returns after `timeout`, and the
        caller watches for the death it caused."""
        request = {"code": code, "silent": False, "store_history": True, "user_expressions": {}, "allow_stdin": False}
        try:
            asyncio.run(self._talk(kernel_id, [("execute_request", request, "status")], timeout))
        except (asyncio.TimeoutError, AssertionError):  # no status came, or the dying kernel's socket closed
            pass

    def open_gpumem_comm(self, kernel_id: str, interval: float, timeout: float = 60) -> None:
        """What the GPU panel does: load the kernel side, open a `gpumem` comm; returns at its first sample
        (the kernel then sends one every `interval` seconds over IOPub)."""
        comm_id = uuid.uuid4().hex
        data = {"type": "open", "protocol": 1, "interval": interval}
        steps = [
            ("execute_request", {"code": "%load_ext gpumem_kernel", "silent": True}, "execute_reply"),
            ("comm_open", {"comm_id": comm_id, "target_name": "gpumem", "data": data}, "comm_msg"),
        ]
        asyncio.run(self._talk(kernel_id, steps, timeout))

    async def _talk(self, kernel_id: str, steps: List[Tuple[str, Dict[str, Any], str]], timeout: float) -> None:
        """Send each request over the kernel's websocket and wait for a message of the given type answering it
        (for comm_open: the first comm_msg of that comm)."""
        from tornado.websocket import websocket_connect

        url = f"ws://127.0.0.1:{self.port}/api/kernels/{kernel_id}/channels?token={self.token}"
        ws = await asyncio.wait_for(websocket_connect(url), timeout)
        try:
            for msg_type, content, answer in steps:
                msg_id = uuid.uuid4().hex
                header = {"msg_id": msg_id, "msg_type": msg_type, "username": "test", "session": msg_id}
                header["version"] = "5.3"
                message = {"header": header, "parent_header": {}, "metadata": {}, "content": content}
                await ws.write_message(json.dumps({**message, "channel": "shell"}))
                deadline = time.monotonic() + timeout
                while True:
                    raw = await asyncio.wait_for(ws.read_message(), max(0.1, deadline - time.monotonic()))
                    if raw is None:
                        raise AssertionError("the kernel's websocket closed")
                    if not isinstance(raw, str):
                        continue
                    reply = json.loads(raw)
                    if reply["header"]["msg_type"] != answer:
                        continue
                    if answer == "comm_msg" and reply["content"].get("comm_id") == content["comm_id"]:
                        break
                    if reply.get("parent_header", {}).get("msg_id") == msg_id:
                        break
        finally:
            ws.close()

    def wait_idle(self, kernel_id: str, timeout: float = 60) -> Dict[str, Any]:
        self.say_hello(kernel_id, timeout)
        deadline = time.monotonic() + timeout
        model: Dict[str, Any] = {}
        while time.monotonic() < deadline:
            model = self.json("GET", f"/api/kernels/{kernel_id}")
            if model["execution_state"] == "idle":
                return model
            time.sleep(0.2)
        raise AssertionError(f"kernel {kernel_id} never idle: {model}")
