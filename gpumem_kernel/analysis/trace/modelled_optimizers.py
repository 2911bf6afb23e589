"""Optimizers the trace models instead of running: bitsandbytes' 8-bit and paged optimizers, whose steps call CUDA
kernels a fake CPU tensor cannot run (and whose constructors read tensor values), and the Adafactors, whose steps
read norms with .item() only to scale the learning rate.

The bitsandbytes stand-in is a torch.optim.Optimizer built over the trace's copy of the parameters, with the user's
optimizer's settings read from its attributes (never touching it): its step allocates exactly the state
bitsandbytes allocates (bitsandbytes/optim/optimizer.py, `Optimizer2State.init_state` / `Optimizer1State.init_state`
and `get_state_buffer`; line numbers below are of commit 95f9af30, release 0.50.2), and nothing else: the update
kernels work in place. Sizes by release:

- 8-bit state (`optim_bits == 8` and `p.numel() >= min_8bit_size`, default 4096): state1 (and state2) uint8 of p's
  shape, absmax1 (and absmax2) fp32 of ceil(numel / blocksize) (optimizer.py:524-529); blocksize 256 since 0.44.0
  (aa57bd89), 2048 before. Releases before 0.43.2 also kept parameters under 4096 elements in 32 bits whatever
  min_8bit_size (5212a0f2). Before 0.50, `block_wise=False` kept four (1,) fp32 maxima instead of absmax, and
  `percentile_clipping < 100` a (100,) fp32 gnorm_vec per parameter.
- 32-bit state (small parameters, 32-bit classes): state1 (and state2) fp32 of p's shape (optimizer.py:508-510).
- The quantisation maps: 256 fp32 values each (functional.py `create_dynamic_map`), one per optimizer, moved to the
  device at the first 8-bit parameter: "dynamic" (and "udynamic" for 2 states) (optimizer.py:513-522).
- `max_unorm > 0`: a (1,) fp32 unorm_vec per parameter (optimizer.py:531-532). `step` is a Python int.
- Paged classes (`is_paged`): state1/state2 of parameters with at least 1e5 elements come from `F.get_paged`,
  cudaMallocManaged unified memory outside PyTorch's caching allocator (optimizer.py:383-390); bitsandbytes marks
  them `is_paged = True`, and so does the stand-in. absmax and qmaps stay in the caching allocator.
- AdEMAMix (not AdEMAMix32bit, which does not override init_state): state1 holds two EMAs, (2, *p.shape), and
  absmax1 (2, blocks) (ademamix.py `init_state`).

torch is imported inside functions only: the kernel shim must load without it."""

from __future__ import annotations

import contextlib
import functools
import sys
from dataclasses import dataclass, replace
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from gpumem_kernel.analysis.trace.plan import TraceError

PACKAGE = "bitsandbytes"
QMAP_VALUES = 256  # create_dynamic_map: `assert len(data) == 2**total_bits`, fp32
PAGED_MIN_NUMEL = 100_000  # get_state_buffer: `p.numel() < 1e5` stays in the caching allocator
BLOCKSIZE = 256  # releases >= 0.44.0
OLD_BLOCKSIZE = 2048  # releases < 0.44.0 ("Change 8bit optimizer blocksize 2048->256", aa57bd89)
OLD_FP32_BELOW = 4096  # releases < 0.43.2: `dtype == torch.uint8 and p.numel() < 4096` -> fp32
GNORM_HISTORY = 100  # percentile_clipping < 100: gnorm_vec, the last 100 gradient norms (releases < 0.50)

_TWO_STATE_NAMES = ("adam", "lamb", "ademamix")  # Optimizer2State's optimizer_name values
_ONE_STATE_NAMES = ("momentum", "lion", "rmsprop", "adagrad", "lars")
_OVERRIDABLE = ("optim_bits", "min_8bit_size", "percentile_clipping", "block_wise", "max_unorm")


