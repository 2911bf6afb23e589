"""bitsandbytes' 8-bit and paged optimizers and the Adafactors in the trace (analysis/trace/modelled_optimizers.py):
the state sizes
bitsandbytes allocates (bitsandbytes/optim/optimizer.py, Optimizer2State/Optimizer1State.init_state and
get_state_buffer, release 0.50.2 lines 374-390 and 491-532), the named kinds planned without the library, and
Adafactor's factored second moments."""

import sys
import types
import warnings
from typing import Any, Dict

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from gpumem_kernel.analysis.trace import modelled_optimizers as modelled  # noqa: E402
from gpumem_kernel.analysis.pipeline.analyze import analyze  # noqa: E402
from gpumem_kernel.analysis.trace.model_copy import make_optimizer  # noqa: E402
from gpumem_kernel.analysis.trace.run import run_trace  # noqa: E402
from gpumem_kernel.analysis.trace.plan import TracePlan, TraceResult  # noqa: E402
from gpumem_kernel.analysis.trace.training_loop import default_loss  # noqa: E402

WIDE, OUT = 256, 512  # a 131072-element weight (8-bit, paged when paging) and a 512-element bias (32-bit)
QMAP = 256 * 4


def _model() -> Any:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(WIDE, OUT), nn.ReLU(), nn.Linear(OUT, 10))


def _trace(model: Any, optimizer: Any) -> TraceResult:
    plan = TracePlan(
        model=model, optimizer=optimizer, make_batch=lambda b, f: torch.randn(b, WIDE), loss_fn=default_loss
    )
    return run_trace(plan, 2)


def _stepped(optimizer: Any, model: Any) -> Any:
    model(torch.randn(2, WIDE)).sum().backward()
    optimizer.step()
    return optimizer


def _state_bytes(optimizer: Any, host_step: bool = False) -> int:
    """Tensor state bytes, each storage once (bitsandbytes shares its qmaps between parameters)."""
    seen: Dict[int, int] = {}
    for state in optimizer.state.values():
        for key, value in state.items():
            if torch.is_tensor(value) and (host_step or key != "step"):
                seen[id(value.untyped_storage())] = value.untyped_storage().nbytes()
    return sum(seen.values())


