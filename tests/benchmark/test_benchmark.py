"""The batch x workers x AMP benchmark on the CPU with real DataLoaders (workers 0 and 2) under `simulate`."""

from __future__ import annotations

import json
import random
from importlib import resources

import jsonschema
import psutil
import pytest
import yaml

torch = pytest.importorskip("torch")

from gpumem_kernel.benchmark.config import BenchmarkConfig, load_config  # noqa: E402
from gpumem_kernel.benchmark.report import MIME, benchmark_bundle, pick_yaml, recommended_yaml  # noqa: E402
from gpumem_kernel.render.text import cut  # noqa: E402
from gpumem_kernel.benchmark.sweep import run_benchmark  # noqa: E402
from user_state import assert_same, state_of  # noqa: E402

GiB = 1 << 30
CAP = 1_200_000  # the CNN's batch 32 (fp32) / 64 (bf16 autocast) do not fit
SEED_CONFIG = """\
benchmark:
  # the benchmark guide's configs/checking_gpu_optimization.yaml, made small
  batch_sizes: [4, 8, 16, 32, 64]
  num_workers_options: [0, 2]
  steps_per_test: 2
  warmup_steps: 1
  test_mixed_precision: true
  test_pin_memory: true
data:
  batch_size: 4096
training:
  use_amp: true
"""


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def cnn() -> "torch.nn.Module":
    torch.manual_seed(2)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Dropout(0.1),
        torch.nn.Linear(8 * 16 * 16, 10),
    )


def dataset():
    generator = torch.Generator().manual_seed(3)
    return torch.utils.data.TensorDataset(
        torch.randn(256, 3, 16, 16, generator=generator), torch.randint(0, 10, (256,), generator=generator)
    )


def children() -> set:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def recompute_picks(rows, limit, target):
    ok = [(i, r) for i, r in enumerate(rows) if r["status"] == "ok"]
    highest = max(ok, key=lambda x: x[1]["samples_per_s"])[0]
    efficient = max(ok, key=lambda x: x[1]["samples_per_s"] / (x[1]["peak_bytes"] / GiB))[0]
    within = [(i, r) for i, r in ok if r["peak_bytes"] <= target * limit]
    recommended = max(within, key=lambda x: x[1]["samples_per_s"])[0] if within else None
    return highest, efficient, recommended


