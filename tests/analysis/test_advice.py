"""What makes it fit (analysis.advise): each lever's row is the analysis run with that lever set, to the byte; the
micro-batch lever keeps the samples per optimizer step; sharding's row is one rank's; the GPU row is the smallest of
the table that holds the step; combinations only where no lever fits alone, and FSDP with the lever that keeps full
training only where nothing that keeps it fits; the rows ordered by cost with the
cheapest that fits recommended; a lever that does not apply or is set already has no row; the user's model and
optimizer stay as they were; the levers' progress comes as one phase, "trying levers k of n"."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import List

import pytest

torch = pytest.importorskip("torch")

from user_state import assert_same, state_of  # noqa: E402
from gpumem_kernel.analysis import AnalysisRequest, advise, analyze, gpu_lookup  # noqa: E402
from gpumem_kernel.analysis.pipeline.advice_levers import COST_KINDS, LEVERS, command_with  # noqa: E402
from gpumem_kernel.analysis.request.progress import Progress  # noqa: E402
from gpumem_kernel.analysis.search.engines import TraceMemo  # noqa: E402

SCHEMA = Path(__file__).resolve().parents[2] / "gpumem_kernel" / "wire" / "schemas" / "analysis.schema.json"
MiB = 1 << 20


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def mlp() -> "torch.nn.Module":
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))


def just_over(model, **options) -> AnalysisRequest:
    """A request whose device holds 1 MiB less than the step's peak (no reserve): it will not fit, by a little."""
    peak = analyze(model, AnalysisRequest(memory="64GiB", reserve=0, **options)).peak_bytes
    return AnalysisRequest(memory=peak - MiB, reserve=0, **options)


def same_as_alone(model, request, row) -> None:
    alone = analyze(model, replace(request, **row.changes))
    assert (row.peak_bytes, row.peak_allocated_bytes, row.status) == (
        alone.peak_bytes,
        alone.peak_allocated_bytes,
        alone.recommendations.current.status,
    ), row.key
    if row.maximum_of == "batch":
        assert row.maximum == alone.recommendations.maximum, row.key
    assert row.per_rank == (alone.distributed is not None), row.key


def test_each_row_is_the_analysis_with_that_lever_to_the_byte_and_the_cheapest_that_fits_is_recommended():
    model = mlp()
    request = just_over(model, batch_size=512, input=(256,))
    before = state_of(model, None)
    analysed = analyze(model, request)
    advice = advise(model, request, analysed)
    after = state_of(model, None)

    assert analysed.recommendations.current.status == "will-not-fit"
    keys = [r.key for r in advice.rows]
    for key in ("micro-batch", "amp-bf16", "8bit-optimizer", "paged-optimizer", "adafactor", "lora", "qlora", "gpu"):
        assert key in keys
    assert "checkpointing" not in keys  # a Sequential of Linear layers: checkpointing saves nothing, so no row
    assert any(k.startswith("fsdp-") for k in keys)
    for row in advice.rows:
        if row.key != "gpu":
            same_as_alone(model, request, row)
    micro = next(r for r in advice.rows if r.key == "micro-batch")
    assert micro.changes["batch_size"] * micro.changes["grad_accum"] == 512
    assert micro.flags == f"-b {micro.changes['batch_size']} --accum {micro.changes['grad_accum']}"
    sharded = next(r for r in advice.rows if r.key.startswith("fsdp-"))
    assert sharded.per_rank and sharded.flags == f"--world-size {sharded.key[5:]} --strategy fsdp"

    ranks = [COST_KINDS.index(r.cost_kind) for r in advice.rows]
    assert ranks == sorted(ranks)  # cheapest first
    first_fit = next(i for i, r in enumerate(advice.rows) if r.fits)
    assert advice.recommended == first_fit and "the cheapest change that fits" in advice.reason
    assert all(r.fits == (r.peak_bytes <= request.memory) for r in advice.rows if r.key != "gpu")
    assert advice.peak_bytes == analysed.peak_bytes and advice.status == "will-not-fit"
    assert_same(before, after)


