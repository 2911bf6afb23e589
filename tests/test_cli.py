"""`python -m gpumem_kernel benchmark|autobatch` through `cli.main(argv)`: the benchmark guide's session, tiny model."""

from __future__ import annotations

import json
import shlex
from importlib import resources

import jsonschema
import psutil
import pytest
import yaml

torch = pytest.importorskip("torch")

from gpumem_kernel import cli  # noqa: E402

MODELS = """\
import torch


def build():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                               torch.nn.Linear(8 * 16 * 16, 10))


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


def wide():  # 101 M parameters: 1.6 GB of weights, gradients and AdamW state, over a 2 GB GTX 1050's memory
    torch.manual_seed(0)
    return torch.nn.Sequential(*(torch.nn.Linear(4096, 4096) for _ in range(6)))


not_a_model = 3
"""
CONFIG = """\
benchmark:
  batch_sizes: [1, 2, 4, 8, 16, 32, 64, 128]
  num_workers_options: [0, 2, 4, 8, 12, 16]
  steps_per_test: 10
  test_mixed_precision: true
  test_pin_memory: true
"""


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def session(tmp_path, monkeypatch):
    """A project folder with a model module and the benchmark guide's config, as the working directory."""
    (tmp_path / "tiny_models.py").write_text(MODELS)
    (tmp_path / "checking_gpu_optimization.yaml").write_text(CONFIG)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_seed_004_session_with_simulate(session, capsys):
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    # the benchmark guide, "특정 배치 크기만 테스트" + "Workers 수도 함께 테스트", on a tiny model without a GPU
    code, out, err = run(
        capsys,
        "benchmark",
        "--config",
        "checking_gpu_optimization.yaml",
        "--model",
        "tiny_models:build",
        "--synthetic",
        "3x16x16",
        "--classes",
        "10",
        "--batch-sizes",
        "4",
        "8",
        "16",
        "32",
        "64",
        "--num-workers",
        "0,2",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--simulate",
        "1MiB",
        "--save-yaml",
        "recommended.yaml",
    )
    assert code == 0, err
    for heading in (
        "BENCHMARK SUMMARY",
        " Batch Workers",
        "I/O(ms)",
        "Samples/s",
        "OPTIMAL CONFIGURATION",
        "Highest Throughput:",
        "Best Efficiency",
        "Recommended for Training:",
        "OOM (sim)",
        "simulated",
    ):
        assert heading in out
    assert "batch" in err and "samples/s" in err  # rows appeared on stderr as they finished
    saved = yaml.safe_load((session / "recommended.yaml").read_text())
    assert set(saved) == {"data", "training"} and saved["data"]["pin_memory"] is False
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before
    code, out, _ = run(
        capsys,
        "benchmark",
        "--config",
        "checking_gpu_optimization.yaml",
        "--model",
        "tiny_models:build",
        "--synthetic",
        "3x16x16",
        "--classes",
        "10",
        "--batch-sizes",
        "8,16",
        "--num-workers",
        "0",
        "--steps",
        "1",
        "--warmup",
        "0",
        "--simulate",
        "1MiB",
        "--format",
        "json",
        "--quiet",
    )
    assert code == 0
    schema = json.loads(resources.files("gpumem_kernel").joinpath("wire/schemas/benchmark.schema.json").read_text())
    payload = json.loads(out)
    jsonschema.Draft202012Validator(schema).validate(payload)
    assert [r["batch_size"] for r in payload["rows"]][:2] == [8, 16]


