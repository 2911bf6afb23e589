"""What the user namespace says about the training setup: batch size, DataLoaders, workers, input size, the
model, and the user's own names for the cells the checklist inserts. Read through the one walk's loop over the
user's variables (heldby.walk.read_variables), by type: a variable that cannot be inspected is named in
`Scan.skipped`, never the end of the checklist."""

from __future__ import annotations

import keyword
import sys
from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence, Tuple

from gpumem_kernel.oom.diagnosis import CodeNames, InputSize, Loader, ModelInfo
from gpumem_kernel.heldby import collect
from gpumem_kernel.heldby.walk import holders, memory_walker, read_variables
from gpumem_kernel.probe.holders import TorchKinds, torch_kinds
from gpumem_kernel.probe.inspection import Skipped, is_fault, type_name
from gpumem_kernel.render.units import human


_HOLDERS_NAMED = 3  # the variables the "what to free" note names, largest first
_BATCH_NAMES = {"batch_size", "bs", "batchsize", "train_batch_size", "per_device_train_batch_size"}
_WORKER_NAMES = {"num_workers", "n_workers", "workers", "dataloader_num_workers"}
_IMAGE_NAMES = {"img_size", "image_size", "imgsz", "img_res", "resolution", "input_size", "crop_size"}
_SEQUENCE_NAMES = {
    "seq_len",
    "seq_length",
    "max_seq_len",
    "max_seq_length",
    "max_length",
    "max_len",
    "block_size",
    "context_length",
    "max_source_length",
    "max_target_length",
}


def _positive_int(value: Any) -> Optional[int]:
    cls = type(value)
    return int(value) if issubclass(cls, int) and not issubclass(cls, bool) and value > 0 else None


@dataclass(frozen=True)
class TrainerArgs:
    """Hugging Face TrainingArguments' setting names, read while the scan had the object."""

    name: str
    batch_size: Optional[int]
    num_workers: int


@dataclass
class Scan:
    """What the user namespace says about the training setup."""

    batch: List[Tuple[str, int]] = field(default_factory=list)
    workers: List[Tuple[str, int]] = field(default_factory=list)
    inputs: List[InputSize] = field(default_factory=list)
    loaders: List[Loader] = field(default_factory=list)
    models: List[Tuple[str, Any]] = field(default_factory=list)
    optimizers: List[str] = field(default_factory=list)
    losses: List[str] = field(default_factory=list)
    device: Optional[str] = None
    scaler: Optional[str] = None
    trainer_args: Optional[TrainerArgs] = None
    skipped: Skipped = field(default_factory=Skipped)  # the variables that could not be inspected


def _is_instance(value: Any, module: str, name: str) -> bool:
    """Whether `value`'s type is `module.name` or a subclass (its `__class__` may lie); False before the module
    is imported."""
    cls = getattr(sys.modules.get(module), name, None)
    return isinstance(cls, type) and issubclass(type(value), cls)


def scan_namespace(shell: Any) -> Scan:
    """Every user variable looked at once; one that cannot be inspected, or whose reading raises, is left out
    and named in `scan.skipped`."""
    scan = Scan()
    kinds = torch_kinds()
    read_variables(shell, scan.skipped, lambda name, value: _scan_one(scan, name, value, kinds))
    return scan


def _scan_one(scan: Scan, name: str, value: Any, kinds: Optional[TorchKinds]) -> None:
    lower = name.lower()
    number = _positive_int(value)
    if number is not None:
        if lower in _BATCH_NAMES:
            scan.batch.append((name, number))
        elif lower in _WORKER_NAMES:
            scan.workers.append((name, number))
        elif lower in _IMAGE_NAMES or lower in _SEQUENCE_NAMES:
            scan.inputs.append(InputSize(name, number, "image" if lower in _IMAGE_NAMES else "sequence"))
        return
    cls = type(value)
    if cls is int and value == 0 and lower in _WORKER_NAMES:
        scan.workers.append((name, 0))
        return
    if kinds is None:
        return
    if _is_instance(value, "torch.utils.data", "DataLoader"):
        batch_size = _positive_int(getattr(value, "batch_size", None))
        scan.loaders.append(Loader(name, batch_size, int(getattr(value, "num_workers", 0) or 0)))
    elif _is_instance(value, "torch.nn.modules.loss", "_Loss"):
        scan.losses.append(name)
    elif kinds.module is not None and issubclass(cls, kinds.module):
        model_info(name, value)  # read once here, under the guard: one that raises is skipped and named
        scan.models.append((name, value))
    elif kinds.optimizer is not None and issubclass(cls, kinds.optimizer):
        scan.optimizers.append(name)
    elif type_name(cls) == "GradScaler" and str(cls.__module__).startswith("torch"):
        scan.scaler = name
    elif lower == "device" and (issubclass(cls, str) or type_name(cls) == "device"):
        scan.device = name
    elif type_name(cls) == "TrainingArguments":  # Hugging Face Trainer's setting names
        scan.trainer_args = TrainerArgs(
            name,
            _positive_int(getattr(value, "per_device_train_batch_size", None)),
            int(getattr(value, "dataloader_num_workers", 0) or 0),
        )