def test_the_gpu_row_is_the_smallest_of_the_table_that_holds_the_step_as_it_is():
    torch.manual_seed(0)
    model = torch.nn.Sequential(*(torch.nn.Linear(4096, 4096) for _ in range(5)))  # 84 M parameters: 1.3 GB of states
    request = AnalysisRequest(batch_size=8, input=(4096,), target="GTX 1050")
    analysed = analyze(model, request)
    advice = advise(model, request, analysed, only=("gpu",))

    row = next(r for r in advice.rows if r.key == "gpu")
    assert row.cost_kind == "hardware" and row.maximum is None and row.changes == {}
    assert row.command == f"%gpumem analyze model --target '{row.lever}'"
    chosen = gpu_lookup(row.lever)
    assert chosen.memory_bytes > gpu_lookup("GTX 1050").memory_bytes
    on_it = analyze(model, replace(request, target=row.lever))
    assert on_it.recommendations.current.status == "fits"
    smaller = [g for g in ("GTX 1060 3GB", "GTX 1050 Ti") if gpu_lookup(g).memory_bytes < chosen.memory_bytes]
    for name in smaller:
        assert analyze(model, replace(request, target=name)).recommendations.current.status != "fits", name


def test_a_shorter_sequence_is_the_longest_that_fits_traced_at_that_length():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(1000, 64), torch.nn.Linear(64, 1000))
    request = just_over(model, batch_size=8, input=(1024,))
    analysed = analyze(model, request)
    advice = advise(model, request, analysed, only=("shorter-sequence",))

    row = next(r for r in advice.rows if r.key == "shorter-sequence")
    assert row.maximum_of == "sequence" and row.changes == {"input": (row.maximum,)}
    assert row.flags == f"--input {row.maximum}" and row.command == f"%gpumem analyze model --input {row.maximum}"
    assert 0 < row.maximum < 1024 and row.fits
    same_as_alone(model, request, row)
    longer = analyze(model, replace(request, input=(row.maximum + 64,)))
    assert longer.peak_bytes > request.memory  # the next length of the search's multiple does not fit


def test_no_shorter_sequence_is_searched_where_the_weights_and_optimizer_state_alone_are_over(monkeypatch):
    """No sequence length shrinks the weights and AdamW's two moments: over the device on their own, the sequence
    search would trace only lengths that do not fit, so it is not run (with room for them it is: the test above)."""
    from gpumem_kernel.analysis.search import engines

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(1000, 64), torch.nn.Linear(64, 1000))
    states = 3 * sum(p.numel() * 4 for p in model.parameters())  # fp32 weights, exp_avg, exp_avg_sq
    request = AnalysisRequest(batch_size=8, input=(1024,), memory=states - MiB, reserve=0)
    analysed = analyze(model, request)
    assert analysed.parameters_bytes + analysed.optimizer_bytes == states
    traced: List[int] = []
    trace = engines.run_trace
    monkeypatch.setattr(engines, "run_trace", lambda plan, b, **kw: traced.append(b) or trace(plan, b, **kw))
    assert advise(model, request, analysed, only=("shorter-sequence",)).rows == [] and traced == []


def test_rows_that_change_only_the_sharding_trace_no_batch_the_analysis_traced(monkeypatch):
    """FSDP's rows trace the same one-GPU step as the analysis (the rank's share is what sharding saves of it): a
    batch the analysis traced is not traced again, and each row is still the analysis with that lever set."""
    from gpumem_kernel.analysis.search import engines

    traced: List[int] = []
    trace = engines.run_trace
    monkeypatch.setattr(engines, "run_trace", lambda plan, b, **kw: traced.append(b) or trace(plan, b, **kw))
    model = mlp()
    request = replace(just_over(model, batch_size=512, input=(256,)), traces=TraceMemo())
    traced.clear()
    analysed = analyze(model, request)
    by_analysis = set(traced)
    traced.clear()
    advice = advise(model, request, analysed, only=("fsdp",))
    assert [r.key[:5] for r in advice.rows] == ["fsdp-"] and 512 in by_analysis
    assert not by_analysis & set(traced) and len(traced) == len(set(traced))
    same_as_alone(model, replace(request, traces=None), advice.rows[0])


