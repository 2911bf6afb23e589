"""The model and optimizer copy a trace runs on, on the patterns public models use: tensors kept in lists and
dicts (YOLOv5's `Detect.grid`), small tensors whose values the forward reads (YOLOv8's `Detect.stride` in
`make_anchors`), and optimizers that read tensor values (bitsandbytes' Adam8bit) or fail in their step."""

from typing import Any, List

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from gpumem_kernel.analysis.trace.model_copy import TensorCopier, copy_model, tensor_attributes  # noqa: E402
from gpumem_kernel.analysis.trace.run import run_trace  # noqa: E402
from gpumem_kernel.analysis.trace.plan import TraceError, TracePlan, TraceResult  # noqa: E402
from gpumem_kernel.analysis.trace.training_loop import default_loss  # noqa: E402


def make_anchors(feats: List[Any], strides: Any, offset: float = 0.5) -> Any:
    """Ultralytics' (YOLOv8/11): iterates the stride tensor and fills with each value."""
    points, stride_tensor = [], []
    dtype = feats[0].dtype
    for i, stride in enumerate(strides):
        h, w = feats[i].shape[2:]
        sx = torch.arange(end=w, dtype=dtype) + offset
        sy = torch.arange(end=h, dtype=dtype) + offset
        sy, sx = torch.meshgrid(sy, sx, indexing="ij")
        points.append(torch.stack((sx, sy), -1).view(-1, 2))
        stride_tensor.append(torch.full((h * w, 1), stride, dtype=dtype))
    return torch.cat(points), torch.cat(stride_tensor)


class Detect(nn.Module):
    """A detection head as YOLOv5 and YOLOv8 keep one: grids cached in a list, strides as a plain tensor."""

    def __init__(self, nl: int = 3, ch: int = 8, no: int = 6) -> None:
        super().__init__()
        self.nl = nl
        self.m = nn.ModuleList(nn.Conv2d(ch, no, 1) for _ in range(nl))
        self.stride = torch.tensor([8.0, 16.0, 32.0])  # not a buffer: set by the model after a dry run
        self.grid = [torch.empty(0)] * nl  # YOLOv5
        self.anchor_grid = [torch.empty(0)] * nl
        self.cache = {"levels": (torch.zeros(nl), [torch.ones(2)])}  # nested containers

    def forward(self, xs: List[Any]) -> Any:
        ys = [self.m[i](x) for i, x in enumerate(xs)]
        if self.training:
            return ys
        for i, y in enumerate(ys):
            if self.grid[i].shape[2:4] != y.shape[2:4]:
                self.grid[i] = torch.zeros(1, 1, *y.shape[2:4])  # YOLOv5's _make_grid, cached on the module
        anchors, strides = make_anchors(ys, self.stride)
        assert self.stride.tolist() == [8.0, 16.0, 32.0] and int(self.stride[-1]) == 32
        flat = torch.cat([y.flatten(2) for y in ys], 2)
        return flat * strides.T + anchors[:, :1].T


class Detector(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, 2, 1)
        self.down = nn.ModuleList(nn.Conv2d(8, 8, 3, 2, 1) for _ in range(4))
        self.detect = Detect()

    def forward(self, x: Any) -> Any:
        x = self.down[0](self.stem(x))  # stride 4
        feats = []
        for conv in self.down[1:]:
            x = conv(x)
            feats.append(x)  # strides 8, 16, 32
        return self.detect(feats)


def _images(b: int, fake: bool) -> Any:
    return torch.randn(b, 3, 64, 64)


def _trace(model: Any, optimizer: Any = "adamw", evaluation: bool = False) -> TraceResult:
    plan = TracePlan(model=model, optimizer=optimizer, make_batch=_images, loss_fn=default_loss, evaluation=evaluation)
    return run_trace(plan, 2)


def test_tensors_in_list_tuple_and_dict_attributes_are_copied_as_stand_ins() -> None:
    model = Detector()
    grid, cache = model.detect.grid, model.detect.cache
    found = {id(t) for _, _, t in tensor_attributes(model)}
    assert {id(grid[0]), id(cache["levels"][0]), id(cache["levels"][1][0])} <= found
    with torch._subclasses.fake_tensor.FakeTensorMode(allow_non_fake_inputs=True):
        clone, mapping, _ = copy_model(model, TensorCopier(fake=True))
    assert clone.detect.grid[0] is clone.detect.grid[2] is mapping[id(grid[0])]  # one tensor, one stand-in
    assert clone.detect.grid is not grid and model.detect.grid is grid
    assert clone.detect.cache["levels"][1][0] is mapping[id(cache["levels"][1][0])]


def test_the_copys_containers_are_its_own_and_shared_where_the_models_are() -> None:
    """A loop that appends to a module's list or registers a hook on the copy leaves the user's model as it was;
    an empty list two modules share is one list in the copy too, as deepcopy keeps it."""
    user = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    shared: List[Any] = []
    user[0].seen, user[1].seen = shared, shared
    user[0].settings = {}
    clone, _, _ = copy_model(user, TensorCopier(fake=False))
    assert clone[0].seen is clone[1].seen and clone[0].seen is not shared
    clone[0].seen.append(1)
    clone[0].settings["k"] = 1
    clone[0].register_forward_hook(lambda *args: None)
    assert shared == [] and user[0].settings == {}
    assert all(not m._forward_hooks for m in user.modules())
    assert clone[0]._forward_hooks is not user[0]._forward_hooks and clone[1]._forward_hooks == {}


def test_a_yolov5_head_with_list_grids_traces_a_training_step() -> None:
    model = Detector()
    assert _trace(model).peak_live > 0
    assert all(g.numel() == 0 for g in model.detect.grid)  # the user's grids untouched


def test_small_tensor_attributes_keep_their_values_in_the_evaluation_step() -> None:
    model = Detector()
    assert _trace(model, evaluation=True).peak_live > 0
    assert all(g.numel() == 0 for g in model.detect.grid)  # the copy's forward cached its grids, not the user's
    assert model.training  # the copy went to eval(), the user's model did not


class ReadsAtConstruction(torch.optim.Optimizer):
    """bitsandbytes' Adam8bit pattern: the constructor reads a value from a tensor made from a parameter."""

    def __init__(self, params: Any, lr: float = 1e-3) -> None:
        super().__init__(params, {"lr": lr})
        for group in self.param_groups:
            for p in group["params"]:
                if torch.zeros_like(p).abs().max().item() > 0:
                    raise AssertionError("unreachable")

    def step(self, closure: Any = None) -> None:
        pass


class ReadsInStep(torch.optim.SGD):
    def step(self, closure: Any = None) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None and p.grad.norm().item() > 1e9:
                    return
        super().step()


class FailsInStep(torch.optim.SGD):
    def step(self, closure: Any = None) -> None:
        raise RuntimeError("unsupported device\nsecond line")


@pytest.mark.parametrize(
    ("cls", "phase"),
    [(ReadsAtConstruction, "re-create"), (ReadsInStep, "step"), (FailsInStep, "step")],
)
def test_an_optimizer_that_cannot_be_copied_or_stepped_is_named_in_one_line(cls: type, phase: str) -> None:
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = cls(model.parameters(), lr=0.1)
    plan = TracePlan(model=model, optimizer=optimizer, make_batch=lambda b, f: torch.randn(b, 8), loss_fn=default_loss)
    with pytest.raises(TraceError) as error:
        run_trace(plan, 2)
    message = str(error.value)
    assert cls.__name__ in message and phase in message and "\n" not in message
    assert error.value.__cause__ is None and error.value.__suppress_context__
