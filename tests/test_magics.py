"""`%gpumem` in an in-process IPython shell: output, one-line errors, escaping, idempotent loading."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import psutil
import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

import gpumem_kernel
from fake_nvml import FakeGpu, GiB
from gpumem_kernel.protocol import validate
from gpumem_kernel.render import status_bundle

HOSTILE = "<img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def ip():
    shell = InteractiveShell.instance()
    shell.extension_manager.load_extension("gpumem_kernel")
    yield shell
    shell.extension_manager.unload_extension("gpumem_kernel")


def run(ip, line: str):
    with capture_output() as captured:
        ip.run_cell(line)
    return captured


def sampler_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "gpumem-sampler")


def test_status_shows_why_there_is_no_gpu_and_the_host(ip):
    captured = run(ip, "%gpumem status")

    assert captured.stderr == ""
    bundle = captured.outputs[0].data
    assert "No NVIDIA GPU" in bundle["text/plain"] and "Host" in bundle["text/plain"]
    assert "Kernel RSS" in bundle["text/plain"] and "System available" in bundle["text/plain"]
    assert "No NVIDIA GPU" in bundle["text/html"]


def test_status_json_prints_a_valid_sample(ip):
    captured = run(ip, "%gpumem status --json")
    sample = json.loads(captured.stdout)
    validate(sample)
    assert sample["kernel"]["pid"] == os.getpid()


def test_no_words_prints_the_usage(ip):
    assert run(ip, "%gpumem").stdout.strip() == "usage: %gpumem status [--json]"


@pytest.mark.parametrize(
    "line, message",
    [
        ("%gpumem bogus", "UsageError: gpumem: unknown command 'bogus'; try: status"),
        ("%gpumem status --bogus", "UsageError: gpumem status: unrecognized arguments: --bogus"),
        ("%gpumem status -h", "UsageError: gpumem status: unrecognized arguments: -h"),
        ('%gpumem status "unbalanced', "UsageError: gpumem status: No closing quotation"),
    ],
)
def test_bad_input_is_one_line_without_traceback(ip, line, message):
    captured = run(ip, line)
    assert captured.stderr.strip() == message
    assert "Traceback" not in captured.stdout + captured.stderr


def test_loading_twice_keeps_one_sampler_and_one_magic(ip):
    before = sampler_threads()
    ip.extension_manager.reload_extension("gpumem_kernel")  # unload + load
    gpumem_kernel.load_ipython_extension(ip)  # a direct second load
    gpumem_kernel._bootstrap()
    assert before == sampler_threads() == 1
    assert "gpumem" in ip.magics_manager.magics["line"]


def test_bootstrap_returns_version_and_protocol(ip):
    assert json.loads(gpumem_kernel._bootstrap()) == {"version": gpumem_kernel.__version__, "protocol": 1}


def test_print_status_is_the_console_layout(capsys):
    gpumem_kernel.print_status()
    out = capsys.readouterr().out
    assert out.startswith("No NVIDIA GPU visible to this kernel: ")
    assert "=" * 60 in out


@pytest.fixture
def hostile_process(tmp_path):
    """A process whose name is HTML: anyone can name a process like this."""
    link = tmp_path / HOSTILE
    link.symlink_to(sys.executable)
    process = subprocess.Popen([str(link), "-c", "import time; time.sleep(60)"])
    for _ in range(200):
        if psutil.Process(process.pid).name() == HOSTILE:
            break
        time.sleep(0.01)
    yield process.pid
    process.kill()
    process.wait()


def test_html_escapes_device_and_process_names(make_prober, hostile_process):
    prober = make_prober([FakeGpu(HOSTILE, "GPU-1", processes=[(hostile_process, GiB), (os.getpid(), GiB)])])
    sample = prober().to_dict()
    assert sample["gpu"]["devices"][0]["processes"][0]["name"] == HOSTILE

    bundle = status_bundle(sample)

    assert "<img" not in bundle["text/html"]
    assert bundle["text/html"].count("&lt;img src=x onerror=alert(1)&gt;") == 2
    assert f"GPU 0: {HOSTILE}" in bundle["text/plain"]
    assert "this kernel" in bundle["text/plain"] and "external" in bundle["text/plain"]
