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
from gpumem_kernel.clear.reclaim import CLEAR_MIME
from gpumem_kernel.magics.gpumem import NO_OOM
from gpumem_kernel.oom.bundle import OOM_MIME
from gpumem_kernel.oom.handler import handler_of
from gpumem_kernel.wire.protocol import validate
from gpumem_kernel.render.status import status_bundle

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
    usage = run(ip, "%gpumem").stdout.strip()
    assert usage.startswith("usage: %gpumem {status,clear,oom,analyze,recommend,autobatch,benchmark,log,holders,watch}")
    assert "--help" in usage


def test_help_lists_every_command_and_its_options(ip):
    overview = run(ip, "%gpumem --help").stdout
    assert "%gpumem status [--json]" in overview
    assert "%gpumem clear [--vars NAME [NAME ...]] [--all-cuda-vars] [--list]" in overview
    assert "%gpumem oom" in overview
    for line in (
        "%gpumem analyze MODEL [options]",
        "%gpumem recommend MODEL [options]",
        "%gpumem autobatch MODEL [options]",
        "%gpumem benchmark MODEL [options]",
        "%gpumem holders [--json] [--top N] [--budget MS]",
        "%%gpumem [--device N]",
    ):
        assert line in overview
    clear_help = run(ip, "%gpumem clear --help")
    assert clear_help.stderr == "" and clear_help.stdout.startswith("usage: %gpumem clear ")
    assert all(option in clear_help.stdout for option in ("--vars", "--all-cuda-vars", "--list", "dry run"))
    assert run(ip, "%gpumem status -h").stdout.startswith("usage: %gpumem status [--json]")


@pytest.mark.parametrize(
    "line, message",
    [
        (
            "%gpumem bogus",
            "UsageError: gpumem: unknown command 'bogus'; try: status, clear, oom, analyze, recommend, "
            "autobatch, benchmark, log, holders, watch",
        ),
        ("%gpumem status --bogus", "UsageError: gpumem status: unrecognized arguments: --bogus"),
        ("%gpumem clear --bogus", "UsageError: gpumem clear: unrecognized arguments: --bogus"),
        ("%gpumem clear --vars", "UsageError: gpumem clear: argument --vars: expected at least one argument"),
        ("%gpumem oom now", "UsageError: gpumem oom: unrecognized arguments: now"),
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
    # the hostile process is this test process's child: a process started from the notebook, not an outsider
    assert "this kernel" in bundle["text/plain"] and "started from this notebook" in bundle["text/plain"]


# --- %gpumem clear and %gpumem oom -------------------------------------------------------------------------------

OOM_TEXT = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 15.70 GiB of which "
    "1.10 GiB is free. Of the allocated memory 13.90 GiB is allocated by PyTorch, and 120.00 MiB is reserved "
    "by PyTorch but unallocated."
)


def _fail(ip, code: str = "raise ValueError('boom')") -> None:
    run(ip, code)
    assert sys.last_value is not None


def test_clear_list_changes_nothing(ip):
    run(ip, "x = [1, 2]\ny = 'kept'")
    _fail(ip)
    error = sys.last_value
    captured = run(ip, "%gpumem clear --list --vars x")

    text = captured.outputs[0].data["text/plain"]
    assert text.startswith("GPU memory clear — dry run (nothing changed)")
    assert "would drop the last error's traceback" in text and "would delete variable x" in text
    assert sys.last_value is error and ip.user_ns["x"] == [1, 2] and ip.user_ns["y"] == "kept"


def test_clear_vars_deletes_only_the_named_variable(ip):
    run(ip, "x = [1, 2]\ny = 'kept'")
    captured = run(ip, "%gpumem clear --vars x")

    assert captured.stderr == ""
    bundle = captured.outputs[0].data
    assert set(bundle) == {CLEAR_MIME, "text/html", "text/plain"}
    assert [h["name"] for h in bundle[CLEAR_MIME]["deleted"]] == ["x"]
    assert "x" not in ip.user_ns and ip.user_ns["y"] == "kept"


def test_clear_without_options_drops_the_traceback_and_keeps_variables(ip):
    run(ip, "x = [1, 2]")
    _fail(ip)
    payload = run(ip, "%gpumem clear").outputs[0].data[CLEAR_MIME]

    assert payload["traceback_sources"] and payload["deleted"] == []
    assert not hasattr(sys, "last_value") and ip.user_ns["x"] == [1, 2]


def test_clear_of_an_unknown_variable_is_one_line_and_deletes_nothing(ip):
    run(ip, "x = 1")
    captured = run(ip, "%gpumem clear --vars x nope")

    assert captured.stderr.strip() == "UsageError: gpumem clear: no variable named 'nope' in this kernel"
    assert captured.outputs == [] and ip.user_ns["x"] == 1


def test_clear_all_cuda_vars_on_cpu_says_there_are_none(ip):
    torch = pytest.importorskip("torch")
    ip.user_ns["cpu_tensor"] = torch.ones(4)
    text = run(ip, "%gpumem clear --all-cuda-vars").outputs[0].data["text/plain"]

    assert "no user variable holds CUDA memory: none to delete" in text
    assert "cpu_tensor" in ip.user_ns
    del ip.user_ns["cpu_tensor"]


def test_oom_shows_the_last_checklist_again(ip):
    run(ip, "%gpumem clear")  # no stale error from another test
    shell_state = handler_of(ip)
    shell_state.last = shell_state.last_bundle = None
    assert run(ip, "%gpumem oom").stdout.strip() == NO_OOM

    first = run(ip, f"raise RuntimeError({OOM_TEXT!r})")  # the handler adds the checklist under the traceback
    again = run(ip, "%gpumem oom")

    assert [o.data[OOM_MIME] for o in again.outputs] == [first.outputs[0].data[OOM_MIME]]
    assert set(again.outputs[0].data) == {OOM_MIME, "text/html", "text/plain"}
    run(ip, "%gpumem clear")  # drops the traceback; the checklist stays available
    assert run(ip, "%gpumem oom").outputs[0].data[OOM_MIME] == first.outputs[0].data[OOM_MIME]


def test_loading_installs_the_oom_handler_and_unloading_removes_it(ip):
    assert handler_of(ip) is not None and RuntimeError in ip.custom_exceptions
    ip.extension_manager.unload_extension("gpumem_kernel")
    assert handler_of(ip) is None and ip.custom_exceptions == ()
    ip.extension_manager.load_extension("gpumem_kernel")
    assert handler_of(ip) is not None
