"""DataLoader worker processes that outlive their configuration: found with psutil, waited for, then ended."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

WORKER_EXIT_TIMEOUT = 5.0


def child_processes() -> Dict[int, Any]:
    import psutil

    try:
        return {p.pid: p for p in psutil.Process().children(recursive=True)}
    except psutil.Error:
        return {}


def reap_workers(before: Sequence[int]) -> Tuple[List[int], List[int]]:
    """Child processes started during a configuration that outlive it: wait for them, then end the ones that
    stay (each by its PID: they are this benchmark's DataLoader workers). Returns (left, terminated)."""
    import psutil

    new = [p for pid, p in child_processes().items() if pid not in before]
    if not new:
        return [], []
    _, alive = psutil.wait_procs(new, timeout=WORKER_EXIT_TIMEOUT)
    left = [p.pid for p in alive]
    for process in alive:
        try:
            process.terminate()
        except psutil.Error:
            pass
    _, still = psutil.wait_procs(alive, timeout=2)
    for process in still:
        try:
            process.kill()
        except psutil.Error:
            pass
    return left, left