def states_heavy() -> "torch.nn.Module":
    """Four 1024 x 1024 layers at batch 2: AdamW's fp32 state (32 MiB) is what a rank or a paged optimizer saves."""
    torch.manual_seed(0)
    return torch.nn.Sequential(*(torch.nn.Linear(1024, 1024) for _ in range(4)))


KEEPING = ("paged-optimizer", "8bit-optimizer", "fsdp", "lora")


def test_where_only_adapters_or_more_gpus_fit_a_row_shards_the_lever_that_keeps_full_training():
    """Neither optimizer fits alone, LoRA does (it trains adapters only) and FSDP alone needs 4 GPUs: the row that
    keeps full training is the optimizer that saves most alone with FSDP over fewer GPUs, to the byte the analysis
    with both set."""
    model = states_heavy()
    peak = analyze(model, AnalysisRequest(batch_size=2, input=(1024,), memory="64GiB", reserve=0)).peak_bytes
    request = AnalysisRequest(batch_size=2, input=(1024,), memory=peak - 50 * MiB, reserve=0)
    advice = advise(model, request, analyze(model, request), only=KEEPING)
    by_key = {r.key: r for r in advice.rows}

    paged, eight = by_key["paged-optimizer"], by_key["8bit-optimizer"]
    assert not paged.fits and not eight.fits and by_key["lora"].fits and paged.peak_bytes < eight.peak_bytes
    alone = next(r for r in advice.rows if r.key.startswith("fsdp-"))
    kept = [r for r in advice.rows if "+fsdp-" in r.key]
    assert [r.key for r in kept] == ["paged-optimizer+fsdp-2"] and alone.changes["world_size"] > 2
    row = kept[0]
    assert row.fits and row.per_rank and row.cost_kind == "gpus"
    assert row.flags == "--optimizer paged-adamw --world-size 2 --strategy fsdp"
    same_as_alone(model, request, row)
    assert advice.rows[advice.recommended].key == "lora"  # still the cheapest that fits: the row is beside it

    # where a lever that keeps full training fits alone, no sharded row: that lever is the answer
    roomier = replace(request, memory=paged.peak_bytes + MiB)
    assert not any("+fsdp-" in r.key for r in advise(model, roomier, analyze(model, roomier), only=KEEPING).rows)


def test_sharding_a_paged_optimizer_saves_no_share_of_the_state_the_gpu_does_not_hold():
    """bitsandbytes' paged state lives in unified memory, outside the device's figures: a rank's formula saves its
    share of the weights, gradients and the state on the device, never of the paged state (a figure below the
    unsharded step less all it could save would be memory the GPU never held)."""
    model = states_heavy()
    options = dict(batch_size=2, input=(1024,), memory="64GiB", reserve=0, optimizer="paged-adamw", checkpointing=True)
    one = analyze(model, AnalysisRequest(**options))
    sharded = analyze(model, AnalysisRequest(world_size=2, strategy="fsdp", **options))
    assert sharded.distributed is not None and sharded.distributed.engine != "traced"  # the formula's figure
    assert one.optimizer_host_bytes >= 2 * 4 * 1024 * 1024 * 4  # both moments of the four weights, paged
    shardable = one.parameters_bytes + one.parameters_bytes + one.optimizer_bytes  # fp32 grads: the weights' size
    assert one.peak_bytes - shardable // 2 <= sharded.peak_bytes < one.peak_bytes


