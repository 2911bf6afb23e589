"""The precision a step of the user's own really ran: an autocast the step enters itself is seen by the trace and
said in the report's settings, its text, its payload and the YAML a user copies, whatever the request said about AMP
(copying `use_amp: false` from a step that ran bf16 would turn AMP off)."""

import json
from importlib import resources
from typing import Any, Callable, Optional

import pytest

torch = pytest.importorskip("torch")
jsonschema = pytest.importorskip("jsonschema")
yaml = pytest.importorskip("yaml")
nn = torch.nn
F = nn.functional

from gpumem_kernel.analysis.pipeline.analyze import analyze  # noqa: E402


def _mlp() -> Any:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))


def _batch(b: int) -> Any:
    return torch.randn(b, 64), torch.randint(0, 10, (b,))


def _step_under(device_type: Optional[str], dtype: Any = None, enabled: bool = True) -> Callable[..., None]:
    """A training step written as users write it: forward and loss under `torch.autocast(device_type, dtype)`
    (no autocast when device_type is None), backward and the optimizer step outside it."""

    def step(model: Any, opt: Any, batch: Any) -> None:
        x, y = batch
        if device_type is None:
            loss = F.cross_entropy(model(x), y)
        else:
            with torch.autocast(device_type, dtype=dtype, enabled=enabled):
                loss = F.cross_entropy(model(x.to(device_type)), y.to(device_type))
        loss.backward()
        opt.step()
        opt.zero_grad()

    return step


def _payload(report: Any) -> Any:
    payload = report.to_payload()
    schema = json.loads(resources.files("gpumem_kernel").joinpath("wire/schemas/analysis.schema.json").read_text())
    jsonschema.validate(payload, schema)
    return payload


@pytest.mark.parametrize(
    "device_type, dtype, amp, dtype_name",
    [
        ("cpu", torch.bfloat16, "bf16", "bfloat16"),
        ("cuda", torch.bfloat16, "bf16", "bfloat16"),  # traced as CPU autocast; the step asked for CUDA's
        ("cuda", torch.float16, "fp16", "float16"),
    ],
)
def test_a_step_under_autocast_reports_amp_on_with_its_dtype(device_type, dtype, amp, dtype_name) -> None:
    report = analyze(_mlp(), batch_size=8, input=_batch, step=_step_under(device_type, dtype), memory="8GiB")
    payload = _payload(report)
    assert payload["settings"]["amp"] == amp
    assert payload["settings"]["step_autocast"] == {"device_type": device_type, "amp": amp}
    config = yaml.safe_load(payload["config_yaml"])
    assert config["training"]["use_amp"] is True and config["training"]["amp_dtype"] == dtype_name
    assert f"# use_amp: seen in your step (torch.autocast('{device_type}', {dtype_name}))" in payload["config_yaml"]
    text = str(report)
    assert f"Mixed Precision:  Enabled ({dtype_name}), seen in your step: torch.autocast('{device_type}'" in text
    assert "Disabled" not in text
    assert any(f"your step enters torch.autocast('{device_type}', dtype=torch.{dtype_name})" in n for n in report.notes)


def test_the_request_amp_and_the_steps_own_are_both_said() -> None:
    report = analyze(
        _mlp(), batch_size=8, input=_batch, step=_step_under("cpu", torch.bfloat16), amp="fp16", memory="8GiB"
    )
    payload = _payload(report)
    assert payload["settings"]["amp"] == "fp16"  # the request's, which the trace ran around the step
    assert payload["settings"]["step_autocast"] == {"device_type": "cpu", "amp": "bf16"}


@pytest.mark.parametrize("step", [_step_under(None), _step_under("cpu", torch.bfloat16, enabled=False)])
def test_a_step_without_autocast_stays_amp_off(step) -> None:
    report = analyze(_mlp(), batch_size=8, input=_batch, step=step, memory="8GiB")
    payload = _payload(report)
    assert payload["settings"]["amp"] is None and "step_autocast" not in payload["settings"]
    assert yaml.safe_load(payload["config_yaml"])["training"]["use_amp"] is False
    assert "Disabled" in str(report) and "seen in your step" not in str(report)
