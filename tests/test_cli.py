"""`python -m gpumem_kernel benchmark|autobatch` through `cli.main(argv)`: seed 004's session on a tiny model."""

from __future__ import annotations

import json
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
    """A project folder with a model module and seed 004's config, as the working directory."""
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
    # seed 004, "특정 배치 크기만 테스트" + "Workers 수도 함께 테스트", on a tiny model without a GPU
    code, out, err = run(capsys, "benchmark", "--config", "checking_gpu_optimization.yaml",
                         "--model", "tiny_models:build", "--synthetic", "3x16x16", "--classes", "10",
                         "--batch-sizes", "4", "8", "16", "32", "64", "--num-workers", "0,2", "--steps", "2",
                         "--warmup", "1", "--simulate", "1MiB", "--save-yaml", "recommended.yaml")
    assert code == 0, err
    for heading in ("📋 BENCHMARK SUMMARY", " Batch Workers", "I/O(ms)", "Samples/s", "🏆 OPTIMAL CONFIGURATION",
                    "🚀 Highest Throughput:", "⚡ Best Efficiency", "💡 Recommended for Training:", "OOM (sim)",
                    "simulated"):
        assert heading in out
    assert "batch" in err and "samples/s" in err  # rows appeared on stderr as they finished
    saved = yaml.safe_load((session / "recommended.yaml").read_text())
    assert set(saved) == {"data", "training"} and saved["data"]["pin_memory"] is False
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before
    code, out, _ = run(capsys, "benchmark", "--config", "checking_gpu_optimization.yaml", "--model",
                       "tiny_models:build", "--synthetic", "3x16x16", "--classes", "10", "--batch-sizes", "8,16",
                       "--num-workers", "0", "--steps", "1", "--warmup", "0", "--simulate", "1MiB", "--format",
                       "json", "--quiet")
    assert code == 0
    schema = json.loads(resources.files("gpumem_kernel").joinpath("schemas/benchmark.schema.json").read_text())
    payload = json.loads(out)
    jsonschema.Draft202012Validator(schema).validate(payload)
    assert [r["batch_size"] for r in payload["rows"]][:2] == [8, 16]


def test_autobatch_command(session, capsys):
    code, out, err = run(capsys, "autobatch", "--model", "tiny_models:mlp", "--input", "32", "--simulate",
                         "150000", "--classes", "10")
    assert code == 0, err
    assert "Maximum:" in out and "simulated" in out and "trial batch" in err
    code, out, _ = run(capsys, "autobatch", "--model", "tiny_models:mlp", "--simulate", "150000", "--format",
                       "json", "--quiet", "--start-batch", "16")
    payload = json.loads(out)
    schema = json.loads(resources.files("gpumem_kernel").joinpath("schemas/autobatch.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(payload)
    assert payload["engine"] == "simulated" and payload["maximum"] > 16


@pytest.mark.parametrize("argv, message", [
    (["benchmark", "--model", "tiny_models:build", "--synthetic", "3x16x16", "--batch-sizes", "abc"],
     "--batch-sizes: expected a list of positive integers, got 'abc'"),
    (["benchmark", "--model", "tiny_models", "--synthetic", "3x16x16"], "expected module:factory"),
    (["benchmark", "--model", "tiny_models:missing", "--synthetic", "3x16x16"], "has no attribute missing"),
    (["benchmark", "--model", "no_such_module:f", "--synthetic", "3x16x16"], "cannot import no_such_module"),
    (["benchmark", "--model", "tiny_models:not_a_model", "--synthetic", "3x16x16"], "not a torch.nn.Module"),
    (["benchmark", "--model", "tiny_models:build"], "one of the arguments --synthetic --dataset is required"),
    (["benchmark", "--model", "tiny_models:build", "--synthetic", "3x16x16", "--config", "bad.yaml"],
     "benchmark.batch_size: unknown key"),
    (["autobatch", "--model", "tiny_models:mlp"], "simulate='6GiB'"),
    (["autobatch", "--model", "tiny_models:mlp", "--simulate", "huge"], "cannot read memory size 'huge'"),
    (["nonsense"], "invalid choice: 'nonsense'"),
])
def test_errors_are_one_line_exit_2(session, capsys, argv, message):
    (session / "bad.yaml").write_text("benchmark:\n  batch_size: [8]\n")
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1, err


def test_subcommands_register(capsys):
    seen = []
    command = cli.Command("hello", "say hello", lambda p: p.add_argument("--name", default="x"),
                          lambda args: seen.append(args.name) or 0)
    cli.register(command)
    try:
        assert cli.main(["hello", "--name", "gpu"]) == 0 and seen == ["gpu"]
        assert "hello" in cli.build_parser().format_help()
    finally:
        del cli.COMMANDS["hello"]