def test_combinations_are_traced_only_where_no_lever_fits_alone():
    model = mlp()
    three = ("amp-bf16", "paged-optimizer", "8bit-optimizer")  # levers that each save a little here
    request = just_over(model, batch_size=512, input=(256,))
    singles = advise(model, request, analyze(model, request), only=three).rows
    assert singles and all("+" not in r.key for r in singles) and any(r.fits for r in singles)

    # a device just under the smallest single lever's peak: none fits alone
    tighter = replace(request, memory=min(r.peak_bytes for r in singles) - MiB)
    advice = advise(model, tighter, analyze(model, tighter), only=three)
    alone = [r for r in advice.rows if "+" not in r.key]
    pairs = [r for r in advice.rows if "+" in r.key]
    assert alone and not any(r.fits for r in alone) and pairs
    assert all(set(r.key.split("+")) <= set(three) and len(r.key.split("+")) >= 2 for r in pairs)
    assert not any({"paged-optimizer", "8bit-optimizer"} <= set(r.key.split("+")) for r in pairs)  # one optimizer
    for row in pairs:
        same_as_alone(model, tighter, row)
        parts = [next(lever for lever in LEVERS if lever.key == key) for key in row.key.split("+")]
        assert row.flags == " ".join(lever.flags(row.changes) for lever in parts)
        assert row.cost_kind == max(parts, key=lambda lever: COST_KINDS.index(lever.cost_kind)).cost_kind


def test_levers_that_do_not_apply_or_are_set_already_have_no_row():
    model = mlp()
    optimizer = torch.optim.AdamW(model.parameters())
    request = just_over(model, batch_size=1, input=(256,), optimizer=optimizer, amp="bf16")
    before = state_of(model, optimizer)
    keys = [r.key for r in advise(model, request, analyze(model, request)).rows]

    # the user's optimizer object: not replaced, nor adapters (their optimizer holds the model's own parameters);
    # AMP set already; batch 1: no smaller micro-batch; a token-free input: no shorter sequence
    assert not {"amp-bf16", "amp-fp16", "8bit-optimizer", "paged-optimizer", "adafactor", "lora", "qlora"} & set(keys)
    assert not {"micro-batch", "shorter-sequence"} & set(keys)
    assert_same(before, state_of(model, optimizer))

    conv = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Flatten())
    conv_request = just_over(conv, batch_size=4, input=(3, 16, 16))
    conv_keys = [r.key for r in advise(conv, conv_request, analyze(conv, conv_request)).rows]
    assert "lora" not in conv_keys and "qlora" not in conv_keys  # no Linear layer to adapt


def test_the_payload_validates_and_the_text_marks_the_recommendation():
    jsonschema = pytest.importorskip("jsonschema")
    model = mlp()
    request = just_over(model, batch_size=512, input=(256,))
    report = analyze(model, request)
    line = "%gpumem analyze model -b 512 --input 256 --optimizer adamw"
    advice = advise(model, request, report, line, only=("micro-batch", "8bit-optimizer"))
    report.advice = advice.to_payload()
    payload = json.loads(json.dumps(report.to_payload()))
    jsonschema.validate(payload, json.loads(SCHEMA.read_text()))
    assert "advice" not in analyze(model, request).to_payload()  # only an advised report carries it

    micro = next(r for r in payload["advice"]["rows"] if r["key"] == "micro-batch")
    assert micro["command"].startswith("%gpumem analyze model --input 256 --optimizer adamw -b ")  # -b replaced
    eight = next(r for r in payload["advice"]["rows"] if r["key"] == "8bit-optimizer")
    assert eight["command"] == "%gpumem analyze model -b 512 --input 256 --optimizer adamw8bit"
    text = str(report)
    chosen = advice.rows[advice.recommended]
    assert f"* {chosen.lever}" in text and f"Recommended: {chosen.lever}: {advice.reason}" in text


def test_a_step_that_fits_gets_rows_and_no_recommendation():
    model = mlp()
    request = AnalysisRequest(batch_size=64, input=(256,), target="T4")
    advice = advise(model, request, analyze(model, request), only=("micro-batch", "amp-bf16", "8bit-optimizer"))
    assert advice.status == "fits" and advice.recommended is None and "fits as analysed" in advice.reason
    assert advice.rows and all(r.fits for r in advice.rows)


