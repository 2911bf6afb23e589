"""The GPU suite (benchmarks/gpu): its harness, and on a real GPU each CUDA promise.

Without a GPU: `python -m benchmarks.gpu --dry-run` runs every section's logic on the CPU with stand-ins;
these tests check what it writes and prints (never a GPU figure: every file says dry_run and device cpu).
With one (`pytest -m gpu`): the full suite runs once (about 9 minutes; or point $GPUMEM_GPU_RESULTS at the
folder of a finished run) and each promise is asserted against its target (the figures benchmarks/README.md promises).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Tuple
from xml.etree import ElementTree

import pytest

from benchmarks.gpu import summary
from conftest import gpu_present
from kernel_harness import REPO_ROOT

FILES = (*summary.FILES, "gpu_suite")
LIBRARY = {"ResNet-50", "ViT-B/16", "GPT-2", "BERT-base", "EfficientNet-B0"}
MiB = 1 << 20


def _suite(out: Path, *flags: str, timeout: float) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu", *flags, "--out", str(out)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _load(out: Path) -> Dict[str, Dict[str, Any]]:
    return {name: json.loads((out / f"{name}.json").read_text()) for name in FILES if (out / f"{name}.json").exists()}


# --- the dry run (CPU, part of the test command) --------------------------------------------------------------


@pytest.fixture(scope="module")
def dry(tmp_path_factory: pytest.TempPathFactory) -> Tuple[subprocess.CompletedProcess, Dict[str, Dict[str, Any]]]:
    out = tmp_path_factory.mktemp("gpu-dry-run")
    done = _suite(out, "--dry-run", timeout=400)
    return done, _load(out)


@pytest.mark.timeout(420)
def test_the_dry_run_finishes_and_prints_the_summary_table(dry) -> None:
    done, results = dry
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert set(results) == set(FILES)
    for check in (
        "traced vs max_memory_allocated",
        "no implicit CUDA context",
        "clear: Out-pinned tensor",
        "restart and free",
        "sampler overhead at 1 Hz",
        "per-rank DDP ws=1",
        "autobatch ",
        "recorded timeline, MLP",
        "OOM capture of a provoked OOM",
        "recording cost",
        "LitGPT LoRA phi-1_5 bf16 mb1",
    ):
        assert check in done.stdout
    assert "DRY RUN (CPU stand-ins, no GPU figure)" in done.stdout
    assert all(s["status"] == "ok" for s in results["gpu_suite"]["sections"].values())


def test_every_file_is_marked_as_a_cpu_dry_run_with_its_provenance(dry) -> None:
    _, results = dry
    for name, data in results.items():
        assert data["dry_run"] is True and data["device"] == "cpu", name
        assert data["date"] and data["command"].startswith("python3 -m benchmarks.gpu --dry-run")
        machine = data["machine"]
        assert {"python", "torch", "platform", "host"} <= set(machine) and ("driver" in machine or "nvml" in machine)
    statuses = {row["status"] for row in results["gpu_suite"]["summary"]}
    assert statuses <= {"dry run", "not measured"}  # nothing claims met / not met without a GPU


def test_the_estimator_rows_cover_both_precisions_optimizers_and_three_batch_sizes(dry) -> None:
    _, results = dry
    est = results["gpu_estimator"]
    mlp = [r for r in est["rows"] if r["arch"] == "MLP"]
    assert all(r["status"] == "ok" for r in mlp), mlp
    assert {(r["precision"], r["optimizer"]) for r in mlp} == {("fp32", "AdamW"), ("bf16", "SGD(momentum)")}
    assert len({r["batch"] for r in mlp}) == 3
    for row in mlp:
        assert set(row["error"]) == {"allocated", "reserved", "process"}
        assert row["error"]["process"] is None and row["truth"]["stand_in"]  # no NVML on the CPU
    assert est["summary"]["allocated"]["n"] >= 4
    expandable = [r for r in mlp if r["allocator"] == "expandable"]  # measured in a process of its own
    assert len(expandable) == 1 and expandable[0]["status"] == "ok"
    assert est["expandable_summary"]["reserved"]["n"] == 1 and "MLP|expandable" in est["context_measured_at_start"]
    for arch in LIBRARY:  # a library model either ran or is recorded as skipped, with the reason
        assert arch in est["skipped"] or any(r["arch"] == arch for r in est["rows"]), arch
        if arch in est["skipped"]:
            assert "not importable" in est["skipped"][arch]
    engine = next(e for e in est["measured_engine"] if e["arch"] == "MLP")
    assert engine["status"] == "ok" and engine["error"]["allocated"] is not None


def test_the_kernel_checks_run_against_a_real_kernel(dry) -> None:
    _, results = dry
    kernel = results["gpu_kernel"]
    context = kernel["no_implicit_context"]
    assert context["ok"] and context["torch_cuda_is_initialized"] is False and context["samples"] >= 1
    clear = kernel["clear"]
    assert clear["ok"] and clear["figure_checked"] == "rss"
    for part in ("traceback", "out"):
        assert clear[part]["tensor_alive_after"] is False
        assert clear[part]["reclaimed"]["rss"] >= 0.9 * clear["tensor_bytes"]
    assert clear["out"]["still_in_out"] is False
    restart = kernel["restart_and_free"]
    assert restart["ok"] and restart["new_pid"] != restart["old_pid"] and restart["old_process_alive"] is False


def test_sampler_distributed_and_autobatch_sections(dry) -> None:
    _, results = dry
    sampler = results["gpu_sampler"]
    assert sampler["ab"]["1 Hz"]["per_round"] and sampler["probe"]["probe"]["median_ms"] > 0
    rows = results["gpu_distributed"]["rows"]
    assert {(r["strategy"], r["status"]) for r in rows} == {("ddp", "ok"), ("fsdp", "ok")}
    assert results["gpu_distributed"]["not_checkable_on_one_gpu"]
    autobatch = results["gpu_autobatch"]
    tools = autobatch["rows"][0]["tools"]
    ours = tools["gpumem autobatch"]
    assert ours["status"] == "ok" and ours["trials"] >= 1 and ours["survival"]["oom"] is False
    for name, tool in tools.items():  # Lightning / accelerate ran, or say why not
        assert tool["status"] == "ok" or "not importable" in tool["reason"], name


def test_the_timeline_section_records_nothing_without_cuda_and_reads_the_stand_in(dry) -> None:
    _, results = dry
    timeline = results["gpu_timeline"]
    row = timeline["rows"][0]
    assert row["arch"] == "MLP" and row["predicted"]["peak"] > 0
    assert row["recorded"]["status"] == "not measured" and row["recorder_touched_cuda"] is False
    assert row["recorded"]["recorder_said"] == [
        "gpumem: nothing to record: CUDA is not in use in this kernel (the timeline never initialises it)"
    ]
    oom = timeline["oom_capture"]
    assert oom["status"] == "dry run" and oom["alive"]["allocated"] == 18 * MiB + 1024
    cost = timeline["recording_cost"]
    assert cost["recorded"] is False and cost["us_per_event_median"] is None and len(cost["per_round"]) == 2


def test_the_llm_section_traces_litgpt_rows_and_walks_what_the_forward_saves(dry) -> None:
    _, results = dry
    llm = results["gpu_llm"]
    assert {r["name"] for r in llm["rows"]} == {"phi-1_5 bf16 mb1", "Llama-2-7b-hf bf16 mb1"}
    for row in llm["rows"]:
        assert row["predicted"]["status"] == "ok" and row["predicted"]["allocated"] > 0, row
        assert row["truth"]["status"] == "not measured" and row["error"] is None and row["met"] is None
    cpu = llm["saved_tensors"]["cpu"]
    assert cpu["status"] == "ok" and cpu["saved_bytes"] == sum(cpu["by_node"].values()) > 0
    assert any("Silu" in name for name in cpu["by_node"]), cpu["by_node"]  # Llama's gated MLP keeps its input
    assert llm["saved_tensors"]["cuda"]["status"] == "not measured" and llm["saved_tensors"]["cuda_minus_cpu"] is None


def test_the_residue_section_names_the_sites_alive_at_the_peak_of_a_recorded_trace(dry) -> None:
    _, results = dry
    (row,) = results["gpu_residue"]["rows"]
    got = row["result"]
    assert got["status"] == "dry run" and got["peak_in_window"] > 0 and got["blocks_at_peak"] >= 1
    assert sum(s["bytes"] for s in got["sites"]) == got["peak_in_window"]  # every block alive there has a site
    sites = {s["site"]: s["bytes"] for s in got["sites"]}
    assert sites["linear.py:134 forward"] == 6 * MiB and sites["adam.py:164 _init_group"] == 4 * MiB, sites


def test_the_advice_section_runs_the_levers_a_real_step_can_take(dry) -> None:
    _, results = dry
    advice = results["gpu_advice"]
    assert advice["status"] == "ok" and advice["arch"] == "MLP", advice
    rows = {r["key"]: r for r in advice["rows"]}
    assert rows["analysed"]["truth"]["status"] == "ok" and rows["analysed"]["error"] is not None
    checked = [r for r in advice["rows"] if r["truth"]["status"] == "ok"]
    assert len(checked) >= 2 and rows["adafactor"] in checked, advice["rows"]  # the analysed step, another optimizer
    assert not {"lora", "qlora", "gpu"} & set(rows)  # levers one GPU cannot apply as they are: not traced
    for row in advice["rows"]:
        assert row["truth"]["status"] in ("ok", "not checked"), row
        assert row["met"] is None  # a dry run claims no target
        if row["truth"]["status"] == "not checked":
            assert row["truth"]["reason"], row


def test_make_readme_says_not_measured_for_a_dry_run(dry, tmp_path: Path) -> None:
    sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
    import make_readme

    _, results = dry
    assert "not measured (no GPU run yet)" in make_readme.row_gpu_suite(None)
    assert "not measured (no GPU run yet)" in make_readme.row_gpu_suite(results["gpu_suite"])


def test_the_pytest_step_collects_every_test_folder_and_skips_the_gpu_tests_here(tmp_path: Path) -> None:
    """`--pytest` is the GPU machine's second command; here it must collect everything and skip each gpu test."""
    if gpu_present():
        pytest.skip("on a GPU, --pytest runs the gpu tests for real (python3 -m benchmarks.gpu --pytest)")
    done = _suite(tmp_path, "--pytest", "--dry-run", timeout=300)
    log = (tmp_path / "gpu_pytest.log").read_text()
    assert done.returncode == 0, log[-3000:]
    assert "== pytest -m gpu" in log
    report = ElementTree.parse(tmp_path / "gpu_pytest.xml").getroot()
    suite = report if report.tag == "testsuite" else report.find("testsuite")
    assert suite is not None
    counts = {k: int(suite.get(k, "0")) for k in ("tests", "skipped", "errors", "failures")}
    assert counts["tests"] >= 18 and counts["errors"] == counts["failures"] == 0, counts
    assert counts["skipped"] == counts["tests"], counts  # every one is a gpu test, and this machine has none