def test_autobatch_command(session, capsys):
    code, out, err = run(
        capsys, "autobatch", "--model", "tiny_models:mlp", "--input", "32", "--simulate", "150000", "--classes", "10"
    )
    assert code == 0, err
    assert "Maximum:" in out and "simulated" in out and "trial batch" in err
    code, out, _ = run(
        capsys,
        "autobatch",
        "--model",
        "tiny_models:mlp",
        "--simulate",
        "150000",
        "--format",
        "json",
        "--quiet",
        "--start-batch",
        "16",
    )
    payload = json.loads(out)
    schema = json.loads(resources.files("gpumem_kernel").joinpath("wire/schemas/autobatch.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(payload)
    assert payload["engine"] == "simulated" and payload["maximum"] > 16


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["benchmark", "--model", "tiny_models:build", "--synthetic", "3x16x16", "--batch-sizes", "abc"],
            "--batch-sizes: expected a list of positive integers, got 'abc'",
        ),
        (["benchmark", "--model", "tiny_models", "--synthetic", "3x16x16"], "expected module:factory"),
        (["benchmark", "--model", "tiny_models:missing", "--synthetic", "3x16x16"], "has no attribute missing"),
        (["benchmark", "--model", "no_such_module:f", "--synthetic", "3x16x16"], "cannot import no_such_module"),
        (["benchmark", "--model", "tiny_models:not_a_model", "--synthetic", "3x16x16"], "not a torch.nn.Module"),
        (["benchmark", "--model", "tiny_models:build"], "one of the arguments --synthetic --dataset is required"),
        (
            ["benchmark", "--model", "tiny_models:build", "--synthetic", "3x16x16", "--config", "bad.yaml"],
            "benchmark.batch_size: unknown key",
        ),
        (["autobatch", "--model", "tiny_models:mlp"], "simulate='6GiB'"),
        (["autobatch", "--model", "tiny_models:mlp", "--simulate", "huge"], "cannot read memory size 'huge'"),
        (["nonsense"], "invalid choice: 'nonsense'"),
    ],
)
def test_errors_are_one_line_exit_2(session, capsys, argv, message):
    (session / "bad.yaml").write_text("benchmark:\n  batch_size: [8]\n")
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1, err