@dataclass(frozen=True)
class BnbSettings:
    """What decides one parameter's bitsandbytes state."""

    states: int  # 2: Adam, AdamW, LAMB, AdEMAMix; 1: Lion, SGD (momentum), RMSprop, Adagrad, LARS
    optim_bits: int = 8
    min_8bit_size: int = 4096
    block_wise: bool = True
    blocksize: int = BLOCKSIZE
    percentile_clipping: int = 100
    max_unorm: float = 0.0
    is_paged: bool = False
    double_first: bool = False  # AdEMAMix: two EMAs in state1
    fp32_below: int = 0  # OLD_FP32_BELOW on releases before 0.43.2

    def eight_bit(self, numel: int) -> bool:
        return self.optim_bits == 8 and numel >= max(self.min_8bit_size, self.fp32_below)

    def blocks(self, numel: int) -> int:
        return -(-numel // self.blocksize)  # (n // blocksize) + bool(n % blocksize)


def is_bitsandbytes(optimizer: Any) -> bool:
    """An optimizer of bitsandbytes' 8-bit family (Optimizer8bit's subclasses), told by module and class names, so
    that bitsandbytes need not be importable here."""
    cls = type(optimizer)
    if not str(cls.__module__).split(".")[0] == PACKAGE:
        return False
    return any(base.__name__ in ("Optimizer8bit", "Optimizer1State", "Optimizer2State") for base in cls.__mro__)


def _release(module: str) -> Optional[Tuple[int, ...]]:
    """bitsandbytes' version as a tuple of ints, when it is loaded (None: assume the current release)."""
    version = getattr(sys.modules.get(module.split(".")[0]), "__version__", None)
    if not isinstance(version, str):
        return None
    parts: List[int] = []
    for piece in version.split("+")[0].split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts) or None


def _state_count(optimizer: Any) -> int:
    names = {base.__name__ for base in type(optimizer).__mro__}
    name = getattr(optimizer, "optimizer_name", None)
    if "Optimizer2State" in names or name in _TWO_STATE_NAMES:
        return 2
    if "Optimizer1State" in names or name in _ONE_STATE_NAMES:
        return 1
    raise TraceError(f"cannot model bitsandbytes optimizer {type(optimizer).__name__}: unknown state layout")


def settings_of(optimizer: Any) -> BnbSettings:
    """The user's bitsandbytes optimizer's settings, from the attributes its constructor sets (`args`, a MockArgs,
    and `is_paged`), with the blocksize and small-parameter rule of the loaded release."""
    args = getattr(optimizer, "args", None)
    release = _release(type(optimizer).__module__)
    old = release is not None and release < (0, 44)
    return BnbSettings(
        states=_state_count(optimizer),
        optim_bits=int(getattr(args, "optim_bits", 32)),
        min_8bit_size=int(getattr(args, "min_8bit_size", 4096)),
        block_wise=bool(getattr(args, "block_wise", True)),
        blocksize=OLD_BLOCKSIZE if old else BLOCKSIZE,
        percentile_clipping=int(getattr(args, "percentile_clipping", 100)),
        max_unorm=float(getattr(args, "max_unorm", 0.0) or 0.0),
        is_paged=bool(getattr(optimizer, "is_paged", False)),
        double_first=any(base.__name__ == "AdEMAMix" for base in type(optimizer).__mro__),
        fp32_below=OLD_FP32_BELOW if release is not None and release < (0, 43, 2) else 0,
    )


def _overrides(optimizer: Any, gindex: int, pindex: int, p: Any) -> Dict[str, Any]:
    """GlobalOptimManager's per-parameter overrides (`override_config`), as `get_config` merges them."""
    manager = getattr(optimizer, "mng", None)
    found: Dict[str, Any] = {}
    tables = ((getattr(manager, "index2config", None), (gindex, pindex)), (getattr(manager, "pid2config", None), id(p)))
    for table, key in tables:
        if isinstance(table, dict) and isinstance(table.get(key), dict):
            found.update({k: v for k, v in table[key].items() if k in _OVERRIDABLE})
    # register_module_override's triples, which check_overrides applies at the first step: Hugging Face's Trainer
    # keeps every nn.Embedding weight in 32 bits this way with its bitsandbytes optimizers
    for module, attr, config in getattr(manager, "module_weight_config_triple", None) or ():
        if getattr(module, attr, None) is p and isinstance(config, dict):
            found.update({k: v for k, v in config.items() if k in _OVERRIDABLE})
    return found