def test_sweep_stops_at_the_oom_and_picks_agree_with_rows(tmp_path):
    config = tmp_path / "checking_gpu_optimization.yaml"
    config.write_text(SEED_CONFIG)
    model = cnn()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(2, 3, 16, 16)).sum().backward()
    optimizer.step()
    random.seed(7)
    before_children = children()
    before = state_of(model, optimizer)
    seen = []
    result = run_benchmark(
        model, dataset=dataset(), config=str(config), simulate=CAP, optimizer=optimizer, on_row=seen.append
    )
    payload = result.to_payload()
    rows = payload["rows"]
    assert seen == result.rows  # every row was reported as it finished, in order
    assert result.engine == "simulated" and payload["limit_bytes"] == CAP
    # the sweep: for every workers x AMP combination, batches ascend and stop at the first OOM
    combos = {}
    for r in rows:
        combos.setdefault((r["num_workers"], r["amp"]), []).append(r)
    assert set(combos) == {(0, False), (2, False), (0, True), (2, True)}  # pin_memory needs a GPU: off only
    ooms = 0
    for combo in combos.values():
        sizes = [r["batch_size"] for r in combo]
        assert sizes == [4, 8, 16, 32, 64][: len(sizes)]
        assert all(r["status"] == "ok" for r in combo[:-1])
        if combo[-1]["status"] == "oom":
            ooms += 1
            assert combo[-1]["peak_bytes"] is None and combo[-1]["samples_per_s"] is None
            assert "simulated" in combo[-1]["error"]
    assert ooms == 4 and len(rows) < 20  # every combination hit the cap before batch 64 ran
    for r in rows:
        if r["status"] == "ok":
            assert r["peak_bytes"] <= CAP and r["gpu_util"] is None
            parts = r["io_ms"] + r["h2d_ms"] + r["forward_ms"] + r["backward_ms"] + r["optimizer_ms"]
            assert parts <= r["total_ms"] * 1.05
            # samples/s is kept to 2 decimals: on a loaded machine a slow step gives a few samples/s, where that
            # rounding alone is more than 0.1 %
            assert r["samples_per_s"] == pytest.approx(1000 * r["batch_size"] / r["total_ms"], rel=1e-3, abs=0.006)
    # the three picks, recomputed from the rows
    highest, efficient, recommended = recompute_picks(rows, CAP, 0.8)
    assert payload["picks"]["highest_throughput"]["row"] == highest
    assert payload["picks"]["best_efficiency"]["row"] == efficient
    assert (payload["picks"]["recommended"] or {}).get("row") == recommended
    assert any("ran out of memory (simulated)" in d for d in payload["diagnostics"])
    # no worker left, the user's objects untouched
    assert children() <= before_children and payload["workers"] == {"leftover": [], "terminated": []}
    assert_same(before, state_of(model, optimizer))
    assert not torch.cuda.is_initialized()
    # the outputs
    schema = json.loads(resources.files("gpumem_kernel").joinpath("wire/schemas/benchmark.schema.json").read_text())
    bundle = benchmark_bundle(result)
    jsonschema.Draft202012Validator(schema).validate(bundle[MIME])
    text = bundle["text/plain"]
    for heading in (
        "BENCHMARK SUMMARY",
        "OPTIMAL CONFIGURATION",
        "Highest Throughput:",
        "Best Efficiency",
        "Recommended for Training:",
        "OOM (sim)",
        "simulated",
    ):
        assert heading in text
    pick = payload["picks"]["recommended"]
    training = {"use_amp": pick["amp"], **({"amp_dtype": payload["amp_dtype"]} if pick["amp"] else {})}
    expected = {
        "data": {"batch_size": pick["batch_size"], "num_workers": pick["num_workers"], "pin_memory": False},
        "training": training,  # the AMP dtype too: on the CPU it is bfloat16, not a GPU's float16
    }
    # one YAML: the payload's (what "Copy as YAML" copies), printed by the text output, written by to_yaml
    assert payload["config_yaml"] == result.to_yaml() and yaml.safe_load(payload["config_yaml"]) == expected
    assert "\n".join(f"  {line}" for line in payload["config_yaml"].splitlines()) in text


def test_without_a_recommended_pick_there_is_no_yaml_to_copy():
    payload = {"picks": {"recommended": None}}
    assert pick_yaml(payload) is None  # the payload's config_yaml is null: the browser's button says why
    assert recommended_yaml(payload).startswith("# gpumem benchmark: no recommended configuration")


def test_ctrl_c_returns_the_partial_table_and_leaves_no_worker():
    model = cnn()
    before = state_of(model, None)
    before_children = children()
    calls = []

    def forward(m, batch):
        calls.append(1)
        if len(calls) == 8:  # inside the third configuration, whose loader has 2 workers running
            raise KeyboardInterrupt
        return m(batch[0])

    result = run_benchmark(
        model,
        synthetic_shape="3x16x16",
        num_classes=10,
        batch_sizes=[4, 8, 16],
        num_workers=[2],
        steps=2,
        warmup_steps=1,
        amp=False,
        simulate=CAP,
        forward=forward,
    )
    assert result.interrupted and len(result.rows) == 2
    assert "interrupted" in str(result).lower()
    assert children() <= before_children
    assert_same(before, state_of(model, None))


def test_cpu_without_cap_tracks_tensor_bytes_and_recommends_fastest():
    result = run_benchmark(
        cnn(),
        synthetic_shape=(3, 16, 16),
        num_classes=10,
        batch_sizes="4,8",
        num_workers=[0],
        steps=1,
        warmup_steps=0,
        amp=False,
        device="cpu",
    )
    assert result.engine == "cpu" and result.limit_bytes is None
    assert all(r.peak_bytes and r.status == "ok" for r in result.rows)
    assert result.picks["recommended"].row == result.picks["highest_throughput"].row


