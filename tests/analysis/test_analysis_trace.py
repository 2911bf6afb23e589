"""The traced engine (fake CPU tensors) against the same tracker on a real CPU training step.

`pytest -s tests/test_analysis_trace.py` prints the traced-vs-tracked table per architecture.
"""

from typing import Any, Callable, Dict, Tuple

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from fake_cuda import fake_cuda_autocast  # noqa: E402
from gpumem_kernel.analysis.trace.run import run_trace  # noqa: E402
from gpumem_kernel.analysis.trace.plan import TraceError, TracePlan, TraceResult  # noqa: E402
from gpumem_kernel.analysis.trace.training_loop import default_loss  # noqa: E402


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


class SmallResNet(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.layers = nn.Sequential(BasicBlock(16, 16, 1), BasicBlock(16, 32, 2), BasicBlock(32, 64, 2))
        self.fc = nn.Linear(64, classes)

    def forward(self, x: Any) -> Any:
        return self.fc(F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1).flatten(1))


class LSTMTagger(nn.Module):
    def __init__(self, vocab: int = 200, dim: int = 32, hidden: int = 64) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, hidden, num_layers=2, batch_first=True)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, tokens: Any) -> Any:
        return self.out(self.lstm(self.embed(tokens))[0])


def _cnn() -> Any:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )


def _transformer() -> Any:
    layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.1, batch_first=True)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)


def _images(b: int, fake: bool) -> Any:
    return torch.randn(b, 3, 32, 32)


ARCHITECTURES: Dict[str, Tuple[Callable[[], Any], Callable[[int, bool], Any], int]] = {
    "MLP": (
        lambda: nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 10)),
        lambda b, fake: torch.randn(b, 128),
        64,
    ),
    "CNN+BatchNorm": (_cnn, _images, 16),
    "ResNet (small)": (SmallResNet, _images, 8),
    "TransformerEncoder": (_transformer, lambda b, fake: torch.randn(b, 32, 64), 8),
    "LSTM": (LSTMTagger, lambda b, fake: torch.randint(0, 200, (b, 24)), 8),
}


def _pair(name: str, **plan_options: Any) -> Tuple[TraceResult, TraceResult]:
    make_model, make_batch, batch = ARCHITECTURES[name]
    torch.manual_seed(0)
    plan = TracePlan(make_model(), "adamw", make_batch, default_loss, **plan_options)
    return run_trace(plan, batch, fake=True), run_trace(plan, batch, fake=False)


def _error(traced: int, tracked: int) -> float:
    return (traced - tracked) / tracked


def test_traced_peak_agrees_with_a_real_cpu_step_on_five_architectures() -> None:
    rows = []
    for name in ARCHITECTURES:
        traced, tracked = _pair(name)
        rows.append((name, traced, tracked))
    print(
        "\n" + f"{'architecture':<20}{'batch':>6}{'traced peak':>14}{'CPU-tracked':>14}{'error':>9}"
        f"{'activations err':>17}{'alloc-model err':>17}"
    )
    for name, traced, tracked in rows:
        print(
            f"{name:<20}{traced.batch_size:>6}{traced.peak_live:>14,}{tracked.peak_live:>14,}"
            f"{_error(traced.peak_live, tracked.peak_live):>9.2%}"
            f"{_error(traced.activations, tracked.activations):>17.2%}"
            f"{_error(traced.device.peak_allocated, tracked.device.peak_allocated):>17.2%}"
        )
    for name, traced, tracked in rows:
        assert abs(_error(traced.peak_live, tracked.peak_live)) <= 0.05, name
        assert abs(_error(traced.device.peak_reserved, tracked.device.peak_reserved)) <= 0.05, name
        assert traced.step_peaks[1] >= traced.step_peaks[0] * 0.99, name  # steady state is step 2


def test_amp_traces_a_cast_cache_and_smaller_activations() -> None:
    plain, _ = _pair("MLP")
    traced, tracked = _pair("MLP", amp="bf16")
    # bf16 copies of the weights that backward needs (layers 2 and 3: the first layer's input needs no grad)
    assert traced.autocast_cache == 2 * (256 * 256 + 256 * 10)
    assert traced.activations < plain.activations
    assert traced.optimizer_state == plain.optimizer_state  # fp32 state stays
    assert abs(_error(traced.peak_live, tracked.peak_live)) <= 0.05


