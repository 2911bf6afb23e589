"""`%gpumem analyze hf:...|config.json|directory` and `python -m gpumem_kernel analyze --model ...`: a model by name
built on the meta device from a shipped config (tests/data/hf_configs), its task and remote-code options; errors
are one line. Nothing is downloaded."""

from __future__ import annotations

from pathlib import Path

import pytest
from IPython.utils.capture import capture_output

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from conftest import gpumem_shell  # noqa: E402
from gpumem_kernel.analysis.report.render import MIME as ANALYSIS_MIME  # noqa: E402
from gpumem_kernel import cli  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "hf_configs"


@pytest.fixture(scope="module")
def ip():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with gpumem_shell() as shell:
        yield shell
    torch.set_num_threads(threads)


def run(ip, code: str):
    with capture_output() as captured:
        ip.run_cell(code)
    return captured


def test_analyze_a_config_directory_with_a_task_head(ip):
    captured = run(ip, f"%gpumem analyze {CONFIGS / 'llama'} -b 2 --input 32 --task base --target H100")

    assert captured.stderr == "", captured.stderr
    payload = captured.outputs[0].data[ANALYSIS_MIME]
    assert payload["model"]["name"] == "LlamaModel" and payload["engine"] == "traced"
    assert payload["settings"]["input"] == "input_ids (32 tokens, vocab 1000)"
    assert "base head, bfloat16 (config's torch_dtype)" in payload["notes"][0]


@pytest.mark.parametrize(
    "line, message",
    [
        (f"{CONFIGS / 'remote_code'}", "not in transformers; run it only if you trust it, with --trust-remote-code"),
        ("hf:a/b/c", "hf:a/b/c: expected hf:ORG/NAME or hf:ORG/NAME@REVISION"),
        (f"{CONFIGS / 'gpt2'} --task image-cls", "transformers has no image-cls head for model type gpt2"),
    ],
)
def test_errors_are_one_usage_line(ip, line, message):
    captured = run(ip, f"%gpumem analyze {line} -b 2 --input 16")
    assert captured.stderr.startswith("UsageError: gpumem analyze: ") and message in captured.stderr
    assert captured.stderr.count("\n") <= 1


def test_the_hub_offline_without_the_config_says_what_to_download(ip, monkeypatch, tmp_path):
    hub = pytest.importorskip("huggingface_hub")
    monkeypatch.setattr(hub.constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    captured = run(ip, "%gpumem analyze hf:Qwen/Qwen2.5-7B -b 1")
    assert captured.stderr.strip() == (
        "UsageError: gpumem analyze: hf:Qwen/Qwen2.5-7B: no config in the local Hugging Face cache and the Hub is "
        "offline (HF_HUB_OFFLINE); download it once with `huggingface-cli download Qwen/Qwen2.5-7B config.json` or "
        "pass a local config.json"
    )


def test_cli_analyzes_a_config_json(capsys):
    path = CONFIGS / "gpt2" / "config.json"
    code = cli.main(["analyze", "--model", str(path), "--batch", "2", "--input", "16", "--target", "H100"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "GPT2LMHeadModel built from" in out and "input_ids (16 tokens, vocab 1000) + labels" in out

    code = cli.main(["analyze", "--model", str(CONFIGS / "remote_code"), "--batch", "2"])
    assert code == 2 and "--trust-remote-code" in capsys.readouterr().err
