"""A rank's memory under DDP, ZeRO and FSDP2, measured on real gloo ranks (CPU processes on 127.0.0.1): what each
strategy keeps per rank between steps, and what it adds at the step's peak; and the same rank traced on fake tensors
under a fake process group, against it."""

from __future__ import annotations

import sys
import tempfile
from typing import Dict, List

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from gpumem_kernel.analysis import (  # noqa: E402
    RandomBatch,
    RankSetup,
    RanksFailed,
    RankTraceError,
    default_loss,
    measure_ranks,
    trace_rank,
)

pytestmark = [
    pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs torch.distributed gloo"),
    pytest.mark.timeout(900),
]

SETTINGS = {
    "ddp": {"strategy": "ddp"},
    "zero1": {"strategy": "zero1"},
    "zero2": {"strategy": "zero2"},
    "fsdp": {"strategy": "fsdp"},
    "fsdp-bf16": {"strategy": "fsdp", "param_dtype": "bfloat16"},
}
BATCH = RandomBatch((8, 128))
# what a step leaves bound into the next (batch, output, loss, the optimizer's step counters): small beside the states
CARRIED = 64 << 10


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        *[torch.nn.Sequential(torch.nn.Linear(128, 512), torch.nn.ReLU(), torch.nn.Linear(512, 128)) for _ in range(4)]
    )


PARAMS = sum(p.numel() * p.element_size() for p in _mlp().parameters())
# a block's parameters in fp32: what one collective's buffers hold (a block gathered, or its gradients reduced)
BLOCK = PARAMS // 4


def _measure(world_size: int) -> Dict[str, List]:
    setups = [RankSetup(world_size=world_size, **setting) for setting in SETTINGS.values()]
    return dict(zip(SETTINGS, measure_ranks(_mlp(), setups, BATCH, default_loss, timeout=800)))


@pytest.fixture(scope="module")
def by_world() -> Dict[int, Dict[str, List]]:
    return {2: _measure(2), 4: _measure(4)}


def _start(ranks: List) -> int:
    return max(r.start_live for r in ranks)


def _peak(ranks: List) -> int:
    return max(r.peak_live for r in ranks)


@pytest.mark.parametrize("n", [2, 4])
def test_every_rank_reports_its_step(by_world: Dict[int, Dict[str, List]], n: int) -> None:
    for name, ranks in by_world[n].items():
        assert [r.rank for r in ranks] == list(range(n)), name
        assert all(r.peak_live >= r.start_live > 0 for r in ranks), name


def test_a_ddp_rank_keeps_every_state_and_a_bucket_copy_of_the_gradients(by_world: Dict[int, Dict[str, List]]) -> None:
    # parameters, AdamW's two states and DDP's gradient buckets: four times the parameters, whatever the world size
    for n in (2, 4):
        assert 4 * PARAMS <= _start(by_world[n]["ddp"]) <= 4 * PARAMS + CARRIED
    assert _peak(by_world[2]["ddp"]) == _peak(by_world[4]["ddp"])


@pytest.mark.parametrize("n", [2, 4])
def test_a_zero1_rank_keeps_its_share_of_the_optimizer_state(by_world: Dict[int, Dict[str, List]], n: int) -> None:
    kept = 2 * PARAMS + 2 * PARAMS // n  # parameters and buckets whole, AdamW's states sharded
    assert kept <= _start(by_world[n]["zero1"]) <= kept + CARRIED


@pytest.mark.parametrize("n", [2, 4])
def test_a_fully_sharded_rank_keeps_its_share_of_every_state(by_world: Dict[int, Dict[str, List]], n: int) -> None:
    for name in ("zero2", "fsdp"):
        kept = 3 * PARAMS // n
        assert kept <= _start(by_world[n][name]) <= kept + CARRIED, name


@pytest.mark.parametrize("n", [2, 4])
def test_parameters_kept_gathered_after_forward_raise_the_peak(by_world: Dict[int, Dict[str, List]], n: int) -> None:
    assert _peak(by_world[n]["zero2"]) > _peak(by_world[n]["fsdp"])
    assert _peak(by_world[n]["fsdp"]) < _peak(by_world[n]["ddp"])


