"""Models by name: `hf:ORG/NAME[@revision]`, a path to a config.json, or a model directory holding one, built on the
meta device from the config with transformers' Auto classes (no weights: building an 8B model takes a second), with
the task head the user names, and the batch that task trains on.

The config comes from the local Hugging Face cache or, when the Hub is reachable, from the Hub; offline and absent,
one line says what to download. transformers is a test extra, never a runtime dependency: it is imported inside
functions only, and its absence is one line saying how to install it. torch is imported inside functions too.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, List, Optional, Tuple
from urllib.parse import urlparse

from gpumem_kernel.analysis.request.progress import ProgressReporter
from gpumem_kernel.analysis.request.request import AnalysisRequest, request_of
from gpumem_kernel.analysis.request.sequence import TokenBatches, at_sequence

HF_PREFIX = "hf:"
# --task -> transformers' Auto class; causal-lm is what fine-tuning notebooks train
TASKS: Dict[str, str] = {
    "causal-lm": "AutoModelForCausalLM",
    "seq-cls": "AutoModelForSequenceClassification",
    "token-cls": "AutoModelForTokenClassification",
    "masked-lm": "AutoModelForMaskedLM",
    "seq2seq-lm": "AutoModelForSeq2SeqLM",
    "image-cls": "AutoModelForImageClassification",
    "base": "AutoModel",
}
DEFAULT_TASK = "causal-lm"
TOKENS_CAP = 2048  # default sequence: the config's context, capped (a 128k context is rarely what one trains on)
_PROBE_TIMEOUT_S = 3.0


@dataclass
class Source:
    """Where a model's config is: a local config.json, and for `hf:` the repository it came from."""

    text: str  # as the user wrote it
    config_path: str
    repo: Optional[str] = None
    revision: Optional[str] = None


@dataclass
class BuiltModel:
    """A model built on the meta device from a config, and what the report should say about it."""

    model: Any
    config: Any
    task: str
    source: str
    notes: List[str] = field(default_factory=list)


def is_model_source(text: str, variables: Any = ()) -> bool:
    """`hf:...`, a path ending in .json, or an existing directory that is not a variable of the kernel."""
    if text.startswith(HF_PREFIX) or text.endswith(".json"):
        return True
    return text not in variables and os.path.isdir(os.path.expanduser(text))


# --- the config -------------------------------------------------------------------------------------------------


def resolve(text: str) -> Source:
    """The local config.json of `text`; ValueError (one line) when there is none."""
    if text.startswith(HF_PREFIX):
        return _hub_source(text)
    path = os.path.expanduser(text)
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
        if not os.path.isfile(path):
            raise ValueError(f"{text}: a directory without a config.json")
    elif not os.path.isfile(path):
        raise ValueError(f"{text}: no such file; pass hf:ORG/NAME, a config.json or a model directory")
    return Source(text, path)


def _hub_source(text: str) -> Source:
    repo, _, revision = text[len(HF_PREFIX) :].partition("@")
    if repo.count("/") > 1 or not repo.strip("/"):
        raise ValueError(f"{text}: expected hf:ORG/NAME or hf:ORG/NAME@REVISION")
    hub = _import("huggingface_hub")
    cached = hub.try_to_load_from_cache(repo, "config.json", revision=revision or None)
    if not _reachable(hub):
        if isinstance(cached, str):
            return Source(text, cached, repo, revision or None)
        raise ValueError(_absent(text, repo, revision))
    return Source(text, _download(hub, text, repo, revision or None), repo, revision or None)


def _absent(text: str, repo: str, revision: str) -> str:
    where = "the Hub is offline (HF_HUB_OFFLINE)" if _offline() else "the Hub is unreachable"
    option = f" --revision {revision}" if revision else ""
    return (
        f"{text}: no config in the local Hugging Face cache and {where}; download it once with "
        f"`huggingface-cli download {repo} config.json{option}` or pass a local config.json"
    )