# --- on a GPU: each promise, asserted ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpu(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Dict[str, Any]]:
    given = os.environ.get("GPUMEM_GPU_RESULTS")
    if given:
        return _load(Path(given))
    if not os.environ.get("GPUMEM_GPU_SUITE_INLINE"):  # ~9 minutes: past a 10-minute command beside the other tests
        pytest.skip(
            "no GPU suite results: run `python3 -m benchmarks.gpu --out DIR` first, then `--pytest --results DIR` "
            "(or set GPUMEM_GPU_SUITE_INLINE=1 to run the suite here)"
        )
    out = tmp_path_factory.mktemp("gpu-run")
    _suite(out, timeout=660)
    return _load(out)


def _real(results: Dict[str, Dict[str, Any]], name: str) -> Dict[str, Any]:
    assert name in results, f"no {name}.json"
    data = results[name]
    assert data["dry_run"] is False and data["device"] == "cuda"
    return data


@pytest.mark.gpu
@pytest.mark.timeout(720)
def test_gpu_traced_estimator_meets_the_targets(gpu) -> None:
    est = _real(gpu, "gpu_estimator")
    assert len(est["architectures"]) >= 10 and not est["skipped"]
    a, r = est["summary"]["allocated"], est["summary"]["reserved"]
    assert a["median_abs"] <= 0.03 and a["max_abs"] <= 0.05, a
    assert r["max_abs"] <= 0.10, r
    contexts = [c for c in est["context_measured_at_start"].values() if c is not None]
    assert all(abs(c - est["context_estimate"]) <= 160 * MiB for c in contexts), contexts  # CONTEXT_UNCERTAINTY


