"""The published comparison's runner (benchmarks/published) applies each row's settings: a 2-layer BERT, not
the published figures."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from benchmarks.published import runner  # noqa: E402
from benchmarks.published import source_hf as hf  # noqa: E402

SMALL = {**hf.BERT_LARGE, "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2}
SMALL["intermediate_size"] = 128


def test_rows_carry_the_page_settings() -> None:
    assert [r.published_mib for r in hf.ROWS] == [14949, 8681, 6775, 13939, 7275, 12295, 4847, 13085, 5363]
    combined = {r.name: r for r in hf.ROWS}["Adam8bit combined"]
    assert (combined.batch, combined.accum, combined.checkpointing, combined.fp16) == (1, 4, True, True)


def test_a_row_is_analysed_with_its_settings() -> None:
    model = runner.bert(SMALL)
    assert model.config._attn_implementation == "eager"
    row = {r.name: r for r in hf.ROWS}["Adam8bit combined"]
    report = runner.analyse(model, row, vocab=1000, sequence=32)
    result = runner.compare(row, report, 0.0)
    assert result["settings"]["keep_grads"] is True
    assert any("gradients kept between steps" in n for n in report.notes)
    assert any("softmax-saves-input" in n for n in result["torch_rules"])
    assert "eager loading" in result["context_basis"] and "CUDA 11.2" in result["context_basis"]
    assert report.settings["amp"] == "fp16" and report.settings["grad_accum"] == 4


def test_the_optimizers_of_that_time() -> None:
    model = runner.bert(SMALL)
    assert runner.optimizer("adamw_hf", model).defaults["foreach"] is False
    bnb = runner.optimizer("Adam8bit", model)
    assert bnb.settings[0][0].blocksize == 2048 and bnb.settings[0][0].fp32_below == 4096


def test_the_seminar_rows_keep_the_previous_run_alive_through_the_forward() -> None:
    """The course notebook's half-precision run starts while the full-precision run's `loss` still holds its fp32
    parameters: the traced peak counts them, and the run without that state does not."""
    import dataclasses

    import torch

    from benchmarks.published import source_seminar as sem
    from gpumem_kernel.analysis.pipeline.analyze import trace_step

    half = {r.name: r for r in sem.ROWS}["Half precision"]
    fresh = dataclasses.replace(half, previous=None, previous_output=None)

    def peak(row: sem.Row) -> int:
        net = sem.model(row.precision)
        opt = torch.optim.SGD(net.parameters(), lr=0.001)
        report = trace_step(sem.step(row), net, opt, batch_size=sem.BATCH, input=sem.make_batch, target="H100 80GB")
        return int(report.peak_allocated_bytes)

    fp32_parameters = sem.LAYERS * (sem.WIDTH * sem.WIDTH + sem.WIDTH) * 4
    assert peak(half) - peak(fresh) >= fp32_parameters // 2  # at least the old weights outlast the new peak
    assert sem.resident_bytes() == 49 * 2 * 512 * 6144 * 4


# --- the new-source protocol: each source module's rows, the runner's merge and the README section ---------------


@pytest.mark.timeout(900)  # a 3B model at 2 x 4096 tokens, traced whole: minutes on a busy 2-core machine
def test_torchtune_packed_row_is_within_its_target() -> None:
    """Llama 3.2 3B at batch 2 x 4096 in bf16 with AdamW (60.0 GiB peak active on an A100): a config with untied
    embeddings, another vocabulary or fp32 parameters, or a trace that lost the fp32 logits, misses by far more."""
    from benchmarks.published import source_torchtune as tt

    assert sum(p.numel() for p in tt.model().parameters()) == 3_212_749_824  # tied embeddings, one copy
    (row,) = tt.run(["+ Packed Dataset"])
    assert (row["unit"], row["published"]) == ("GiB", 60.0)
    assert abs(row["error"]) <= tt.TARGET, row


@pytest.mark.timeout(900)
def test_torchao_four_bit_row_is_within_its_target() -> None:
    """ViT-H at batch 8 under bf16 autocast with torchao's 4-bit Adam (7.72 GB allocated on an RTX 4070 Ti SUPER)."""
    from benchmarks.zoo.packages import missing

    reason = missing("timm")
    if reason:
        pytest.skip(reason)
    from benchmarks.published import source_torchao as ao

    (row,) = ao.run(["ao 4-bit"])
    assert (row["unit"], row["published"]) == ("GB", 7.72)
    assert abs(row["error"]) <= ao.TARGET, row


