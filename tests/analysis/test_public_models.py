"""Public Hugging Face architectures in their default configuration (SDPA attention), built from tiny configs (no
download): the trace must answer the value reads transformers makes only to pick a fast path (`pad_token_id in
input_ids[:, [-1, 0]]`, `torch.all(mask == 1)`), and leave transformers' functions as they were afterwards."""

from typing import Any, Callable, Dict

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from gpumem_kernel.analysis.trace.run import run_trace  # noqa: E402
from gpumem_kernel.analysis.trace.plan import TraceError, TracePlan, TraceResult  # noqa: E402
from gpumem_kernel.analysis.trace.training_loop import default_loss  # noqa: E402
from transformers.utils import import_utils  # noqa: E402

VOCAB = 100
SEQ = 16


def _tokens(mask: bool, labels: bool = False) -> Callable[[int, bool], Dict[str, Any]]:
    def make(b: int, fake: bool) -> Dict[str, Any]:
        batch = {"input_ids": torch.randint(0, VOCAB, (b, SEQ))}
        if mask:
            batch["attention_mask"] = torch.ones(b, SEQ, dtype=torch.long)
        if labels:
            batch["labels"] = torch.randint(0, VOCAB, (b, SEQ // 2))
        return batch

    return make


def _trace(model: Any, make_batch: Callable[[int, bool], Any], evaluation: bool = False) -> TraceResult:
    plan = TracePlan(model=model, optimizer="adamw", make_batch=make_batch, loss_fn=default_loss, evaluation=evaluation)
    return run_trace(plan, 2)


def _bert() -> Any:
    config = transformers.BertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    return transformers.BertForSequenceClassification(config)


def _gpt2() -> Any:
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=2, n_positions=64, bos_token_id=0, eos_token_id=0
    )
    return transformers.GPT2LMHeadModel(config)


def _llama() -> Any:
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
    )
    return transformers.LlamaForCausalLM(config)


def _t5() -> Any:
    config = transformers.T5Config(
        vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2, decoder_start_token_id=0
    )
    return transformers.T5ForConditionalGeneration(config)


def test_bert_with_default_sdpa_attention_traces_without_and_with_a_mask() -> None:
    model = _bert()
    assert model.config._attn_implementation == "sdpa"
    for mask in (False, True):
        assert _trace(model, _tokens(mask)).peak_live > 0
    assert _trace(model, _tokens(True), evaluation=True).peak_live > 0


@pytest.mark.parametrize("build", [_gpt2, _llama], ids=["gpt2", "llama"])
def test_causal_language_models_trace_with_a_mask(build: Callable[[], Any]) -> None:
    model = build()
    for mask in (False, True):
        assert _trace(model, _tokens(mask)).peak_live > 0


def test_t5_traces_with_a_mask_and_labels() -> None:
    result = _trace(_t5(), _tokens(True, labels=True))
    assert result.loss_source == "model"


def test_vit_traces() -> None:
    config = transformers.ViTConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=32,
        patch_size=8,
        num_labels=3,
    )
    model = transformers.ViTForImageClassification(config)
    assert _trace(model, lambda b, fake: {"pixel_values": torch.randn(b, 3, 32, 32)}).peak_live > 0


def _holders() -> Dict[str, Any]:
    """Every loaded transformers module whose globals name `is_torchdynamo_compiling`, with what they hold."""
    import sys

    return {
        name: vars(module)["is_torchdynamo_compiling"]
        for name, module in list(sys.modules.items())
        if name.startswith("transformers") and "is_torchdynamo_compiling" in getattr(module, "__dict__", {})
    }


_ANSWERS: list = []


class _ReadsValues(torch.nn.Module):
    """Asks transformers whether it is compiling, then reads a value only the real data has."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x: Any) -> Any:
        _ANSWERS.append(import_utils.is_torchdynamo_compiling())
        if x.sum().item() > 0:  # a read that picks no fast path: still refused
            return self.linear(x)
        return self.linear(x) * 2


def test_fast_path_answers_last_only_for_the_trace_even_one_that_fails() -> None:
    _bert()  # transformers' modeling modules loaded
    before = _holders()
    assert before and all(f is import_utils.is_torchdynamo_compiling for f in before.values())
    with pytest.raises(TraceError, match="depends on tensor values"):
        _trace(_ReadsValues(), lambda b, fake: torch.randn(b, 4))
    assert _ANSWERS == [True]  # answered inside the trace, which then refused the value read
    assert _holders() == before
    assert not import_utils.is_torchdynamo_compiling()
    _trace(_bert(), _tokens(True))
    assert _holders() == before


def test_wav2vec2_with_a_padding_mask_traces_spec_augment() -> None:
    """SpecAugment reads each input's length from the padding mask (`mask.sum(-1).tolist()`): the count of a
    boolean mask follows the select rule (every frame unpadded by default: the most masked spans)."""
    config = transformers.Wav2Vec2Config(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        conv_dim=(16, 16),
        conv_stride=(5, 2),
        conv_kernel=(10, 3),
        num_conv_pos_embeddings=8,
        num_conv_pos_embedding_groups=2,
        mask_time_prob=0.5,
        mask_time_length=2,
    )
    model = transformers.Wav2Vec2ForCTC(config)

    def audio(b: int, fake: bool) -> Dict[str, Any]:
        return {"input_values": torch.randn(b, 400), "attention_mask": torch.ones(b, 400, dtype=torch.long)}

    result = _trace(model, audio)
    assert result.peak_live > 0
    assert any("count of a boolean mask" in n and "every element selected" in n for n in result.notes)
    assert _trace(model, audio, evaluation=True).peak_live > 0
