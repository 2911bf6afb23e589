"""Answering, for the duration of a trace, the value reads that libraries make only to choose a fast path.

Hugging Face transformers (4.x) checks `pad_token_id in input_ids[:, [-1, 0]]` and `torch.all(mask == 1)` before a
forward to drop a mask it can do without; a fake tensor has no values to answer that. Under torch.compile it asks
`is_torchdynamo_compiling()` first and skips those checks (keeping the mask as given): the trace takes that path.
The function is swapped in the globals of every loaded transformers module that imported it by name (its answer
changes nothing else a trace measures: a warning, a cache's static address), never in torch itself, whose
optimizers also ask whether they are compiling. Restored on exit, also when the trace fails.

The attention path is the exception (analysis.fake.attention_path): masking_utils' decision whether a causal mask
can be skipped is asked as an eager run asks it, with the mask's values, and the compile check answers False
meanwhile (4.57 and 5.x); 5.x's sdpa_attention_forward, which asks only to pack a single query token's heads
instead of expanding K/V (no value read follows), keeps its own answer.

No library is imported here: one the user has not loaded cannot be in their model."""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Iterator, List, Tuple

from gpumem_kernel.analysis.allocator.import_guard import interrupts_held
from gpumem_kernel.analysis.fake.attention_path import answering_as_run, mask_decisions
from gpumem_kernel.analysis.fake.library_reads import swap_worst_cases

# (the package whose modules hold the name, the module that defines it, the function's name)
_COMPILE_CHECKS = (("transformers", "transformers.utils.import_utils", "is_torchdynamo_compiling"),)
# modules whose compile check keeps its own answer: it only chooses between paths that read no values (5.x)
_AS_RUN = frozenset({"transformers.integrations.sdpa_attention"})


def _compiling() -> bool:
    """The answer a library gets while the trace runs: take the path a compiled graph takes, except while a
    mask decision is asked as an eager run asks it (analysis.fake.attention_path)."""
    return not answering_as_run()


def _holders(package: str, name: str, original: Any) -> List[Any]:
    """The package's loaded modules whose globals hold `original` under `name`."""
    found = []
    for module_name, module in list(sys.modules.items()):
        if module_name != package and not module_name.startswith(package + "."):
            continue
        if module_name in _AS_RUN:
            continue
        namespace = getattr(module, "__dict__", None)  # not getattr(module, name): lazy modules would import
        if isinstance(namespace, dict) and namespace.get(name) is original:
            found.append(module)
    return found


# LayerDrop (wav2vec2, Whisper, ...) draws `torch.rand([])` per layer and skips the layer when it falls below the
# drop rate. A draw of a scalar is answered with a constant just below 1: no layer is skipped, the step's largest
# memory (a planner's answer), and a fake tensor that holds a constant can be compared and read.
_NO_DROP = 1.0 - 2.0**-24


def _scalar_draws(rand: Any) -> Any:
    import torch

    def draw(*size: Any, **kwargs: Any) -> Any:
        shape = size[0] if len(size) == 1 and isinstance(size[0], (list, tuple)) else size
        if tuple(shape) == () and set(kwargs) <= {"dtype", "device"}:
            return torch.tensor(_NO_DROP, dtype=kwargs.get("dtype") or torch.get_default_dtype())
        return rand(*size, **kwargs)

    return draw


@contextlib.contextmanager
def answer_fast_paths() -> Iterator[None]:
    """Within this block, loaded libraries' compile checks answer True and a scalar random draw keeps every layer;
    every swapped name is restored after."""
    import torch

    swapped: List[Tuple[Any, str, Any]] = [(torch, "rand", torch.rand)]
    try:
        with interrupts_held():  # a Ctrl-C waits until every swap is listed, so that the finally undoes them all
            torch.rand = _scalar_draws(torch.rand)
            swapped += swap_worst_cases()  # value reads in libraries answered as the worst case (library_reads)
            swapped += mask_decisions()  # the attention path as an eager run takes it (attention_path)
            for package, defining, name in _COMPILE_CHECKS:
                original = getattr(sys.modules.get(defining), name, None)
                if not callable(original):
                    continue
                for module in _holders(package, name, original):
                    swapped.append((module, name, original))
                    setattr(module, name, _compiling)
        yield
    finally:
        with interrupts_held():
            for module, name, original in reversed(swapped):
                setattr(module, name, original)