@pytest.mark.parametrize("n", [2, 4])
def test_bf16_parameters_gather_half_the_bytes(by_world: Dict[int, Dict[str, List]], n: int) -> None:
    assert _peak(by_world[n]["fsdp-bf16"]) < _peak(by_world[n]["fsdp"])


def test_a_rank_that_fails_says_why_in_one_line_and_leaves_no_file(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the launch keeps its files
    model = torch.nn.Linear(64, 8)  # the batch has 128 features: the forward fails on every rank
    with pytest.raises(RanksFailed, match=r"^a gloo rank failed: RuntimeError: .*\n?$"):
        measure_ranks(model, [RankSetup("ddp", 2)], BATCH, default_loss, timeout=600)
    assert list(tmp_path.iterdir()) == []  # a failed rank's pickled traceback included


def test_ranks_start_after_ipython_reset_emptied_main(monkeypatch: pytest.MonkeyPatch) -> None:
    """IPython's %reset empties the interactive namespace, which is `__main__`'s, `__spec__` with it; spawn needs
    it. The ranks start all the same (here the forward fails on every rank, as above: the ranks ran), and
    `__main__` is left as it was."""
    main = sys.modules["__main__"]
    monkeypatch.delattr(main, "__spec__", raising=False)
    with pytest.raises(RanksFailed, match=r"^a gloo rank failed: RuntimeError: "):
        measure_ranks(torch.nn.Linear(64, 8), [RankSetup("ddp", 2)], BATCH, default_loss, timeout=600)
    assert not hasattr(main, "__spec__")


def test_a_strategy_of_no_rank_wrapper_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown strategy 'zero4'"):
        RankSetup("zero4", 2)


@pytest.fixture(scope="module")
def traced() -> Dict[int, Dict[str, object]]:
    model = _mlp()

    def rank(n: int, setting: Dict[str, str]) -> object:
        return trace_rank(model, RankSetup(world_size=n, **setting), BATCH, default_loss)

    return {n: {name: rank(n, setting) for name, setting in SETTINGS.items()} for n in (2, 4)}


@pytest.mark.parametrize("n", [2, 4])
def test_a_traced_rank_keeps_to_the_byte_what_a_real_rank_keeps(
    by_world: Dict[int, Dict[str, List]], traced: Dict[int, Dict[str, object]], n: int
) -> None:
    for name, ranks in by_world[n].items():
        assert {r.start_live for r in ranks} == {traced[n][name].start_live}, name


@pytest.mark.parametrize("n", [2, 4])
def test_a_traced_ddp_or_zero1_rank_peaks_to_the_byte_as_a_real_one(
    by_world: Dict[int, Dict[str, List]], traced: Dict[int, Dict[str, object]], n: int
) -> None:
    for name in ("ddp", "zero1"):
        real = by_world[n][name][0]  # rank 0, as traced: ZeroRedundancyOptimizer's shards differ by rank
        assert (traced[n][name].peak_live, traced[n][name].peak_phase) == (real.peak_live, real.peak_phase), name


@pytest.mark.parametrize("n", [2, 4])
def test_a_traced_fsdp_rank_peaks_at_most_a_collectives_buffers_below_a_real_one(
    by_world: Dict[int, Dict[str, List]], traced: Dict[int, Dict[str, object]], n: int
) -> None:
    # the fake group's collectives complete at once; gloo's free their tensors when its thread is done with them
    # (a reduce-scatter's input and output: a block's gradients, whole and sharded)
    for name in ("zero2", "fsdp", "fsdp-bf16"):
        for real in by_world[n][name]:
            assert traced[n][name].peak_live <= real.peak_live <= traced[n][name].peak_live + 2 * BLOCK, name


def test_a_traced_rank_leaves_the_model_and_the_process_untouched() -> None:
    model = _mlp()
    before = [(p, p.detach().clone()) for p in model.parameters()]
    trace_rank(model, RankSetup("fsdp", 4), BATCH, default_loss)
    trace_rank(model, RankSetup("ddp", 4), BATCH, default_loss)
    assert [p for p, _ in before] == list(model.parameters())
    assert all(torch.equal(p, copy) and p.grad is None for p, copy in before)
    assert type(model) is torch.nn.Sequential and not dist.is_initialized()


def test_a_rank_is_not_traced_beside_a_process_group_in_use() -> None:
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        with pytest.raises(RankTraceError, match="a process group is already initialised"):
            trace_rank(_mlp(), RankSetup("ddp", 2), BATCH, default_loss)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("name", ["ddp", "zero1"])
def test_the_reports_per_rank_figure_is_what_a_real_rank_holds(by_world: Dict[int, Dict[str, List]], name: str) -> None:
    from gpumem_kernel.analysis import analyze

    model = _mlp()
    alone = analyze(model, batch_size=8, input=(128,))
    ranked = analyze(model, batch_size=8, input=(128,), world_size=4, strategy=name)
    assert ranked.distributed.engine == "traced" and not any("by the formula" in n for n in ranked.notes)
    per_rank_live = alone.peak_live_bytes - (alone.peak_allocated_bytes - ranked.peak_allocated_bytes)
    assert per_rank_live == by_world[4][name][0].peak_live


class _ConvBlock(torch.nn.Sequential):
    def __init__(self) -> None:
        super().__init__(torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU())


def _cnn() -> torch.nn.Module:
    """Repeated conv blocks with BatchNorm (running statistics: buffers DDP broadcasts from rank 0 each forward)."""
    torch.manual_seed(0)
    blocks = [_ConvBlock() for _ in range(4)]
    head = [torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10)]
    return torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), *blocks, *head)


