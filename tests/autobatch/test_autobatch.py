"""Auto batch size on the CPU under `simulate`: the search against brute force, and the user's state untouched."""

from __future__ import annotations

import json
import random
from importlib import resources

import jsonschema
import pytest
import yaml

torch = pytest.importorskip("torch")

from user_state import assert_same, state_of  # noqa: E402
from gpumem_kernel.autobatch.search import (  # noqa: E402
    MIME,
    auto_select_batch_size,
    autobatch_bundle,
    render_html,
    scan_batch_sizes,
)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models on 2 shared cores: OpenMP threads spinning against other processes cost 10x."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


CAP = 200_000  # bytes of tracked tensors: the MLP below fits ~95 samples
SCAN = range(1, 129)


def mlp() -> "torch.nn.Module":
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)
    )


def cnn() -> "torch.nn.Module":
    """BatchNorm (buffers change in training) and Dropout (consumes the RNG)."""
    torch.manual_seed(1)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1),
        torch.nn.BatchNorm2d(4),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Dropout(0.2),
        torch.nn.Linear(4 * 8 * 8, 10),
    )


def test_search_finds_the_brute_force_maximum():
    model = mlp()
    brute = scan_batch_sizes(model, SCAN, input=(32,), simulate=CAP)
    fits = [t.batch for t in brute if t.ok]
    assert fits and not brute[-1].ok, "the scan must cross the boundary"
    brute_max = max(fits)
    assert all(t.ok for t in brute if t.batch <= brute_max)  # monotone: the boundary is one batch
    searched = auto_select_batch_size(model, input=(32,), simulate=CAP, predict=False)
    predicted = auto_select_batch_size(model, input=(32,), simulate=CAP)
    print(
        f"\nautobatch trial counts (simulated cap {CAP} B, MLP 32-64-64-10, AdamW): brute force "
        f"{len(brute)} trials -> {brute_max}; search from batch 1 {searched.n_trials} trials -> "
        f"{searched.maximum}; from the analysis prediction ({predicted.predicted}) {predicted.n_trials} trials "
        f"-> {predicted.maximum}"
    )
    assert searched.maximum == predicted.maximum == brute_max
    assert searched.engine == predicted.engine == "simulated"
    assert predicted.start_source == "analysis" and predicted.n_trials <= searched.n_trials
    for result in (searched, predicted):
        assert result.n_trials == len(result.trials) < len(brute) // 4
        assert any(t.batch == brute_max and t.ok for t in result.trials)
        assert any(t.batch == brute_max + 1 and not t.ok for t in result.trials)  # the boundary was verified
        assert result.recommended == 64  # 95 x 0.9 = 85.5 -> power of two
    assert int(searched) == brute_max


@pytest.mark.parametrize("start", [1, 7, 300, 5000])
def test_search_from_any_start(start):
    result = auto_select_batch_size(mlp(), start_batch=start, input=(32,), simulate=CAP, multiple=8, margin=0.2)
    assert result.maximum == 95
    assert result.recommended == 72  # 95 x 0.8 = 76 -> multiple of 8
    assert result.start_batch == start and result.start_source == "start_batch"


def test_user_state_is_restored_exactly():
    model = cnn()
    model.eval()
    model[0].train()  # a mixed set of train/eval flags
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(4, 3, 8, 8)
    model(x).pow(2).mean().backward()
    optimizer.step()  # the optimizer has state
    model(x).sum().backward()  # and the parameters hold gradients
    random.seed(5)
    torch.manual_seed(6)
    before = state_of(model, optimizer)
    result = auto_select_batch_size(
        model,
        optimizer=optimizer,
        input=(3, 8, 8),
        simulate=600_000,
        start_batch=4,
        loss=lambda out, batch: out.float().pow(2).mean(),
    )
    assert result.maximum > 4 and result.optimizer == "AdamW"
    assert_same(before, state_of(model, optimizer))
    assert not torch.cuda.is_initialized()


def test_ctrl_c_stops_and_restores():
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    before = state_of(model, optimizer)
    seen = []

    def progress(trial):
        seen.append(trial)
        if len(seen) == 3:
            raise KeyboardInterrupt

    result = auto_select_batch_size(
        model, optimizer=optimizer, input=(32,), simulate=CAP, start_batch=1, progress=progress
    )
    assert result.interrupted and result.n_trials == 3
    assert result.maximum == max(t.batch for t in seen if t.ok)
    assert any("interrupted" in note for note in result.notes)
    assert_same(before, state_of(model, optimizer))


