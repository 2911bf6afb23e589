"""Numbers that must add up: the maximum does not depend on the analysed batch, every caption states the share
of the maximum its numbers really are, the user chooses the rounding (--round, the JupyterLab setting), and
the figures a user reads twice agree (no raw byte counts in notes)."""

from __future__ import annotations

import re
from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from gpumem_kernel.analysis.report import picks  # noqa: E402
from gpumem_kernel.analysis.pipeline.analyze import analyze  # noqa: E402
from gpumem_kernel.analysis.report.picks import Rounding, parse_rounding, percent  # noqa: E402
from gpumem_kernel.analysis.report.render import analysis_bundle, render_html, render_text  # noqa: E402
from gpumem_kernel.autobatch.search import auto_select_batch_size, autobatch_bundle  # noqa: E402


def _mlp() -> Any:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 1024))


@pytest.fixture(scope="module")
def planned() -> Any:
    """A real analysis with batch-size picks (traced, planning for 2 GiB)."""
    torch.manual_seed(0)
    return analyze(nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)), batch_size=32, memory="2GiB")


# --- the maximum is the model's, not the -b's ----------------------------------------------------------------


def test_the_maximum_is_the_same_for_every_analysed_batch() -> None:
    """Before: 13314 at -b 8, 13688 at -b 256, 13156 at -b 2048 (the search started at -b and 2x -b and
    stopped within 1-3% of the limit), and the recommended pick jumped between 4096 and 8192 with it."""
    model = _mlp()
    reports = {b: analyze(model, batch_size=b, memory="2GiB") for b in (1, 8, 256, 2048)}
    maxima = {b: r.recommendations.maximum for b, r in reports.items()}
    assert len(set(maxima.values())) == 1, maxima
    assert len({(r.recommendations.recommended, r.recommendations.safe) for r in reports.values()}) == 1
    maximum = maxima[8]
    limit = reports[8].device.limit_bytes
    fitting = {p.batch_size: p.peak_bytes for p in reports[8].curve}
    assert fitting[maximum] <= limit  # the maximum was traced and fits
    over = [b for b, peak in fitting.items() if b > maximum and peak <= limit]
    assert not over, f"batches above the maximum that fit: {over}"
    closest_over = min(b for b, peak in fitting.items() if peak > limit)
    assert closest_over - maximum <= max(1, maximum // 200)  # within 0.5% of the boundary
    for b, report in reports.items():  # the analysed batch is still on the curve, where the chart marks it
        assert b in {p.batch_size for p in report.curve}


# --- captions state the real share ----------------------------------------------------------------------------


def _with_picks(payload: dict, maximum: int, recommended: int, safe: int) -> dict:
    recs = dict(payload["recommendations"], maximum=maximum, recommended=recommended, safe=safe)
    return dict(payload, recommendations=recs)


def test_analysis_captions_say_the_share_their_numbers_are(planned: Any) -> None:
    """The issue's numbers: 256 is 50% of 507 and 128 is 25% (the captions said ~60% and ~40%)."""
    payload = _with_picks(planned.to_payload(), 507, 256, 128)
    text, html = render_text(payload), render_html(payload)
    recommended = "256 (balanced: 50% of the maximum 507; aim 60%, rounded down to a power of two)"
    safe = "128 (conservative: 25% of the maximum 507; aim 40%, rounded down to a power of two)"
    assert f"Recommended:      {recommended}" in text
    assert f"Safe:             {safe}" in text
    assert "balanced: 50% of the maximum 507; aim 60%, rounded down to a power of two" in html
    assert "conservative: 25% of the maximum 507" in html
    assert "~60%" not in text + html and "~40%" not in text + html


def test_every_caption_of_a_real_analysis_matches_its_numbers(planned: Any) -> None:
    payload = planned.to_payload()
    recs = payload["recommendations"]
    text = render_text(payload)
    for name in ("recommended", "safe"):
        share = percent(recs[name], recs["maximum"])
        assert f"{recs[name]} (" in text and f"{share}% of the maximum {recs['maximum']}" in text
    assert "Pick Rounding:    power of two (default)" in text


def test_autobatch_caption_says_how_far_below_the_maximum() -> None:
    """The issue's numbers: 16 is 38% below 26 (the caption said 10%, the margin)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
    result = auto_select_batch_size(model, input=(32,), simulate="1MiB", start_batch=8, predict=False)
    payload = dict(result.to_payload(), maximum=26, recommended=16, margin=0.1)
    bundle = autobatch_bundle(payload)
    caption = "16 (38% below the maximum 26; margin 10%, rounded down to a power of two)"
    assert f"Recommended:      {caption}" in bundle["text/plain"]
    assert "38% below the maximum 26; margin 10%" in bundle["text/html"]
    assert "Rounding:         power of two (default)" in bundle["text/plain"]


def test_percent_rounds_half_up_like_the_browser() -> None:
    assert [percent(1, 8), percent(3, 8), percent(256, 507), percent(10, 26)] == [13, 38, 50, 38]


# --- the user chooses the rounding ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, code, label",
    [("pow2", "pow2", "power of two"), ("8", "8", "multiple of 8"), ("none", "none", "none"), ("1", "none", "none")],
)
def test_rounding_spellings(text: str, code: str, label: str) -> None:
    rounding = parse_rounding(text)
    assert (rounding.code, rounding.label) == (code, label)
    with pytest.raises(ValueError, match="use pow2"):
        parse_rounding("eight")


def test_the_payload_says_which_rounding_made_the_picks(planned: Any) -> None:
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
    maximum = planned.recommendations.maximum
    by_eight = analyze(model, batch_size=32, memory="2GiB", rounding="8").to_payload()
    exact = analyze(model, batch_size=32, memory="2GiB", rounding="none").to_payload()
    for payload in (by_eight, exact):
        assert payload["recommendations"]["maximum"] == maximum
    recs = by_eight["recommendations"]
    assert recs["recommended"] % 8 == 0 and recs["safe"] % 8 == 0 and recs["rounding"] == "multiple of 8"
    assert recs["recommended"] == int(0.6 * maximum) // 8 * 8
    assert (by_eight["settings"]["round"], by_eight["settings"]["round_source"]) == ("8", "option")
    assert by_eight["settings"]["multiple"] == 8
    assert exact["recommendations"]["recommended"] == int(0.6 * maximum)
    assert exact["recommendations"]["safe"] == int(0.4 * maximum)
    assert (exact["settings"]["round"], exact["recommendations"]["rounding"]) == ("none", "none")
    assert "rounded down to a whole batch" in render_text(exact)
    default = planned.to_payload()
    assert (default["settings"]["round"], default["settings"]["round_source"]) == ("pow2", "default")
    with pytest.raises(ValueError, match="disagree"):
        analyze(model, batch_size=32, memory="2GiB", multiple=8, rounding="pow2")


def test_the_jupyterlab_setting_is_the_default_and_the_option_wins() -> None:
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
    by_setting = analyze(model, batch_size=32, memory="2GiB", rounding_setting="8").to_payload()
    assert (by_setting["settings"]["round"], by_setting["settings"]["round_source"]) == ("8", "setting")
    assert by_setting["recommendations"]["recommended"] % 8 == 0
    assert "Pick Rounding:    multiple of 8 (JupyterLab setting)" in analysis_bundle(by_setting)["text/plain"]
    by_option = analyze(model, batch_size=32, memory="2GiB", rounding="pow2", rounding_setting="8").to_payload()
    assert (by_option["settings"]["round"], by_option["settings"]["round_source"]) == ("pow2", "option")
    torch.manual_seed(0)
    small = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
    result = auto_select_batch_size(
        small, input=(32,), simulate="1MiB", start_batch=8, predict=False, rounding_setting="8"
    )
    assert (result.round, result.round_source, result.rounding) == ("8", "setting", "multiple of 8")
    assert result.recommended == Rounding(multiple=8).apply(result.maximum * 0.9)


def test_autobatch_rounds_as_asked() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
    result = auto_select_batch_size(model, input=(32,), simulate="1MiB", start_batch=8, predict=False, rounding="none")
    assert result.recommended == int(result.maximum * 0.9) and (result.round, result.round_source) == (
        "none",
        "option",
    )


def test_the_browser_sends_the_setting_over_the_channel(make_prober: Any) -> None:
    """`configure` with `rounding` (what src/channel/bridge.ts sends after hello) sets the kernel's default;
    a value it cannot be is a bad-request error and changes nothing."""
    from fake_comm import FakeComm, open_msg

    from gpumem_kernel.channel.comm import Channel
    from gpumem_kernel.probe.sampler import Sampler
    from gpumem_kernel.wire.protocol import CAPABILITIES

    assert "rounding" in CAPABILITIES
    channel = Channel(Sampler(make_prober([])), "0.1.0")
    comm = FakeComm("c1")
    channel._on_open(comm, open_msg({"type": "open", "protocol": 1}))
    try:
        comm.browser_sends({"type": "request", "id": "r-1", "action": "configure", "args": {"rounding": "8"}})
        assert comm.sent[-1]["type"] == "reply"
        assert picks.resolve(None, channel.settings.rounding) == (Rounding(multiple=8), "setting")
        comm.browser_sends({"type": "request", "id": "r-2", "action": "configure", "args": {"rounding": "2^"}})
        assert comm.sent[-1]["type"] == "error" and comm.sent[-1]["code"] == "bad-request"
        assert picks.resolve(None, channel.settings.rounding) == (Rounding(multiple=8), "setting")
    finally:
        channel.unregister()


# --- the figures a user reads twice -----------------------------------------------------------------------------


def test_notes_format_bytes_with_the_one_formatter(planned: Any) -> None:
    """An optimizer note printed "modelled: 941584 B"."""
    for figure in planned.to_payload()["figures"]:
        assert not re.search(r"\d{4,} B\b", figure["note"]), figure
    optimizer = next(f for f in planned.figures if f.name == "optimizer")
    assert re.fullmatch(r"modelled: \d+\.\d\d (KiB|MiB)", optimizer.note)