def per_parameter_settings(optimizer: Any) -> List[List[BnbSettings]]:
    """Each parameter's settings, group by group, overrides applied."""
    base = settings_of(optimizer)
    return [
        [replace(base, **_overrides(optimizer, g, i, p)) for i, p in enumerate(group["params"])]
        for g, group in enumerate(optimizer.param_groups)
    ]


@functools.lru_cache(maxsize=None)
def stand_in_class() -> type:
    """The stand-in optimizer class (made on first use: torch is imported inside functions only)."""
    import torch

    class BitsAndBytesStandIn(torch.optim.Optimizer):
        """Allocates at its first step the state a bitsandbytes optimizer allocates; updates nothing."""

        def __init__(self, params: Any, settings: List[List[BnbSettings]], name: str, defaults: Dict[str, Any]):
            super().__init__(params, dict(defaults))
            self.settings = settings
            self.modelled = name  # the user's class, for the report
            self.is_paged = any(s.is_paged for group in settings for s in group)
            self.qmaps: Dict[str, Any] = {}

        @torch.no_grad()
        def step(self, closure: Any = None) -> Any:
            loss = None
            if closure is not None:
                with torch.enable_grad():
                    loss = closure()
            for group, settings in zip(self.param_groups, self.settings):
                for p, s in zip(group["params"], settings):
                    if p.grad is None:
                        continue
                    state = self.state[p]
                    if len(state) == 0:
                        init_state(state, p, s, self.qmaps)
                    if not p.grad.is_contiguous():  # update_step: `p.grad = p.grad.contiguous()`
                        p.grad = p.grad.contiguous()
                    state["step"] += 1
            return loss

    return BitsAndBytesStandIn


def init_state(state: Dict[str, Any], p: Any, s: BnbSettings, qmaps: Dict[str, Any]) -> None:
    """The tensors `init_state` puts in a parameter's state (see the module docstring for the source lines)."""
    import torch

    state["step"] = 0
    numel = p.numel()
    dtype = torch.uint8 if s.eight_bit(numel) else torch.float32
    shape = ((2,) if s.double_first else ()) + tuple(p.shape)
    names = ("state1", "state2")[: s.states]
    for name in names:
        state[name] = _state_buffer(shape if name == "state1" else tuple(p.shape), dtype, p.device, s, numel)
    if dtype == torch.uint8:
        for index, qmap in enumerate(("dynamic", "udynamic")[: s.states]):
            if qmap not in qmaps:  # one map per optimizer, moved to the device once
                qmaps[qmap] = torch.zeros(QMAP_VALUES, dtype=torch.float32, device=p.device)
            state[f"qmap{index + 1}"] = qmaps[qmap]
        for name in names:
            index = name[-1]
            if s.block_wise:
                rows = (2,) if s.double_first and index == "1" else ()
                state[f"absmax{index}"] = torch.zeros(rows + (s.blocks(numel),), dtype=torch.float32, device=p.device)
            else:
                state[f"max{index}"] = torch.zeros((1,), dtype=torch.float32, device=p.device)
                state[f"new_max{index}"] = torch.zeros((1,), dtype=torch.float32, device=p.device)
    if s.percentile_clipping < 100:
        state["gnorm_vec"] = torch.zeros((GNORM_HISTORY,), dtype=torch.float32, device=p.device)
    if s.max_unorm > 0.0 and not s.double_first:
        state["unorm_vec"] = torch.zeros((1,), dtype=torch.float32, device=p.device)


def _state_buffer(shape: Tuple[int, ...], dtype: Any, device: Any, s: BnbSettings, numel: int) -> Any:
    """get_state_buffer: paged (unified memory, marked as bitsandbytes marks it) for >= 1e5 elements."""
    import torch

    buffer = torch.zeros(shape, dtype=dtype, device=device)
    if s.is_paged and numel >= PAGED_MIN_NUMEL:
        buffer.is_paged = True
    return buffer


def model_bitsandbytes(optimizer: Any, groups: List[Dict[str, Any]]) -> Any:
    """The stand-in for the user's bitsandbytes optimizer over `groups` (the copy's parameters, its settings)."""
    settings = per_parameter_settings(optimizer)
    defaults = {k: v for k, v in getattr(optimizer, "defaults", {}).items()}
    return stand_in_class()(groups, settings, type(optimizer).__name__, defaults)


