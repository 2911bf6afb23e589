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