BIG = "99999999999999999999"


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["analyze", "--model", "tiny_models:mlp", "--device", "tpu"],
            "argument --device: expected cpu, cuda, cuda:N or N, got 'tpu'",
        ),
        (["analyze", "--model", "tiny_models:mlp", "--device", "cuda:3"], "got 'cuda:3', but this kernel sees no CUDA"),
        (
            ["autobatch", "--model", "tiny_models:mlp", "--simulate", "1MiB", "--device", "tpu"],
            "argument --device: expected cpu, auto, cuda, cuda:N or N, got 'tpu'",
        ),
        (
            ["benchmark", "--model", "tiny_models:build", "--synthetic", "3x16x16", "--device", "3"],
            "got '3', but this kernel sees no CUDA device",
        ),
        (
            ["analyze", "--model", "tiny_models:mlp", "--batch", BIG],
            f"argument -b/--batch: expected an integer from 1 to 2147483647, got '{BIG}'",
        ),
        (
            ["autobatch", "--model", "tiny_models:mlp", "--simulate", "1MiB", "--start-batch", BIG],
            "argument --start-batch: expected an integer from 1 to 2147483647",
        ),
        (
            ["autobatch", "--model", "tiny_models:mlp", "--simulate", "1MiB", "--max-batch", BIG],
            "argument --max-batch: expected an integer from 1 to 2147483647",
        ),
        (["benchmark", "--model", "tiny_models:build", "--synthetic", "3x16x16", "--config", "."], ".: is a directory"),
        (
            ["benchmark", "--model", "tiny_models:build", "--synthetic", "3x16x16", "--config", "/proc/self/mem"],
            "/proc/self/mem: cannot read it",
        ),
    ],
)
def test_device_batch_and_config_are_checked_as_in_the_magics(session, capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1, err
    assert "overflow" not in err.lower() and not torch.cuda.is_initialized()


@pytest.mark.parametrize(
    "argv",
    [
        ["analyze", "--model", "x" * 20_000],
        ["analyze", "--model", "tiny_models:mlp", "--target", "x" * 20_000],
        ["analyze", "--model", "tiny_models:mlp", "--amp", "x" * 20_000],
        ["info", "--format", "RTX " * 5_000],
        ["benchmark", "--model", "tiny_models:build", "--synthetic", "3x16x16", "--config", "x" * 20_000],
    ],
    ids=["model", "target", "amp", "format", "config"],
)
def test_echoed_values_are_cut(session, capsys, argv):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert len(err) < 500 and "…" in err, err[:500]


def test_subcommands_register(capsys):
    seen = []
    command = cli.Command(
        "hello", "say hello", lambda p: p.add_argument("--name", default="x"), lambda args: seen.append(args.name) or 0
    )
    cli.register(command)
    try:
        assert cli.main(["hello", "--name", "gpu"]) == 0 and seen == ["gpu"]
        assert "hello" in cli.build_parser().format_help()
    finally:
        del cli.COMMANDS["hello"]


# --- info and analyze -----------------------------------------------------------------------------------------


def test_module_entry_point_info_without_a_gpu(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(cli.__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(
        [sys.executable, "-m", "gpumem_kernel", "info"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "No NVIDIA GPU visible: " in done.stdout
    for label in ("Host", "Total Memory:", "Available:", "This process:"):
        assert label in done.stdout


def test_info_json_is_a_valid_sample(capsys):
    from gpumem_kernel.wire.protocol import validate

    code, out, _ = run(capsys, "info", "--format", "json")
    assert code == 0
    validate(json.loads(out))
    assert not torch.cuda.is_initialized()  # NVML only


def test_info_lists_each_gpu(make_prober):
    from fake_nvml import FakeGpu, GiB

    prober = make_prober(
        [
            FakeGpu("NVIDIA GeForce RTX 4080 SUPER", "GPU-1", total=16 * GiB, used=4 * GiB),
            FakeGpu("NVIDIA A100-SXM4-80GB", "GPU-2", total=80 * GiB, used=0, cc=(8, 0)),
        ]
    )
    text = cli.info_text(prober().to_dict())

    assert "2 GPUs visible" in text and "No NVIDIA GPU" not in text
    assert "GPU 0: NVIDIA GeForce RTX 4080 SUPER" in text and "GPU 1: NVIDIA A100-SXM4-80GB" in text
    assert "Total Memory:     16.00 GiB" in text and "Used:             4.00 GiB (25.0%)" in text
    assert "Compute:          8.9" in text and "Compute:          8.0" in text
    assert "Multiprocessors:  n/a (known once CUDA is initialised)" in text and "Host" in text


def test_analyze_command(session, capsys):
    code, out, err = run(
        capsys,
        "analyze",
        "--model",
        "tiny_models:mlp",
        "--batch",
        "32",
        "--target",
        "RTX 4080 Super",
        "--amp",
        "bf16",
        "--optimizer",
        "adamw",
    )
    assert code == 0, err
    assert "💾 Memory Analysis - planning for RTX 4080 Super" in out and "🎯 Batch Size Recommendations:" in out
    assert "Mixed Precision:  Enabled (bfloat16)" in out
    code, out, _ = run(
        capsys,
        "analyze",
        "--model",
        "tiny_models:build",
        "--input",
        "3x16x16",
        "--memory",
        "4GiB",
        "--classes",
        "10",
        "--format",
        "json",
    )
    payload = json.loads(out)
    schema = json.loads(resources.files("gpumem_kernel").joinpath("wire/schemas/analysis.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(payload)
    assert payload["engine"] == "traced" and payload["recommendations"]["maximum"]
    assert payload["settings"]["input"].startswith("(3, 16, 16)")


def analyze_json(capsys, *options):
    code, out, err = run(capsys, "analyze", "--model", "tiny_models:mlp", "--format", "json", *options)
    assert code == 0, err
    return json.loads(out)


def test_analyze_plans_for_a_target_within_the_memory_given(session, capsys):
    """A MIG slice or a share of an H100: its compute capability (context, 32 MiB cuBLAS workspace) in 20 GiB."""
    both = analyze_json(capsys, "--target", "H100", "--memory", "20GiB")
    card = analyze_json(capsys, "--target", "H100")
    alone = analyze_json(capsys, "--memory", "20GiB")
    assert both["device"]["name"] == "H100 80GB with 20.0 GiB" and both["device"]["total_bytes"] == 20 << 30
    assert both["device"]["compute_capability"] == card["device"]["compute_capability"] == "9.0"
    assert both["context_bytes"] == card["context_bytes"] and both["workspace_bytes"] == card["workspace_bytes"]
    assert both["device"]["limit_bytes"] < card["device"]["limit_bytes"]
    assert any("planned with compute capability 9.0" in note for note in both["notes"])
    # --memory alone: no generation assumed, and the report says so
    assert alone["device"]["compute_capability"] is None and alone["workspace_bytes"] < both["workspace_bytes"]
    assert any(note.startswith("--memory without --target: no GPU generation assumed") for note in alone["notes"])
    code, out, err = run(capsys, "analyze", "--model", "tiny_models:mlp", "--target", "Tesla V100-SXM2-16GB")
    assert code == 0, err
    assert "planning for V100 16GB" in out and "Total:            16.00 GiB" in out


def test_analyze_and_autobatch_round_as_asked(session, capsys):
    code, out, err = run(
        capsys, "analyze", "--model", "tiny_models:mlp", "--memory", "2GiB", "--round", "8", "--format", "json"
    )
    assert code == 0, err
    payload = json.loads(out)
    recs = payload["recommendations"]
    assert recs["rounding"] == "multiple of 8" and recs["recommended"] % 8 == 0 and recs["safe"] % 8 == 0
    assert (payload["settings"]["round"], payload["settings"]["round_source"]) == ("8", "option")
    code, out, err = run(
        capsys, "autobatch", "--model", "tiny_models:mlp", "--simulate", "150000", "--round", "none", "--quiet"
    )
    assert code == 0, err
    assert "Rounding:         none (--round)" in out and "rounded down to a whole batch" in out
    code, out, err = run(capsys, "analyze", "--model", "tiny_models:mlp", "--round", "eight")
    assert code == 2 and "argument --round: unknown rounding 'eight'" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "argv, message",
    [
        (["analyze", "--model", "tiny_models:mlp", "--target", "RTX 9999"], "unknown GPU 'RTX 9999'"),
        (["analyze", "--model", "tiny_models:mlp", "--memory", "lots"], "cannot read memory size 'lots'"),
        (["analyze", "--model", "tiny_models:mlp", "--input", "3xq"], "bad input shape '3xq'"),
        (["analyze", "--model", "tiny_models:mlp", "--input", "3x3"], "training step failed while tracing"),
        (["analyze", "--model", "tiny_models:not_a_model"], "not a torch.nn.Module"),
        (["analyze", "--model", "tiny_models:mlp", "--target", "V100"], "ambiguous GPU 'V100': say 'V100 16GB'"),
        (["info", "--format", "yaml"], "invalid choice: 'yaml'"),
    ],
)
def test_analyze_and_info_errors_are_one_line(session, capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1, err


def test_analyze_takes_the_magics_sequence_options(capsys, monkeypatch):
    """--seq, --search seq, --seq-batches and --seq-multiple: the magic's own definitions, passed on to the analysis."""
    from gpumem_kernel.analysis.pipeline import model_source

    seen = {}

    def analyze_named(source, request, **named):
        seen.update(request.options(), source=source)
        return "the report"

    monkeypatch.setattr(model_source, "analyze_named", analyze_named)
    argv = ["--seq", "4096", "--search", "seq", "--seq-batches", "1,4", "--seq-multiple", "128"]
    code, out, err = run(capsys, "analyze", "--model", "hf:org/name", *argv)
    assert (code, out, err) == (0, "the report\n", "")
    assert (seen["seq"], seen["search"], seen["seq_batches"], seen["seq_multiple"]) == (4096, "seq", "1,4", 128)
    code, _, err = run(capsys, "analyze", "--model", "hf:org/name", "--search", "length")
    assert code == 2 and "invalid choice: 'length'" in err and len(err.splitlines()) == 1


OVER = ["analyze", "--model", "tiny_models:wide", "-b", "8", "--input", "4096", "--target", "GTX 1050"]


def test_analyze_advise_says_what_makes_it_fit_and_the_recommended_command_runs_in_the_terminal(session, capsys):
    """--advise, as the magic has it: the rows in the JSON payload and the text report; each row's command is this
    terminal command with the lever's flags (no --advise, no --format); the recommended one, run, fits."""
    code, out, err = run(capsys, *OVER, "--advise", "--format", "json")
    assert code == 0, err
    payload = json.loads(out)
    schema = json.loads(resources.files("gpumem_kernel").joinpath("wire/schemas/analysis.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(payload)
    advice = payload["advice"]
    assert payload["recommendations"]["current"]["status"] == advice["status"] == "will-not-fit"
    for row in advice["rows"]:
        assert row["command"].startswith("python -m gpumem_kernel analyze --model tiny_models:wide -b 8 ")
        assert row["command"].endswith(row["flags"]) and "--advise" not in row["command"]
        assert "--format" not in row["command"]
    chosen = advice["rows"][advice["recommended"]]
    assert chosen["fits"]

    words = shlex.split(chosen["command"])
    assert words[:3] == ["python", "-m", "gpumem_kernel"]
    code, out, err = run(capsys, *words[3:], "--format", "json")
    assert code == 0, err
    followed = json.loads(out)
    assert followed["peak_bytes"] == chosen["peak_bytes"] and "advice" not in followed
    assert followed["recommendations"]["current"]["status"] in ("fits", "tight")


def test_analyze_text_report_has_the_advice_table_and_advise_with_timeline_is_one_line(session, capsys):
    code, out, err = run(capsys, "analyze", "--model", "tiny_models:mlp", "--input", "32", "--target", "T4", "--advise")
    assert code == 0, err
    assert "What makes it fit on T4" in out and "Recommended: none: the step fits as analysed" in out
    code, out, err = run(capsys, "analyze", "--model", "tiny_models:mlp", "--advise", "--timeline")
    assert code == 2 and out == ""
    assert err == "python -m gpumem_kernel: error: --advise and --timeline: one at a time\n"
