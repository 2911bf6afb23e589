"""Grad mode at the failing line of an out-of-memory error: whether it ran with gradients off (evaluation or
inference), and what says so.

The evidence, innermost first (the context that is active at the failing line is the one set last):

- a frame whose failing line lies inside `with torch.no_grad():`, `with torch.inference_mode():` or
  `with torch.set_grad_enabled(False):` (or whose function is decorated with `@torch.no_grad()` /
  `@torch.inference_mode()`), read with `ast` from the frame's source in linecache, where IPython keeps every
  cell under its file name; `torch.enable_grad()` or `torch.set_grad_enabled(True)` nearer the line means
  training;
- a frame of Lightning's evaluation entry points (`validation_step`, `test_step`, `predict_step`), which
  Lightning runs without gradients;
- else torch's own grad mode, when it is still off after the cell (`torch.set_grad_enabled(False)` called as a
  statement stays on for the whole kernel).

torch's own frames (its `torch.nn.init` and optimizers turn gradients off for their own work), IPython's,
Python's and ours are not read, nor the frames of an optimizer's methods. A frame whose source is missing or
no longer matches says nothing. Nothing here imports torch.
"""

from __future__ import annotations

import ast
import linecache
import os
import sys
import sysconfig
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Tuple

from gpumem_kernel.probe.torchstats import loaded_torch
from gpumem_kernel.probe.cells import cell_of

# Lightning runs these under torch.no_grad() or torch.inference_mode() (its evaluation and prediction loops).
LIGHTNING_EVAL_STEPS = ("validation_step", "test_step", "predict_step")
# Modules whose folders are not read: their grad switches are their own business, not the user's evaluation.
_SKIPPED_MODULES = ("torch", "IPython", "ipykernel", "gpumem_kernel")
_SOURCE_LIMIT = 2_000_000  # characters: a larger file is not parsed
_CODE_LIMIT = 80  # characters of a context expression quoted in the evidence
_COMPREHENSIONS = ("<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>")
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_MATCH_CASE = getattr(ast, "match_case", None)  # Python 3.10+: on 3.9 there is no match statement to look into


class GradMode(NamedTuple):
    """What one construct does to grad mode: `enabled` after it, and the evidence (for `enabled` False)."""

    enabled: bool
    evidence: str


def grad_off_evidence(tb: Any = None) -> Optional[str]:
    """Why the failed call ran with gradients off (one line), or None when it ran with them on or nothing
    says. `tb`: the failed call's traceback (default sys.last_traceback)."""
    tb = tb if tb is not None else getattr(sys, "last_traceback", None)
    trees: Dict[str, Optional[ast.Module]] = {}
    for frame, line in reversed(_frames(tb)):
        try:
            mode = _frame_mode(frame, line, trees)
        except Exception:  # a frame that cannot be read says nothing (RecursionError on deep code included)
            continue
        if mode is not None:
            return None if mode.enabled else mode.evidence
    return _global_mode()


def _frames(tb: Any) -> List[Tuple[Any, int]]:
    """(frame, failing line) of each traceback entry, outermost first."""
    found: List[Tuple[Any, int]] = []
    while tb is not None and len(found) < 1000:
        found.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    return found


def _global_mode() -> Optional[str]:
    torch = loaded_torch()
    if torch is None:
        return None
    try:
        if torch.is_inference_mode_enabled():
            return "inference mode is on in this kernel (torch.is_inference_mode_enabled() is True)"
        if not torch.is_grad_enabled():
            return "gradients are off in this kernel (torch.is_grad_enabled() is False)"
    except Exception:
        return None
    return None


# --- one frame ------------------------------------------------------------------------------------------------


