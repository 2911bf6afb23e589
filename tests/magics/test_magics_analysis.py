"""`%gpumem analyze|recommend|autobatch|benchmark` and `%%gpumem` in an in-process IPython shell, on tiny models."""

from __future__ import annotations

import sys

import jsonschema
import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

torch = pytest.importorskip("torch")

from conftest import gpumem_shell  # noqa: E402
from gpumem_kernel.analysis.report.render import MIME as ANALYSIS_MIME  # noqa: E402
from gpumem_kernel.autobatch.search import MIME as AUTOBATCH_MIME  # noqa: E402
from gpumem_kernel.autobatch.search import scan_batch_sizes  # noqa: E402
from gpumem_kernel.benchmark.report import MIME as BENCHMARK_MIME  # noqa: E402
from gpumem_kernel.wire.protocol import load_payload_schema  # noqa: E402
from gpumem_kernel.magics.analysis import last_recommendation  # noqa: E402
from gpumem_kernel.oom.bundle import OOM_MIME  # noqa: E402

MLP_PARAMETER_BYTES = (32 * 64 + 64 + 64 * 10 + 10) * 4
SETUP = """\
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
wide = torch.nn.Sequential(torch.nn.Linear(128, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
cnn = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                          torch.nn.Linear(8 * 16 * 16, 10))
not_a_model = [1, 2]
momentum_sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
sample = torch.randn(4, 32)
def make_batch(b):
    return torch.randn(b, 32)
def mse_loss(output, batch):
    return output.pow(2).mean()
calls = [0]
def interrupting_loss(output, batch):
    calls[0] += 1
    if calls[0] >= 4:
        raise KeyboardInterrupt
    return output.float().pow(2).mean()
"""


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def ip():
    with gpumem_shell() as shell:
        run(shell, SETUP)
        yield shell


def run(ip, code: str):
    with capture_output() as captured:
        ip.run_cell(code)
    return captured


def schema(name: str):
    return jsonschema.Draft202012Validator(load_payload_schema(name))