CNN_BATCH = RandomBatch((4, 3, 16, 16))
CNN_BLOCK = sum(p.numel() * p.element_size() for p in _ConvBlock().parameters())
CNN_SETTINGS = {"ddp": RankSetup("ddp", 2), "fsdp": RankSetup("fsdp", 2)}


@pytest.fixture(scope="module")
def cnn_ranks() -> Dict[str, List]:
    return dict(zip(CNN_SETTINGS, measure_ranks(_cnn(), list(CNN_SETTINGS.values()), CNN_BATCH, default_loss)))


def test_a_traced_ddp_rank_of_a_batchnorm_cnn_is_a_real_one_to_the_byte(cnn_ranks: Dict[str, List]) -> None:
    traced = trace_rank(_cnn(), CNN_SETTINGS["ddp"], CNN_BATCH, default_loss)
    for real in cnn_ranks["ddp"]:
        assert (traced.start_live, traced.peak_live, traced.peak_phase) == (
            real.start_live,
            real.peak_live,
            real.peak_phase,
        ), real.rank


def test_a_traced_fsdp_rank_of_a_batchnorm_cnn_peaks_at_most_a_collectives_buffers_below_a_real_one(
    cnn_ranks: Dict[str, List],
) -> None:
    traced = trace_rank(_cnn(), CNN_SETTINGS["fsdp"], CNN_BATCH, default_loss)
    for real in cnn_ranks["fsdp"]:
        assert traced.peak_live <= real.peak_live <= traced.peak_live + 2 * CNN_BLOCK, real.rank


def test_a_bf16_fsdp_rank_of_a_batchnorm_cnn_is_refused_as_a_real_rank_refuses_it() -> None:
    # FSDP2 casts BatchNorm's weight to bf16 but not its fp32 running statistics: batch_norm refuses them on a real
    # rank, and a fake kernel does not check dtypes, so the trace refuses the setup itself
    setup = RankSetup("fsdp", 2, param_dtype="bfloat16")
    with pytest.raises(RankTraceError, match=r"BatchNorm 1\.1's weight but not its torch\.float32 running statistics"):
        trace_rank(_cnn(), setup, CNN_BATCH, default_loss)
    with pytest.raises(RanksFailed, match="expected scalar type BFloat16 but found Float"):
        measure_ranks(_cnn(), [setup], CNN_BATCH, default_loss, timeout=600)