def test_checkpointing_keeps_fewer_activations() -> None:
    plain, _ = _pair("ResNet (small)")
    checkpointed, tracked = _pair("ResNet (small)", checkpointing=True)
    assert checkpointed.activations < 0.6 * plain.activations
    assert abs(_error(checkpointed.peak_live, tracked.peak_live)) <= 0.05


def test_gradient_accumulation_keeps_gradients_across_micro_batches() -> None:
    plain, _ = _pair("CNN+BatchNorm")
    accumulated, tracked = _pair("CNN+BatchNorm", grad_accum=4)
    assert accumulated.gradients == plain.gradients
    assert accumulated.peak_live >= plain.peak_live
    assert abs(_error(accumulated.peak_live, tracked.peak_live)) <= 0.05


def _lt_handles(traced: TraceResult) -> list:
    assert traced.timeline is not None
    return [e for e in traced.timeline.device if isinstance(e.handle, tuple) and e.handle[0] == "cublaslt"]


def test_cublaslt_workspace_is_kept_per_thread_or_taken_per_call_as_the_plan_says() -> None:
    """The MLP's three nn.Linear layers run addmm with a bias, which CUDA sends to cuBLASLt; backward's mm
    products run on cuBLAS. gpus.blas_workspaces says, by torch version, which of the three shapes applies."""
    MiB = 1 << 20
    timeline = {"stack_hook": lambda: ()}
    shared, _ = _pair("MLP", **timeline)  # from torch 2.12: Lt uses the cuBLAS workspace
    kept, _ = _pair("MLP", cublaslt_bytes=MiB, **timeline)  # torch 2.9 to 2.11
    per_call, _ = _pair("MLP", cublaslt_call_bytes=MiB, **timeline)  # before 2.9
    assert _lt_handles(shared) == []
    assert [(e.kind, e.handle, e.nbytes) for e in _lt_handles(kept)] == [("alloc", ("cublaslt", "main"), MiB)]
    assert kept.cublas_bytes == shared.cublas_bytes + MiB  # the forward thread's, kept for good
    assert kept.device.peak_allocated == shared.device.peak_allocated + MiB
    calls = _lt_handles(per_call)
    assert len(calls) == 2 * 3 * 2  # alloc and free, for three layers, in the forward passes of two steps
    assert all(a.kind == "alloc" and f.kind == "free" and a.handle == f.handle for a, f in zip(calls[::2], calls[1::2]))
    assert per_call.cublas_bytes == shared.cublas_bytes  # nothing kept


@pytest.mark.parametrize(
    "layer, shape, on_lt",
    [
        (lambda: nn.Linear(16, 8), (4, 16), True),
        (lambda: nn.Linear(16, 8), (2, 4, 16), True),  # contiguous 3-D input: flattened into one addmm
        (lambda: nn.Linear(16, 8, bias=False), (4, 16), False),  # mm
        (lambda: nn.Linear(16, 8), (4, 2, 16), False),  # transposed below: matmul, then the bias added
        (lambda: nn.Linear(16, 1), (4, 16), False),  # a one-column product stays off cuBLASLt
    ],
)
def test_only_an_addmm_with_a_bias_vector_is_marked_for_cublaslt(layer, shape, on_lt) -> None:
    from gpumem_kernel.analysis.trace.tracker import trace_tracker_class

    module, x = layer(), torch.randn(*shape)
    if x.dim() == 3 and not on_lt:
        x = x.transpose(0, 1)  # not contiguous: linear takes the matmul path
    tracker = trace_tracker_class()()
    with tracker:
        with tracker.span("forward", 1, 0):
            module(x)
    tracker.close()
    kinds = [m.kind for m in tracker.markers]
    assert kinds == (["cublaslt"] if on_lt else ["cublas"])


def test_trace_inserts_cublas_workspaces_per_thread() -> None:
    traced, _ = _pair("MLP")
    assert traced.cublas_bytes == 2 * 8_519_680  # forward thread + autograd thread
    assert traced.device.peak_allocated >= traced.peak_live
    assert traced.device.peak_reserved >= traced.device.peak_allocated