def _formula(numels: Any, states: int, blocksize: int = 256, min_8bit: int = 4096) -> int:
    """init_state's sizes: uint8 state + fp32 absmax per block (optimizer.py:518-529) for >= min_8bit_size
    elements, fp32 state (optimizer.py:508-510) below; one 256-value fp32 qmap per state (optimizer.py:513-522)."""
    total, eight_bit = 0, False
    for n in numels:
        if n >= min_8bit:
            eight_bit = True
            total += states * (n + 4 * -(-n // blocksize))
        else:
            total += states * 4 * n
    return total + (states * QMAP if eight_bit else 0)


NUMELS = (WIDE * OUT, OUT, OUT * 10, 10)


# --- minimal bitsandbytes look-alikes: class names and attributes as bitsandbytes sets them, no library ----------


class _Args:
    def __init__(self, **values: Any) -> None:
        self.__dict__.update(values)


class Optimizer8bit(torch.optim.Optimizer):
    """Reads a tensor value in its constructor, as bitsandbytes' create_dynamic_map does (`.tolist()`)."""

    def __init__(self, params: Any, lr: float = 1e-3, optim_bits: int = 8, is_paged: bool = False, **args: Any):
        super().__init__(params, {"lr": lr, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0})
        self.qmap = torch.linspace(0.1, 1, 8).tolist()
        self.args = _Args(optim_bits=optim_bits, min_8bit_size=4096, max_unorm=0.0, skip_zeros=False, **args)
        self.is_paged = is_paged

    def step(self, closure: Any = None) -> None:
        raise AssertionError("a CUDA kernel: never run in the trace")


class Optimizer2State(Optimizer8bit):
    pass


class Optimizer1State(Optimizer8bit):
    pass


class Adam8bit(Optimizer2State):
    pass


class Lion8bit(Optimizer1State):
    pass


class PagedAdamW32bit(Optimizer2State):
    def __init__(self, params: Any, lr: float = 1e-3) -> None:
        super().__init__(params, lr, optim_bits=32, is_paged=True)


for _cls in (Optimizer8bit, Optimizer2State, Optimizer1State, Adam8bit, Lion8bit, PagedAdamW32bit):
    _cls.__module__ = "bitsandbytes.optim.adam"


def test_8bit_state_for_large_parameters_and_32bit_for_small_ones() -> None:
    model = _model()
    optimizer = _stepped(make_optimizer("adam8bit", list(model.parameters())), model)
    weight, bias = model[0].weight, model[0].bias
    assert optimizer.state[weight]["state1"].dtype == torch.uint8
    assert optimizer.state[weight]["state2"].shape == weight.shape
    assert optimizer.state[weight]["absmax1"].shape == (WIDE * OUT // 256,)
    assert optimizer.state[bias]["state1"].dtype == torch.float32 and "absmax1" not in optimizer.state[bias]
    assert optimizer.state[weight]["qmap1"] is optimizer.state[model[2].weight]["qmap1"]  # one map per optimizer
    assert optimizer.state[weight]["step"] == 1  # a Python int, as bitsandbytes keeps it
    assert _state_bytes(optimizer) == _formula(NUMELS, states=2)


def test_absmax_blocks_round_up_and_the_blocksize_follows_the_release(monkeypatch: Any) -> None:
    settings = modelled.BnbSettings(states=2)
    assert [settings.blocks(n) for n in (4096, 4097, 4351, 256)] == [16, 17, 17, 1]
    model = _model()
    assert modelled.settings_of(Adam8bit(model.parameters())).blocksize == 256  # none loaded: the current release
    monkeypatch.setitem(sys.modules, "bitsandbytes", types.SimpleNamespace(__version__="0.41.1"))
    old = modelled.settings_of(Adam8bit(model.parameters()))
    assert (old.blocksize, old.fp32_below) == (2048, 4096)  # 2048 before 0.44.0; < 4096 in 32 bits before 0.43.2
    assert old.blocks(4097) == 3


def test_a_bitsandbytes_optimizer_that_reads_values_in_its_constructor_is_modelled() -> None:
    model = _model()
    adam = _trace(model, Adam8bit(model.parameters()))
    lion = _trace(model, Lion8bit(model.parameters()))
    assert adam.optimizer_state == _formula(NUMELS, states=2)
    assert lion.optimizer_state == _formula(NUMELS, states=1)  # Lion, momentum: one state, one qmap
    assert adam.optimizer_host == lion.optimizer_host == 0  # `step` is a Python int


def test_per_parameter_overrides_and_old_release_options_are_read() -> None:
    model = _model()
    optimizer = Adam8bit(model.parameters(), percentile_clipping=95, block_wise=False)
    triples = [(model[2], "bias", {"optim_bits": 32})]  # what HF's Trainer registers for nn.Embedding weights
    optimizer.mng = _Args(index2config={}, pid2config={id(model[2].weight): {"optim_bits": 32}})
    optimizer.mng.module_weight_config_triple = triples
    stand_in = _stepped(modelled.model_bitsandbytes(optimizer, optimizer.param_groups), model)
    big = stand_in.state[model[0].weight]
    assert {"max1", "new_max1", "max2", "new_max2", "gnorm_vec"} <= set(big) and "absmax1" not in big
    assert big["gnorm_vec"].shape == (100,)
    assert stand_in.state[model[2].weight]["state1"].dtype == torch.float32  # override_config(optim_bits=32)
    assert modelled.per_parameter_settings(optimizer)[0][3].optim_bits == 32  # register_module_override


def test_paged_state_is_marked_outside_the_caching_allocator() -> None:
    model = _model()
    optimizer = _stepped(make_optimizer("paged-adamw8bit", list(model.parameters())), model)
    big, small = optimizer.state[model[0].weight], optimizer.state[model[2].weight]
    assert big["state1"].is_paged and big["state2"].is_paged  # >= 1e5 elements: cudaMallocManaged
    assert not getattr(big["absmax1"], "is_paged", False) and not getattr(small["state1"], "is_paged", False)
    assert modelled.outside_allocator("state1", big["state1"], device_step=False)
    assert not modelled.outside_allocator("absmax1", big["absmax1"], device_step=False)
    assert modelled.paged_state_bytes(optimizer) == 2 * WIDE * OUT
    traced = _trace(model, PagedAdamW32bit(model.parameters()))
    assert traced.optimizer_state + traced.optimizer_host == _formula(NUMELS, states=2, min_8bit=10**9)


def test_named_8bit_kinds_hold_about_a_quarter_of_adamw_state() -> None:
    model = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512))
    reports = {kind: analyze(model, batch_size=2, input=(512,), optimizer=kind) for kind in ("adamw", "adamw8bit")}
    ratio = reports["adamw8bit"].optimizer_bytes / reports["adamw"].optimizer_bytes
    assert 2 / 8 < ratio < 2 / 8 + 0.02  # 2 bytes + 8/256 of absmax per element, against 8; biases stay fp32


def test_torch_adafactor_traces_with_its_factored_state() -> None:
    if not hasattr(torch.optim, "Adafactor"):
        pytest.skip("torch.optim.Adafactor needs torch >= 2.5")
    model = _model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = _trace(model, torch.optim.Adafactor(model.parameters()))
        other = _model()
        real = _stepped(torch.optim.Adafactor(other.parameters()), other)
    # row (out, 1) and column (1, in) vectors for matrices, a full vector for biases, a float32 `step` on the host
    factored = 4 * (OUT + WIDE + OUT + 10 + OUT + 10)
    assert traced.optimizer_state == factored == _state_bytes(real)
    assert traced.optimizer_host == 4 * 4
    named = _trace(model, "adafactor")
    assert named.optimizer_state == factored
    # the named kind runs as CUDA's default does, foreach (a copied optimizer of the user's: the same), whose
    # step holds about a parameter's worth more than the for-loop a CPU would pick
    assert named.optimizer_transient == traced.optimizer_transient and named.peak_live == traced.peak_live


@pytest.mark.parametrize("beta1", [None, 0.9])
def test_transformers_adafactor_traces_with_its_defaults(beta1: Any) -> None:
    optimization = pytest.importorskip("transformers.optimization")
    model = _model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = _trace(model, optimization.Adafactor(model.parameters(), lr=None, beta1=beta1))
        other = _model()
        real = _stepped(optimization.Adafactor(other.parameters(), lr=None, beta1=beta1), other)
    assert traced.optimizer_state == _state_bytes(real, host_step=True)  # exp_avg_sq_row/col, RMS (+ exp_avg)


def test_an_unknown_kind_is_one_line() -> None:
    with pytest.raises(ValueError) as error:
        analyze(_model(), batch_size=2, input=(WIDE,), optimizer="adam4bit")
    assert "adamw8bit" in str(error.value) and "\n" not in str(error.value)
    with pytest.raises(ValueError, match="paged-adamw8bit"):
        make_optimizer("adam4bit", list(_model().parameters()))


# --- the real library, where it installs (CPU builds run their steps on CPU tensors) ---------------------------


@pytest.mark.parametrize("name", ["Adam8bit", "AdamW8bit", "Lion8bit", "PagedAdamW8bit", "PagedAdamW32bit", "SGD8bit"])
def test_modelled_state_equals_the_real_optimizer_state(name: str) -> None:
    bnb = pytest.importorskip("bitsandbytes")
    cls = getattr(bnb.optim, name)
    kwargs = {"momentum": 0.9} if name == "SGD8bit" else {}
    model = _model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # paged optimizers on CPU fall back to ordinary buffers
        traced = _trace(model, cls(model.parameters(), lr=1e-3, **kwargs))
        other = _model()
        real = _stepped(cls(other.parameters(), lr=1e-3, **kwargs), other)
    assert traced.optimizer_state + traced.optimizer_host == _state_bytes(real)


def test_paged_state_stays_out_of_the_replay_and_the_report_says_where_it_is() -> None:
    """A paged optimizer's large states live in unified memory: the allocator model never holds them, and the
    report names their size and where they are."""
    model = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512))
    paged = analyze(model, batch_size=2, input=(512,), optimizer="paged-adamw8bit", memory="8GiB")
    plain = analyze(model, batch_size=2, input=(512,), optimizer="adamw8bit", memory="8GiB")

    state = 2 * 2 * 512 * 512  # two uint8 states of each 512x512 weight (>= 1e5 elements: paged)
    assert plain.peak_allocated_bytes - paged.peak_allocated_bytes == state
    assert any(n.startswith("paged optimizer state: 1.00 MiB in unified memory") for n in paged.notes), paged.notes
    assert not any("paged optimizer state" in n for n in plain.notes)
