"""Real ranks of a data-parallel step on the CPU: `world_size` processes on the gloo backend (127.0.0.1, a free
port, one worker thread), each wrapping its own copy of the model as the strategy does and measuring its live tensor
bytes with the storage tracker (analysis.trace.ranks.rank_step). What a traced rank is compared with.

The processes are spawned (never forked from a kernel that may hold threads), limited to one thread each, given a
deadline, and killed if they outlive it. torch is imported inside functions only: the kernel shim must load
without it."""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple

from gpumem_kernel.analysis.trace.ranks import RankPeak, RankSetup, rank_step


@dataclass(frozen=True)
class RandomBatch:
    """A rank's batch, picklable for the rank processes: `shape` random floats, or token ids below `vocab` (as
    input_ids and labels, so that a language model computes its own loss)."""

    shape: Tuple[int, ...]
    vocab: Optional[int] = None

    def __call__(self) -> Any:
        import torch

        if self.vocab is None:
            return torch.randn(*self.shape)
        ids = torch.randint(0, self.vocab, self.shape)
        return {"input_ids": ids, "labels": ids}


class RanksFailed(RuntimeError):
    """A rank process failed or outlived its deadline: one line, with the first rank's error."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def measure_ranks(
    model: Any,
    setups: Sequence[RankSetup],
    make_batch: Callable[[], Any],
    loss_fn: Callable[[Any, Any], Any],
    amp: Optional[str] = None,
    timeout: float = 600.0,
) -> List[List[RankPeak]]:
    """Each setup's ranks (one list per setup, rank order), all setups in one launch of world_size processes;
    the setups must share a world size. `model` is copied (serialised) to each rank; `make_batch` and `loss_fn`
    must be picklable (module-level functions or partials of them)."""
    import torch

    sizes = {s.world_size for s in setups}
    if len(sizes) != 1:
        raise ValueError(f"one launch runs one world size, not {sorted(sizes)}")
    world_size = sizes.pop()
    buffer = io.BytesIO()
    torch.save(model, buffer)
    with tempfile.TemporaryDirectory(prefix="gpumem-ranks-") as folder:
        args = (world_size, free_port(), buffer.getvalue(), list(setups), make_batch, loss_fn, amp, folder)
        _launch(world_size, args, timeout)
        return [
            [RankPeak(**json.loads((Path(folder) / f"{i}-{rank}.json").read_text())) for rank in range(world_size)]
            for i in range(len(setups))
        ]


@contextlib.contextmanager
def _spawnable_main() -> Iterator[None]:
    """multiprocessing's spawn reads `__main__.__spec__`. In IPython `__main__` is the interactive namespace's
    module, and `%reset` empties that namespace, its `__spec__` with it: every spawn then raises AttributeError. A
    missing one is set to None (an interactive `__main__`: nothing for a child to import) while the ranks start,
    and removed again."""
    main = sys.modules.get("__main__")
    missing = main is not None and not hasattr(main, "__spec__")
    if missing:
        main.__spec__ = None  # type: ignore[union-attr]
    try:
        yield
    finally:
        if missing and "__spec__" in vars(main):
            del main.__spec__  # type: ignore[union-attr]


def _launch(world_size: int, args: tuple, timeout: float) -> None:
    import torch.multiprocessing as mp

    with _spawnable_main():
        context = mp.start_processes(_rank_main, args=args, nprocs=world_size, join=False, start_method="spawn")
    deadline = time.monotonic() + timeout
    try:
        while not context.join(timeout=max(0.1, min(5.0, deadline - time.monotonic()))):
            if time.monotonic() > deadline:
                raise RanksFailed(f"{world_size} gloo ranks did not finish within {timeout:.0f} s")
    except mp.ProcessRaisedException as exc:
        raise RanksFailed(f"a gloo rank failed: {str(exc).strip().splitlines()[-1]}") from None
    except mp.ProcessExitedException as exc:
        raise RanksFailed(f"a gloo rank exited: {exc}") from None
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
            process.join(5)
        for name in context.error_files:  # where a failed rank pickled its traceback: read above, ours to remove
            with contextlib.suppress(OSError, TypeError):
                os.remove(name)


def _rank_main(
    rank: int,
    world_size: int,
    port: int,
    model_bytes: bytes,
    setups: List[RankSetup],
    make_batch: Callable[[], Any],
    loss_fn: Callable[[Any, Any], Any],
    amp: Optional[str],
    folder: str,
) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", _loopback())  # any gloo group torch makes besides ours
    dist.Backend.register_backend(SERIAL_GLOO, _serial_gloo, devices=["cpu"])
    dist.init_process_group(
        SERIAL_GLOO, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size, timeout=_timeout()
    )
    try:
        for i, setup in enumerate(setups):
            torch.manual_seed(rank)  # each rank its own batch, as a sampler gives it
            model = torch.load(io.BytesIO(model_bytes), weights_only=False)
            peak = rank_step(model, setup, rank, make_batch, loss_fn, amp, on_step=_settle)
            del model
            (Path(folder) / f"{i}-{rank}.json").write_text(json.dumps(asdict(peak)))
            dist.barrier()
    finally:
        dist.destroy_process_group()


# gloo on one worker thread. A collective's tensors are let go by the worker that ran it, after the rank has been
# told the collective is done: with gloo's usual two workers, the last gradients reduced in a step may be freed
# after the next step began, and counted as kept between steps. One worker runs the queue in order, each
# collective let go before the next one starts: a barrier then proves every earlier one let go.
SERIAL_GLOO = "gloo_serial"


def _serial_gloo(store: Any, rank: int, size: int, timeout: Any) -> Any:
    """A gloo process group on the loopback interface with one worker thread (the backend SERIAL_GLOO names)."""
    import torch.distributed as dist

    options = dist.ProcessGroupGloo._Options()
    options._devices = [dist.ProcessGroupGloo.create_device(interface=_loopback())]
    options._threads = 1
    options._timeout = timeout
    return dist.ProcessGroupGloo(store, rank, size, options)


def _settle(step: int) -> None:
    """Before each step: every rank there, every earlier collective's tensors let go (see SERIAL_GLOO)."""
    import torch.distributed as dist

    dist.barrier()


def _timeout() -> Any:
    import datetime

    return datetime.timedelta(minutes=10)


def _loopback() -> str:
    """The loopback interface's name (gloo binds its pairs to one interface; 127.0.0.1 is on it)."""
    try:
        return next(name for _, name in socket.if_nameindex() if name.startswith("lo"))
    except (OSError, StopIteration):
        return "lo"