def test_torchao_stand_in_allocates_the_quantised_state() -> None:
    """torchao's Adam4bit keeps half a byte per element and an fp32 scale per 128 (a quantised parameter), fp32
    zeros for one under 4096 elements."""
    import torch

    from benchmarks.published import source_torchao as ao

    big, small = torch.nn.Parameter(torch.zeros(64, 128)), torch.nn.Parameter(torch.zeros(10))
    opt = ao.ao_adam([big, small], 4)
    big.grad, small.grad = torch.zeros_like(big), torch.zeros_like(small)
    opt.step()
    assert opt.state[big]["exp_avg.codes"].numel() == 64 * 128 // 2
    assert opt.state[big]["exp_avg_sq.scale"].numel() == 64 * 128 // 128
    assert opt.state[small]["exp_avg"].dtype == torch.float32 and opt.state[small]["exp_avg"].numel() == 10


def _source(rows: list) -> dict:
    return {
        "module": "source_x",
        "name": "Example source",
        "url": "https://example.org/table",
        "text": "https://example.org/table@commit",
        "gpu": "A100 80GB",
        "stack": "torch 2.5",
        "measure": "peak active GiB",
        "open": "the torch release",
        "target": 0.03,
        "not_expressed": "Compile: fused kernels",
        "rows": rows,
    }


def test_the_readme_renders_each_new_source_with_its_target() -> None:
    from benchmarks.published import readme

    hit = {"name": "packed", "settings": {"batch": 2}, "unit": "GiB", "published": 60.0, "predicted": 59.67}
    hit.update(error=-0.0054, seconds=1.0, note="")
    miss = {**hit, "name": "compiled", "predicted": 66.0, "error": 0.1, "note": "fusions not traced"}
    text = readme.section({"sources": [], "new_sources": [_source([hit, miss])], "targets": {}})
    assert "**Example source**" in text and "1/2 rows within the target (3%)" in text
    assert "| packed | batch 2 | 60.0 GiB | 59.67 GiB | -0.5% | yes |" in text
    assert "no: fusions not traced" in text and "Rows not expressed: Compile: fused kernels." in text
    assert "last run" not in text  # one run: the provenance line dates it


def test_the_readme_dates_each_source_a_partial_run_kept() -> None:
    from benchmarks.published import readme

    kept = {**_source([]), "name": "Kept source, old", "date": "2026-01-02T00:00:00+00:00"}
    fresh = {**_source([]), "name": "Fresh source", "date": "2026-02-03T00:00:00+00:00"}
    text = readme.section({"date": fresh["date"], "sources": [], "new_sources": [kept, fresh], "targets": {}})
    assert "Each source's last run: Kept source 2026-01-02; Fresh source 2026-02-03." in text


def test_a_partial_run_keeps_the_other_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks.published import __main__ as published

    before = {"date": "2026-01-02T03:04:05+00:00", "sources": [{"name": "hf"}, {"name": "seminar"}]}
    before["new_sources"] = [_source([]), {"module": "old"}]
    monkeypatch.setattr(published, "_previous", lambda: before)
    monkeypatch.setattr(published, "NEW_SOURCES", ("source_x", "old"))
    monkeypatch.setattr(published, "new_source", lambda name, rows=None: {"module": name, "rows": ["fresh"]})
    result = published.collect(["source_x"], None)
    assert result["sources"] == [{"name": n, "date": "2026-01-02T03:04:05+00:00"} for n in ("hf", "seminar")]
    assert result["new_sources"] == [{"module": "source_x", "rows": ["fresh"]}, {"module": "old"}]
    with pytest.raises(SystemExit, match="unknown source"):
        published.collect(["nope"], None)
