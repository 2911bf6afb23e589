"""The report's language-model facts (analysis.trace.llm_facts): the logits and loss line measured from the trace (the
lm_head's output, the loss's float32 upcast, the cross-entropy's log-softmax) against vocabulary x sequence x batch,
the attention implementation and what gradient checkpointing wrapped; tiny Llama and Qwen2 configs whose 32,000-token
vocabulary makes the logits the largest tensors of the step."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from gpumem_kernel.analysis.pipeline.analyze import analyze  # noqa: E402
from gpumem_kernel.analysis.trace.llm_facts import Checkpointed  # noqa: E402
from gpumem_kernel.analysis.pipeline.model_source import analyze_named  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "hf_configs"
SCHEMA = Path(__file__).resolve().parents[2] / "gpumem_kernel" / "wire" / "schemas" / "analysis.schema.json"
VOCAB = 32_000


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def large_vocabulary(tmp_path: Path, family: str) -> str:
    """The shipped 2-layer config (hidden 64) with a 32,000-token vocabulary."""
    config = json.loads((CONFIGS / family / "config.json").read_text())
    config["vocab_size"] = VOCAB
    path = tmp_path / family / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    return str(path)


def _valid(report: Any) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(json.loads(json.dumps(report.to_payload())), json.loads(SCHEMA.read_text()))


def test_logits_and_the_losses_fp32_copy_are_measured_and_match_the_formula(tmp_path):
    batch, seq = 2, 96
    report = analyze_named(large_vocabulary(tmp_path, "llama"), batch_size=batch, seq=seq, memory="2GiB")
    logits = report.llm.logits
    values = VOCAB * seq * batch

    assert (logits.vocab, logits.seq, logits.batch, logits.dtype) == (VOCAB, seq, batch, "bfloat16")
    assert logits.logits_bytes == logits.formula_bytes == values * 2  # the lm_head's bf16 output
    assert logits.upcast_bytes == values * 4  # logits.float() in transformers' causal-LM loss
    assert logits.log_softmax_bytes == values * 4  # cross-entropy's log-softmax of the fp32 copy, kept for backward
    assert logits.held_bytes >= logits.logits_bytes + logits.upcast_bytes + logits.log_softmax_bytes
    assert logits.backward_bytes >= values * 4  # the log-softmax's gradient, fp32
    # with 64-wide hidden states the logits dominate the step
    assert logits.held_bytes > report.peak_live_bytes / 2
    assert report.llm.attention == "sdpa" and report.llm.checkpointing is None

    text = str(report)
    line = next(row for row in text.splitlines() if "Logits & Loss:" in row)
    assert "vocab 32,000 × seq 96 × batch 2 (6.1M values)" in line
    assert "11.72 MiB bfloat16 (lm_head output) + 23.44 MiB float32 copy (the loss's upcast)" in line
    assert "Attention:        sdpa (config._attn_implementation)" in text
    _valid(report)


def test_checkpointing_and_eager_attention_are_said_and_logits_without_a_loss_have_no_copy():
    config = transformers.Qwen2Config.from_pretrained(str(CONFIGS / "qwen2"), vocab_size=VOCAB)
    config._attn_implementation = "eager"
    with torch.device("meta"):
        model = transformers.Qwen2ForCausalLM(config)
    # input ids without labels: the default loss (mean of squares of the logits), no cross-entropy
    report = analyze(model, batch_size=1, input=64, checkpointing=True, memory="2GiB")

    assert report.llm.attention == "eager"
    assert report.llm.checkpointing == Checkpointed(2, "Qwen2DecoderLayer", "model.layers.0-1")
    logits = report.llm.logits
    assert logits.logits_bytes == logits.formula_bytes == VOCAB * 64 * 4  # fp32 model: fp32 logits
    assert logits.upcast_bytes == logits.log_softmax_bytes == 0
    text = str(report)
    assert "Checkpointing:    2 Qwen2DecoderLayer (model.layers.0-1)" in text
    assert "float32 copy" not in text and "Attention:        eager" in text
    _valid(report)


def test_a_model_without_a_vocabulary_has_no_language_model_block():
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    report = analyze(model, batch_size=4, memory="2GiB")
    assert report.llm is None and report.to_payload()["llm"] is None
    assert "Language Model" not in str(report)