def _frame_mode(frame: Any, line: int, trees: Dict[str, Optional[ast.Module]]) -> Optional[GradMode]:
    code = frame.f_code
    if _skipped(code.co_filename) or _is_optimizer(frame):
        return None
    tree = _tree(code.co_filename, frame.f_globals, trees)
    if tree is None:
        return None
    chain = _enclosing(tree, line)
    scope = next((i for i in range(len(chain) - 1, -1, -1) if isinstance(chain[i], _SCOPES)), None)
    if not _matches(code.co_name, chain[scope] if scope is not None else None):
        return None  # the source changed since the code ran, or a lambda whose body is elsewhere
    where = _where(code.co_filename, line, code.co_name)
    inside = chain[scope + 1 :] if scope is not None else chain
    for node in reversed(inside):
        if isinstance(node, (ast.With, ast.AsyncWith)) and line >= node.body[0].lineno:
            mode = _with_mode(node, where)
            if mode is not None:
                return mode
    if scope is not None and isinstance(chain[scope], (ast.FunctionDef, ast.AsyncFunctionDef)):
        return _function_mode(chain[scope], where)
    return None


def _matches(co_name: str, scope: Optional[ast.AST]) -> bool:
    """Whether the innermost scope around the line is the frame's own code."""
    if co_name in _COMPREHENSIONS:
        return True
    if scope is None:
        return co_name == "<module>"
    return getattr(scope, "name", None) == co_name


def _with_mode(node: Any, where: str) -> Optional[GradMode]:
    for item in reversed(node.items):  # the last item is entered last: it is the innermost
        enabled = grad_switch(item.context_expr)
        if enabled is not None:
            return GradMode(enabled, f"the failing line runs inside `with {_code(item.context_expr)}:` ({where})")
    return None


def _function_mode(function: Any, where: str) -> Optional[GradMode]:
    for decorator in reversed(function.decorator_list):  # the one nearest the def wraps the body innermost
        enabled = grad_switch(decorator, decorator=True)
        if enabled is not None:
            return GradMode(enabled, f"`{function.name}` is decorated with `@{_code(decorator)}` ({where})")
    if function.name in LIGHTNING_EVAL_STEPS:
        return GradMode(False, f"it was raised in `{function.name}`, which Lightning runs without gradients ({where})")
    return None


def grad_switch(expr: ast.expr, decorator: bool = False) -> Optional[bool]:
    """What a context manager (or decorator) expression leaves grad mode at: False for torch.no_grad(),
    torch.inference_mode() and torch.set_grad_enabled(False), True for torch.enable_grad() and
    torch.set_grad_enabled(True); None when it is none of them or its argument is not a constant."""
    if not isinstance(expr, ast.Call):  # `@torch.no_grad` without parentheses decorates too
        name = _last_name(expr) if decorator else None
        return {"no_grad": False, "inference_mode": False, "enable_grad": True}.get(name or "")
    name = _last_name(expr.func)
    if name == "no_grad":
        return False
    if name == "enable_grad":
        return True
    if name == "inference_mode":
        mode = _argument(expr, "mode", True)
        return False if mode is True else None  # inference_mode(False) leaves grad mode as it was
    if name == "set_grad_enabled":
        mode = _argument(expr, "mode", None)
        return mode if isinstance(mode, bool) else None
    return None


def _last_name(expr: ast.expr) -> Optional[str]:
    if isinstance(expr, ast.Attribute):
        return expr.attr
    if isinstance(expr, ast.Name):
        return expr.id
    return None


def _argument(call: ast.Call, keyword: str, default: Any) -> Any:
    """The constant value of the first positional argument or of `keyword`; `default` when neither is given;
    None when it is not a constant."""
    node: Optional[ast.expr] = call.args[0] if call.args else None
    for kw in call.keywords:
        if kw.arg == keyword:
            node = kw.value
    if node is None:
        return default
    return node.value if isinstance(node, ast.Constant) else None


def _code(expr: ast.expr) -> str:
    text = " ".join(ast.unparse(expr).split())
    return text if len(text) <= _CODE_LIMIT else text[: _CODE_LIMIT - 1] + "…"


