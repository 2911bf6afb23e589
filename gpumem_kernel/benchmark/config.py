"""The benchmark's configuration: the benchmark guide's `benchmark:` section read from YAML or a mapping,
each value checked, and the command line's overrides applied."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields
from typing import Any, List, Mapping, Optional, Union

from gpumem_kernel.render.text import cut, one_line


@dataclass
class BenchmarkConfig:
    """The benchmark guide's `benchmark:` section (configs/checking_gpu_optimization.yaml), plus warm-up and target."""

    batch_sizes: List[int] = field(default_factory=lambda: [1 << i for i in range(14)])
    num_workers_options: List[int] = field(default_factory=lambda: [0, 2, 4, 8, 12, 16])
    steps_per_test: int = 10
    warmup_steps: int = 2
    test_mixed_precision: bool = True
    test_pin_memory: bool = True
    memory_target: float = 0.8  # recommended: within this share of the device memory (or the simulated cap)


def _int_list(value: Any, minimum: int) -> Optional[List[int]]:
    if isinstance(value, str):
        value = [v for v in value.replace(",", " ").split() if v]
        try:
            value = [int(v) for v in value]
        except ValueError:
            return None
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if (
        not isinstance(value, (list, tuple))
        or not value
        or not all(isinstance(v, int) and not isinstance(v, bool) and v >= minimum for v in value)
    ):
        return None
    return sorted(set(value))


def check_value(name: str, value: Any, label: str) -> Any:
    """One field's value, normalised, or a one-line ValueError naming it."""

    def bad(expected: str) -> ValueError:
        return ValueError(f"{label}: expected {expected}, got {value!r}")

    if name == "batch_sizes":
        result = _int_list(value, 1)
        if result is None:
            raise bad("a list of positive integers")
        return result
    if name == "num_workers_options":
        result = _int_list(value, 0)
        if result is None:
            raise bad("a list of integers >= 0")
        return result
    if name in ("steps_per_test", "warmup_steps"):
        minimum = 1 if name == "steps_per_test" else 0
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise bad("a positive integer" if minimum else "an integer >= 0")
        return value
    if name in ("test_mixed_precision", "test_pin_memory"):
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if name == "memory_target":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
            raise bad("a fraction in (0, 1]")
        return float(value)
    raise ValueError(f"{label}: unknown key; known: {', '.join(f.name for f in fields(BenchmarkConfig))}")


def load_config(source: Union[None, str, os.PathLike, Mapping[str, Any], BenchmarkConfig]) -> BenchmarkConfig:
    """A BenchmarkConfig from a YAML file path, a mapping shaped like it ({"benchmark": {...}}), or None
    (the benchmark guide's defaults). Other top-level sections (data, training, ...) are left alone; an unknown key or
    a bad value under `benchmark:` is a one-line ValueError naming it."""
    if isinstance(source, BenchmarkConfig):
        return source
    if source is None:
        return BenchmarkConfig()
    where = ""
    if isinstance(source, (str, os.PathLike)):
        where = f"{cut(os.fspath(source))}: "
        data = _read_yaml(os.fspath(source))
    else:
        data = source
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}expected a mapping with a 'benchmark:' section, got {type(data).__name__}")
    section = data.get("benchmark")
    if section is None:
        raise ValueError(f"{where}benchmark: missing section (see the benchmark guide's example config)")
    if not isinstance(section, Mapping):
        raise ValueError(f"{where}benchmark: expected a mapping, got {section!r}")
    values = {}
    for key, value in section.items():
        try:
            values[str(key)] = check_value(str(key), value, f"benchmark.{key}")
        except ValueError as exc:
            raise ValueError(f"{where}{exc}") from None
    return BenchmarkConfig(**values)


CONFIG_LIMIT = 1 << 20  # a config is a few lines; this bounds a read of /dev/zero or a huge file


def _read_text(path: str) -> str:
    """The file's text, or a one-line ValueError naming it: every file problem (missing, a directory, no
    permission, unreadable like /proc/self/mem, endless like /dev/zero, not UTF-8) is the user's to fix."""
    name = cut(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read(CONFIG_LIMIT + 1)
    except FileNotFoundError:
        raise ValueError(f"{name}: no such config file") from None
    except IsADirectoryError:
        raise ValueError(f"{name}: is a directory, not a config file") from None
    except OSError as exc:  # permission, EIO, a name too long, ...
        raise ValueError(f"{name}: cannot read it: {(exc.strerror or type(exc).__name__).lower()}") from None
    if len(data) > CONFIG_LIMIT:
        raise ValueError(f"{name}: larger than 1 MiB, not a config file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{name}: not UTF-8 text (byte {exc.start})") from None


def _read_yaml(path: str) -> Any:
    import yaml

    text = _read_text(path)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        problem = one_line(str(getattr(exc, "problem", None) or exc))
        raise ValueError(f"{cut(path)}: not valid YAML{at}: {problem}") from None


_OVERRIDES = {
    "batch_sizes": "batch_sizes",
    "num_workers": "num_workers_options",
    "steps": "steps_per_test",
    "warmup_steps": "warmup_steps",
    "amp": "test_mixed_precision",
    "pin_memory": "test_pin_memory",
    "memory_target": "memory_target",
}


def with_overrides(config: BenchmarkConfig, **overrides: Any) -> BenchmarkConfig:
    """Command-line style overrides (batch_sizes, num_workers, steps, warmup_steps, amp, pin_memory,
    memory_target); None leaves the config's value."""
    values = asdict(config)
    for name, value in overrides.items():
        if value is None:
            continue
        if name not in _OVERRIDES:
            raise ValueError(f"{name}: unknown override; known: {', '.join(_OVERRIDES)}")
        values[_OVERRIDES[name]] = check_value(_OVERRIDES[name], value, name)
    return BenchmarkConfig(**values)
