"""`%gpumem analyze` and what makes it fit: a step that will not fit a known limit gets the advice on its own where
its analyses are quick (else a line saying how to ask), in the report's one output (the payload's "advice", valid
against the schema, and the text report's table); the recommended row's command, run as its own cell, fits; a
step that fits gets none unless --advise asks; --json carries it; --advise with --timeline is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from IPython.utils.capture import capture_output  # noqa: E402

from conftest import gpumem_shell  # noqa: E402
from gpumem_kernel.analysis.report.render import MIME as ANALYSIS_MIME  # noqa: E402
from gpumem_kernel.magics import analysis as analysis_magic  # noqa: E402

SCHEMA = Path(__file__).resolve().parents[2] / "gpumem_kernel" / "wire" / "schemas" / "analysis.schema.json"
# 101 M parameters: 1.6 GB of weights, gradients and AdamW state, over a 2 GB GTX 1050's memory
OVER = "%gpumem analyze wide -b 8 --input 4096 --target 'GTX 1050'"


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def wide() -> "torch.nn.Module":
    torch.manual_seed(0)
    return torch.nn.Sequential(*(torch.nn.Linear(4096, 4096) for _ in range(6)))


def mlp() -> "torch.nn.Module":
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))


def run(ip, line: str):
    with capture_output() as captured:
        ip.run_cell(line)
    return captured


def test_a_step_that_will_not_fit_and_whose_advice_would_be_slow_says_how_to_ask_for_it(monkeypatch):
    # the levers' analyses would take longer than the magic spends unasked (here: any time at all)
    monkeypatch.setattr(analysis_magic, "ADVICE_SECONDS", 0.0)
    with gpumem_shell({"wide": wide()}) as ip:
        over = run(ip, OVER)
    assert over.stderr == "" and len(over.outputs) == 1
    payload = over.outputs[0].data[ANALYSIS_MIME]
    assert payload["recommendations"]["current"]["status"] == "will-not-fit" and "advice" not in payload
    assert "What would make it fit: %gpumem analyze … --advise" in over.outputs[0].data["text/plain"]


def test_a_step_that_will_not_fit_gets_the_advice_unasked_where_it_is_quick(monkeypatch):
    """Unasked, the advice is the one --advise computes (the same rows); the budget is read from the analysis's own
    time, so that this test holds on any machine it is set high."""
    monkeypatch.setattr(analysis_magic, "ADVICE_SECONDS", 1e9)
    with gpumem_shell({"wide": wide()}) as ip:
        unasked = run(ip, OVER).outputs[0].data
        asked = run(ip, OVER + " --advise").outputs[0].data
    assert unasked[ANALYSIS_MIME]["advice"] == asked[ANALYSIS_MIME]["advice"]
    assert (
        "What makes it fit on GTX 1050" in unasked["text/plain"]
        and "What would make it fit" not in unasked["text/plain"]
    )


def test_a_step_that_will_not_fit_gets_the_advice_and_its_recommended_command_fits():
    jsonschema = pytest.importorskip("jsonschema")
    with gpumem_shell({"wide": wide()}) as ip:
        over = run(ip, OVER + " --advise")
        assert over.stderr == "" and len(over.outputs) == 1
        payload = over.outputs[0].data[ANALYSIS_MIME]
        jsonschema.validate(json.loads(json.dumps(payload)), json.loads(SCHEMA.read_text()))
        advice = payload["advice"]
        assert payload["recommendations"]["current"]["status"] == advice["status"] == "will-not-fit"
        assert advice["target"] == "GTX 1050" and advice["peak_bytes"] == payload["peak_bytes"]
        for row in advice["rows"]:
            assert row["command"].startswith("%gpumem analyze wide ") and row["command"].endswith(row["flags"])
        chosen = advice["rows"][advice["recommended"]]
        assert chosen["fits"] and advice["reason"].startswith("the cheapest change that fits")

        text = over.outputs[0].data["text/plain"]
        assert "What makes it fit on GTX 1050" in text and f"Recommended: {chosen['lever']}" in text

        followed = run(ip, chosen["command"]).outputs[0].data[ANALYSIS_MIME]
    assert followed["peak_bytes"] == chosen["peak_bytes"] and followed["recommendations"]["current"]["status"] in (
        "fits",
        "tight",
    )
    assert "advice" not in followed  # it fits now: no advice of its own


def test_a_step_that_fits_gets_advice_only_with_advise_and_json_carries_it():
    with gpumem_shell({"model": mlp()}) as ip:
        plain = run(ip, "%gpumem analyze model -b 64 --input 256 --target T4").outputs[0].data
        asked = run(ip, "%gpumem analyze model -b 64 --input 256 --target T4 --advise --json")
        refused = run(ip, "%gpumem analyze model -b 64 --input 256 --advise --timeline")

    assert "advice" not in plain[ANALYSIS_MIME] and "What makes it fit" not in plain["text/plain"]
    advice = json.loads(asked.stdout)["advice"]
    assert advice["status"] == "fits" and advice["recommended"] is None and "fits as analysed" in advice["reason"]
    assert advice["rows"] and all(r["fits"] for r in advice["rows"])
    assert refused.stderr.strip() == "UsageError: gpumem analyze: --advise and --timeline: one at a time"
