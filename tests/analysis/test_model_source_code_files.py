"""--trust-remote-code on a local model folder: a code file the config's auto_map names and the folder lacks is one
line naming it (not transformers' "Repo id must be in the form ..."); with the files there, the model builds."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from gpumem_kernel.analysis.pipeline.model_source import _code_files, build  # noqa: E402

REMOTE = Path(__file__).resolve().parents[1] / "data" / "hf_configs" / "remote_code"

CONFIGURATION = """
from transformers import PretrainedConfig


class GpumemCustomConfig(PretrainedConfig):
    model_type = "gpumem_custom"

    def __init__(self, hidden_size=64, vocab_size=1000, num_hidden_layers=2, **kwargs):
        self.hidden_size = hidden_size
        self.vocab_size = vocab_size
        self.num_hidden_layers = num_hidden_layers
        super().__init__(**kwargs)
"""

MODELING = """
import torch
from transformers import PreTrainedModel

from .configuration_custom import GpumemCustomConfig


class GpumemCustomForCausalLM(PreTrainedModel):
    config_class = GpumemCustomConfig

    def __init__(self, config):
        super().__init__(config)
        self.embed = torch.nn.Embedding(config.vocab_size, config.hidden_size)
        self.head = torch.nn.Linear(config.hidden_size, config.vocab_size)

    def forward(self, input_ids=None, **kwargs):
        return self.head(self.embed(input_ids))
"""


@pytest.fixture
def folder(tmp_path) -> Path:
    copy = tmp_path / "custom"
    copy.mkdir()
    shutil.copy(REMOTE / "config.json", copy / "config.json")
    return copy


def message(path: Path) -> str:
    with pytest.raises(ValueError) as raised:
        build(str(path), trust_remote_code=True)
    text = str(raised.value)
    assert "\n" not in text and "Repo id" not in text
    return text


def test_a_missing_code_file_is_named(folder):
    (folder / "configuration_custom.py").write_text(CONFIGURATION)
    assert message(folder) == (
        f"{folder}: the code file modeling_custom.py is missing from {folder} (config.json's auto_map names it); "
        "copy it there from the model's repository"
    )


def test_every_missing_code_file_is_named(folder):
    text = message(folder)
    assert "the code files configuration_custom.py, modeling_custom.py are missing from" in text


def test_with_its_code_files_the_folder_builds(folder):
    (folder / "configuration_custom.py").write_text(CONFIGURATION)
    (folder / "modeling_custom.py").write_text(MODELING)
    built = build(str(folder), trust_remote_code=True)
    assert type(built.model).__name__ == "GpumemCustomForCausalLM"
    assert sum(p.numel() for p in built.model.parameters()) == 2 * 1000 * 64 + 1000


def test_the_code_files_of_an_auto_map():
    auto_map = {
        "AutoConfig": "configuration_x.XConfig",
        "AutoModel": "modeling_x.XModel",
        "AutoModelForCausalLM": "modeling_x.XForCausalLM",
        "AutoTokenizer": ["tokenization_x.XTokenizer", None],
        "AutoModelForSeq2SeqLM": "org/other--modeling_y.Y",  # another repository's code
    }
    assert _code_files(auto_map) == ["configuration_x.py", "modeling_x.py", "tokenization_x.py"]
    assert _code_files(None) == [] and _code_files(json.loads("[1]")) == []