def state(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def same(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# --- analyze and recommend ------------------------------------------------------------------------------------


def test_analyze_displays_a_schema_valid_bundle(ip):
    captured = run(ip, "%gpumem analyze model --batch 16")

    assert captured.stderr == "" and len(captured.outputs) == 1
    bundle = captured.outputs[0].data
    assert set(bundle) == {ANALYSIS_MIME, "text/html", "text/plain"}
    payload = bundle[ANALYSIS_MIME]
    schema("analysis").validate(payload)
    assert payload["parameters_bytes"] == MLP_PARAMETER_BYTES
    assert payload["gradients_bytes"] == MLP_PARAMETER_BYTES
    assert payload["optimizer_bytes"] == 2 * MLP_PARAMETER_BYTES  # AdamW: exp_avg + exp_avg_sq
    assert payload["settings"]["batch_size"] == 16
    assert "Memory Analysis" in bundle["text/plain"] and "<table" in bundle["text/html"]


def test_would_it_fit_on_an_rtx_4080_super(ip):
    line = '%gpumem analyze model --target "RTX 4080 Super" --amp bf16 --optimizer adamw --batch 32'
    payload = run(ip, line).outputs[0].data[ANALYSIS_MIME]

    assert payload["engine"] == "traced"
    assert payload["device"]["name"] == "RTX 4080 Super" and payload["device"]["source"] == "target"
    assert payload["settings"]["amp"] == "bf16" and payload["settings"]["optimizer"] == "AdamW"
    assert payload["recommendations"]["current"]["status"] in ("fits", "tight", "will-not-fit")
    assert payload["recommendations"]["current"]["batch_size"] == 32
    assert payload["error_bound"]["statement"]


def test_target_and_memory_combine_and_memory_alone_says_what_it_assumed(ip):
    both = run(ip, '%gpumem analyze model --target "RTX 3090" --memory 20GiB').outputs[0].data
    payload = both[ANALYSIS_MIME]
    assert payload["device"]["total_bytes"] == 20 << 30 and payload["device"]["compute_capability"] == "8.6"
    card = run(ip, '%gpumem analyze model --target "RTX 3090"').outputs[0].data[ANALYSIS_MIME]
    assert payload["device"]["bf16"] is True and payload["context_bytes"] == card["context_bytes"]
    assert "planning for RTX 3090 with 20.0 GiB" in both["text/plain"]
    assert "Source:           memory (compute 8.6)" in both["text/plain"]
    alone = run(ip, "%gpumem analyze model --memory 20GiB").outputs[0].data["text/plain"]
    assert "compute not given: generic context and workspaces" in alone and "--memory without --target" in alone
    for line in ('%gpumem analyze model --target "GTX 1080 Ti"', "%gpumem analyze model --target 'rtx 3070'"):
        assert run(ip, line).outputs[0].data[ANALYSIS_MIME]["device"]["source"] == "target"


def test_analyze_reads_inputs_losses_and_optimizers_from_the_namespace(ip):
    by_function = (
        run(ip, "%gpumem analyze model -b 8 --input make_batch --loss mse_loss --optimizer momentum_sgd --memory 2GiB")
        .outputs[0]
        .data[ANALYSIS_MIME]
    )
    by_sample = run(ip, "%gpumem analyze model -b 8 --input sample --memory 2GiB").outputs[0].data[ANALYSIS_MIME]

    assert by_function["settings"]["input"] == "make_batch(batch_size)"
    assert by_function["settings"]["optimizer"] == "SGD"
    assert by_function["optimizer_bytes"] == MLP_PARAMETER_BYTES  # momentum buffers only
    assert by_sample["settings"]["input"].startswith("sample: (32,)")
    assert by_function["input_bytes"] == by_sample["input_bytes"] == 8 * 32 * 4


def test_analyze_json_prints_the_payload(ip):
    import json

    captured = run(ip, "%gpumem analyze model --memory 16GiB --json")
    payload = json.loads(captured.stdout)
    schema("analysis").validate(payload)
    assert captured.outputs == [] and payload["device"]["source"] == "memory"


@pytest.mark.parametrize(
    "line, message",
    [
        ("%gpumem analyze nope", "MODEL: no variable named 'nope' in this kernel"),
        ("%gpumem analyze not_a_model", "not_a_model is a list, not a torch.nn.Module"),
        ("%gpumem analyze model.missing", "MODEL: model has no attribute 'missing'"),
        ("%gpumem analyze model --input 3xq", "--input: bad input shape '3xq'"),
        ("%gpumem analyze model --input nothere", "--input 'nothere': no variable of that name"),
        ("%gpumem analyze model --input 3x224x224", "training step failed while tracing"),
        ('%gpumem analyze model --target "RTX 9999"', "--target: unknown GPU 'RTX 9999'"),
        ("%gpumem analyze model --memory huge", "--memory: cannot read memory size 'huge'"),
        ("%gpumem analyze model --amp fp8", "argument --amp: invalid choice: 'fp8'"),
        ("%gpumem analyze model --optimizer lion", "--optimizer 'lion': use adamw, adam, sgd, sgd-momentum, adam8bit"),
        ("%gpumem analyze model --optimizer not_a_model", "--optimizer not_a_model: a list, not a torch.optim"),
        ("%gpumem analyze model --loss not_a_model", "--loss not_a_model: a list is not callable"),
        (
            "%gpumem analyze model --batch many",
            "argument -b/--batch: expected an integer from 1 to 2147483647, got 'many'",
        ),
        ("%gpumem analyze model --strategy zero4", "argument --strategy: invalid choice: 'zero4'"),
        ("%gpumem analyze model --round 2^", "argument --round: unknown rounding '2^': use pow2 (the default), none"),
        ("%gpumem analyze model --memory 2GiB --round 8 --multiple 16", "--multiple 16 and --round '8' disagree"),
        ("%gpumem analyze", "the following arguments are required: MODEL"),
        ("%gpumem analyze model --bogus", "unrecognized arguments: --bogus"),
        ("%gpumem recommend nope", "MODEL: no variable named 'nope'"),
    ],
)
def test_bad_arguments_are_one_line_without_traceback(ip, line, message):
    captured = run(ip, line)

    command = line.split()[1]
    assert captured.stderr.startswith(f"UsageError: gpumem {command}: ") and message in captured.stderr
    assert captured.stderr.count("\n") == 1, captured.stderr
    assert "Traceback" not in captured.stdout + captured.stderr and captured.outputs == []


def test_help_documents_every_option(ip):
    text = run(ip, "%gpumem analyze --help").stdout
    # argparse wraps the usage to the terminal's width (80 columns without one, as in a kernel): the words, not
    # the line breaks
    assert text.split()[:3] == ["usage:", "%gpumem", "analyze"]
    for option in (
        "--batch",
        "--input",
        "--vocab",
        "--loss",
        "--optimizer",
        "--amp",
        "--accum",
        "--checkpointing",
        "--device",
        "--target",
        "--memory",
        "--multiple",
        "--round",
        "--effective-batch",
        "--world-size",
        "--strategy",
        "--json",
        '"RTX 4080 Super"',
        "examples:",
    ):
        assert option in text, option
    for command, options in (
        ("recommend", ("--target", "--memory")),
        ("autobatch", ("--simulate", "--margin", "--max", "--multiple", "--round")),
        ("benchmark", ("--synthetic", "--loader-factory", "--dataset", "--save-yaml")),
    ):
        text = run(ip, f"%gpumem {command} --help").stdout
        assert text.split()[:3] == ["usage:", "%gpumem", command] and all(o in text for o in options)


def test_recommend_shows_only_the_three_picks(ip):
    captured = run(ip, "%gpumem recommend wide --memory 2GiB --batch 64 --multiple 8")

    bundle = captured.outputs[0].data
    assert set(bundle) == {"text/plain", "text/html"}
    text = bundle["text/plain"]
    for label in ("Maximum:", "Recommended:", "Safe:", "Current:", "Engine: traced"):
        assert label in text
    assert "Model Memory" not in text and "Batch Memory" not in text
    assert ">Recommended</td>" in bundle["text/html"] and ">Safe</td>" in bundle["text/html"]
    picks = run(ip, "%gpumem analyze wide --memory 2GiB --batch 64 --multiple 8").outputs[0].data[ANALYSIS_MIME]
    recs = picks["recommendations"]
    assert f"Recommended:      {recs['recommended']} " in text and f"Safe:             {recs['safe']} " in text
    assert recs["recommended"] % 8 == 0


def test_the_maximum_does_not_change_with_the_batch_asked_about(ip):
    """-b is the batch the breakdown is of; the maximum is the model's on that device (it was 507 at -b 8 and
    510 at -b 2048)."""
    maxima = {
        b: run(ip, f"%gpumem analyze wide --memory 2GiB -b {b}").outputs[0].data[ANALYSIS_MIME]["recommendations"]
        for b in (8, 64, 2048)
    }
    assert len({(r["maximum"], r["recommended"], r["safe"]) for r in maxima.values()}) == 1, maxima


def test_round_chooses_how_the_picks_are_rounded(ip):
    def picks(line: str) -> dict:
        payload = run(ip, f"%gpumem analyze wide --memory 2GiB -b 64 {line}").outputs[0].data[ANALYSIS_MIME]
        schema("analysis").validate(payload)
        return payload

    by_eight, exact, default = picks("--round 8"), picks("--round none"), picks("")
    maximum = default["recommendations"]["maximum"]
    assert by_eight["recommendations"]["maximum"] == exact["recommendations"]["maximum"] == maximum
    assert by_eight["recommendations"]["recommended"] == int(0.6 * maximum) // 8 * 8
    assert exact["recommendations"]["recommended"] == int(0.6 * maximum)
    recommended = default["recommendations"]["recommended"]
    assert recommended & (recommended - 1) == 0  # a power of two by default
    assert [p["settings"]["round"] for p in (by_eight, exact, default)] == ["8", "none", "pow2"]
    assert [p["settings"]["round_source"] for p in (by_eight, exact, default)] == ["option", "option", "default"]
    text = run(ip, "%gpumem recommend wide --memory 2GiB -b 64 --round 8").outputs[0].data["text/plain"]
    share = round(100 * by_eight["recommendations"]["recommended"] / maximum)
    assert f"{share}% of the maximum {maximum}; aim 60%, rounded down to a multiple of 8" in text
    result = run(ip, "%gpumem autobatch wide --input 128 --simulate 3MiB --round none").outputs[-1].data
    assert result[AUTOBATCH_MIME]["round"] == "none"
    assert result[AUTOBATCH_MIME]["recommended"] == int(result[AUTOBATCH_MIME]["maximum"] * 0.9)


def test_the_oom_checklist_uses_the_last_recommendation(ip):
    payload = run(ip, "%gpumem analyze wide --memory 2GiB --batch 64").outputs[0].data[ANALYSIS_MIME]
    recommended = payload["recommendations"]["recommended"]
    assert recommended and last_recommendation(ip) == recommended

    oom_text = (
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 15.70 GiB of which "
        "1.10 GiB is free. Of the allocated memory 13.90 GiB is allocated by PyTorch, and 120.00 MiB is "
        "reserved by PyTorch but unallocated."
    )
    # the error in a step that runs the analysed model: the analysis is for the model that failed
    step = f"def train_step(model):\n    raise RuntimeError({oom_text!r})\n"
    captured = run(ip, f"batch_size = {recommended * 4}\n{step}train_step(wide)")

    steps = {s["id"]: s for s in captured.outputs[0].data[OOM_MIME]["steps"]}
    assert steps["batch-size"]["title"] == f"Reduce the batch size to {recommended}"
    assert "the last %gpumem analyze recommendation" in steps["batch-size"]["detail"]
    run(ip, "%gpumem clear")
    del ip.user_ns["batch_size"]


# --- autobatch --------------------------------------------------------------------------------------------------


def test_autobatch_simulated_matches_brute_force_and_restores_the_model(ip):
    wide = ip.user_ns["wide"]
    before = state(wide)
    captured = run(ip, "%gpumem autobatch wide --simulate 2MiB")

    assert captured.stderr == ""
    first, *updates = captured.outputs
    assert "trial 1, batch" in first.data["text/plain"] and all(o.update for o in updates)
    payload = captured.outputs[-1].data[AUTOBATCH_MIME]
    schema("autobatch").validate(payload)
    assert payload["engine"] == "simulated" and "simulated" in captured.outputs[-1].data["text/plain"]
    maximum = payload["maximum"]
    trials = scan_batch_sizes(wide, range(1, maximum + 4), simulate="2MiB")
    assert max(t.batch for t in trials if t.ok) == maximum
    assert all(t.ok == (t.batch <= maximum) for t in trials)
    assert same(before, state(wide))


def test_autobatch_errors_are_one_line(ip):
    # without CUDA, autobatch has no GPU to search on (with it, that line searches)
    no_gpu = "no GPU to search on: pass --device 'cuda', or --simulate"
    for line, message in ([] if torch.cuda.is_available() else [("%gpumem autobatch wide", no_gpu)]) + [
        ("%gpumem autobatch wide --simulate lots", "--simulate: cannot read memory size 'lots'"),
        (
            "%gpumem autobatch wide --simulate 2MiB --batch 4 --input 3x3",
            "a training step failed: RuntimeError: mat1 and mat2 shapes cannot be multiplied",
        ),
    ]:
        captured = run(ip, line)
        assert captured.stderr.startswith("UsageError: gpumem autobatch: ") and message in captured.stderr
        assert captured.stderr.count("\n") == 1 and "Traceback" not in captured.stdout + captured.stderr


def test_autobatch_ctrl_c_shows_the_partial_result_and_restores(ip):
    wide = ip.user_ns["wide"]
    before = state(wide)
    ip.user_ns["calls"][0] = 0
    captured = run(ip, "%gpumem autobatch wide --simulate 2MiB --batch 8 --loss interrupting_loss")

    payload = captured.outputs[-1].data[AUTOBATCH_MIME]
    assert payload["interrupted"] and payload["maximum"] == 8
    assert "Interrupted: partial result" in captured.outputs[-1].data["text/plain"]
    assert same(before, state(wide))


# --- benchmark --------------------------------------------------------------------------------------------------


def test_benchmark_rows_appear_as_they_finish(ip, tmp_path):
    saved = tmp_path / "best.yaml"
    captured = run(
        ip,
        "%gpumem benchmark cnn --synthetic 3x16x16 --classes 10 --batch-sizes 4,8,16,32 "
        f"--num-workers 0 --steps 1 --warmup 0 --simulate 1MiB --save-yaml {saved}",
    )

    assert captured.stderr == ""
    progress, final = captured.outputs[:-1], captured.outputs[-1]
    assert [o.update for o in captured.outputs] == [False] + [True] * (len(captured.outputs) - 1)
    assert "1 row(s) so far" in progress[0].data["text/plain"]
    payload = final.data[BENCHMARK_MIME]
    schema("benchmark").validate(payload)
    assert len(progress) == len(payload["rows"])  # one update per finished row, then the result
    assert payload["engine"] == "simulated" and any(r["status"] == "oom" for r in payload["rows"])
    assert payload["picks"]["highest_throughput"] is not None and payload["picks"]["recommended"] is not None
    assert "OPTIMAL CONFIGURATION" in final.data["text/plain"]
    assert saved.read_text().startswith("# gpumem benchmark") and f"written to {saved}" in captured.stdout


def test_benchmark_ctrl_c_shows_the_partial_table(ip):
    ip.user_ns["calls"][0] = 0
    captured = run(
        ip,
        "%gpumem benchmark cnn --synthetic 3x16x16 --classes 10 --batch-sizes 4,8,16 "
        "--num-workers 0 --steps 1 --warmup 0 --simulate 1MiB --loss interrupting_loss",
    )

    payload = captured.outputs[-1].data[BENCHMARK_MIME]
    assert payload["interrupted"] and 1 <= len(payload["rows"]) < 6
    assert "Interrupted: partial table" in captured.outputs[-1].data["text/plain"]


@pytest.mark.parametrize(
    "line, message",
    [
        ("%gpumem benchmark cnn", "give one data source: --dataset VAR, --loader-factory VAR or --synthetic SHAPE"),
        ("%gpumem benchmark cnn --synthetic 3x16x16 --batch-sizes a", "--batch-sizes: expected a list of positive"),
        ("%gpumem benchmark cnn --dataset sample --classes 3", "--classes goes with --synthetic"),
        ("%gpumem benchmark cnn --synthetic 3xq", "bad input shape '3xq'"),
        ("%gpumem benchmark cnn --synthetic 3x16x16 --config no_such.yaml", "no_such.yaml: no such config file"),
        ("%gpumem benchmark cnn --loader-factory sample", "--loader-factory sample: a Tensor is not callable"),
    ],
)
def test_benchmark_bad_arguments_are_one_line(ip, line, message):
    captured = run(ip, line)
    assert captured.stderr.startswith("UsageError: gpumem benchmark: ") and message in captured.stderr
    assert captured.stderr.count("\n") == 1 and captured.outputs == []


# --- one check of --device and the batch sizes in every command; echoed values are cut ---------------------------

HUGE = "x" * 20_000  # a pasted blob; any length past the bound shows the cut
BIG = "99999999999999999999"


@pytest.mark.parametrize(
    "line, message",
    [
        ("%gpumem analyze model --device tpu", "argument --device: expected cpu, cuda, cuda:N or N, got 'tpu'"),
        ("%gpumem recommend model --device 3", "argument --device: got '3', but this kernel sees no CUDA device"),
        ("%gpumem autobatch wide --simulate 2MiB --device cuda:3", "got 'cuda:3', but this kernel sees no CUDA device"),
        ("%gpumem benchmark cnn --synthetic 3x16x16 --device tpu", "expected cpu, cuda, cuda:N or N, got 'tpu'"),
        (
            f"%gpumem analyze model -b {BIG}",
            f"argument -b/--batch: expected an integer from 1 to 2147483647, got '{BIG}'",
        ),
        (f"%gpumem recommend model --batch {BIG}", "argument -b/--batch: expected an integer from 1 to 2147483647"),
        (f"%gpumem autobatch wide --simulate 2MiB -b {BIG}", "argument -b/--batch: expected an integer from 1 to"),
        (f"%gpumem autobatch wide --simulate 2MiB --max {BIG}", "argument --max: expected an integer from 1 to"),
        ("%gpumem analyze model --batch 0", "argument -b/--batch: expected an integer from 1 to 2147483647, got '0'"),
        ("%gpumem benchmark cnn --synthetic 3x16x16 --classes 0", "argument --classes: expected an integer from 1 to"),
    ],
)
def test_device_and_batch_are_checked_alike_by_every_command(ip, line, message):
    captured = run(ip, line)

    command = line.split()[1]
    assert captured.stderr.startswith(f"UsageError: gpumem {command}: ") and message in captured.stderr
    assert captured.stderr.count("\n") == 1 and captured.outputs == []
    assert "Traceback" not in captured.stdout + captured.stderr and "overflow" not in captured.stderr.lower()
    assert not torch.cuda.is_initialized()


def test_cell_magic_refuses_a_device_this_kernel_does_not_have(ip):
    captured = run(ip, "%%gpumem --device 3\nnever = 1")
    assert captured.stderr.strip() == (
        "UsageError: gpumem cell: argument --device: got '3', but this kernel sees no CUDA device"
    )
    assert "never" not in ip.user_ns and captured.outputs == []
    assert run(ip, "%%gpumem --device cuda:0\nnever = 1").stderr.strip().endswith("sees no CUDA device")
    assert "never" not in ip.user_ns and not torch.cuda.is_initialized()


@pytest.mark.parametrize(
    "line",
    [
        "{huge}",
        "analyze {huge}",
        "analyze model --target {huge}",
        "analyze model --amp {huge}",
        "analyze model --device {huge}",
        "analyze model --input {huge}",
        "analyze model --optimizer {huge}",
        "analyze model --memory {huge}",
        "status {huge}",
        "clear --vars {huge}",
        "benchmark cnn --synthetic 3x16x16 --config {huge}",
        "benchmark cnn --synthetic 3x16x16 --batch-sizes {huge}",
        'analyze model --target "{spaced}"',
        "CELL --device {huge}",
    ],
    ids=lambda line: line.split("{")[0].strip() or "command",
)
def test_echoed_values_are_cut(ip, line):
    # The magic itself: IPython's input transforms and $-expansion are quadratic in the line's length.
    line = line.format(huge=HUGE, spaced="RTX " * 5_000)
    magics = ip.magics_manager.magics
    with capture_output() as captured, pytest.raises(UsageError) as caught:
        if line.startswith("CELL "):
            magics["cell"]["gpumem"](line[len("CELL ") :], "never = 1")
        else:
            magics["line"]["gpumem"](line)

    message = str(caught.value)
    assert message.startswith("gpumem") and "\n" not in message
    assert len(message) < 500 and "…" in message, message[:500]
    assert captured.outputs == [] and "never" not in ip.user_ns


# --- %%gpumem -----------------------------------------------------------------------------------------------------


def test_cell_magic_reports_the_cells_delta_without_initialising_cuda(ip):
    captured = run(ip, "%%gpumem\nbig = bytearray(64 * 1024 * 1024)\nbig[::4096] = b'x' * len(big[::4096])")

    assert captured.stderr == "" and ip.user_ns["big"] is not None
    bundle = captured.outputs[-1].data
    text = bundle["text/plain"]
    assert text.startswith("%%gpumem: the cell ran in ")
    assert "host RSS delta +" in text and "CUDA is not initialised in this kernel: host memory only" in text
    delta = float(text.split("delta +")[1].split()[0])
    assert delta >= 32  # MiB: the cell touched 64 MiB
    assert "<table" in bundle["text/html"]
    assert not torch.cuda.is_initialized()
    del ip.user_ns["big"]


def test_cell_magic_reports_a_failing_cell_and_bad_options(ip):
    failing = run(ip, "%%gpumem\n1 / 0")
    assert "ZeroDivisionError" in failing.stdout + failing.stderr
    assert "(it raised an error)" in failing.outputs[-1].data["text/plain"]

    bad = run(ip, "%%gpumem --device x\nnever = 1")
    assert bad.stderr.strip() == "UsageError: gpumem cell: argument --device: expected cuda:N or N, got 'x'"
    assert "never" not in ip.user_ns
    assert run(ip, "%%gpumem --help\nnever = 1").stdout.startswith("usage: %%gpumem [--device N]")
    assert "never" not in ip.user_ns


def test_unloading_removes_the_cell_magic(ip):
    assert "gpumem" in ip.magics_manager.magics["cell"]
    ip.extension_manager.unload_extension("gpumem_kernel")
    assert "gpumem" not in ip.magics_manager.magics["cell"] and "gpumem" not in ip.magics_manager.magics["line"]
    ip.extension_manager.load_extension("gpumem_kernel")
    assert "gpumem" in ip.magics_manager.magics["cell"]
    assert sys.modules.get("gpumem_kernel.magics.analysis") is not None


def test_the_seeds_python_api_is_on_the_package_and_loads_lazily(capsys):
    import subprocess

    cheap = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, gpumem_kernel; "
            "assert 'torch' not in sys.modules and 'gpumem_kernel.analysis.pipeline.analyze' not in sys.modules",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cheap.returncode == 0, cheap.stderr

    import gpumem_kernel
    from gpumem_kernel import (
        get_gpu_info,
        print_gpu_info,  # noqa: F401
        recommend_batch_size,
    )

    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    picks = recommend_batch_size(model, gpu_memory_gb=2)
    assert {"maximum", "recommended", "safe"} <= set(picks) and picks["engine"] == "traced"
    from gpumem_kernel.probe.prober import probe

    # what NVML lists on this machine (none on a CPU host; a GPU host lists its devices)
    listed = [d.cuda_index for d in probe().gpu.devices if d.cuda_index is not None]
    assert [g["index"] for g in get_gpu_info()] == listed
    print_gpu_info()
    if not listed:
        assert "No NVIDIA GPU" in capsys.readouterr().out
    with pytest.raises(AttributeError):
        gpumem_kernel.no_such_function  # noqa: B018


class FakeCuda:
    """torch.cuda's allocator counters for two devices; the cell moves them through `fake_cuda.step(...)`."""

    GiB = 1 << 30

    def __init__(self) -> None:
        self.allocated = {0: 0, 1: self.GiB}
        self.peak = dict(self.allocated)
        self.reserved = {0: 0, 1: 2 * self.GiB}
        self.synchronized = []
        self.initialized = True

    def step(self, device: int, peak_extra: int, delta: int) -> None:
        self.peak[device] = max(self.peak[device], self.allocated[device] + peak_extra)
        self.allocated[device] += delta
        self.reserved[device] += self.GiB

    def install(self, monkeypatch) -> None:
        for name, value in {
            "is_initialized": lambda: self.initialized,
            "device_count": lambda: 2,
            "current_device": lambda: 0,
            "memory_allocated": lambda i=0: self.allocated[i],
            "max_memory_allocated": lambda i=0: self.peak[i],
            "memory_reserved": lambda i=0: self.reserved[i],
            "synchronize": lambda i=0: self.synchronized.append(i),
            "reset_peak_memory_stats": lambda i=0: self.peak.__setitem__(i, self.allocated[i]),
        }.items():
            monkeypatch.setattr(torch.cuda, name, value)


def test_cell_magic_reports_each_cuda_device_in_use_and_leaves_unused_ones_alone(ip, monkeypatch):
    from gpumem_kernel import extension

    sampler = extension.current().sampler
    sampler.stop()  # its probe would believe the fake and ask the real torch.cuda
    fake = FakeCuda()
    ip.user_ns["fake_cuda"] = fake
    try:
        with monkeypatch.context() as patch:
            fake.install(patch)
            captured = run(ip, "%%gpumem\nfake_cuda.step(1, peak_extra=1 << 30, delta=512 << 20)")
            first_syncs = list(fake.synchronized)
            explicit = run(ip, "%%gpumem --device 0\nfake_cuda.step(0, peak_extra=0, delta=0)")
            too_far = run(ip, "%%gpumem --device 7\npass")
            fake.initialized, fake.synchronized = False, []  # CUDA first used by the cell, on device 1 only
            fake.reserved = {0: 0, 1: 0}
            first_use = run(ip, "%%gpumem\nfake_cuda.initialized = True\nfake_cuda.step(1, 1 << 20, 1 << 20)")
    finally:
        sampler.start()
        del ip.user_ns["fake_cuda"]

    text = captured.outputs[-1].data["text/plain"]
    assert "cuda:1   peak +1.00 GiB, delta +512.00 MiB, reserved 3.00 GiB" in text
    assert "cuda:0" not in text and "host RSS delta" in text and "host memory only" not in text
    assert first_syncs == [1, 1]  # never device 0: synchronising an unused device would create a CUDA context there
    assert "cuda:0   peak +0.00 MiB, delta +0.00 MiB" in explicit.outputs[-1].data["text/plain"]
    text = first_use.outputs[-1].data["text/plain"]
    assert "cuda:1   peak " in text and "cuda:0" not in text and fake.synchronized == []
    assert too_far.stderr.strip() == (
        "UsageError: gpumem cell: argument --device: got '7', but this kernel sees 2 CUDA devices"
    )
