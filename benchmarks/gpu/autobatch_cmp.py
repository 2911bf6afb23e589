"""Section `autobatch`: our `auto_select_batch_size` against Lightning's BatchSizeFinder (binsearch) and
accelerate's `find_executable_batch_size`, on the same models with the same free memory.

To keep each search to seconds on an 80 GB GPU, a ballast process holds all but `FREE_GIB` of the GPU, as another
user's process would: every tool sees the same free memory through the driver. Per model, one process runs
the three tools in turn (fp32, AdamW, 3 steps a trial where a tool lets us choose), then for each tool's pick
`SURVIVAL_STEPS` training steps and a validation pass (`VAL_BATCHES` batches under no_grad) on a fresh copy
of the model, through the same plain loop for every tool: does it run out of memory?
Recorded per tool: trials, the batch sizes tried, seconds, the pick (ours: `recommended`, its `maximum` too;
Lightning: the size it sets; accelerate: the first size that ran, from its default start of 128).

Dry run (CPU): the same code, a tiny model, and a simulated device shared by all three tools: the tracker of
autobatch.py (live tensor bytes, capped) raises "CUDA out of memory." inside their training steps.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from benchmarks.gpu.common import GiB, MiB, REPO, Context, first_line, one_line, section_context, write_result

NAME = "gpu_autobatch"
FREE_GIB = 8
SURVIVAL_STEPS, VAL_BATCHES = 100, 10
DRY_SURVIVAL = (2, 1)
DRY_CAP = 1 * MiB  # the simulated device of the dry run: the tiny nanoGPT's maximum is a batch of 13
GPU_MODELS = ["ResNet-50", "GPT-2", "U-Net"]
DRY_MODELS = ["nanoGPT"]
TRIAL_STEPS = 3  # Lightning's default steps_per_trial; our own search runs its default (2)


# --- the device: real, or simulated for the dry run -------------------------------------------------------------


@contextlib.contextmanager
def device_guard(cap: Optional[int], model: Any, optimizer: Any, data: Any = None) -> Iterator[None]:
    """On the CPU, count live tensor bytes (the model's states, `data`, what the step allocates) against `cap`
    and fail as CUDA does; on a GPU, nothing."""
    if cap is None:
        yield
        return
    from gpumem_kernel.analysis import SimulatedOOM, make_tracker, register_states

    tracker = make_tracker(cap)
    register_states(tracker, model, optimizer)
    tracker.register(data)
    try:
        with tracker:
            tracker.check_baseline()
            yield
    except SimulatedOOM as exc:  # the message Lightning's and accelerate's OOM tests look for
        raise RuntimeError(f"CUDA out of memory. {exc}") from None
    finally:
        tracker.close()


def train_step(model: Any, optimizer: Any, built: Any, batch: int, device: Any, cap: Optional[int]) -> None:
    with device_guard(cap, model, optimizer):
        data = built.make_batch(batch, False).to(device)
        built.loss(model(data), data).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def fresh(built: Any, device: Any) -> Any:
    import torch

    model = copy.deepcopy(built.model).to(device).train()
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)


def release(device: Any) -> None:
    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


# --- the three tools ------------------------------------------------------------------------------------------


def ours(built: Any, device: Any, cap: Optional[int]) -> Dict[str, Any]:
    from gpumem_kernel.autobatch.search import auto_select_batch_size

    result = auto_select_batch_size(
        built.model,
        device=str(device),
        input=lambda b: built.make_batch(b, False),
        loss=built.loss,
        optimizer="adamw",
        simulate=cap,
    )
    return {
        "pick": result.recommended,
        "maximum": result.maximum,
        "trials": result.n_trials,
        "tried": [[t.batch, t.ok] for t in result.trials],
        # why each size was tried and what it measured: the search's steps can be replayed from these
        "trial_details": [
            {"batch": t.batch, "ok": t.ok, "phase": t.phase, "allocated": t.peak_bytes, "reserved": t.reserved_bytes}
            for t in result.trials
        ],
        "limit": result.limit_bytes,
        "notes": list(result.notes),
        "seconds": result.seconds,
        "start": [result.start_source, result.start_batch],
    }


def _lightning() -> Any:
    try:
        import lightning.pytorch as pl
    except ImportError:
        try:
            import pytorch_lightning as pl
        except ImportError:
            raise ImportError("neither lightning nor pytorch_lightning is installed") from None
    return pl


def _runs(seen: List[int]) -> List[int]:
    """Batch sizes of consecutive trials (each trial is a run of steps at one size)."""
    return [b for i, b in enumerate(seen) if i == 0 or seen[i - 1] != b]


def lightning(built: Any, device: Any, cap: Optional[int]) -> Dict[str, Any]:
    import torch
    from torch.utils.data import DataLoader, Dataset

    pl = _lightning()
    sample = built.make_batch(1, False)[0]

    class Same(Dataset):  # one sample repeated: data loading stays out of the comparison
        def __len__(self) -> int:
            return 1 << 20

        def __getitem__(self, i: int) -> Any:
            return sample

    class Module(pl.LightningModule):  # Lightning: imported at run time
        def __init__(self) -> None:
            super().__init__()
            self.model = copy.deepcopy(built.model)
            self.batch_size = 2
            self.automatic_optimization = False  # the step runs inside the (simulated) device guard
            self.seen: List[int] = []

        def train_dataloader(self) -> Any:
            return DataLoader(Same(), batch_size=self.batch_size)

        def training_step(self, data: Any, index: int) -> None:
            self.seen.append(int(data.shape[0]))
            optimizer = self.optimizers()
            with device_guard(cap, self.model, optimizer.optimizer, data):  # Lightning made `data` outside
                self.manual_backward(built.loss(self.model(data), data))
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=1e-4, foreach=True)

    module = Module()
    with tempfile.TemporaryDirectory() as root:
        trainer = pl.Trainer(
            accelerator="gpu" if device.type == "cuda" else "cpu",
            devices=1,
            max_epochs=1,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            default_root_dir=root,
        )
        started = time.perf_counter()
        pick = pl.tuner.Tuner(trainer).scale_batch_size(
            module, mode="binsearch", steps_per_trial=TRIAL_STEPS, init_val=2, max_trials=25
        )
        seconds = time.perf_counter() - started
    tried = _runs(module.seen)
    return {
        "pick": pick,
        "trials": len(tried),
        "tried": tried,
        "seconds": round(seconds, 3),
        "package": pl.__name__.split(".")[0],
        "version": getattr(pl, "__version__", None),
    }


def accelerate(built: Any, device: Any, cap: Optional[int]) -> Dict[str, Any]:
    import accelerate as acc
    from accelerate.utils import find_executable_batch_size

    tried: List[int] = []

    @find_executable_batch_size(starting_batch_size=128)
    def trial(batch_size: int) -> int:
        tried.append(batch_size)
        model, optimizer = fresh(built, device)
        for _ in range(TRIAL_STEPS):
            train_step(model, optimizer, built, batch_size, device, cap)
        return batch_size

    started = time.perf_counter()
    pick = trial()
    return {
        "pick": pick,
        "trials": len(tried),
        "tried": tried,
        "seconds": round(time.perf_counter() - started, 3),
        "version": acc.__version__,
        "start": 128,
    }


TOOLS: Dict[str, Callable[[Any, Any, Optional[int]], Dict[str, Any]]] = {
    "gpumem autobatch": ours,
    "Lightning BatchSizeFinder (binsearch)": lightning,
    "accelerate find_executable_batch_size": accelerate,
}


# --- survival at the pick ------------------------------------------------------------------------------------


def survival(built: Any, batch: int, device: Any, cap: Optional[int], steps: int, val: int) -> Dict[str, Any]:
    """`steps` training steps and `val` validation batches at `batch` on a fresh copy: any OOM?"""
    import torch

    release(device)
    model, optimizer = fresh(built, device)
    started = time.perf_counter()
    error, done = None, 0
    try:
        for _ in range(steps):
            train_step(model, optimizer, built, batch, device, cap)
            done += 1
        model.eval()
        with torch.no_grad():
            for _ in range(val):
                with device_guard(cap, model, optimizer):
                    model(built.make_batch(batch, False).to(device))
    except RuntimeError as exc:
        from gpumem_kernel.oom.classify import is_oom

        if not is_oom(exc):
            raise
        error = one_line(exc)
    reserved = torch.cuda.max_memory_reserved(device) if device.type == "cuda" else None
    del model, optimizer
    release(device)
    return {
        "batch": batch,
        "steps": steps,
        "validation_batches": val,
        "steps_done": done,
        "oom": error is not None,
        "error": error,
        "max_memory_reserved": reserved,
        "seconds": round(time.perf_counter() - started, 2),
    }


def compare(arch: str, dry: bool, progress: Optional[Callable[[Dict[str, Any]], None]] = None) -> Dict[str, Any]:
    """Each tool's pick and its survival run; `progress` gets the row so far after each tool (what a kill at the
    time budget leaves is kept)."""
    import torch

    from benchmarks.gpu import models

    built = models.build(arch, dry)
    device = torch.device("cpu") if dry else torch.device("cuda", 0)
    cap = DRY_CAP if dry else None
    steps, val = DRY_SURVIVAL if dry else (SURVIVAL_STEPS, VAL_BATCHES)
    tools: Dict[str, Any] = {}
    for name, tool in TOOLS.items():
        release(device)
        try:
            entry = tool(built, device, cap)
        except ImportError as exc:
            tools[name] = {"status": "skipped", "reason": f"not importable: {one_line(exc)}"}
            continue
        except Exception as exc:  # a tool that crashes is a finding
            tools[name] = {"status": "failed", "reason": one_line(exc)}
            continue
        release(device)
        entry["survival"] = survival(built, entry["pick"], device, cap, steps, val) if entry.get("pick") else None
        tools[name] = {"status": "ok", **entry}
        print(
            f"autobatch/{arch}/{name}: pick {entry['pick']} in {entry['trials']} trials, {entry['seconds']} s",
            flush=True,
        )
        if progress is not None:
            progress({"arch": arch, "batch_input": built.input, "tools": dict(tools)})
    return {"arch": arch, "batch_input": built.input, "tools": tools}


# --- orchestration ----------------------------------------------------------------------------------------------


def start_ballast(free_bytes: int) -> Tuple["subprocess.Popen[str]", Optional[int]]:
    """A process holding all of the GPU but `free_bytes` (its context included), until killed or its section ends."""
    code = (
        "import os, sys, time, torch; torch.zeros(1, device='cuda'); free, _ = torch.cuda.mem_get_info(); "
        "n = max(0, free - int(sys.argv[1])); x = torch.empty(n, dtype=torch.uint8, device='cuda'); "
        "print(n, flush=True)\n"
        "while os.getppid() == int(sys.argv[2]): time.sleep(0.5)"  # ends with its section, killed or not
    )
    argv = [sys.executable, "-c", code, str(free_bytes), str(os.getpid())]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    held = first_line(proc, 120)  # the bytes it holds, once it holds them
    return proc, int(held) if held and held.isdigit() else None


def _spawn(arch: str, ctx: Context, seconds: float) -> Dict[str, Any]:
    """`compare` in a fresh process: its own CUDA context and allocator (in this one for a dry run)."""
    if ctx.in_process:
        return {"status": "ok", **compare(arch, True)}
    out = Path(tempfile.mkdtemp(prefix="gpumem-autobatch-")) / "compare.json"  # not in <out>: it comes back whole
    cmd = [sys.executable, "-m", "benchmarks.gpu.autobatch_cmp", "--compare", arch, "--result", str(out)]
    try:
        done = subprocess.run(
            cmd + (["--dry-run"] if ctx.dry_run else []), cwd=REPO, timeout=seconds, capture_output=True, text=True
        )
        sys.stdout.write(done.stdout)
        if done.returncode != 0:
            return {"arch": arch, "status": "failed", "reason": (done.stderr.strip().splitlines() or ["?"])[-1]}
    except subprocess.TimeoutExpired:
        killed = f"killed at its time budget ({seconds:.0f} s)"
        if not out.exists():
            return {"arch": arch, "status": "not measured", "reason": killed}
        data = json.loads(out.read_text())  # the tools that finished before the kill
        for name in TOOLS:
            data["tools"].setdefault(name, {"status": "not measured", "reason": killed})
        return {"status": "ok", **data}
    data = json.loads(out.read_text())
    out.unlink()
    out.parent.rmdir()
    return {"status": "ok", **data}


def _targets(rows: List[Dict[str, Any]], dry: bool) -> Dict[str, Any]:
    """Issue 10's targets: our pick survives (zero OOMs) in no more trials than Lightning's binsearch."""
    ours_name, lightning_name = list(TOOLS)[:2]
    checks = []
    for row in rows:
        tools = row.get("tools") or {}
        mine, theirs = tools.get(ours_name, {}), tools.get(lightning_name, {})
        if mine.get("status") != "ok":
            continue
        survived = bool(mine.get("survival")) and not mine["survival"]["oom"]
        fewer = theirs.get("status") == "ok" and mine["trials"] <= theirs["trials"]
        checks.append(
            {
                "arch": row["arch"],
                "ours_survived": survived,
                "ours_trials": mine["trials"],
                "lightning_trials": theirs.get("trials"),
                "no_more_trials": fewer,
            }
        )
    met = None if dry or not checks else all(c["ours_survived"] and c["no_more_trials"] for c in checks)
    return {"checks": checks, "met": met}


def run(ctx: Context, free_gib: float) -> Dict[str, Any]:
    from benchmarks.gpu.estimator import _available

    archs = DRY_MODELS if ctx.dry_run else GPU_MODELS
    skipped = {a: why for a in archs if (why := _available(a)) is not None}
    todo = [a for a in archs if a not in skipped]
    ballast, held = (None, None) if ctx.dry_run else start_ballast(int(free_gib * GiB))
    rows: List[Dict[str, Any]] = []
    try:
        for i, arch in enumerate(todo):
            share = (ctx.left() - 5) / (len(todo) - i)
            if share < (5 if ctx.dry_run else 40):
                rows.append({"arch": arch, "status": "not measured", "reason": "time budget"})
                continue
            rows.append(_spawn(arch, ctx, share))
    finally:
        if ballast is not None:
            ballast.kill()
            ballast.wait(10)
    return {
        "description": "gpumem autobatch vs Lightning BatchSizeFinder (binsearch) vs accelerate "
        "find_executable_batch_size: trials, seconds, pick; then training steps and a "
        "validation pass at each pick on a fresh model (same loop for all tools)",
        "ballast_bytes": held,
        "free_memory": f"{free_gib} GiB (ballast process)"
        if not ctx.dry_run
        else f"simulated cap of {DRY_CAP // MiB} MiB on live tensor bytes",
        "survival": dict(
            zip(("steps", "validation_batches"), DRY_SURVIVAL if ctx.dry_run else (SURVIVAL_STEPS, VAL_BATCHES))
        ),
        "precision": "fp32",
        "optimizer": "AdamW",
        "skipped": skipped,
        "rows": rows,
        "targets": _targets(rows, ctx.dry_run),
    }


def main() -> None:
    if "--compare" in sys.argv:
        parser = argparse.ArgumentParser()
        parser.add_argument("--compare", required=True)
        parser.add_argument("--result", type=Path, required=True)
        parser.add_argument("--dry-run", action="store_true")
        args = parser.parse_args()

        def keep(row: Dict[str, Any]) -> None:
            args.result.write_text(json.dumps(row))

        keep(compare(args.compare, args.dry_run, keep))
        return
    ctx = section_context(__doc__.splitlines()[0])
    result = run(ctx, FREE_GIB)
    write_result(ctx, NAME, result)
    print(f"autobatch: targets {result['targets']}", flush=True)


if __name__ == "__main__":
    main()
