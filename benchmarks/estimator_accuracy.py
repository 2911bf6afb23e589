"""Issue 6, row 3: the traced estimator's predicted peak against a measured peak, on a zoo of architectures.

Each model of the zoo below (plain torch, small enough for a CPU) trains for two steps, fp32 and bf16 autocast,
with Adam and with SGD(momentum): the prediction is `analysis_trace.run_trace(fake=True)` (the model's copy is
made of fake tensors: no memory, shapes only), the CPU reference is the same tracker on a real CPU training
step (`run_trace(fake=False)`: live tensor storage bytes, followed allocation by allocation); the error is
(predicted - measured) / measured of the last step's peak of live bytes. The caching-allocator replay of each
trace (what the estimator predicts for `reserved` on CUDA) is compared the same way as a second column.

With CUDA (`torch.cuda.is_available()`), the GPU columns compare the traced `device.peak_allocated` /
`peak_reserved` with `max_memory_allocated` / `max_memory_reserved` over real steps on the GPU
(`analysis.measure_step_peaks`); otherwise they read "not measured".

Named cases (issue 9 §5, the estimator's former blind spots) are checked against an independent tracker instead:
the user's own training loop (their module modes, their checkpointing, their loss, Hugging Face's own
`gradient_checkpointing_enable()`) on a deep copy of the model, under `torch.profiler` with `profile_memory=True`,
whose CPU-allocator events give the peak of live bytes in the second step. They go to `results/estimator_cases.json`.

    PYTHONPATH=. .venv/bin/python benchmarks/estimator_accuracy.py [--only GPT,LSTM] [--cases all|NAME,...]

With neither option both the zoo and the cases run; `--only` runs only zoo models, `--cases` only named cases.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_result  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from gpumem_kernel.analysis import run_trace  # noqa: E402

from gpumem_kernel.analysis import TracePlan, TraceResult  # noqa: E402

from gpumem_kernel.analysis import default_loss  # noqa: E402

# --- the zoo ----------------------------------------------------------------------------------------------


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.GELU(), nn.Dropout(0.1), nn.Linear(512, 10)
        )

    def forward(self, x: Any) -> Any:
        return self.net(x)


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1),
            nn.BatchNorm2d(64),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(64, 128, 3, padding=1),
            nn.BatchNorm2d(128),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(128, 10)

    def forward(self, x: Any) -> Any:
        return self.head(self.features(x).flatten(1))


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: Any) -> Any:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNet(nn.Module):
    """ResNet-18's layout (2 basic blocks a stage) at CIFAR scale and quarter width."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        widths = [
            (16, 16, 1),
            (16, 16, 1),
            (16, 32, 2),
            (32, 32, 1),
            (32, 64, 2),
            (64, 64, 1),
            (64, 128, 2),
            (128, 128, 1),
        ]
        self.layers = nn.Sequential(*[BasicBlock(a, b, s) for a, b, s in widths])
        self.fc = nn.Linear(128, classes)

    def forward(self, x: Any) -> Any:
        return self.fc(F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1).flatten(1))


class ViT(nn.Module):
    """Patch embedding (conv), class token, learned positions, pre-norm encoder, linear head."""

    def __init__(
        self, image: int = 32, patch: int = 4, dim: int = 128, depth: int = 4, heads: int = 4, classes: int = 10
    ) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, patch)
        tokens = (image // patch) ** 2
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, tokens + 1, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(
            dim, heads, 4 * dim, dropout=0.1, activation="gelu", batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x: Any) -> Any:
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.head(self.norm(self.encoder(x))[:, 0])


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Any) -> Any:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (y.view(b, t, self.heads, c // self.heads).transpose(1, 2) for y in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=0.1 if self.training else 0.0)
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


class GPTBlock(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim), nn.Dropout(0.1))

    def forward(self, x: Any) -> Any:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """nanoGPT-style decoder: token + position embeddings, causal pre-norm blocks, tied LM head."""

    def __init__(self, vocab: int = 1000, context: int = 64, dim: int = 128, depth: int = 4, heads: int = 4) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(context, dim)
        self.blocks = nn.ModuleList([GPTBlock(dim, heads) for _ in range(depth)])
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx: Any) -> Any:
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


