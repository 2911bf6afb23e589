"""The architectures the GPU suite measures: real ones from the libraries of the GPU image, and the plain-torch
zoo of benchmarks/estimator_accuracy.py (its U-Net is the one "you write" of issue 10).

`build(name, dry)` returns the model with its batch maker, loss and three batch sizes; `dry=True` gives a tiny
variant of the same library classes, for the CPU dry run. A library that does not import raises `Unavailable`
with the reason, and the sections record the architecture as skipped.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.estimator_accuracy import BERT, CNN, GPT, LSTMLM, MLP, ViT, ResNet, UNet
from gpumem_kernel.analysis import default_loss

MakeBatch = Callable[[int, bool], Any]


class Unavailable(Exception):
    """The architecture's library is not importable here."""


@dataclass
class Built:
    model: nn.Module
    make_batch: MakeBatch  # (batch size, fake) -> batch, as analysis_trace.TracePlan wants it
    loss: Callable[[Any, Any], Any]
    batches: Tuple[int, int, int]
    input: str


def images(size: int, channels: int = 3) -> MakeBatch:
    return lambda b, fake: torch.randn(b, channels, size, size)


def tokens(vocab: int, length: int) -> MakeBatch:
    return lambda b, fake: torch.randint(0, vocab, (b, length))


def lm_loss(output: Any, batch: Any) -> Any:
    """Cross-entropy of the logits against the input tokens (HF models return a ModelOutput)."""
    logits = output if isinstance(output, torch.Tensor) else output["logits"]
    return F.cross_entropy(logits.float().flatten(0, 1), batch.flatten())


def _need(module: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except Exception as exc:  # a broken install (e.g. a CUDA torchvision on CPU torch) is unavailable too
        raise Unavailable(
            f"{module} not importable: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
            if str(exc)
            else f"{module} not importable: {type(exc).__name__}"
        ) from None


# --- library models ------------------------------------------------------------------------------------------


def resnet50(dry: bool) -> Built:
    tv = _need("torchvision")
    if dry:
        from torchvision.models.resnet import Bottleneck, ResNet as TvResNet

        return Built(
            TvResNet(Bottleneck, [1, 1, 1, 1], num_classes=10),
            images(32),
            default_loss,
            (2, 4, 8),
            "3x32x32 (one Bottleneck per stage)",
        )  # batch 2 at least: BatchNorm of a 1x1 map
    return Built(tv.models.resnet50(), images(224), default_loss, (16, 32, 64), "3x224x224")


def vit_b_16(dry: bool) -> Built:
    tv = _need("torchvision")
    if dry:
        model = tv.models.VisionTransformer(
            image_size=32, patch_size=16, num_layers=1, num_heads=2, hidden_dim=32, mlp_dim=64, num_classes=10
        )
        return Built(model, images(32), default_loss, (1, 2, 4), "3x32x32 (1 layer, width 32)")
    return Built(tv.models.vit_b_16(), images(224), default_loss, (8, 16, 32), "3x224x224")


def gpt2(dry: bool) -> Built:
    tf = _need("transformers")
    if dry:
        config = tf.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=128, n_positions=32, use_cache=False)
        return Built(tf.GPT2LMHeadModel(config), tokens(128, 16), lm_loss, (1, 2, 4), "16 tokens (tiny config)")
    config = tf.GPT2Config(use_cache=False)  # GPT-2 small, 124M; built from the config, no weights fetched
    return Built(tf.GPT2LMHeadModel(config), tokens(config.vocab_size, 256), lm_loss, (4, 8, 16), "256 tokens")


def bert(dry: bool) -> Built:
    tf = _need("transformers")
    if dry:
        config = tf.BertConfig(
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            vocab_size=128,
            max_position_embeddings=32,
        )
        return Built(tf.BertForMaskedLM(config), tokens(128, 16), lm_loss, (1, 2, 4), "16 tokens (tiny config)")
    config = tf.BertConfig()  # BERT-base, 110M
    return Built(tf.BertForMaskedLM(config), tokens(config.vocab_size, 128), lm_loss, (8, 16, 32), "128 tokens")