class _Attention(nn.Module):
    """One attention block as HF and nanoGPT write it: F.scaled_dot_product_attention with attention dropout."""

    def __init__(self, dropout: float, dim: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.qkv, self.out, self.heads, self.dropout = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim), heads, dropout

    def forward(self, x: Any) -> Any:
        b, t, c = x.shape
        q, k, v = (y.view(b, t, self.heads, c // self.heads).transpose(1, 2) for y in self.qkv(x).split(c, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, t, c))


def _attention_trace(model: Any, seq: int = 512) -> TraceResult:
    torch.manual_seed(0)
    return run_trace(TracePlan(model, "adamw", lambda b, fake: torch.randn(b, seq, 64), default_loss), 4)


def test_attention_dropout_is_traced_as_cudas_fused_kernels_keep_it() -> None:
    """CUDA's flash / memory-efficient kernels keep no L x L weights with dropout; the CPU's math path would
    (4 x 4 heads x 512 x 512 x 4 B = 16 MiB of weights, and as much again of mask, per block)."""
    with_dropout, without = _attention_trace(_Attention(0.1)), _attention_trace(_Attention(0.0))
    assert with_dropout.peak_live == without.peak_live
    assert any("attention with dropout" in n for n in with_dropout.notes)
    assert not any("attention with dropout" in n for n in without.notes)
    assert F.scaled_dot_product_attention is torch._C._nn.scaled_dot_product_attention  # the user's torch, as it was


def test_attention_is_the_users_again_after_a_trace_that_fails() -> None:
    class Broken(_Attention):
        def forward(self, x: Any) -> Any:
            super().forward(x)
            raise RuntimeError("the user's own bug")

    with pytest.raises(TraceError, match="the user's own bug"):
        _attention_trace(Broken(0.1))
    assert F.scaled_dot_product_attention is torch._C._nn.scaled_dot_product_attention


def test_multihead_attention_asking_for_weights_keeps_cudas_math_path() -> None:
    """need_weights=False (nn.TransformerEncoderLayer's call) is fused on CUDA; need_weights=True is the math
    path on CUDA too, so its dropout and L x L weights stay in the trace."""

    class Block(nn.Module):
        def __init__(self, dropout: float, need_weights: bool) -> None:
            super().__init__()
            self.attn, self.need = nn.MultiheadAttention(64, 4, dropout=dropout, batch_first=True), need_weights

        def forward(self, x: Any) -> Any:
            return self.attn(x, x, x, need_weights=self.need)[0]

    fused = [_attention_trace(Block(d, need_weights=False)).peak_live for d in (0.1, 0.0)]
    math = [_attention_trace(Block(d, need_weights=True)).peak_live for d in (0.1, 0.0)]
    assert fused[0] == fused[1]
    assert math[0] > math[1] + 4 * 4 * 512 * 512  # the dropout's mask and dropped weights, at least 4 MiB more
    assert math[1] > fused[1] + 4 * 4 * 512 * 512 * 4  # the L x L weights kept for backward


def test_dropout_keeps_cudas_one_byte_mask() -> None:
    """CUDA's fused dropout keeps a bool mask for backward; the CPU's own kernel keeps a mask of the input's dtype."""

    def trace(p: float) -> TraceResult:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(128, 512), nn.Dropout(p), nn.Linear(512, 10))
        return run_trace(TracePlan(model, "sgd", lambda b, fake: torch.randn(b, 128), default_loss), 64)

    assert trace(0.1).activations - trace(0.0).activations == 64 * 512  # one byte per element


def _mixed_step(make: Callable[..., Any]) -> Dict[str, Any]:
    """One call of each function whose autocast policy differs between the CPU and CUDA; each output's dtype.
    `make(*shape)` makes a tensor (torch.empty on fake CUDA tensors: they have no random generator)."""
    x, conv_w, norm_w, proj = make(2, 4, 8, 8), make(8, 4, 3, 3), make(8), make(16, 16)
    out: Dict[str, Any] = {}
    out["conv2d"] = F.conv2d(x, conv_w, padding=1)
    out["group_norm"] = F.group_norm(out["conv2d"], 2, norm_w, norm_w)
    out["interpolate"] = F.interpolate(out["group_norm"], scale_factor=2)
    out["linear"] = F.linear(out["interpolate"], proj)
    out["layer_norm"] = F.layer_norm(out["linear"], (16,))
    out["rms_norm"] = F.rms_norm(out["linear"], (16,))
    out["softmax"] = F.softmax(F.linear(out["layer_norm"], proj), -1)
    out["softplus"] = F.softplus(F.linear(out["softmax"], proj))
    out["log_softmax"] = F.log_softmax(F.linear(out["softplus"], proj), -1)
    out["cosine_similarity"] = F.cosine_similarity(out["linear"], out["linear"], dim=-1)
    h = out["linear"]  # bf16 under autocast: the element-wise math CUDA runs in fp32, as models write it
    out["torch.pow"] = torch.pow(h, 3.0)  # Hugging Face's GELU (gpt2's gelu_new)
    out["**"], out["rpow"], out["Tensor.pow"] = h**2, 2.0**h, h.pow(2)
    out["exp"], out["log"], out["rsqrt"], out["log1p"] = h.exp(), torch.log(h), h.rsqrt(), torch.log1p(h)
    out["tanh"] = torch.tanh(h)  # the same on both
    return {name: tensor.dtype for name, tensor in out.items()}


def _under_cuda_autocast() -> Dict[str, Any]:
    with fake_cuda_autocast():
        return _mixed_step(lambda *shape: torch.empty(shape, device="cuda"))


def test_traced_autocast_follows_cudas_policy_where_the_cpus_differs() -> None:
    from gpumem_kernel.analysis.fake.cuda_kernels import cuda_kernels

    cuda = _under_cuda_autocast()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cpu = _mixed_step(torch.randn)
        with cuda_kernels() as rerouted:
            traced = _mixed_step(torch.randn)
    assert traced == cuda
    differ = {n for n in cpu if cpu[n] != cuda[n]}
    assert differ >= {"group_norm", "layer_norm", "softmax", "interpolate", "torch.pow", "**", "exp", "rsqrt"}
    assert rerouted.autocast >= 6 + len(differ & {"torch.pow", "**", "rpow", "Tensor.pow", "exp", "log", "rsqrt"})
    assert torch.Tensor.exp is torch._C.TensorBase.exp and "exp" not in torch.Tensor.__dict__  # put back


def _cross_entropy_ops(device: str, make: Callable[..., Any]) -> list:
    """The aten ops (and their output dtypes) of a bf16 classifier head's cross-entropy under autocast."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list = []

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            if func.namespace == "aten" and func.overloadpacket.__name__ != "view":
                outs = out if isinstance(out, (tuple, list)) else (out,)
                self.seen.append((func.overloadpacket.__name__, [o.dtype for o in outs if isinstance(o, torch.Tensor)]))
            return out

    hidden, head = make(64, 32), make(1000, 32)
    target = torch.zeros(64, dtype=torch.long, device=device)
    with Ops() as ops:
        F.cross_entropy(F.linear(hidden, head), target)
    return ops.seen


def test_traced_cross_entropy_keeps_what_cudas_autocast_keeps() -> None:
    from gpumem_kernel.analysis.fake.cuda_kernels import cuda_kernels

    with fake_cuda_autocast():
        cuda = _cross_entropy_ops("cuda", lambda *shape: torch.empty(shape, device="cuda"))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cpu = _cross_entropy_ops("cpu", torch.randn)
        with cuda_kernels():
            traced = _cross_entropy_ops("cpu", torch.randn)
    assert ("_log_softmax", [torch.bfloat16]) in cuda  # log_softmax in bf16, then an fp32 copy for nll_loss
    assert traced == cuda and cpu != cuda


def test_an_lstm_under_bf16_traces_on_any_cpu() -> None:
    """Where this CPU's oneDNN has no bf16 RNN kernel (some AMD hosts), the trace says so and bounds the RNN in
    fp32 instead of failing; where it has one, the RNN is traced in bf16."""
    traced, tracked = _pair("LSTM", amp="bf16")
    plain, _ = _pair("LSTM")
    assert traced.peak_live == tracked.peak_live
    fallback = any("no bf16 RNN kernel" in n for n in traced.notes)
    assert traced.peak_live <= plain.peak_live if not fallback else traced.peak_live > 0