class BERT(nn.Module):
    """BERT-style encoder: token + position + segment embeddings, LayerNorm, post-norm encoder, MLM head."""

    def __init__(self, vocab: int = 1000, context: int = 64, dim: int = 128, depth: int = 4, heads: int = 4) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(context, dim)
        self.seg = nn.Embedding(2, dim)
        self.ln = nn.LayerNorm(dim)
        self.drop = nn.Dropout(0.1)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.1, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.mlm = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.LayerNorm(dim), nn.Linear(dim, vocab))

    def forward(self, idx: Any) -> Any:
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.drop(self.ln(self.tok(idx) + self.pos(positions) + self.seg(torch.zeros_like(idx))))
        return self.mlm(self.encoder(x))


class LSTMLM(nn.Module):
    def __init__(self, vocab: int = 1000, dim: int = 64, hidden: int = 128) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, hidden, num_layers=2, batch_first=True, dropout=0.1)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, tokens: Any) -> Any:
        return self.out(self.lstm(self.embed(tokens))[0])


def _double_conv(cin: int, cout: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(),
    )


class UNet(nn.Module):
    """Three-level U-Net: conv pairs, max-pool down, transposed-conv up, concatenated skips, 1x1 head."""

    def __init__(self, channels: int = 3, classes: int = 2, base: int = 16) -> None:
        super().__init__()
        self.down1 = _double_conv(channels, base)
        self.down2 = _double_conv(base, 2 * base)
        self.bottom = _double_conv(2 * base, 4 * base)
        self.up2 = nn.ConvTranspose2d(4 * base, 2 * base, 2, 2)
        self.dec2 = _double_conv(4 * base, 2 * base)
        self.up1 = nn.ConvTranspose2d(2 * base, base, 2, 2)
        self.dec1 = _double_conv(2 * base, base)
        self.head = nn.Conv2d(base, classes, 1)

    def forward(self, x: Any) -> Any:
        d1 = self.down1(x)
        d2 = self.down2(F.max_pool2d(d1, 2))
        b = self.bottom(F.max_pool2d(d2, 2))
        u2 = self.dec2(torch.cat([self.up2(b), d2], dim=1))
        u1 = self.dec1(torch.cat([self.up1(u2), d1], dim=1))
        return self.head(u1)


def _images(size: int = 32) -> Callable[[int, bool], Any]:
    return lambda b, fake: torch.randn(b, 3, size, size)


def _tokens(vocab: int = 1000, length: int = 64) -> Callable[[int, bool], Any]:
    return lambda b, fake: torch.randint(0, vocab, (b, length))


# name -> (model factory, batch maker, batch size)
ZOO: Dict[str, Tuple[Callable[[], nn.Module], Callable[[int, bool], Any], int]] = {
    "MLP": (MLP, lambda b, fake: torch.randn(b, 256), 64),
    "CNN": (CNN, _images(), 16),
    "ResNet": (ResNet, _images(), 8),
    "ViT": (ViT, _images(), 8),
    "GPT": (GPT, _tokens(), 8),
    "BERT": (BERT, _tokens(), 8),
    "LSTM": (LSTMLM, _tokens(length=32), 8),
    "U-Net": (UNet, _images(64), 4),
}
PRECISIONS = {"fp32": None, "bf16": "bf16"}
OPTIMIZERS = {"Adam": "adam", "SGD(momentum)": "sgd-momentum"}


# --- measuring ----------------------------------------------------------------------------------------------


def _error(predicted: int, measured: int) -> float:
    return (predicted - measured) / measured


def _gpu_columns(plan: TracePlan, batch: int, traced: TraceResult) -> Dict[str, Any]:
    if not torch.cuda.is_available():
        return {"gpu": "not measured"}
    from gpumem_kernel.analysis import measure_step_peaks

    device = torch.device("cuda", torch.cuda.current_device())
    measured = measure_step_peaks(plan, batch, device)
    if measured is None:
        return {"gpu": "out of memory"}
    allocated, reserved = measured
    return {
        "gpu_allocated": allocated,
        "gpu_reserved": reserved,
        "predicted_allocated": traced.device.peak_allocated,
        "predicted_reserved": traced.device.peak_reserved,
        "error_vs_max_memory_allocated": _error(traced.device.peak_allocated, allocated),
        "error_vs_max_memory_reserved": _error(traced.device.peak_reserved, reserved),
    }