@pytest.mark.parametrize(
    "text, message",
    [
        ("benchmark:\n  batch_size: [8]\n", "benchmark.batch_size: unknown key"),
        ("benchmark:\n  batch_sizes: abc\n", "benchmark.batch_sizes: expected a list of positive integers, got 'abc'"),
        ("benchmark:\n  num_workers_options: [0, -2]\n", "benchmark.num_workers_options: expected a list of integers"),
        ("benchmark:\n  steps_per_test: 0\n", "benchmark.steps_per_test: expected a positive integer, got 0"),
        ("benchmark:\n  test_mixed_precision: maybe\n", "benchmark.test_mixed_precision: expected true or false"),
        ("benchmark:\n  memory_target: 1.5\n", "benchmark.memory_target: expected a fraction in (0, 1], got 1.5"),
        ("data:\n  batch_size: 8\n", "benchmark: missing section"),
        ("benchmark: [\n", "not valid YAML"),
    ],
)
def test_bad_config_is_one_line_naming_it(tmp_path, text, message):
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    with pytest.raises(ValueError) as caught:
        load_config(str(path))
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_config_file_problems_are_one_line_naming_the_file(tmp_path, monkeypatch):
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("benchmark:\n  # caf\xe9\n  steps_per_test: 3\n".encode("latin-1"))
    locked = tmp_path / "locked.yaml"
    locked.write_text("benchmark:\n  steps_per_test: 3\n")
    real_open = open

    def refusing_open(file, *args, **kwargs):  # root reads a chmod 000 file anyway: refuse it here
        if str(file) == str(locked):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", refusing_open)
    for path, problem in (
        (tmp_path, "is a directory"),
        ("/proc/self/mem", "cannot read it"),
        (latin, "not UTF-8 text"),
        (locked, "permission denied"),
        ("/dev/zero", "larger than 1 MiB"),
    ):
        with pytest.raises(ValueError) as caught:
            load_config(str(path))
        message = str(caught.value)
        # a long path is cut as every echoed value is (a deeper temporary folder, e.g. under pytest-xdist)
        assert message.startswith(f"{cut(str(path))}: ") and problem in message, message
        assert "\n" not in message and len(message) < 300


def test_config_defaults_and_overrides(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text(SEED_CONFIG)
    config = load_config(str(path))
    assert config.batch_sizes == [4, 8, 16, 32, 64] and config.memory_target == 0.8
    assert load_config(None) == BenchmarkConfig()
    assert BenchmarkConfig().batch_sizes[-1] == 8192  # the benchmark guide's list
    with pytest.raises(ValueError, match="^batch_sizes: expected a list of positive integers, got 'x'$"):
        run_benchmark(cnn(), synthetic_shape="3x16x16", batch_sizes="x", simulate=CAP)


def test_swapping_is_suspected_only_with_all_three_signs():
    """Swapping: no OOM, but per-sample time collapses at the memory limit while utilisation drops (GPU)."""
    from gpumem_kernel.benchmark.diagnostics import diagnose
    from gpumem_kernel.benchmark.picks import pick_configurations
    from gpumem_kernel.benchmark.result import BenchmarkRow
    from gpumem_kernel.benchmark.sweep import _swapping

    total = 16 * GiB
    fast = BenchmarkRow(
        16,
        4,
        True,
        True,
        "ok",
        total_ms=100.0,
        samples_per_s=160.0,
        gpu_util=92.0,
        peak_bytes=11 * GiB,
        peak_reserved_bytes=11 * GiB,
        efficiency=14.5,
    )
    slow = BenchmarkRow(
        32,
        4,
        True,
        True,
        "ok",
        total_ms=2000.0,
        samples_per_s=16.0,
        gpu_util=35.0,
        peak_bytes=int(15.9 * GiB),
        peak_reserved_bytes=int(15.9 * GiB),
        device_used_bytes=16 * GiB,
    )
    assert _swapping(fast, slow, total)
    assert not _swapping(fast, BenchmarkRow(**{**slow.__dict__, "gpu_util": 95.0}), total)  # still busy
    assert not _swapping(fast, BenchmarkRow(**{**slow.__dict__, "total_ms": 210.0}), total)  # not slower
    assert not _swapping(
        fast, BenchmarkRow(**{**slow.__dict__, "peak_reserved_bytes": 8 * GiB, "device_used_bytes": 9 * GiB}), total
    )  # memory not at the limit
    assert not _swapping(fast, BenchmarkRow(**{**slow.__dict__, "gpu_util": None}), None)  # no GPU: never
    slow.status = "swapping-suspected"
    picks = pick_configurations([fast, slow], total, 0.8)
    assert picks["recommended"].batch_size == 16 and picks["highest_throughput"].batch_size == 16
    assert any("swapping" in line for line in diagnose([fast, slow], picks, "cuda", total))
