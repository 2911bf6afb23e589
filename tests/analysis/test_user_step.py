"""The user's own training step traced (trace_step, analyze(step=...)), gradients kept between steps
(keep_grads), and inputs that require grad, each against the same step run for real on the CPU."""

from typing import Any, Callable, Tuple

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from gpumem_kernel.analysis.pipeline.analyze import analyze, trace_step  # noqa: E402
from gpumem_kernel.analysis.trace.run import run_trace  # noqa: E402
from gpumem_kernel.analysis.trace.plan import TracePlan, TraceResult  # noqa: E402
from gpumem_kernel.analysis.trace.training_loop import default_loss  # noqa: E402


def _mlp() -> Any:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))


def _batch(b: int, fake: bool) -> Any:
    return torch.randn(b, 64), torch.randint(0, 10, (b,))


def _classification(output: Any, batch: Any) -> Any:
    return F.cross_entropy(output, batch[1])


def _feed_first(model: Any) -> Any:
    class First(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, x: Any, y: Any) -> Any:
            return self.inner(x)

    return First()


def _pair(plan: TracePlan, batch: int = 16) -> Tuple[TraceResult, TraceResult]:
    torch.manual_seed(0)
    return run_trace(plan, batch, fake=True), run_trace(plan, batch, fake=False)


def _plan(model: Any, optimizer: Any = "adamw", **options: Any) -> TracePlan:
    return TracePlan(model, optimizer, _batch, options.pop("loss_fn", _classification), **options)


def _step(model: Any, opt: Any, batch: Any) -> None:
    x, y = batch
    loss = F.cross_entropy(model(x.to("cuda")), y.cuda())
    loss.backward()
    opt.step()
    opt.zero_grad()


def test_a_users_step_traces_as_the_same_step_runs_for_real() -> None:
    model = _mlp()
    traced, tracked = _pair(_plan(model, step_fn=_step))
    built_in, _ = _pair(_plan(_feed_first(_mlp())))

    assert traced.peak_live == tracked.peak_live
    assert traced.device.peak_reserved == tracked.device.peak_reserved
    params = sum(p.numel() * 4 for p in model.parameters())
    assert traced.parameters == params and traced.gradients == params
    assert traced.optimizer_state == 2 * params  # AdamW's two moments, registered as the copy's step made them
    # the same work as the built-in loop, which keeps its output and loss bound a little longer
    assert abs(traced.peak_live - built_in.peak_live) <= 0.05 * built_in.peak_live


def test_two_optimizers_and_two_backward_passes_in_one_step() -> None:
    torch.manual_seed(0)
    model = nn.ModuleDict(
        {"g": nn.Linear(32, 64), "d": nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 1))}
    )
    opts = {"g": torch.optim.Adam(model["g"].parameters()), "d": torch.optim.SGD(model["d"].parameters(), lr=0.1)}

    def gan_step(m: Any, o: Any, batch: Any) -> None:
        noise, _ = batch
        fake = m["g"](noise[:, :32])
        d_loss = m["d"](fake.detach()).mean()
        d_loss.backward()
        o["d"].step()
        o["d"].zero_grad()
        g_loss = -m["d"](fake).mean()
        g_loss.backward()
        o["g"].step()
        o["g"].zero_grad()

    traced, tracked = _pair(_plan(model, opts, step_fn=gan_step))

    assert traced.peak_live == tracked.peak_live
    g_bytes = sum(p.numel() * 4 for p in model["g"].parameters())
    assert traced.optimizer_state == 2 * g_bytes  # Adam's moments for g; plain SGD keeps none for d
    assert all(not s for s in (opts["g"].state, opts["d"].state))  # the user's optimizers never stepped
    assert all(p.grad is None for p in model.parameters())


