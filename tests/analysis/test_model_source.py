"""Models by name (analysis.pipeline.model_source): configs shipped in tests/data/hf_configs built on the meta device
with the task head asked for, traced; the Hub, the cache, remote code and a missing transformers each answer in one
line. Nothing is downloaded: the Hub paths run offline or with the connection refused."""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from gpumem_kernel.analysis.pipeline import model_source  # noqa: E402
from gpumem_kernel.analysis.trace.model_copy import TensorCopier  # noqa: E402
from gpumem_kernel.analysis.pipeline.model_source import analyze_named, build, is_model_source  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "hf_configs"
FAMILIES = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "mistral": "MistralForCausalLM",
    "gpt2": "GPT2LMHeadModel",
}


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _real_count(name: str) -> int:
    """Parameters of the same config built the ordinary way, with weights on the CPU."""
    config = transformers.AutoConfig.from_pretrained(str(CONFIGS / name))
    return sum(p.numel() for p in transformers.AutoModelForCausalLM.from_config(config).parameters())


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_each_shipped_config_analyses_from_its_path_and_builds_from_its_directory(name):
    report = analyze_named(str(CONFIGS / name / "config.json"), batch_size=2, input="64", target="H100")
    from_directory = build(str(CONFIGS / name))

    count = _real_count(name)
    assert report.model_name == FAMILIES[name] == type(from_directory.model).__name__
    assert report.engine == "traced" and report.parameter_count == count
    dtype = "float32" if name == "gpt2" else "bfloat16"  # GPT-2's config names no torch_dtype
    assert report.parameters_by_dtype == {dtype: count * (4 if name == "gpt2" else 2)}
    assert all(p.device.type == "meta" for p in from_directory.model.parameters())
    assert report.settings["input"] == "input_ids (64 tokens, vocab 1000) + labels"
    assert f"{dtype} (" in report.notes[0] and "on the meta device" in report.notes[0]
    assert report.activations_bytes > 0 and report.recommendations.maximum is not None


def test_without_input_the_context_capped_at_2048_is_the_sequence_and_said():
    built = build(str(CONFIGS / "qwen2"))  # max_position_embeddings 4096
    _, described, notes = model_source.default_input(built, None, None)
    assert described == "input_ids (2048 tokens, vocab 1000) + labels"
    assert notes == [
        "input: 2048 tokens, the config's max_position_embeddings 4096 capped at 2048; --input N for another length"
    ]
    _, described, notes = model_source.default_input(build(str(CONFIGS / "gpt2")), None, 50)
    assert described.startswith("input_ids (128 tokens, vocab 50)") and "max_position_embeddings" in notes[0]


def test_the_task_head_changes_the_model_class():
    classes = {
        task: type(build(str(CONFIGS / "llama"), task=task).model).__name__
        for task in ("causal-lm", "seq-cls", "token-cls", "base")
    }
    assert classes == {
        "causal-lm": "LlamaForCausalLM",
        "seq-cls": "LlamaForSequenceClassification",
        "token-cls": "LlamaForTokenClassification",
        "base": "LlamaModel",
    }
    with pytest.raises(ValueError, match=r"^\S+llama: transformers has no seq2seq-lm head for model type llama$"):
        build(str(CONFIGS / "llama"), task="seq2seq-lm")
    with pytest.raises(ValueError, match="task 'cls': use one of causal-lm, "):
        build(str(CONFIGS / "llama"), task="cls")


def test_a_classification_head_trains_on_class_labels():
    # GPT-2 has no pad token: the classifier needs one to find each row's last token, so the eos id stands in
    report = analyze_named(str(CONFIGS / "gpt2"), task="seq-cls", batch_size=2, input="32", target="H100")
    assert report.model_name == "GPT2ForSequenceClassification"
    assert report.settings["input"] == "input_ids (32 tokens, vocab 1000) + labels"


def test_meta_parameters_copy_to_fake_tensors_of_their_shape_and_dtype_without_data():
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    model = build(str(CONFIGS / "llama")).model
    with FakeTensorMode():
        copier = TensorCopier(fake=True)
        copies = [(p, copier.copy(p)) for p in model.parameters()]
    for p, fake in copies:
        assert isinstance(fake, FakeTensor) and fake.device.type == "cpu"
        assert (fake.shape, fake.dtype, fake.requires_grad) == (p.shape, p.dtype, p.requires_grad)