def _offline() -> bool:
    return any(
        os.environ.get(v, "").upper() in ("1", "ON", "YES", "TRUE") for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def _reachable(hub: Any) -> bool:
    """Whether the Hub answers, asked once and quickly: huggingface_hub retries an unreachable host for ~25 s."""
    if _offline():
        return False
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True  # only the proxy knows: let the download try
    endpoint = urlparse(hub.constants.ENDPOINT)
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        socket.create_connection((endpoint.hostname or "", port), timeout=_PROBE_TIMEOUT_S).close()
    except OSError:
        return False
    return True


def _download(hub: Any, text: str, repo: str, revision: Optional[str]) -> str:
    errors = hub.errors
    try:
        return str(hub.hf_hub_download(repo, "config.json", revision=revision))
    except errors.GatedRepoError:
        reason = "a gated repository: accept its terms on the Hub and log in (`huggingface-cli login`)"
    except errors.RepositoryNotFoundError:
        reason = "no such repository on the Hub (or a private one: log in with `huggingface-cli login`)"
    except errors.RevisionNotFoundError:
        reason = f"no revision {revision!r} in this repository"
    except errors.EntryNotFoundError:
        reason = "this repository has no config.json"
    except Exception as exc:  # HTTP errors, a cache that cannot be written ...
        reason = f"cannot download its config.json ({type(exc).__name__}: {_first_line(exc)})"
    raise ValueError(f"{text}: {reason}")


# --- building on the meta device --------------------------------------------------------------------------------


def build(text: str, task: Optional[str] = None, trust_remote_code: bool = False) -> BuiltModel:
    """The model `text` names, on the meta device, with the `task` head (causal-lm by default)."""
    task = task or DEFAULT_TASK
    if task not in TASKS:
        raise ValueError(f"task {task!r}: use one of {', '.join(TASKS)}")
    transformers = _import("transformers")
    source = resolve(text)
    raw = _read_json(source)
    _check_remote_code(raw, source, trust_remote_code, transformers)
    if trust_remote_code:
        _check_code_files(raw, source)
    config = _config(transformers, source, trust_remote_code)
    dtype = _dtype(config)
    if task == "seq-cls" and getattr(config, "pad_token_id", None) is None:
        # transformers' sequence classifiers pick each row's last token by the pad id, and refuse batches without one
        config.pad_token_id = _first_id(getattr(config, "eos_token_id", None))
    model = _instantiate(transformers, config, task, trust_remote_code, dtype, text)
    attention = getattr(model.config, "_attn_implementation", None) or "eager"
    written = "config's torch_dtype" if _config_dtype(config) is not None else "no torch_dtype in the config"
    notes = [
        f"{type(model).__name__} built from {text} on the meta device (no weights): {task} head, "
        f"{str(dtype).replace('torch.', '')} ({written}), attention {attention}"
    ]
    return BuiltModel(model, config, task, text, notes)


def _import(name: str) -> Any:
    try:
        return __import__(name)
    except ImportError:
        raise ValueError(
            f"models by name need {name}, which this kernel lacks: pip install transformers (it brings huggingface_hub)"
        ) from None


def _read_json(source: Source) -> Dict[str, Any]:
    try:
        with open(source.config_path, encoding="utf-8") as handle:
            raw = json.load(handle)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{source.text}: cannot read {source.config_path} ({_first_line(exc)})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{source.text}: {source.config_path} is not a JSON object")
    return raw


def _check_remote_code(raw: Dict[str, Any], source: Source, trust: bool, transformers: Any) -> None:
    """A config whose model code lives in its repository (auto_map) and not in transformers runs that code only when
    asked; transformers' own ValueError about it is several lines long."""
    known = raw.get("model_type") in transformers.models.auto.configuration_auto.CONFIG_MAPPING
    if "auto_map" in raw and not known and not trust:
        raise ValueError(
            f"{source.text}: its model code lives in the repository (auto_map), not in transformers; "
            "run it only if you trust it, with --trust-remote-code (trust_remote_code=True)"
        )
    if "model_type" not in raw and "auto_map" not in raw:
        raise ValueError(f"{source.text}: {source.config_path} has no model_type: not a transformers config")


def _code_files(auto_map: Any) -> List[str]:
    """The Python files a config's auto_map names ("modeling_x.Model" -> modeling_x.py), in order; a reference to
    another repository's code ("org/repo--modeling_x.Model") is that repository's, not the folder's."""
    values = auto_map.values() if isinstance(auto_map, dict) else []
    references = [r for v in values for r in (v if isinstance(v, (list, tuple)) else [v]) if isinstance(r, str)]
    files = [r.rsplit(".", 1)[0] + ".py" for r in references if "--" not in r and "." in r]
    return list(dict.fromkeys(files))


def _check_code_files(raw: Dict[str, Any], source: Source) -> None:
    """A model folder whose config names its code (auto_map) must hold the code's files: without one, transformers
    takes the folder for a Hub repository id and says only "Repo id must be in the form ..."."""
    if source.repo is not None:
        return  # from the Hub: transformers fetches the files the repository holds
    folder = os.path.dirname(os.path.abspath(source.config_path))
    missing = [name for name in _code_files(raw.get("auto_map")) if not os.path.isfile(os.path.join(folder, name))]
    if len(missing) == 1:
        raise ValueError(
            f"{source.text}: the code file {missing[0]} is missing from {folder} (config.json's auto_map names it); "
            "copy it there from the model's repository"
        )
    if missing:
        raise ValueError(
            f"{source.text}: the code files {', '.join(missing)} are missing from {folder} (config.json's auto_map "
            "names them); copy them there from the model's repository"
        )


def _config(transformers: Any, source: Source, trust: bool) -> Any:
    # The repository's own code is fetched by its name, a local folder's from the folder (transformers looks for
    # the code files beside config.json only when given the folder); everything else reads the local file.
    if trust and source.repo:
        where = source.repo
    elif trust and os.path.basename(source.config_path) == "config.json":
        where = os.path.dirname(os.path.abspath(source.config_path))
    else:
        where = source.config_path
    try:
        return transformers.AutoConfig.from_pretrained(where, revision=source.revision, trust_remote_code=trust)
    except (OSError, ValueError, KeyError) as exc:
        raise ValueError(f"{source.text}: transformers cannot read its config ({_first_line(exc)})") from None


def _config_dtype(config: Any) -> Any:
    # transformers 4.56 renamed torch_dtype to dtype; either may hold a string or a torch.dtype
    return config.__dict__.get("dtype") or config.__dict__.get("torch_dtype")


def _dtype(config: Any) -> Any:
    import torch

    value = _config_dtype(config)
    if isinstance(value, str):
        value = getattr(torch, value.replace("torch.", ""), None)
    return value if isinstance(value, torch.dtype) and value.is_floating_point else torch.float32


def _instantiate(transformers: Any, config: Any, task: str, trust: bool, dtype: Any, text: str) -> Any:
    import torch

    auto = getattr(transformers, TASKS[task])
    keyword = "dtype" if _version(transformers.__version__) >= (4, 56) else "torch_dtype"
    try:
        with torch.device("meta"):  # parameters without storage: no memory, no initialisation cost
            return auto.from_config(config, trust_remote_code=trust, **{keyword: dtype})
    except ValueError as exc:
        if "Unrecognized configuration class" in str(exc):
            raise ValueError(f"{text}: transformers has no {task} head for model type {config.model_type}") from None
        raise ValueError(f"{text}: cannot build the {task} model ({_first_line(exc)})") from None
    except Exception as exc:  # a model's own code failing on the meta device, a missing optional package ...
        raise ValueError(f"{text}: cannot build the {task} model ({type(exc).__name__}: {_first_line(exc)})") from None


def _version(text: str) -> Tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:2]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def _first_id(value: Any) -> int:
    if isinstance(value, (list, tuple)):
        value = value[0] if value else None
    return int(value) if isinstance(value, int) else 0


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:200] if lines else type(exc).__name__