def planned_bitsandbytes(
    params: Sequence[Any], settings: BnbSettings, name: str, lr: float, weight_decay: float
) -> Any:
    """A named kind's stand-in (bitsandbytes' constructor defaults: betas (0.9, 0.999), eps 1e-8)."""
    params = list(params)
    defaults = {"lr": lr, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": weight_decay}
    return stand_in_class()(params, [[settings] * len(params)], name, defaults)


def carry_paged_marks(original: Dict[str, Any], copied: Dict[str, Any]) -> None:
    """A copied state keeps bitsandbytes' `is_paged` mark (a copy of a stepped paged optimizer's state)."""
    for key, value in original.items():
        if getattr(value, "is_paged", False) and key in copied:
            copied[key].is_paged = True


def outside_allocator(key: str, value: Any, device_step: bool) -> bool:
    """Whether an optimizer state tensor lives outside PyTorch's caching allocator on CUDA: torch's `step` scalars
    of non-fused optimizers (host memory) and bitsandbytes' paged state (cudaMallocManaged)."""
    return (key == "step" and not device_step) or bool(getattr(value, "is_paged", False))


def paged_state_bytes(optimizer: Any) -> int:
    """Bytes of paged (unified-memory) state, each storage once."""
    seen: Dict[Any, int] = {}
    for state in optimizer.state.values():
        for value in state.values():
            if getattr(value, "is_paged", False):
                st = value.untyped_storage()
                seen[id(st)] = int(st.nbytes())
    return sum(seen.values())


# --- Adafactor: a step whose value reads only scale the learning rate ---------------------------------------------

# (package, class name): torch.optim.Adafactor reads `param.norm(2).item()` and `update.norm(2).item()`
# (_adafactor.py, _single_tensor_adafactor); transformers' compares its `RMS` state with a float in `_get_lr`
# (relative_step / scale_parameter, the defaults). Neither read changes a shape or what is allocated.
_VALUE_BLIND_STEPS = (("torch", "Adafactor"), ("transformers", "Adafactor"))


def reads_values_for_scale_only(optimizer: Any) -> bool:
    cls = type(optimizer)
    return (str(cls.__module__).split(".")[0], cls.__name__) in _VALUE_BLIND_STEPS


def answer_value_reads(optimizer: Any) -> Any:
    """The optimizer, its step patched (on this instance only) to run with .item() of a fake tensor answered."""
    step = optimizer.step

    @functools.wraps(step)
    def answered_step(*args: Any, **kwargs: Any) -> Any:
        with answered_scalar_reads():
            return step(*args, **kwargs)

    optimizer.step = answered_step
    return optimizer


def _neutral(fake_mode: Any, func: Any, arg: Any) -> Any:
    """A fake tensor's value read: its memo when FakeTensorMode has one, else 1 of its kind (a norm, a count)."""
    memo = getattr(arg, "item_memo", None)
    if memo is not None:
        return memo
    if arg.dtype.is_floating_point or arg.dtype.is_complex:
        return 1.0
    return True if str(arg.dtype) == "torch.bool" else 1


@contextlib.contextmanager
def answered_scalar_reads() -> Iterator[None]:
    """Within this block a fake tensor's .item() returns a neutral value instead of raising; restored after, also on
    error. Real tensors and fake constants answer as before (FakeTensorMode computes those before this table)."""
    import torch

    try:
        from torch._subclasses import fake_impls

        table = fake_impls.op_implementations_dict
    except (ImportError, AttributeError):  # another torch: the read fails as it would, in one line
        yield
        return
    ops = [torch.ops.aten._local_scalar_dense.default, torch.ops.aten.item.default]
    saved = {op: table[op] for op in ops if op in table}
    try:
        for op in saved:
            table[op] = _neutral
        yield
    finally:
        table.update(saved)


def make_adafactor(params: Sequence[Any], lr: float) -> Any:
    """torch.optim.Adafactor (torch >= 2.5) for the `adafactor` kind, its value reads answered."""
    import torch

    cls = getattr(torch.optim, "Adafactor", None)
    if cls is None:
        raise ValueError(f"optimizer 'adafactor' needs torch >= 2.5 (torch.optim.Adafactor), not {torch.__version__}")
    return answer_value_reads(cls(params, lr=lr, foreach=True))
