"""An analysis leaves the user's random stream where it was: a seeded notebook draws the same numbers with or without
`%gpumem analyze` between its cells, also when the plan adds adapters initialised at random."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from gpumem_kernel.analysis import analyze, analyze_named  # noqa: E402

LLAMA = Path(__file__).resolve().parents[1] / "data" / "hf_configs" / "llama" / "config.json"


def _draws_after(run) -> torch.Tensor:
    torch.manual_seed(1234)
    run()
    return torch.rand(4)


def test_a_lora_plan_leaves_the_random_stream_where_it_was() -> None:
    expected = _draws_after(lambda: None)
    after = _draws_after(lambda: analyze_named(str(LLAMA), batch_size=1, seq=32, lora="r=4", target="A100-40GB"))
    assert torch.equal(after, expected)


def test_an_analysis_of_a_model_object_leaves_the_random_stream_where_it_was() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 4))
    expected = _draws_after(lambda: None)
    after = _draws_after(lambda: analyze(model, batch_size=4, input=(16,), target="A100-40GB"))
    assert torch.equal(after, expected)