def test_empty_cache_in_a_users_step_frees_the_allocator_models_cache() -> None:
    model = _mlp()

    def with_scratch(clear: bool) -> Callable[[Any, Any, Any], None]:
        def step(m: Any, opt: Any, batch: Any) -> None:
            scratch = torch.empty(48 << 20, dtype=torch.uint8, device="cuda")  # a 48 MiB segment, then freed
            del scratch
            if clear:
                torch.cuda.empty_cache()
            big = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")  # does not fit the cached 48 MiB one
            del big
            _step(m, opt, batch)

        return step

    # no cuBLAS workspaces: they would take the cached segments' room and move the figures (as they do on CUDA)
    kept, _ = _pair(_plan(model, step_fn=with_scratch(False), cublas_bytes=0))
    cleared, _ = _pair(_plan(model, step_fn=with_scratch(True), cublas_bytes=0))

    # kept: the 48 MiB segment stays cached beside the 64 MiB one; cleared: it goes back before the 64 MiB one
    assert kept.device.peak_reserved - cleared.device.peak_reserved == 48 << 20
    assert torch.cuda.empty_cache.__module__.startswith("torch")  # put back after the trace


def test_cuda_autocast_in_a_users_step_is_traced_as_the_traces_autocast() -> None:
    model = _mlp()

    def amp_step(m: Any, opt: Any, batch: Any) -> None:
        x, y = batch
        with torch.autocast("cuda", dtype=torch.float16):
            loss = F.cross_entropy(m(x.cuda()), y.cuda())
        loss.backward()
        opt.step()
        opt.zero_grad()

    plain, _ = _pair(_plan(model, step_fn=_step))
    amp, _ = _pair(_plan(model, step_fn=amp_step))

    assert amp.activations < plain.activations
    assert amp.autocast_cache > 0
    assert torch.autocast is torch.amp.autocast_mode.autocast


def test_gradients_kept_between_steps_are_alive_through_the_next_forward() -> None:
    model = _feed_first(_mlp())
    none_traced, none_tracked = _pair(_plan(model))
    kept_traced, kept_tracked = _pair(_plan(model, keep_grads=True))

    assert kept_traced.peak_live == kept_tracked.peak_live and none_traced.peak_live == none_tracked.peak_live
    params = sum(p.numel() * 4 for p in model.parameters())
    forward_gradients = kept_traced.phase_peaks["forward"] - none_traced.phase_peaks["forward"]
    assert forward_gradients == params


def test_an_input_that_requires_grad_keeps_it() -> None:
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
    sample = torch.randn(4, 64, requires_grad=True)

    with_grad = analyze(model, batch_size=32, input=sample, memory="8GiB")
    without = analyze(model, batch_size=32, input=sample.detach(), memory="8GiB")

    assert with_grad.peak_live_bytes - without.peak_live_bytes >= 32 * 64 * 4  # the input's gradient


def test_trace_step_gives_the_analysis_report_and_names_the_step() -> None:
    model = _mlp()
    opt = torch.optim.AdamW(model.parameters())

    report = trace_step(_step, model, opt, batch_size=16, input=lambda b: _batch(b, False), memory="8GiB")

    assert report.settings["batch_size"] == 16 and report.recommendations.maximum is not None
    assert any("your step _step(model, optimizer, batch) traced" in n for n in report.notes)
    assert not opt.state and all(p.grad is None for p in model.parameters())


def test_a_failing_step_is_one_line_that_names_the_users_error() -> None:
    def broken(m: Any, opt: Any, batch: Any) -> None:
        m(batch[0]).sum().backward()
        undefined_name  # noqa: B018, F821

    with pytest.raises(ValueError) as caught:
        trace_step(broken, _mlp(), batch_size=8, input=lambda b: _batch(b, False), memory="8GiB")

    message = str(caught.value)
    assert "\n" not in message and "NameError" in message and "undefined_name" in message
    assert torch.autograd.backward.__module__ == "torch.autograd"  # put back after a failed trace too


def test_step_must_be_callable() -> None:
    with pytest.raises(ValueError, match="step must be a callable"):
        analyze(_mlp(), batch_size=8, input=(64,), step="train_step", memory="8GiB")


def test_default_loss_is_unused_by_a_users_step() -> None:
    plan = _plan(_mlp(), step_fn=_step, loss_fn=default_loss)
    traced, tracked = _pair(plan)
    assert traced.loss_source == "custom" and traced.peak_live == tracked.peak_live
