"""Hugging Face families built from their configs (no download), default attention (SDPA where the family has
it), with and without an attention mask. Encoders keep their base configs; the decoder-only LLMs (7B by
default) keep their architecture at 4 layers and hidden 512 (SHRUNK), which builds in a second on 2 cores."""

from __future__ import annotations

from typing import Any, Callable, Dict, List

from benchmarks.zoo.entry import Entry

SEQ = 128
SHRUNK = "4 layers, hidden 512, 8 heads (2 KV heads), intermediate 1376, vocab 32000"
_LLM = dict(
    hidden_size=512,
    intermediate_size=1376,
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=2,
    vocab_size=32000,
    max_position_embeddings=1024,
)


def _tokens(vocab: int, mask: bool, seq: int = SEQ, labels: bool = False) -> Callable[[int], Dict[str, Any]]:
    def make(b: int) -> Dict[str, Any]:
        import torch

        batch = {"input_ids": torch.randint(0, vocab, (b, seq))}
        if mask:
            batch["attention_mask"] = torch.ones(b, seq, dtype=torch.long)
        if labels:
            batch["labels"] = torch.randint(0, vocab, (b, seq))
        return batch

    make.__name__ = f"tokens{'_mask' if mask else ''}"
    return make


def _model(cls: str, config: str, **settings: Any) -> Callable[[], Any]:
    def build() -> Any:
        import transformers

        return getattr(transformers, cls)(getattr(transformers, config)(**settings))

    return build


def _text(
    name: str, cls: str, config: str, vocab: int, size: str, labels: bool = False, **settings: Any
) -> List[Entry]:
    build = _model(cls, config, vocab_size=vocab, **settings)
    text = f"tokens ({SEQ},)" + (" + labels" if labels else "")
    return [
        Entry(name, "huggingface", "transformers", build, _tokens(vocab, False, labels=labels), text, size=size),
        Entry(
            f"{name} +mask",
            "huggingface",
            "transformers",
            build,
            _tokens(vocab, True, labels=labels),
            text + " + mask",
            size=size,
        ),
    ]


def _llm(name: str, cls: str, config: str, **extra: Any) -> List[Entry]:
    settings = {**_LLM, **extra}
    vocab = settings.pop("vocab_size")
    return _text(name, cls, config, vocab, SHRUNK, labels=True, **settings)


def _t5_batch(b: int) -> Dict[str, Any]:
    import torch

    return {
        "input_ids": torch.randint(0, 32128, (b, SEQ)),
        "attention_mask": torch.ones(b, SEQ, dtype=torch.long),
        "labels": torch.randint(0, 32128, (b, 32)),
    }


def _clip_batch(b: int) -> Dict[str, Any]:
    import torch

    return {
        "input_ids": torch.randint(0, 49408, (b, 77)),
        "attention_mask": torch.ones(b, 77, dtype=torch.long),
        "pixel_values": torch.randn(b, 3, 224, 224),
        "return_loss": True,
    }


def _whisper_batch(b: int) -> Dict[str, Any]:
    import torch

    return {"input_features": torch.randn(b, 80, 3000), "labels": torch.randint(0, 51865, (b, 64))}


def _wav2vec2_batch(mask: bool) -> Callable[[int], Dict[str, Any]]:
    def make(b: int) -> Dict[str, Any]:
        import torch

        batch = {"input_values": torch.randn(b, 16000)}
        if mask:
            batch["attention_mask"] = torch.ones(b, 16000, dtype=torch.long)
        return batch

    make.__name__ = f"audio{'_mask' if mask else ''}"
    return make


def _audio_and_vision() -> List[Entry]:
    hf = "huggingface"
    vit = _model("ViTForImageClassification", "ViTConfig")
    wav2vec2 = _model("Wav2Vec2ForCTC", "Wav2Vec2Config")
    return [
        Entry("ViT-base", hf, "transformers", vit, (3, 224, 224), "images (3,224,224)"),
        Entry(
            "CLIP", hf, "transformers", _model("CLIPModel", "CLIPConfig"), _clip_batch, "tokens (77,) + mask + images"
        ),
        Entry(
            "Whisper (default config)",
            hf,
            "transformers",
            _model("WhisperForConditionalGeneration", "WhisperConfig"),
            _whisper_batch,
            "features (80,3000) + labels (64,)",
        ),
        Entry("wav2vec2-base", hf, "transformers", wav2vec2, _wav2vec2_batch(False), "audio (16000,)"),
        Entry("wav2vec2-base +mask", hf, "transformers", wav2vec2, _wav2vec2_batch(True), "audio (16000,) + mask"),
    ]


def entries() -> List[Entry]:
    full = "full size"
    t5 = _model("T5ForConditionalGeneration", "T5Config", decoder_start_token_id=0)
    return [
        *_text("BERT-base", "BertForSequenceClassification", "BertConfig", 30522, full),
        *_text("RoBERTa-base", "RobertaForMaskedLM", "RobertaConfig", 50265, full, labels=True, pad_token_id=1),
        *_text("DeBERTa-v2-base", "DebertaV2ForSequenceClassification", "DebertaV2Config", 128100, full),
        *_text("GPT-2", "GPT2LMHeadModel", "GPT2Config", 50257, full, labels=True),
        *_llm("Llama", "LlamaForCausalLM", "LlamaConfig"),
        *_llm("Mistral", "MistralForCausalLM", "MistralConfig", sliding_window=64),
        *_llm("Qwen2", "Qwen2ForCausalLM", "Qwen2Config"),
        *_llm("Phi", "PhiForCausalLM", "PhiConfig"),
        *_llm("Gemma", "GemmaForCausalLM", "GemmaConfig", head_dim=64),
        Entry("T5-small", "huggingface", "transformers", t5, _t5_batch, f"tokens ({SEQ},) + mask + labels (32,)"),
        *_audio_and_vision(),
    ]