def measure(name: str, precision: str, optimizer: str) -> Dict[str, Any]:
    make_model, make_batch, batch = ZOO[name]
    torch.manual_seed(0)
    model = make_model()
    plan = TracePlan(model, OPTIMIZERS[optimizer], make_batch, default_loss, amp=PRECISIONS[precision])
    started = time.perf_counter()
    traced = run_trace(plan, batch, fake=True)
    trace_s = time.perf_counter() - started
    started = time.perf_counter()
    tracked = run_trace(plan, batch, fake=False)
    real_s = time.perf_counter() - started
    row: Dict[str, Any] = {
        "model": name,
        "precision": precision,
        "optimizer": optimizer,
        "batch": batch,
        "parameters": sum(p.numel() for p in model.parameters()),
        "predicted_peak": traced.peak_live,
        "measured_peak": tracked.peak_live,
        "error": _error(traced.peak_live, tracked.peak_live),
        "predicted_reserved_model": traced.device.peak_reserved,
        "replayed_reserved_model": tracked.device.peak_reserved,
        "error_reserved_model": _error(traced.device.peak_reserved, tracked.device.peak_reserved),
        "peak_phase": traced.peak_phase,
        "trace_s": round(trace_s, 3),
        "real_step_s": round(real_s, 3),
    }
    row.update(_gpu_columns(plan, batch, traced))
    return row


# --- named cases (issue 9 §5): the estimator against the user's own loop, tracked by the allocator ------------------


class Bottleneck(nn.Module):
    """torchvision's ResNet-50 block: 1x1, 3x3 (stride), 1x1 with expansion 4, projection shortcut on change."""

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, 4 * width, 1, bias=False), nn.BatchNorm2d(4 * width)
        self.downsample: Optional[nn.Module] = None
        if stride != 1 or cin != 4 * width:
            self.downsample = nn.Sequential(nn.Conv2d(cin, 4 * width, 1, stride, bias=False), nn.BatchNorm2d(4 * width))

    def forward(self, x: Any) -> Any:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet50(nn.Module):
    """torchvision's resnet50 layout without torchvision: 7x7 stem, stages of 3, 4, 6, 3 bottlenecks (16)."""

    def __init__(self, classes: int = 1000, base: int = 64) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, base, 7, 2, 3, bias=False), nn.BatchNorm2d(base)
        cin, stages = base, []
        for index, (blocks, width) in enumerate(zip((3, 4, 6, 3), (base, 2 * base, 4 * base, 8 * base))):
            layers = []
            for block in range(blocks):
                layers.append(Bottleneck(cin, width, 2 if block == 0 and index > 0 else 1))
                cin = 4 * width
            stages.append(nn.Sequential(*layers))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: Any) -> Any:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class DecoderBlock(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: Any, cache: Optional[List[Any]] = None) -> Any:
        b, t, c = x.shape
        q, k, v = (
            y.view(b, t, self.heads, c // self.heads).transpose(1, 2) for y in self.qkv(self.ln1(x)).split(c, dim=2)
        )
        if cache is not None:
            cache.append((k, v))  # the KV cache a generating model keeps
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class Decoder(nn.Module):
    """A stand-in for a Hugging Face causal LM: `config.use_cache`, a dict output with `loss` (given labels),
    `logits` and `past_key_values` (with the cache on)."""

    def __init__(
        self,
        vocab: int = 8192,
        context: int = 128,
        dim: int = 256,
        depth: int = 4,
        heads: int = 4,
        as_object: bool = False,
    ) -> None:
        super().__init__()
        self.as_object = as_object  # ModelOutput-like attributes instead of a dict (HF returns either)
        self.config = SimpleNamespace(use_cache=True, vocab_size=vocab)
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(context, dim)
        self.blocks = nn.ModuleList([DecoderBlock(dim, heads) for _ in range(depth)])
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, input_ids: Any, labels: Any = None) -> Any:
        cache: Optional[List[Any]] = [] if self.config.use_cache else None
        x = self.tok(input_ids) + self.pos(torch.arange(input_ids.shape[1], device=input_ids.device))
        for block in self.blocks:
            x = block(x, cache)
        out: Dict[str, Any] = {"logits": self.head(self.ln(x))}
        if labels is not None:
            logits = out["logits"][:, :-1].float()  # as HF's causal-LM loss: upcast, shift
            out["loss"] = F.cross_entropy(logits.flatten(0, 1), labels[:, 1:].flatten())
        if cache is not None:
            out["past_key_values"] = cache
        return SimpleNamespace(**out) if self.as_object else out