def test_progress_comes_as_the_levers_phase():
    model = mlp()
    seen: List[Progress] = []
    request = AnalysisRequest(batch_size=1, input=(256,), target="T4", amp="bf16")
    analysed = analyze(model, request)
    advise(model, replace(request, on_progress=seen.append), analysed, only=("amp-bf16", "8bit-optimizer", "adafactor"))

    assert seen and {u.phase for u in seen} == {"levers"}
    labels = [u.doing.split(":")[0] for u in seen]
    assert labels[0] == "trying levers 1 of 2 (8-bit optimizer)"  # AMP is set already: two levers
    assert labels[-1] == "trying levers 2 of 2 (Adafactor)"
    assert [u.traces for u in seen] == sorted(u.traces for u in seen)  # counted on across the levers


def test_command_with_replaces_the_options_a_row_sets_again():
    line = "%gpumem analyze model -b 64 --input 256 --memory 8GiB --optimizer=adam"
    assert (
        command_with(line, "-b 32 --accum 2")
        == "%gpumem analyze model --input 256 --memory 8GiB --optimizer=adam -b 32 --accum 2"
    )
    assert command_with(line, "--target 'RTX 4090'") == (
        "%gpumem analyze model -b 64 --input 256 --optimizer=adam --target 'RTX 4090'"
    )
    assert command_with(line, "--optimizer adam8bit").endswith("--memory 8GiB --optimizer adam8bit")


def test_a_lever_whose_analysis_refuses_it_has_no_row_and_the_others_keep_theirs(monkeypatch):
    import importlib

    pipeline = importlib.import_module("gpumem_kernel.analysis.pipeline.analyze")
    real = pipeline.analyze

    def refusing(model, request=None, **keywords):
        if request is not None and request.optimizer == "adafactor":
            raise ValueError("adafactor: refused here")
        return real(model, request, **keywords)

    model = mlp()
    request = AnalysisRequest(batch_size=64, input=(256,), target="T4")
    analysed = analyze(model, request)
    monkeypatch.setattr(pipeline, "analyze", refusing)
    advice = advise(model, request, analysed, only=("8bit-optimizer", "adafactor"))
    assert [r.key for r in advice.rows] == ["8bit-optimizer"]


def test_expandable_segments_traces_as_the_allocator_setting_does(monkeypatch):
    model = mlp()
    request = AnalysisRequest(batch_size=64, input=(256,), target="T4")
    asked = analyze(model, replace(request, expandable_segments=True))
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    monkeypatch.delenv("PYTORCH_ALLOC_CONF", raising=False)
    by_setting = analyze(model, request)
    assert (asked.peak_bytes, asked.peak_reserved_bytes) == (by_setting.peak_bytes, by_setting.peak_reserved_bytes)
    assert any("expandable segments" in note for note in asked.notes)


def test_a_row_whose_batch_1_does_not_fit_costs_one_trace_and_has_the_searchs_figures(monkeypatch):
    """A row reads the analysed batch's peak and status and the maximum: where batch 1 is analysed and over the
    limit, its analysis ends at maximum 0 without the search's runs from batch 8 down, with the same figures the
    whole analysis gives."""
    from gpumem_kernel.analysis.search import engines

    traced: List[int] = []
    trace = engines.run_trace

    def counted(plan, batch, **options):
        traced.append(batch)
        return trace(plan, batch, **options)

    monkeypatch.setattr(engines, "run_trace", counted)
    model = mlp()
    request = just_over(model, batch_size=1, input=(256,), amp="bf16")
    traced.clear()
    whole = analyze(model, request)
    searched = list(traced)
    traced.clear()
    row = analyze(model, replace(request, advice_row=True))

    assert whole.recommendations.current.status == row.recommendations.current.status == "will-not-fit"
    assert whole.recommendations.maximum == row.recommendations.maximum == 0
    assert (row.peak_bytes, row.peak_allocated_bytes) == (whole.peak_bytes, whole.peak_allocated_bytes)
    assert traced == [1] and len(searched) > 2  # the analysed batch alone; no AMP-saving trace either