def test_an_8b_config_builds_on_meta_in_seconds_with_its_parameter_count():
    build(str(CONFIGS / "llama"))  # transformers and its Llama modules imported: the build alone is timed
    started = time.perf_counter()
    built = build(str(CONFIGS / "llama3_8b" / "config.json"))
    elapsed = time.perf_counter() - started

    print(f"an 8B config built in {elapsed:.1f} s")
    # on the meta device: no weight is materialised (the time, a few seconds, belongs in benchmarks/)
    assert {p.device.type for p in built.model.parameters()} == {"meta"}
    assert sum(p.numel() for p in built.model.parameters()) == 8_030_261_248
    assert {p.dtype for p in built.model.parameters()} == {torch.bfloat16}


def test_remote_code_runs_only_when_asked():
    with pytest.raises(ValueError) as raised:
        build(str(CONFIGS / "remote_code"))
    message = str(raised.value)
    assert "\n" not in message and "--trust-remote-code" in message and "auto_map" in message


def test_missing_transformers_is_one_line_saying_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` now raises ImportError
    with pytest.raises(ValueError, match=r"^models by name need transformers, .*: pip install transformers") as raised:
        build(str(CONFIGS / "llama"))
    assert "\n" not in str(raised.value)


@pytest.fixture
def empty_cache(monkeypatch, tmp_path):
    hub = pytest.importorskip("huggingface_hub")
    monkeypatch.setattr(hub.constants, "HF_HUB_CACHE", str(tmp_path))
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_offline_without_the_config_in_the_cache_says_what_to_download(empty_cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError) as raised:
        build("hf:Qwen/Qwen2.5-7B")
    assert str(raised.value) == (
        "hf:Qwen/Qwen2.5-7B: no config in the local Hugging Face cache and the Hub is offline (HF_HUB_OFFLINE); "
        "download it once with `huggingface-cli download Qwen/Qwen2.5-7B config.json` or pass a local config.json"
    )


def test_an_unreachable_hub_is_one_line_at_once(empty_cache, monkeypatch):
    def refused(*args, **kwargs):
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(socket, "create_connection", refused)  # never a download, network or not
    started = time.perf_counter()
    with pytest.raises(ValueError) as raised:
        build("hf:Qwen/Qwen2.5-7B@main")
    assert time.perf_counter() - started < 2  # not huggingface_hub's ~25 s of retries
    assert str(raised.value).startswith("hf:Qwen/Qwen2.5-7B@main: no config in the local Hugging Face cache and the ")
    assert "`huggingface-cli download Qwen/Qwen2.5-7B config.json --revision main`" in str(raised.value)


def test_offline_a_cached_config_is_built(empty_cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    repo = empty_cache / "models--acme--tiny-llama"
    snapshot = repo / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    (snapshot / "config.json").write_text((CONFIGS / "llama" / "config.json").read_text())

    built = build("hf:acme/tiny-llama")
    assert type(built.model).__name__ == "LlamaForCausalLM" and "built from hf:acme/tiny-llama" in built.notes[0]


@pytest.mark.parametrize(
    "text, message",
    [
        ("hf:a/b/c", "hf:a/b/c: expected hf:ORG/NAME or hf:ORG/NAME@REVISION"),
        (
            "missing/config.json",
            "missing/config.json: no such file; pass hf:ORG/NAME, a config.json or a model directory",
        ),
    ],
)
def test_bad_names_are_one_line(text, message):
    with pytest.raises(ValueError) as raised:
        build(text)
    assert str(raised.value) == message


def test_a_json_that_is_not_a_transformers_config(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"hidden_size": 8}))
    with pytest.raises(ValueError, match="has no model_type: not a transformers config$"):
        build(str(path))


def test_what_counts_as_a_model_name(tmp_path):
    assert is_model_source("hf:Qwen/Qwen2.5-7B") and is_model_source("cfg/config.json")
    assert is_model_source(str(tmp_path)) and not is_model_source(str(tmp_path), {str(tmp_path): 1})
    assert not is_model_source("model") and not is_model_source("trainer.model")