# --- the batch its task trains on -------------------------------------------------------------------------------


def default_input(built: BuiltModel, input: Any, vocab_size: Optional[int]) -> Tuple[Any, str, List[str]]:
    """(input for analyze(), its description, notes): a shape (or none) becomes the task's batch, with labels so the
    model computes its own loss (the logits' fp32 copy included); any other input is the user's, as given."""
    if input is not None and not isinstance(input, (str, int, tuple, list)):
        return input, "", []
    from gpumem_kernel.analysis.request.arguments import parse_shape

    shape = parse_shape(input) if input is not None else None
    if built.task == "image-cls":
        return _images(built, shape)
    notes = []
    if shape is None:
        tokens, said = _context(built.config)
        shape = (tokens,)
        notes.append(f"input: {tokens} tokens, {said}; --input N for another length")
    if len(shape) != 1:
        raise ValueError(f"--input {input}: a {built.task} model takes a number of tokens, e.g. 2048")
    vocab = int(vocab_size or getattr(built.config, "vocab_size", 0) or 0)
    if vocab < 1:
        raise ValueError(f"{built.source}: the config has no vocab_size; pass --vocab N")
    make = _token_batch(built, shape[0], vocab)
    labels = "" if built.task == "base" else " + labels"
    return make, f"input_ids ({shape[0]} tokens, vocab {vocab}){labels}", notes