def _bert_dropout_off() -> nn.Module:
    model = BERT()
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.eval()  # the user's choice: no dropout, the rest in train mode
    return model


def _gpt2() -> nn.Module:
    import transformers

    config = transformers.GPT2Config(
        vocab_size=8192,
        n_positions=128,
        n_embd=256,
        n_layer=4,
        n_head=4,
        use_cache=True,
        bos_token_id=0,
        eos_token_id=0,
    )
    return transformers.GPT2LMHeadModel(config)


def _has_transformers() -> bool:
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


class _Checkpointed(nn.Module):
    """How a user checkpoints a block by hand."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block

    def forward(self, *args: Any) -> Any:
        from torch.utils.checkpoint import checkpoint

        return checkpoint(self.block, *args, use_reentrant=False)


def _checkpoint_by_hand(model: nn.Module, containers: Tuple[str, ...]) -> nn.Module:
    for name in containers:
        blocks = model.get_submodule(name)
        wrapped = [_Checkpointed(block) for block in blocks]
        parent, _, attr = name.rpartition(".")
        holder = model.get_submodule(parent) if parent else model
        setattr(holder, attr, nn.Sequential(*wrapped) if isinstance(blocks, nn.Sequential) else nn.ModuleList(wrapped))
    return model


def _stand_in_checkpointed(model: nn.Module) -> nn.Module:
    model.config.use_cache = False  # what HF's gradient checkpointing does
    return _checkpoint_by_hand(model, ("blocks",))


def _hf_checkpointed(model: nn.Module) -> nn.Module:
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def _lm_tokens(vocab: int = 8192, length: int = 128) -> Callable[[int, bool], Any]:
    def make(b: int, fake: bool) -> Dict[str, Any]:
        ids = torch.randint(0, vocab, (b, length))
        return {"input_ids": ids, "labels": ids}

    return make


def _own_loss(output: Any, batch: Any) -> Any:
    return output["loss"]


@dataclass
class Case:
    """A named row: what the user runs, and what they mean by it."""

    model: Callable[[], nn.Module]
    make_batch: Callable[[int, bool], Any]
    batch: int
    what: str  # the blind spot it covers
    checkpointing: bool = False  # passed to the estimator (--checkpointing)
    prepare: Callable[[nn.Module], nn.Module] = lambda model: model  # the user's own version of the options
    loss: Callable[[Any, Any], Any] = default_loss  # the loss the user's loop backpropagates
    needs: Optional[Callable[[], bool]] = None


CASES: Dict[str, Case] = {
    "eval-mode Dropout (BERT)": Case(
        _bert_dropout_off, _tokens(), 8, "submodules left in eval() by the user are traced in eval mode"
    ),
    "checkpointing, ResNet-50 layout": Case(
        ResNet50,
        _images(224),
        2,
        "--checkpointing wraps all 16 bottlenecks across the four stages",
        checkpointing=True,
        prepare=lambda m: _checkpoint_by_hand(m, ("layer1", "layer2", "layer3", "layer4")),
    ),
    "model-owned loss (decoder)": Case(
        Decoder, _lm_tokens(), 4, "the loss the model returns (labels given) is the one traced", loss=_own_loss
    ),
    "model-owned loss (GPT-2, HF)": Case(
        _gpt2, _lm_tokens(), 4, "HF ModelOutput.loss is the one traced", loss=_own_loss, needs=_has_transformers
    ),
    "checkpointing + use_cache (decoder)": Case(
        Decoder,
        _lm_tokens(),
        4,
        "--checkpointing turns the KV cache off, as HF does",
        checkpointing=True,
        prepare=_stand_in_checkpointed,
        loss=_own_loss,
    ),
    "checkpointing + use_cache (GPT-2, HF)": Case(
        _gpt2,
        _lm_tokens(),
        4,
        "--checkpointing matches HF's gradient_checkpointing_enable()",
        checkpointing=True,
        prepare=_hf_checkpointed,
        loss=_own_loss,
        needs=_has_transformers,
    ),
}


def feed_batch(model: nn.Module, batch: Any) -> Any:
    return model(**batch) if isinstance(batch, dict) else model(batch)


def allocator_peak(case: Case, user_model: nn.Module, steps: int = 2) -> int:
    """The user's loop on a deep copy (modes as left, their checkpointing, their loss), Adam as the estimator's
    plan runs it; the peak of live CPU-allocator bytes in the last step, from torch.profiler's memory events
    (allocations since the copy was made: parameters, gradients, state, activations and temporaries).
    Attention and dropout run as the trace runs them, as on CUDA (trace.cuda_kernels: fused attention and
    dropout kernels), so both sides compute the same step and the check stays one of bookkeeping."""
    from torch.profiler import ProfilerActivity, profile, record_function

    from gpumem_kernel.analysis import cuda_kernels

    with cuda_kernels(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        model = case.prepare(copy.deepcopy(user_model))
        optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-3, foreach=True)
        out = loss = batch = None
        for step in range(1, steps + 1):
            with record_function(f"gpumem-step-{step}"):
                batch = case.make_batch(case.batch, False)
                out = feed_batch(model, batch)
                loss = case.loss(out, batch)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
        del out, loss, batch, model, optimizer
    events = prof.profiler.kineto_results.events()
    last = next(e for e in events if e.name() == f"gpumem-step-{steps}")
    live = peak = 0
    for event in sorted((e for e in events if e.name() == "[memory]"), key=lambda e: e.start_ns()):
        live += event.nbytes()
        if last.start_ns() <= event.start_ns() <= last.end_ns():
            peak = max(peak, live)
    return peak


def measure_case(name: str) -> Dict[str, Any]:
    case = CASES[name]
    torch.manual_seed(0)
    model = case.model()
    plan = TracePlan(model, "adam", case.make_batch, default_loss, checkpointing=case.checkpointing)
    started = time.perf_counter()
    traced = run_trace(plan, case.batch, fake=True)
    trace_s = time.perf_counter() - started
    started = time.perf_counter()
    truth = allocator_peak(case, model)
    truth_s = time.perf_counter() - started
    return {
        "case": name,
        "what": case.what,
        "model": type(model).__name__,
        "batch": case.batch,
        "parameters": sum(p.numel() for p in model.parameters()),
        "predicted_peak": traced.peak_live,
        "measured_peak": truth,
        "error": _error(traced.peak_live, truth),
        "peak_phase": traced.peak_phase,
        "notes": traced.notes,
        "trace_s": round(trace_s, 3),
        "real_step_s": round(truth_s, 3),
    }


def run_cases(names: List[str]) -> None:
    rows: List[Dict[str, Any]] = []
    for name in names:
        needs = CASES[name].needs
        if needs is not None and not needs():
            rows.append({"case": name, "what": CASES[name].what, "skipped": "transformers is not installed"})
            print(f"{name:<40}skipped: transformers is not installed", flush=True)
            continue
        try:
            row = measure_case(name)
            print(
                f"{name:<40}predicted {row['predicted_peak']:>13,} measured {row['measured_peak']:>13,}  "
                f"error {row['error']:+.2%}  (trace {row['trace_s']:.1f} s, real {row['real_step_s']:.1f} s)",
                flush=True,
            )
        except Exception as exc:  # a case the tracer cannot follow is a result too
            row = {
                "case": name,
                "what": CASES[name].what,
                "failed": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
            }
            print(f"{name:<40}FAILED {row['failed']}", flush=True)
        rows.append(row)
    ok = [r for r in rows if "error" in r]
    write_result(
        "estimator_cases",
        {
            "description": "named cases of issue 9 §5: traced peak (fake tensors, Adam, fp32) vs the peak of live "
            "CPU-allocator bytes (torch.profiler, profile_memory) over the user's own loop on a deep "
            "copy, second step; error = (predicted - measured) / measured",
            "transformers": _version_of("transformers"),
            "rows": rows,
            "cpu": _summary([r["error"] for r in ok]),
        },
    )


def _version_of(module: str) -> Optional[str]:
    try:
        return str(__import__(module).__version__)
    except ImportError:
        return None


def _summary(values: List[float]) -> Dict[str, Optional[float]]:
    magnitudes = [abs(v) for v in values]
    return {
        "median_abs_error": statistics.median(magnitudes) if magnitudes else None,
        "max_abs_error": max(magnitudes) if magnitudes else None,
        "n": len(magnitudes),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated model names (default: the whole zoo)")
    parser.add_argument(
        "--cases", default="", help="'all' or comma-separated named cases (issue 9 §5): " + ", ".join(CASES)
    )
    args = parser.parse_args()
    names = [n.strip() for n in args.only.split(",") if n.strip()] or ([] if args.cases else list(ZOO))
    unknown = sorted(set(names) - set(ZOO))
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; the zoo: {', '.join(ZOO)}")
    cases = (
        list(CASES)
        if args.cases == "all" or not (args.cases or args.only)
        else [n.strip() for n in args.cases.split(",") if n.strip()]
    )
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; the cases: {', '.join(CASES)}")
    if names:
        run_zoo(names)
    if cases:
        run_cases(cases)


def run_zoo(names: List[str]) -> None:
    rows: List[Dict[str, Any]] = []
    for name in names:
        for precision in PRECISIONS:
            for optimizer in OPTIMIZERS:
                try:
                    row = measure(name, precision, optimizer)
                    print(
                        f"{name:<8}{precision:<6}{optimizer:<15}predicted {row['predicted_peak']:>12,} "
                        f"measured {row['measured_peak']:>12,}  error {row['error']:+.2%}  "
                        f"(trace {row['trace_s']:.1f} s)",
                        flush=True,
                    )
                except Exception as exc:  # a model the tracer cannot follow is a result too
                    row = {
                        "model": name,
                        "precision": precision,
                        "optimizer": optimizer,
                        "failed": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                    }
                    print(f"{name:<8}{precision:<6}{optimizer:<15}FAILED {row['failed']}", flush=True)
                rows.append(row)

    ok = [r for r in rows if "error" in r]
    per_model = {}
    for name in names:
        mine = [r["error"] for r in ok if r["model"] == name]
        per_model[name] = _summary(mine)
    gpu_rows = [r for r in ok if "error_vs_max_memory_allocated" in r]
    write_result(
        "estimator_accuracy",
        {
            "description": "traced peak (fake tensors) vs the peak of live tensor bytes tracked over a real CPU "
            "training step (2 steps, last step's peak); error = (predicted - measured) / measured",
            "rows": rows,
            "per_model": per_model,
            "cpu": _summary([r["error"] for r in ok]),
            "cpu_reserved_model": _summary([r["error_reserved_model"] for r in ok]),
            "failed": [f"{r['model']} {r['precision']} {r['optimizer']}: {r['failed']}" for r in rows if "failed" in r],
            "gpu": {
                "vs_max_memory_allocated": _summary([r["error_vs_max_memory_allocated"] for r in gpu_rows]),
                "vs_max_memory_reserved": _summary([r["error_vs_max_memory_reserved"] for r in gpu_rows]),
            }
            if gpu_rows
            else "not measured: torch.cuda.is_available() is False on this machine",
        },
    )
    summary = _summary([r["error"] for r in ok])
    print(
        f"CPU: median |error| {summary['median_abs_error']:.2%}, max {summary['max_abs_error']:.2%} "
        f"over {summary['n']} configurations"
    )


if __name__ == "__main__":
    main()