def test_errors_are_one_line():
    if not torch.cuda.is_available():  # with a GPU the search would run on it
        with pytest.raises(ValueError, match="simulate='6GiB'"):
            auto_select_batch_size(mlp(), input=(32,))  # no GPU, no cap
    with pytest.raises(ValueError, match="steps must be at least 2"):
        auto_select_batch_size(mlp(), input=(32,), simulate=CAP, steps=1)
    with pytest.raises(ValueError, match="simulate"):
        auto_select_batch_size(mlp(), input=(32,), simulate="lots")


def test_bundle_validates_and_says_simulated():
    result = auto_select_batch_size(mlp(), start_batch=90, input=(32,), simulate=CAP)
    bundle = autobatch_bundle(result)
    schema = json.loads(resources.files("gpumem_kernel").joinpath("wire/schemas/autobatch.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(bundle[MIME])
    json.dumps(bundle[MIME])
    assert "simulated" in bundle["text/plain"] and "simulated" in bundle["text/html"]
    assert "Maximum:          95" in bundle["text/plain"]
    payload = dict(bundle[MIME], model_name="<script>x</script>")
    assert "<script>" not in render_html(payload) and "&lt;script&gt;" in render_html(payload)


def test_the_yaml_to_copy_is_in_the_payload_and_in_the_text():
    result = auto_select_batch_size(mlp(), start_batch=90, input=(32,), simulate=CAP, amp="bf16")
    bundle = autobatch_bundle(result)
    text = bundle[MIME]["config_yaml"]
    assert yaml.safe_load(text) == {
        "data": {"batch_size": result.recommended},
        "training": {"use_amp": True, "amp_dtype": "bfloat16"},
    }
    assert text.startswith("# gpumem autobatch of Sequential: simulated on cpu, limit 0.19 MiB\n")
    assert "\n".join(f"  {line}" for line in text.splitlines()) in bundle["text/plain"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_the_maximum_is_the_boundary_and_the_recommendation_trains():  # pragma: no cover - GPU only
    """Three models on a GPU capped at 2 GiB for this process: the search's maximum runs and maximum + 1 runs out
    of memory in a brute-force scan around it, and 100 more steps at the recommended batch do not OOM."""
    from gpumem_kernel.autobatch.search import scan_batch_sizes

    torch.manual_seed(0)
    models = [
        (torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 4096)), (4096,)),
        (
            torch.nn.Sequential(
                torch.nn.Conv2d(3, 64, 3, padding=1),
                torch.nn.BatchNorm2d(64),
                torch.nn.ReLU(),
                torch.nn.Conv2d(64, 64, 3, padding=1),
                torch.nn.ReLU(),
                torch.nn.AdaptiveAvgPool2d(1),
                torch.nn.Flatten(),
                torch.nn.Linear(64, 10),
            ),
            (3, 64, 64),
        ),
        (torch.nn.TransformerEncoderLayer(256, 8, 1024, batch_first=True), (128, 256)),
    ]
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction((2 << 30) / total, 0)
    try:
        for model, shape in models:
            model = model.cuda()
            result = auto_select_batch_size(model, "cuda:0", input=shape, steps=3)
            assert result.engine == "cuda" and result.maximum > 1, result.notes
            around = range(max(1, result.maximum - 2), result.maximum + 3)
            scan = {t.batch: t.ok for t in scan_batch_sizes(model, around, "cuda:0", input=shape, steps=3)}
            print(
                f"\n{type(model).__name__}: maximum {result.maximum} in {result.n_trials} trials "
                f"({result.start_source}, predicted {result.predicted}); scan {scan}"
            )
            assert scan[result.maximum] and not scan[result.maximum + 1]
            optimizer = torch.optim.AdamW(model.parameters())
            for _ in range(100):
                x = torch.randn((result.recommended,) + shape, device="cuda")
                model(x).float().pow(2).mean().backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            del optimizer, x
            model.cpu()
            torch.cuda.empty_cache()
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, 0)