def _context(config: Any) -> Tuple[int, str]:
    context = getattr(config, "max_position_embeddings", None)
    if not isinstance(context, int) or context < 1:
        return 512, "the config gives no max_position_embeddings"
    if context > TOKENS_CAP:
        return TOKENS_CAP, f"the config's max_position_embeddings {context} capped at {TOKENS_CAP}"
    return context, "the config's max_position_embeddings"


def _token_batch(built: BuiltModel, tokens: int, vocab: int) -> TokenBatches:
    task, classes = built.task, int(getattr(built.config, "num_labels", 2) or 2)

    def batch(batch_size: int, seq: int) -> Dict[str, Any]:
        import torch

        ids = torch.randint(0, vocab, (batch_size, seq), device="cpu")
        if task == "base":
            return {"input_ids": ids}
        if task == "seq-cls":
            return {"input_ids": ids, "labels": torch.randint(0, classes, (batch_size,), device="cpu")}
        if task == "token-cls":
            return {"input_ids": ids, "labels": torch.randint(0, classes, (batch_size, seq), device="cpu")}
        return {"input_ids": ids, "labels": ids.clone()}  # causal, masked and seq2seq LMs: the model's own loss

    # the sequence search asks for the same batch at other lengths (analysis.request.sequence)
    return TokenBatches(batch, tokens, f"{task}_batch")


def _images(built: BuiltModel, shape: Optional[Tuple[int, ...]]) -> Tuple[Any, str, List[str]]:
    config = built.config
    notes = []
    if shape is None:
        size, channels = getattr(config, "image_size", None), getattr(config, "num_channels", 3)
        if not isinstance(size, int):
            raise ValueError(f"{built.source}: the config gives no image_size; pass --input CxHxW")
        shape = (int(channels), size, size)
        notes.append(f"input: {shape[0]}x{size}x{size} images, the config's num_channels and image_size")
    classes = int(getattr(config, "num_labels", 2) or 2)
    dtype_name = str(_dtype(config)).replace("torch.", "")

    def batch(batch_size: int) -> Dict[str, Any]:
        import torch

        pixels = torch.randn((batch_size,) + shape, dtype=getattr(torch, dtype_name), device="cpu")
        return {"pixel_values": pixels, "labels": torch.randint(0, classes, (batch_size,), device="cpu")}

    batch.__name__ = "image_batch"
    return batch, f"pixel_values {'x'.join(map(str, shape))} {dtype_name} + labels", notes


# --- the analysis -----------------------------------------------------------------------------------------------


def analyze_named(
    name: str,
    request: Optional[AnalysisRequest] = None,
    *,
    task: Optional[str] = None,
    trust_remote_code: bool = False,
    run: Optional[Callable[..., Any]] = None,
    **keywords: Any,
) -> Any:
    """analyze() of the model `name` names, `hf:ORG/NAME[@revision]`, a config.json or a model directory, built on
    the meta device and traced; `run` in place of analyze() (the predicted timeline's predict(): (report, history)),
    called with the request's options as keywords. The options: a request, or its fields as keywords.

        gpumem_kernel.analyze_named("hf:Qwen/Qwen2.5-7B", batch_size=1, input=2048, target="H100", amp="bf16")
    """
    request = request_of(request, keywords)
    if request.device is not None and str(request.device).startswith("cuda"):
        raise ValueError(f"{name}: a model built by name has no weights to measure on a GPU; drop --device (traced)")
    building = ProgressReporter(request.on_progress)
    building.enter("building", f"building {name}")
    built = build(name, task, trust_remote_code)
    vocab_size = request.vocab_size
    input = at_sequence(built.model, request.input, request.seq, vocab_size)  # --seq N: N tokens, or one line why not
    batch, described, notes = default_input(built, input, vocab_size)
    # the user's own input: their --vocab applies as for any model; the task's batch has its own ids
    planned = replace(request, input=batch, vocab_size=None if described else vocab_size)
    if run is None:
        from gpumem_kernel.analysis.pipeline.analyze import analyze

        result = analyze(built.model, planned)
    else:
        result = run(built.model, on_progress=planned.on_progress, **planned.options())
    report = result[0] if isinstance(result, tuple) else result
    report.notes[:0] = built.notes + notes
    if described:
        report.settings["input"] = described
    return result
