"""Section `sampler`: what the sampler costs a GPU training loop, and one probe's cost with real NVML.

The measuring code is benchmarks/sampler_overhead.py's (interleaved A/B rounds of no sampler / 1 Hz / 10 Hz, the
ratio of mean step times within a round; the attributed measure around each sample); only the loop differs: a
CUDA training step (ResNet-18/4 of the zoo, batch 256, synchronised at the end of each step so a step's time
is the GPU's), and the probe runs its NVML path and reads torch's allocator (CUDA is initialised here).

Dry run (CPU): the CPU loop of sampler_overhead.py, short windows; the probe runs its no-GPU path.
"""

from __future__ import annotations

import statistics
from typing import Any, Callable, Dict, List

from benchmarks.gpu.common import Context, section_context, write_result

NAME = "gpu_sampler"
TARGET_1HZ = 0.005


def gpu_loop() -> Callable[[], None]:
    import torch

    from benchmarks.estimator_accuracy import ResNet

    torch.manual_seed(0)
    model = ResNet().cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    x = torch.randn(256, 3, 32, 32, device="cuda")
    y = torch.randint(0, 10, (256,), device="cuda")

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        torch.cuda.synchronize()

    return step


def ab_rounds(step: Callable[[], None], rounds: int, window: float) -> Dict[str, Any]:
    from benchmarks import sampler_overhead as so

    names = list(so.SETTINGS)
    ratios: Dict[str, List[float]] = {n: [] for n in names if n != "none"}
    steps: Dict[str, int] = {n: 0 for n in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]  # no setting always first
        got = {n: so.measure_setting(step, so.SETTINGS[n], window) for n in order}
        for n in ratios:
            ratios[n].append(got[n]["mean"] / got["none"]["mean"] - 1)
        for n in names:
            steps[n] += got[n]["steps"]
    return {
        n: {"overhead_median": statistics.median(v), "per_round": v, "spread": [min(v), max(v)], "steps": steps[n]}
        for n, v in ratios.items()
    } | {"none": {"steps": steps["none"]}}


def run(ctx: Context) -> Dict[str, Any]:
    import torch

    from benchmarks import sampler_overhead as so

    dry = ctx.dry_run
    if dry:
        torch.set_num_threads(1)  # as sampler_overhead.py: the sampler's GIL share shows in the step time
    step = so.make_loop() if dry else gpu_loop()
    so.run_window(step, 0.3 if dry else 3.0)  # warm-up: kernels, allocator, cuDNN choices
    rounds, window, attributed_s = (2, 0.2, 1.5) if dry else (8, 1.0, 12.0)
    if not dry:  # what start-up and the warm-up left of the budget: three arms a round, then the attributed run
        rounds = max(2, min(rounds, int((ctx.left() - attributed_s - 8) / (3 * window))))
    ab = ab_rounds(step, rounds, window)
    local = so.attributed(step, 1.0, attributed_s)
    probe = so.probe_cost(repeats=3 if dry else 10, number=20 if dry else 100)
    overhead = local["overhead"]
    return {
        "description": "sampler overhead on a training loop (A/B ratio of mean step times within each round; "
        "attributed excess around samples) and the probe's cost per call",
        "loop": "CPU MLP 256-512-512-10, batch 64 (sampler_overhead.py)"
        if dry
        else "CUDA ResNet-18/4 (zoo), batch 256, SGD momentum, synchronised per step",
        "rounds": rounds,
        "window_s": window,
        "ab": ab,
        "attributed_1hz": local,
        "probe": probe,
        "target": {"overhead_1hz_max": TARGET_1HZ, "met": None if dry else overhead < TARGET_1HZ},
    }


def main() -> None:
    ctx = section_context(__doc__.splitlines()[0])
    result = run(ctx)
    write_result(ctx, NAME, result)
    print(
        f"sampler: A/B 1 Hz {result['ab']['1 Hz']['overhead_median']:+.3%}, attributed "
        f"{result['attributed_1hz']['overhead']:+.3%}; probe {result['probe']['probe']['median_ms']:.3f} ms",
        flush=True,
    )


if __name__ == "__main__":
    main()