def efficientnet(dry: bool) -> Built:
    timm = _need("timm")
    if dry:
        return Built(
            timm.create_model("test_efficientnet", pretrained=False, num_classes=10),
            images(32),
            default_loss,
            (2, 4, 8),
            "3x32x32 (timm test_efficientnet)",
        )
    return Built(
        timm.create_model("efficientnet_b0", pretrained=False), images(224), default_loss, (16, 32, 64), "3x224x224"
    )


# --- the plain-torch zoo -------------------------------------------------------------------------------------


def unet(dry: bool) -> Built:
    if dry:
        return Built(UNet(base=4), images(32), default_loss, (1, 2, 4), "3x32x32, base width 4")
    return Built(UNet(base=32), images(256), default_loss, (4, 8, 16), "3x256x256, base width 32")


def mlp(dry: bool) -> Built:
    return Built(
        MLP(),
        lambda b, fake: torch.randn(b, 256),
        default_loss,
        (2, 4, 8) if dry else (256, 1024, 4096),
        "256 features",
    )


def gpt_plain(dry: bool) -> Built:
    if dry:
        return Built(
            GPT(vocab=64, context=16, dim=32, depth=1, heads=2),
            tokens(64, 16),
            default_loss,
            (1, 2, 4),
            "16 tokens, width 32",
        )
    model = GPT(vocab=8192, context=256, dim=384, depth=6, heads=6)
    return Built(model, tokens(8192, 256), default_loss, (8, 16, 32), "256 tokens, width 384, 6 blocks")


def _zoo(
    cls: Callable[[], nn.Module], make: MakeBatch, batches: Tuple[int, int, int], text: str
) -> Callable[[bool], Built]:
    return lambda dry: Built(cls(), make, default_loss, (1, 2, 4) if dry else batches, text)


# name -> (source, builder)
ARCHS: Dict[str, Tuple[str, Callable[[bool], Built]]] = {
    "ResNet-50": ("torchvision", resnet50),
    "ViT-B/16": ("torchvision", vit_b_16),
    "GPT-2": ("transformers", gpt2),
    "BERT-base": ("transformers", bert),
    "EfficientNet-B0": ("timm", efficientnet),
    "U-Net": ("plain torch", unet),
    "MLP": ("plain torch", mlp),
    "nanoGPT": ("plain torch", gpt_plain),
    "CNN": ("plain torch", _zoo(CNN, images(32), (64, 128, 256), "3x32x32")),
    "ResNet-18/4": ("plain torch", _zoo(ResNet, images(32), (64, 128, 256), "3x32x32, quarter width")),
    "ViT-tiny": ("plain torch", _zoo(ViT, images(32), (32, 64, 128), "3x32x32")),
    "BERT-mini": ("plain torch", _zoo(BERT, tokens(1000, 64), (16, 32, 64), "64 tokens")),
    "LSTM": ("plain torch", _zoo(LSTMLM, tokens(1000, 32), (16, 32, 64), "32 tokens")),
}
# The dry run keeps to three plain models (time on a 2-core CI machine) plus the library ones that import.
DRY_ARCHS: List[str] = ["MLP", "U-Net", "nanoGPT", "ResNet-50", "ViT-B/16", "GPT-2", "BERT-base", "EfficientNet-B0"]


def names(dry: bool) -> List[str]:
    return list(DRY_ARCHS if dry else ARCHS)


def source(name: str) -> str:
    return ARCHS[name][0]


@functools.lru_cache(maxsize=4)
def build(name: str, dry: bool) -> Built:
    """The architecture, seeded (the same weights in every process); cached: traces reuse one instance."""
    torch.manual_seed(0)
    return ARCHS[name][1](dry)


def parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
