"""Sizes that depend on tensor values (analysis.fake.size_hints): a fake trace answers them with a stated default (an
upper bound) or the user's hint, and agrees with the real step where the data selects exactly the hinted share."""

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from gpumem_kernel.analysis.fake.size_hints import check  # noqa: E402
from gpumem_kernel.analysis.trace.run import run_trace  # noqa: E402
from gpumem_kernel.analysis.trace.plan import TracePlan  # noqa: E402

BOXES = 4  # targets per image: a quarter of the image indices are distinct
ANCHORS = 400


class _YoloLike(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(16, ANCHORS * 5)

    def forward(self, x, targets):
        return self.head(x).view(x.shape[0], ANCHORS, 5)


def _yolo_loss(output, batch):
    """Ultralytics' preprocess: targets padded to the most per image, then an assignment over (b, n_max, anchors)."""
    x, targets = batch
    image = targets[:, 0].long()
    _, counts = image.unique(return_counts=True)
    counts = counts.to(dtype=torch.int32)
    gt = torch.zeros(x.shape[0], counts.max(), 5)
    scores = output.sigmoid().unsqueeze(1) * (gt.sum(-1, keepdim=True).unsqueeze(-1) + 1)
    return scores.mean()


def _yolo_batch(b, fake=False):
    image = torch.arange(b).repeat_interleave(BOXES).float()[:, None]
    return torch.randn(b, 16), torch.cat([image, torch.rand(b * BOXES, 5)], 1)


class _DetectorLike(nn.Module):
    """Boolean-mask indexing and nonzero over the positives (half of the rows in _detector_batch)."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Linear(16, 64)

    def forward(self, x):
        f = self.features(x)
        positive = x[:, :1].expand(-1, 64) > 0
        matched = torch.nonzero(x[:, 0] > 0).squeeze(1)
        return f[positive].sum() + f[matched].pow(2).sum()


def _detector_batch(b, fake=False):
    x = torch.randn(b, 16)
    x[:, 0] = torch.tensor([1.0, -1.0]).repeat(b // 2)
    return x


def _peaks(model, make, loss, hints, batch=8):
    plan = TracePlan(model, "sgd", make, loss, size_hints=check(hints))
    fake = run_trace(plan, batch, fake=True)
    real = run_trace(TracePlan(model, "sgd", make, loss), batch, fake=False)
    return fake, real


def test_a_yolo_like_loss_sizes_counts_max_by_the_hint_and_agrees_with_the_real_step() -> None:
    hinted, real = _peaks(_YoloLike(), _yolo_batch, _yolo_loss, {"unique": 1 / BOXES})
    default, _ = _peaks(_YoloLike(), _yolo_batch, _yolo_loss, None)

    assert hinted.peak_live == real.peak_live
    assert default.peak_live > hinted.peak_live  # every count read as all targets: the upper bound
    assert any(n.startswith("aten._unique2 at ") and "25 % of the elements distinct" in n for n in hinted.notes)
    (note,) = [n for n in default.notes if n.startswith("aten._unique2")]
    assert "test_size_hints.py:" in note and "every element distinct" in note and "default" in note


def test_boolean_masks_and_nonzero_select_every_element_by_default_and_the_hinted_fraction() -> None:
    hinted, real = _peaks(_DetectorLike(), _detector_batch, lambda out, batch: out, 0.5)
    default, _ = _peaks(_DetectorLike(), _detector_batch, lambda out, batch: out, None)

    assert hinted.peak_live == real.peak_live
    assert default.peak_live > hinted.peak_live
    ops = {n.split(" at ")[0]: n for n in default.notes if " at " in n}
    assert "every element selected (default, an upper bound" in ops["aten.nonzero"]
    assert "aten.index.Tensor (boolean mask)" in ops
    assert any("50 % of the elements selected (size_hints)" in n for n in hinted.notes)


def test_a_location_key_hints_only_that_line() -> None:
    hints = check({"test_size_hints.py:52": 0.5})  # the nonzero line of _DetectorLike.forward
    plan = TracePlan(_DetectorLike(), "sgd", _detector_batch, lambda out, batch: out, size_hints=hints)
    notes = run_trace(plan, 8, fake=True).notes
    assert any(n.startswith("aten.nonzero at ") and "50 %" in n for n in notes)
    assert any(n.startswith("aten.index.Tensor") and "default" in n for n in notes)


PICKED = 6  # candidates a sampler keeps, of the batch's rows


class _SamplerLike(nn.Module):
    """A detector's sampler (torchvision's BalancedPositiveNegativeSampler, then roi_heads' `where(pos | neg)`): the
    indices of a few candidates written into zero masks, and the rows those masks select; then a mask written in a
    way no rule follows."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Linear(16, 64)

    def forward(self, x):
        f = self.features(x)
        candidates = torch.nonzero(x[:, 0] > 0).squeeze(1)
        picked = candidates[torch.randperm(candidates.numel())[:PICKED]]
        positive = torch.zeros(x.shape[0], dtype=torch.uint8)
        positive[picked] = 1
        negative = torch.zeros_like(positive)
        negative[picked[:2]] = 1
        sampled = torch.where(positive | negative)[0]
        touched = positive.clone()
        touched.masked_fill_(x[:, 1] > 0, 1)
        return f[sampled].pow(2).sum() + f[torch.where(touched)[0]].sum()


def test_a_select_from_a_mask_the_step_wrote_takes_at_most_what_was_written() -> None:
    """A sampler's masks hold the k indices written into zeros: the select over them takes at most those (below the
    user's hint too), and a mask written in a way no rule follows falls back to every element."""
    for hint in (None, 0.5):
        plan = TracePlan(_SamplerLike(), "sgd", _detector_batch, lambda out, batch: out, size_hints=check(hint))
        notes = run_trace(plan, 64, fake=True).notes
        (sampled,) = [n for n in notes if f"test_size_hints.py:{_line('sampled = ')}:" in n]
        (touched,) = [n for n in notes if f"test_size_hints.py:{_line('f[torch.where(touched)')}:" in n]
        assert f"{PICKED + 2} of 64 elements selected: at most the elements set in the mask" in sampled
        assert ("below size_hints' 32" in sampled) == (hint is not None)
        assert "of 64 elements selected: at most" not in touched  # masked_fill_ forgot the bound


def _line(code: str) -> int:
    """The line of this file that holds `code` (once)."""
    lines = [i for i, text in enumerate(open(__file__).read().splitlines(), 1) if code in text and "_line(" not in text]
    assert len(lines) == 1, lines
    return lines[0]


class _ReadsData(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x):
        width = int(x.abs().sum())  # a value of the batch itself, not of a hinted op: no rule answers it
        return self.linear(x)[:, :width]


def test_a_read_that_no_hint_answers_keeps_the_one_line_refusal() -> None:
    from gpumem_kernel.analysis.pipeline.analyze import analyze

    with pytest.raises(ValueError) as caught:
        analyze(_ReadsData(), batch_size=4, input=(8,), memory="8GiB", size_hints=0.1)
    message = str(caught.value)
    assert "aten._local_scalar_dense" in message and "test_size_hints.py:" in message and "\n" not in message


def test_the_analysis_reports_the_rule() -> None:
    from gpumem_kernel.analysis.pipeline.analyze import analyze

    report = analyze(_DetectorLike(), batch_size=8, input=_detector_batch, memory="8GiB", size_hints=0.5)
    assert any(n.startswith("aten.nonzero at ") and "50 %" in n for n in report.notes)


@pytest.mark.parametrize("bad", [1.5, -0.1, "x", {"nonsense": 0.1}, {"select": 2}, {"repeat": -1}])
def test_malformed_hints_are_refused_in_one_line(bad) -> None:
    with pytest.raises(ValueError) as caught:
        check(bad)
    assert "size_hints" in str(caught.value) and "\n" not in str(caught.value)


def test_the_magic_takes_a_fraction() -> None:
    from gpumem_kernel.magics.options import analyze_arguments
    from gpumem_kernel.magics.parsing import parse

    assert parse(analyze_arguments, "analyze", "model --size-hint 0.1").size_hint == 0.1