def _attribute(obj: Any, name: str) -> Any:
    """`obj.name`, or None when it is missing or reading it raises (a model's own attribute hooks)."""
    try:
        return getattr(obj, name, None)
    except BaseException as error:
        if not is_fault(error):
            raise
        return None


def model_info(name: str, model: Any) -> ModelInfo:
    parameters = size = 0
    try:
        for p in model.parameters():
            parameters += p.numel()
            size += p.numel() * p.element_size()
    except Exception:
        pass
    blocks, blocks_kind = _largest_blocks(model)
    return ModelInfo(
        name,
        type_name(type(model)),
        int(parameters),
        int(size),
        blocks,
        blocks_kind,
        hf_checkpointing=callable(_attribute(model, "gradient_checkpointing_enable")),
        checkpointing_on=_attribute(model, "is_gradient_checkpointing") is True,
    )


def _largest_blocks(model: Any) -> Tuple[Optional[str], Optional[str]]:
    """Attribute path of the ModuleList/Sequential (depth ≤ 3) with the most parameters, for checkpointing."""
    best: Tuple[int, Optional[str], Optional[str]] = (0, None, None)
    try:
        for path, module in model.named_modules():
            kind = type(module).__name__
            if kind not in ("ModuleList", "Sequential") or len(module) < 2:
                continue
            parts = path.split(".") if path else []
            if len(parts) > 3 or not all(_is_name(part) for part in parts):
                continue
            count = sum(p.numel() for p in module.parameters())
            if count > best[0]:
                best = (count, path, kind)
    except Exception:
        return None, None
    return best[1], best[2]


def pick_batch(scan: Scan) -> Tuple[Optional[int], Optional[str]]:
    loaders = [loader for loader in scan.loaders if loader.batch_size]
    train = [loader for loader in loaders if "train" in loader.name.lower()] or loaders
    if train:
        return train[0].batch_size, f"{train[0].name}.batch_size"
    if scan.trainer_args is not None and scan.trainer_args.batch_size:
        return scan.trainer_args.batch_size, f"{scan.trainer_args.name}.per_device_train_batch_size"
    if scan.batch:
        return scan.batch[0][1], scan.batch[0][0]
    return None, None


def pick_workers(scan: Scan) -> Optional[int]:
    counts = [loader.num_workers for loader in scan.loaders] + [n for _, n in scan.workers]
    if scan.trainer_args is not None:
        counts.append(scan.trainer_args.num_workers)
    return max(counts) if counts else None


def _graph(graph_bytes: int) -> str:
    """What a variable keeps alive through its autograd graphs, after its own bytes ("" for none)."""
    return f" (and {human(graph_bytes)} through its autograd graphs)" if graph_bytes else ""


def _is_name(text: str) -> bool:
    """Whether code can spell `text` as a name: namespace keys are any strings (globals()["x = 1; ..."])."""
    return text.isidentifier() and not keyword.iskeyword(text)


def _code_name(candidates: Sequence[str], placeholder: str) -> str:
    """The first candidate code can spell, else the placeholder the user fills: inserted cells are code the user
    runs, so a key that is not an identifier never reaches them."""
    return next((name for name in candidates if _is_name(name)), placeholder)


def code_names(scan: Scan, model: Optional[ModelInfo]) -> CodeNames:
    names = [loader.name for loader in scan.loaders]
    train = [name for name in names if "train" in name.lower()] or names
    default = CodeNames()
    return CodeNames(
        model=_code_name([model.name] if model else [], default.model),
        optimizer=_code_name(scan.optimizers, default.optimizer),
        loader=_code_name(train, default.loader),
        criterion=_code_name(scan.losses, default.criterion),
        device=_code_name([scan.device] if scan.device else [], default.device),
    )


def half_precision(scan: Scan, model_name: str) -> bool:
    for name, value in scan.models:
        if name == model_name:
            try:
                return str(next(value.parameters()).dtype) in ("torch.float16", "torch.bfloat16")
            except Exception:
                return False
    return False


def variables_note(shell: Any) -> Optional[str]:
    """What to free that clearing leaves: the variables holding the most GPU memory, by the walk the holders panel
    and the clear use (a `trainer` object holding a model on the GPU is one); None while no GPU memory is in use
    (heldby.collect.cuda_in_use, the holders' switch) or no variable holds any. Variables that cannot be
    inspected are left out here: the scan's one line names them."""
    try:
        in_use = collect.cuda_in_use()
    except Exception:  # a torch.cuda that cannot say what it allocated: the checklist goes on without the note
        return None
    walker = memory_walker(in_use[0]) if in_use is not None else None
    if walker is None:
        return None
    held = holders(shell, walker=walker)
    if not held:
        return None
    listed = ", ".join(f"`{h.name}` {human(h.bytes)}{_graph(h.graph_bytes)}" for h in held[:_HOLDERS_NAMED])
    more = f" and {len(held) - _HOLDERS_NAMED} more" if len(held) > _HOLDERS_NAMED else ""
    command = _code_name([h.name for h in held], "NAME")
    return (
        f"What to free: your variables hold {human(sum(h.bytes for h in held))} of GPU memory that clearing "
        f"leaves: {listed}{more}; del the ones you no longer need, or run %gpumem clear --vars {command}"
    )
