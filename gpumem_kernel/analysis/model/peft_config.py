"""A PEFT adapter config for the plan (`peft=`, `--peft`): what `adapter_config.json` holds, read from that file, a
directory holding it, inline JSON text, a dict or a `peft.PeftConfig`, and applied to the planning copy with peft's
own `get_peft_model` (never to the user's model).

The methods planned: LoRA (with DoRA, rsLoRA, `modules_to_save`), IA3, LoHa, LoKr, LN tuning, prompt tuning, prefix
tuning and P-tuning. The keys that do not change training memory (`base_model_name_or_path`, `revision`,
`inference_mode`, ...) are read and ignored: a saved adapter says `inference_mode: true`, and the plan trains its
adapters anyway (a note says so).

torch and peft are imported inside functions only: the kernel shim must load without them.
"""

from __future__ import annotations

import json
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

FILE_NAME = "adapter_config.json"
# peft_type -> the method's name in the report
METHODS: Dict[str, str] = {
    "LORA": "LoRA",
    "IA3": "IA3",
    "LOHA": "LoHa",
    "LOKR": "LoKr",
    "LN_TUNING": "LN tuning",
    "PROMPT_TUNING": "prompt tuning",
    "PREFIX_TUNING": "prefix tuning",
    "P_TUNING": "P-tuning",
}
PROMPT_LEARNING = ("PROMPT_TUNING", "PREFIX_TUNING", "P_TUNING")
NEEDS_PEFT = "--peft needs peft installed (pip install peft)"
PEFT_HELP = (
    "plan a PEFT adapter on a copy of the model (never on yours), as adapter_config.json holds it: that file, a "
    'directory holding it, or inline JSON (\'{"peft_type": "LORA", "r": 16, "use_dora": true}\'); LoRA (DoRA, '
    "rsLoRA, modules_to_save), IA3, LoHa, LoKr, LN tuning, prompt, prefix and P-tuning, added with peft's "
    "get_peft_model; not with --lora"
)
# read and ignored: where the adapter comes from and how it is served, not what training holds
# LoRA settings that change the adapters beyond what gpumem's own modules hold (when set)
_NEEDS_PEFT_KEYS = (
    "use_dora",
    "modules_to_save",
    "layers_to_transform",
    "layers_pattern",
    "rank_pattern",
    "alpha_pattern",
    "exclude_modules",
    "target_parameters",
    "trainable_token_indices",
)
_IGNORED = ("base_model_name_or_path", "revision", "auto_mapping", "peft_version", "inference_mode")
# a model class name's ending -> the peft task type prompt learning needs to put its prompts in the forward
_TASKS = (
    ("ForCausalLM", "CAUSAL_LM"),
    ("ForConditionalGeneration", "SEQ_2_SEQ_LM"),
    ("ForSeq2SeqLM", "SEQ_2_SEQ_LM"),
    ("ForSequenceClassification", "SEQ_CLS"),
    ("ForTokenClassification", "TOKEN_CLS"),
    ("ForQuestionAnswering", "QUESTION_ANS"),
)


@dataclass(frozen=True)
class PeftSpec:
    """An adapter config as read: its peft_type, the settings that shape training, where it came from."""

    peft_type: str  # a key of METHODS
    settings: Dict[str, Any] = field(hash=False)  # the config's keys but peft_type and the ignored ones
    source: str = "the peft config"  # the file, or 'the inline JSON', for messages
    inference_mode: bool = False

    @property
    def method(self) -> str:
        """The method's name: 'DoRA' for a LoRA config with use_dora."""
        return "DoRA" if self.peft_type == "LORA" and self.settings.get("use_dora") else METHODS[self.peft_type]


@dataclass
class PeftAdapters:
    """What applying the config did, for the report."""

    spec: PeftSpec
    text: str  # 'DoRA r=32, alpha=64, dropout=0 on q_proj,v_proj'
    layers: int  # the modules peft wrapped (0 for prompt learning)
    trainable: int  # trainable parameters after get_peft_model
    version: str  # peft's
    notes: List[str] = field(default_factory=list)


# --- reading ------------------------------------------------------------------------------------------------------


def parse_peft(value: Any) -> Optional[PeftSpec]:
    """None, a path (file or directory), inline JSON text, a dict or a peft.PeftConfig -> a PeftSpec; ValueError (one
    line, naming the source) otherwise. Needs no peft: the config is checked by peft when applied."""
    if value is None or value is False or isinstance(value, PeftSpec):
        return value or None
    if hasattr(value, "to_dict") and hasattr(value, "peft_type"):  # a peft.PeftConfig
        return _spec(_plain(value.to_dict()), "your PeftConfig")
    if isinstance(value, dict):
        return _spec(dict(value), "the peft dict")
    if isinstance(value, (str, Path)):
        text = str(value).strip()
        if text.startswith("{"):
            return _spec(_json(text, "the inline JSON"), "the inline JSON")
        path = _config_path(text)
        return _spec(_json(_read(path), str(path)), str(path))
    raise ValueError(
        f"peft must be a path to {FILE_NAME}, its JSON text, a dict or a PeftConfig, not {type(value).__name__}"
    )


