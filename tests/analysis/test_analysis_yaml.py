"""The analysis's "Copy as YAML" and "Insert code": written by the kernel into the payload, from its numbers."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Dict

import pytest
import yaml

from gpumem_kernel.analysis.report.render import accumulation_code, analysis_yaml, render_text

FIXTURES = Path(__file__).resolve().parents[2] / "src" / "__tests__" / "fixtures"


def fixture(name: str) -> Dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text("utf-8"))


@pytest.mark.parametrize(
    "name", ["analysis_target", "analysis_accum", "analysis_nogpu", "analysis_hostile", "analysis_llm"]
)
def test_the_fixtures_carry_what_the_kernel_writes_now(name):
    payload = fixture(name)
    assert payload["config_yaml"] == analysis_yaml(payload)
    assert payload["accumulation_code"] == accumulation_code(payload)


def test_a_pick_above_the_target_effective_batch_is_capped_to_it():
    p = fixture("analysis_target")
    recs = p["recommendations"]
    config = yaml.safe_load(p["config_yaml"])
    assert config["data"]["batch_size"] == min(recs["recommended"], recs["accumulation"]["target_effective_batch"])
    assert config["training"]["gradient_accumulation_steps"] == recs["accumulation"]["recommended"]
    assert (
        config["data"]["batch_size"] * config["training"]["gradient_accumulation_steps"]
        == recs["lr"]["to_effective_batch"]
    )
    assert config["training"] == {
        "gradient_accumulation_steps": recs["accumulation"]["recommended"],
        "use_amp": True,
        "amp_dtype": "bfloat16",
        "gradient_checkpointing": False,
    }
    assert p["accumulation_code"] is None  # no accumulation needed: no "Insert code"


def test_accumulation_steps_and_the_loop_at_the_recommended_pick():
    p = fixture("analysis_accum")
    recs = p["recommendations"]
    config = yaml.safe_load(p["config_yaml"])
    assert config["data"]["batch_size"] == recs["recommended"] and recs["recommended"] % 8 == 0
    assert config["training"]["gradient_accumulation_steps"] == recs["accumulation"]["recommended"] > 1
    assert config["training"]["amp_dtype"] == "float16"
    code = p["accumulation_code"]
    compile(code, "<accumulation>", "exec")
    assert f"batch_size = {recs['recommended']}" in code
    assert f"accumulation_steps = {recs['accumulation']['recommended']}" in code
    assert "scaler = torch.amp.GradScaler(device.type)" in code and "dtype=torch.float16" in code


def test_without_a_recommendation_the_analysed_batch_is_copied():
    p = fixture("analysis_nogpu")
    assert p["recommendations"]["recommended"] is None
    config = yaml.safe_load(p["config_yaml"])
    assert config["data"]["batch_size"] == p["settings"]["batch_size"]
    assert config["training"]["gradient_accumulation_steps"] == p["settings"]["grad_accum"]
    assert "# batch_size: as analysed (no recommendation)" in p["config_yaml"]


def test_an_extrapolated_maximum_is_said_in_a_comment():
    p = copy.deepcopy(fixture("analysis_accum"))
    p["recommendations"]["extrapolated"] = True
    assert "maximum extrapolated" in analysis_yaml(p) and yaml.safe_load(analysis_yaml(p))


def test_a_hostile_model_name_stays_in_a_comment():
    p = copy.deepcopy(fixture("analysis_hostile"))
    p["model"]["name"] = "Net\ntraining:\n  use_amp: true\u2028data: {batch_size: 1}"
    config = yaml.safe_load(analysis_yaml(p))
    assert set(config) == {"data", "training"} and config["training"]["use_amp"] is False
    assert (
        config["data"]["batch_size"] == yaml.safe_load(fixture("analysis_hostile")["config_yaml"])["data"]["batch_size"]
    )


def test_the_text_output_prints_the_yaml_and_older_payloads_still_render():
    p = fixture("analysis_accum")
    text = render_text(p)
    assert "📋 Configuration (YAML):" in text
    assert "\n".join(f"  {line}" for line in p["config_yaml"].splitlines()) in text
    older = {k: v for k, v in p.items() if k not in ("config_yaml", "accumulation_code")}
    assert "Configuration (YAML)" not in render_text(older)