@pytest.mark.gpu
def test_gpu_expandable_segments_are_modelled_as_the_allocator_maps_them(gpu) -> None:
    s = _real(gpu, "gpu_estimator")["expandable_summary"]
    assert s["reserved"]["n"] >= 4 and s["reserved"]["max_abs"] <= 0.10, s  # ResNet-50, GPT-2 x fp32, bf16
    assert s["allocated"]["max_abs"] <= 0.05, s


@pytest.mark.gpu
def test_gpu_measured_engine_matches_the_allocator(gpu) -> None:
    est = _real(gpu, "gpu_estimator")
    engine = est["measured_engine_summary"]
    assert engine["allocated"]["n"] >= 10 and engine["allocated"]["max_abs"] <= 0.05, engine


@pytest.mark.gpu
def test_gpu_no_implicit_cuda_context(gpu) -> None:
    context = _real(gpu, "gpu_kernel")["no_implicit_context"]
    assert context["positive_control"]["listed_by_nvml"] is True  # NVML's list does see this machine's PIDs
    assert context["ok"] and context["nvml_listed_pids"] == [] and context["torch_cuda_is_initialized"] is False
    assert context["sampled_seconds"] >= 30 and context["samples"] >= 25


@pytest.mark.gpu
def test_gpu_clear_returns_pinned_tensors_to_the_driver(gpu) -> None:
    clear = _real(gpu, "gpu_kernel")["clear"]
    assert clear["ok"] and clear["figure_checked"] == "nvml_process"
    for part in ("traceback", "out"):
        assert clear[part]["reclaimed"]["nvml_process"] >= 0.9 * clear["tensor_bytes"], clear[part]
        assert clear[part]["reclaimed"]["memory_reserved"] >= 0.9 * clear["tensor_bytes"], clear[part]