def _plain(config: Dict[str, Any]) -> Dict[str, Any]:
    """A PeftConfig's to_dict() with its enums and sets as JSON has them."""
    plain = {}
    for key, value in config.items():
        value = getattr(value, "value", value)  # PeftType, TaskType
        plain[key] = sorted(value) if isinstance(value, (set, frozenset)) else value
    return plain


def _config_path(text: str) -> Path:
    path = Path(text).expanduser()
    if path.is_dir():
        inside = path / FILE_NAME
        if not inside.is_file():
            raise ValueError(f"peft: no {FILE_NAME} in {path}")
        return inside
    if not path.is_file():
        raise ValueError(f"peft: no such file or directory: {path}")
    return path


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"peft: cannot read {path} ({type(exc).__name__}: {exc})") from None


def _json(text: str, source: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"peft: {source} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None


def _spec(config: Any, source: str) -> PeftSpec:
    if not isinstance(config, dict):
        raise ValueError(f"peft: {source} holds a {type(config).__name__}, not an adapter config (a JSON object)")
    raw = config.get("peft_type")
    if raw is None:
        raise ValueError(f'peft: {source} has no peft_type; name the method, e.g. "peft_type": "LORA"')
    peft_type = str(getattr(raw, "value", raw)).strip().upper().replace("-", "_")
    if peft_type not in METHODS:
        raise ValueError(f"peft: {source} has peft_type {raw!r}, not one planned; use one of {', '.join(METHODS)}")
    settings = {k: v for k, v in config.items() if k != "peft_type" and k not in _IGNORED}
    return PeftSpec(peft_type, settings, source, bool(config.get("inference_mode", False)))


def lora_settings(spec: PeftSpec) -> Optional[Dict[str, Any]]:
    """A plain LoRA config as parse_lora takes it (r, alpha, dropout, targets), for gpumem's own adapter modules
    when peft is not installed; None when the config needs peft (another method, DoRA, modules_to_save, a bias, a
    pattern, targets not named as a list ...)."""
    settings = spec.settings
    targets = settings.get("target_modules")
    if spec.peft_type != "LORA" or any(settings.get(key) for key in _NEEDS_PEFT_KEYS):
        return None
    if settings.get("bias", "none") != "none" or not isinstance(targets, (list, tuple)) or not targets:
        return None
    return {
        "r": settings.get("r", 8),
        "alpha": settings.get("lora_alpha", 8),
        "dropout": settings.get("lora_dropout", 0.0),
        "targets": list(targets),
    }


# --- applying -----------------------------------------------------------------------------------------------------


def apply_peft(model: Any, spec: PeftSpec, peft: Any) -> Tuple[Any, PeftAdapters]:
    """The planning copy wrapped by peft's get_peft_model with the config; ValueError (one line, naming the source)
    when peft refuses the config or the model."""
    notes: List[str] = []
    settings = dict(spec.settings)
    if spec.peft_type in PROMPT_LEARNING and not settings.get("task_type"):
        settings["task_type"] = task_type(model)
        notes.append(f"{spec.method}: task_type {settings['task_type']} read from {type(model).__name__}")
    _plain_initialisation(spec, settings, notes)
    config = _config(spec, settings, peft, notes)
    try:
        wrapped = peft.get_peft_model(model, config)
    except Exception as exc:  # a layer type the method does not wrap, targets that match nothing ...
        raise ValueError(f"peft: cannot apply {spec.source} to {type(model).__name__} ({_first(exc)})") from None
    steady_lycoris(wrapped)
    built = wrapped.peft_config["default"]
    layers = sum(1 for m in wrapped.modules() if _is_tuner_layer(m))
    trainable = sum(p.numel() for p in wrapped.parameters() if p.requires_grad)
    if spec.inference_mode:
        notes.append(f"{spec.source} says inference_mode: true (as peft saves it); the plan trains the adapters")
    done = PeftAdapters(spec, describe(spec.peft_type, built), layers, trainable, str(peft.__version__), notes)
    return wrapped, done


# initialisations that read the weights or a tokenizer (SVD of each weight, a download): the same tensors as the
# default one, so the plan starts the adapters the default way
_INITIALISERS = {"LORA": ("init_lora_weights", (True, False, "gaussian"), True)}
_INITIALISERS["PROMPT_TUNING"] = ("prompt_tuning_init", ("RANDOM",), "RANDOM")


def _plain_initialisation(spec: PeftSpec, settings: Dict[str, Any], notes: List[str]) -> None:
    key, plain, default = _INITIALISERS.get(spec.peft_type, ("", (), None))
    value = settings.get(key)
    if key and value is not None and value not in plain:
        settings[key] = default
        notes.append(f"{spec.method}: {key} {value!r} not run on the copy (the adapters' memory does not depend on it)")


def _config(spec: PeftSpec, settings: Dict[str, Any], peft: Any, notes: List[str]) -> Any:
    from peft.mapping import PEFT_TYPE_TO_CONFIG_MAPPING

    cls = PEFT_TYPE_TO_CONFIG_MAPPING[spec.peft_type]
    known = set(getattr(cls, "__dataclass_fields__", {}))
    unknown = sorted(k for k in settings if k not in known)
    if unknown:  # a config saved by a newer peft, or a misspelt key: peft would drop them too, with a warning
        notes.append(f"{spec.source}: peft {peft.__version__}'s {cls.__name__} has no {', '.join(unknown)} (ignored)")
    try:
        return cls(**{k: v for k, v in settings.items() if k in known})
    except Exception as exc:  # a bad value: peft's own checks
        raise ValueError(f"peft: {spec.source}: {cls.__name__} refuses it ({_first(exc)})") from None


def _first(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:200]}"