def _where(filename: str, line: int, name: str) -> str:
    cell = cell_of(filename)
    if cell is not None:
        return f"In [{cell}], line {line}"
    return f"{os.path.basename(filename)}:{line} in {name}"


# --- source and its statements -----------------------------------------------------------------------------------


def _tree(filename: str, module_globals: Any, trees: Dict[str, Optional[ast.Module]]) -> Optional[ast.Module]:
    """The parsed source of a file (a cell: IPython keeps it in linecache), or None without one."""
    if filename not in trees:
        trees[filename] = _parse(filename, module_globals)
    return trees[filename]


def _parse(filename: str, module_globals: Any) -> Optional[ast.Module]:
    try:
        globals_ = module_globals if isinstance(module_globals, dict) else None
        source = "".join(linecache.getlines(filename, globals_))
        if not source or len(source) > _SOURCE_LIMIT:
            return None
        return ast.parse(source, filename)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OSError, UnicodeDecodeError):
        return None


def _enclosing(tree: ast.AST, line: int) -> List[ast.AST]:
    """The statements (and except clauses) that contain `line`, outermost first."""
    chain: List[ast.AST] = []
    node: Optional[ast.AST] = tree
    while node is not None:
        node = next(_containing(node, line), None)
        if node is not None:
            chain.append(node)
    return chain


def _containing(node: ast.AST, line: int) -> Iterator[ast.AST]:
    for child in _statement_children(node):
        if child.lineno <= line <= (child.end_lineno or child.lineno):
            yield child


def _statement_children(node: ast.AST) -> Iterator[Any]:
    """The child statements of a node, looking through the parts that are no statements (a match's cases)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.stmt, ast.excepthandler)):
            yield child
        elif _MATCH_CASE is not None and isinstance(child, _MATCH_CASE):
            yield from _statement_children(child)


# --- frames that are not read ---------------------------------------------------------------------------------


def _skipped(filename: str) -> bool:
    """torch's, IPython's, Python's own and our frames, and code without a file."""
    if filename.startswith("<") and not filename.startswith("<ipython-input-"):
        return True
    path = os.path.join(os.path.normcase(os.path.abspath(filename)), "")
    modules, stdlib = _skipped_roots(tuple(name for name in _SKIPPED_MODULES if name in sys.modules))
    if any(path.startswith(root) for root in modules):
        return True
    # conda keeps site-packages inside the standard library's folder: the libraries there are read
    return not _in_libraries(path) and any(path.startswith(root) for root in stdlib)


def _in_libraries(path: str) -> bool:
    return any(part in ("site-packages", "dist-packages") for part in path.replace("\\", "/").split("/"))


_ROOTS: Dict[Tuple[str, ...], Tuple[Tuple[str, ...], Tuple[str, ...]]] = {}


def _folder(path: str) -> str:
    return os.path.join(os.path.normcase(os.path.abspath(path)), "")


def _skipped_roots(loaded: Tuple[str, ...]) -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
    """(the folders of the skipped modules that are loaded, the standard library's folders)."""
    roots = _ROOTS.get(loaded)
    if roots is None:
        files = [getattr(sys.modules.get(name), "__file__", None) for name in loaded]
        modules = tuple(_folder(os.path.dirname(f)) for f in files if isinstance(f, str) and f)
        paths = sysconfig.get_paths()
        stdlib = tuple(_folder(paths[key]) for key in ("stdlib", "platstdlib") if paths.get(key))
        roots = _ROOTS[loaded] = (modules, stdlib)
    return roots


def _is_optimizer(frame: Any) -> bool:
    """A method of a torch optimizer (a third-party one's step runs under torch.no_grad() in training)."""
    optim = sys.modules.get("torch.optim")
    cls = getattr(optim, "Optimizer", None)
    try:
        value = frame.f_locals.get("self")
        return isinstance(cls, type) and isinstance(value, cls)
    except Exception:
        return False