@pytest.mark.gpu
def test_gpu_restart_and_free_sees_the_old_pid_leave(gpu) -> None:
    restart = _real(gpu, "gpu_kernel")["restart_and_free"]
    assert restart["ok"] and restart["nvml_before"] >= restart["tensor_bytes"]
    assert restart["nvml_released_s"] is not None and restart["nvml_released_s"] <= 30  # the panel's default wait
    assert restart["panel_lists_old_pid"] is False


@pytest.mark.gpu
def test_gpu_sampler_overhead_and_probe(gpu) -> None:
    sampler = _real(gpu, "gpu_sampler")
    assert sampler["probe"]["gpu_available"] is True
    assert sampler["attributed_1hz"]["overhead"] < 0.005, sampler["attributed_1hz"]


@pytest.mark.gpu
def test_gpu_autobatch_pick_survives_in_no_more_trials_than_lightning(gpu) -> None:
    autobatch = _real(gpu, "gpu_autobatch")
    checks = autobatch["targets"]["checks"]
    assert checks and all(c["ours_survived"] for c in checks), checks
    assert all(c["no_more_trials"] for c in checks), checks


@pytest.mark.gpu
def test_gpu_per_rank_estimates_at_world_size_one(gpu) -> None:
    rows = _real(gpu, "gpu_distributed")["rows"]
    assert rows and all(r["status"] == "ok" for r in rows), rows
    for row in rows:
        assert abs(row["error"]["allocated"]) <= 0.10, row  # the per-rank figures' target


@pytest.mark.gpu
def test_gpu_litgpt_lora_steps_match_the_analysis_of_the_same_step(gpu) -> None:
    llm = _real(gpu, "gpu_llm")
    rows = llm["rows"]
    assert len(rows) == 5 and all(r["truth"]["status"] == "ok" for r in rows), rows
    for row in rows:
        assert row["truth"]["allocated"] > row["truth"]["model_bytes"] > 0, row
        assert abs(row["error"]) <= 0.05, row  # the published rows' target
    assert llm["saved_tensors"]["cuda"]["status"] == "ok", llm["saved_tensors"]["cuda"]


@pytest.mark.gpu
def test_gpu_fit_advice_rows_match_real_steps_with_their_levers(gpu) -> None:
    advice = _real(gpu, "gpu_advice")
    checked = [r for r in advice["rows"] if r["truth"]["status"] == "ok"]
    assert len(checked) >= 3, advice["rows"]
    for row in checked:
        assert abs(row["error"]) <= 0.05, row


@pytest.mark.gpu
def test_gpu_recorded_timeline_peak_matches_the_allocator(gpu) -> None:
    timeline = _real(gpu, "gpu_timeline")
    done = [r for r in timeline["rows"] if (r.get("recorded") or {}).get("status") == "ok"]
    assert len(done) >= 2, timeline["rows"]
    for row in done:
        rec = row["recorded"]
        assert rec["ok"], row  # max_memory_allocated * (1 - slack) <= recorded peak <= max_memory_allocated
        assert rec["events_dropped"] == 0 and rec["baseline"] > 0  # the parameters, allocated before


@pytest.mark.gpu
def test_gpu_oom_capture_says_what_was_alive(gpu) -> None:
    oom = _real(gpu, "gpu_timeline")["oom_capture"]
    assert oom["status"] == "ok" and oom["ok"], oom


@pytest.mark.gpu
def test_gpu_recording_cost_is_measured(gpu) -> None:
    cost = _real(gpu, "gpu_timeline")["recording_cost"]
    assert cost["recorded"] is True and cost["events_per_step"] > 0 and cost["us_per_event_median"] is not None