def task_type(model: Any) -> str:
    """The peft task type of a model by its class name (prompt learning puts its prompts in that model's forward)."""
    name = type(model).__name__
    for ending, task in _TASKS:
        if name.endswith(ending):
            return task
    return "FEATURE_EXTRACTION"


def _is_tuner_layer(module: Any) -> bool:
    from peft.tuners.tuners_utils import BaseTunerLayer

    return isinstance(module, BaseTunerLayer)


def describe(peft_type: str, config: Any) -> str:
    """The method and its settings, as the report names them: 'DoRA r=32, alpha=64, dropout=0.05 on q_proj,v_proj',
    'IA3 on k_proj,v_proj,down_proj (feed-forward: down_proj)', 'prompt tuning, 20 virtual tokens'."""

    def get(key: str) -> Any:
        return getattr(config, key, None)

    if peft_type in PROMPT_LEARNING:
        return f"{METHODS[peft_type]}, {get('num_virtual_tokens')} virtual tokens"
    targets = f" on {_names(get('target_modules'))}"
    if peft_type == "LORA":
        name = "DoRA" if get("use_dora") else "LoRA"
        rs = " (rsLoRA scaling)" if get("use_rslora") else ""
        text = f"{name} r={get('r')}, alpha={get('lora_alpha'):g}, dropout={get('lora_dropout'):g}{rs}{targets}"
    elif peft_type in ("LOHA", "LOKR"):
        text = f"{METHODS[peft_type]} r={get('r')}, alpha={get('alpha'):g}{targets}"
    elif peft_type == "IA3":
        text = f"IA3{targets} (feed-forward: {_names(get('feedforward_modules'))})"
    else:
        text = f"{METHODS[peft_type]}{targets}"
    saved = get("modules_to_save")
    return text + (f"; trained in full: {_names(saved)}" if saved else "")


def method_of(model: Any) -> str:
    """The adapter method of a PEFT model by its config ('DoRA', 'IA3', ...); 'LoRA' for any other model."""
    configs = getattr(model, "peft_config", None)
    config = next(iter(configs.values()), None) if isinstance(configs, dict) else None
    peft_type = str(getattr(getattr(config, "peft_type", None), "value", getattr(config, "peft_type", "LORA")))
    if peft_type == "LORA" and getattr(config, "use_dora", False):
        return "DoRA"
    return METHODS.get(peft_type, peft_type)


def _names(value: Any) -> str:
    if not value:
        return "none"
    if isinstance(value, str):
        return value  # a pattern
    return ",".join(sorted(str(v) for v in value))


def steady_lycoris(model: Any) -> None:
    """LoHa's and LoKr's forward draw `torch.rand(1) > module_dropout` each training step to skip the adapters at
    random; a traced step cannot read that value. The planning copy's layers run peft's forward with the adapters
    always applied: the step that holds the most (module_dropout 0, the default, always applies them)."""
    from peft.tuners.lycoris_utils import LycorisLayer

    for module in model.modules():
        if isinstance(module, LycorisLayer) and hasattr(module, "_get_delta_activations"):
            # a bound method: the trace's deep copies of the model bind it to their own layer
            module.forward = types.MethodType(_always_applied, module)


def _always_applied(layer: Any, x: Any, *args: Any, **kwargs: Any) -> Any:
    """peft's LycorisLayer forward, its adapters applied at every training step."""
    if layer.disable_adapters or layer.merged:
        return layer.base_layer(x, *args, **kwargs)
    previous_dtype = x.dtype
    result = layer.base_layer(x, *args, **kwargs)
    for active in layer.active_adapters:
        if active in layer._available_adapters:
            result = result + layer._get_delta_activations(active, x, *args, **kwargs)
    return result.to(previous_dtype)
