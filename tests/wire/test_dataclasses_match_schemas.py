"""Every dataclass that becomes JSON on the wire says what its schema says, field by field, both ways.

The JSON Schemas in gpumem_kernel/wire/schemas/ are the one source of the wire format; the Python side keeps
its payloads as dataclasses (they carry behaviour and are built field by field), so this test compares each one
with the schema object it becomes: the same field names, the same nullability (`Optional` ⇔ the schema allows
null), the same basic JSON type (bool/int/float/str/list/dict), nested dataclasses, list items and map values
recursively, and the same required fields (the kernel always emits every field: a schema property the
dataclass has but the schema does not require must be listed below as added later, which older kernels omit).
A difference fails, naming the dataclass field and the schema place.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, FrozenSet, List, Mapping, Optional, Tuple

import pytest

from gpumem_kernel.analysis.report import report as analysis_report
from gpumem_kernel.analysis.request import sequence as analysis_sequence
from gpumem_kernel.analysis.trace import llm_facts
from gpumem_kernel.autobatch import search
from gpumem_kernel.benchmark import config as benchmark_config
from gpumem_kernel.benchmark import result as benchmark_result
from gpumem_kernel.clear import reclaim
from gpumem_kernel.growth import report as growth_report
from gpumem_kernel.heldby import message as holders_message
from gpumem_kernel.watchwidget import session as watch_session
from gpumem_kernel.oom import diagnosis as oom_diagnosis
from gpumem_kernel.oom import parse as oom_parse
from gpumem_kernel.oom import step as oom_step
from gpumem_kernel.server import exits
from gpumem_kernel.timeline import payload as timeline_payload
from gpumem_kernel.wire import protocol

SCHEMAS = Path(__file__).resolve().parents[2] / "gpumem_kernel" / "wire" / "schemas"


@dataclass(frozen=True)
class Mirror:
    """A dataclass and the schema object it becomes."""

    cls: type
    ref: str  # "sample.schema.json", "reply.schema.json#/$defs/child"
    # schema properties that no field of the dataclass gives (to_payload adds them, or the parser reads them)
    added: FrozenSet[str] = frozenset()
    # fields to_payload moves into a nested object: field name -> "object.property"
    moved: Mapping[str, str] = field(default_factory=dict)
    # schema properties that are not required although the kernel always sends them: added without a protocol
    # bump, so outputs and kernels from before they existed lack them
    added_later: FrozenSet[str] = frozenset()
    # the kernel reads it from the browser: an optional property may be None in Python (absent on the wire)
    parsed: bool = False


# nested records the mirrors above reach, with their properties added later (the comparison builds their Mirror)
NESTED_ADDED_LATER: Mapping[type, FrozenSet[str]] = {
    protocol.Children: frozenset({"uss", "pss", "uss_growth_per_min"}),
    oom_diagnosis.HostMemory: frozenset({"workers_uss"}),
    oom_diagnosis.OtherProcess: frozenset({"cmdline", "local_pid"}),
    protocol.Device: frozenset(
        {"power_mw", "power_limit_mw", "energy_mj", "power_note", "notebook_processes", "uncertain"}
    ),
    protocol.GpuProcess: frozenset({"relation", "note", "local_pid", "create_time", "cmdline", "rank"}),
    benchmark_result.BenchmarkRow: frozenset({"energy_per_sample_j", "mean_power_w"}),
    benchmark_result.Pick: frozenset({"energy_per_sample_j"}),
    holders_message.HolderLine: frozenset({"graph_bytes"}),
    holders_message.DeviceHolders: frozenset({"graph_bytes"}),
    reclaim.Holder: frozenset({"graph_by_device"}),
    llm_facts.LlmFacts: frozenset({"attention_path"}),
    analysis_sequence.SequencePicks: frozenset({"variable"}),
    analysis_report.Distributed: frozenset({"engine"}),
}

MIRRORS = [
    # comm messages and their parts (wire/protocol.py); Sample covers Gpu, Device, Allocator, GpuProcess, ...
    Mirror(protocol.Sample, "sample.schema.json"),
    Mirror(protocol.Hello, "hello.schema.json", added_later=frozenset({"create_time"})),
    Mirror(protocol.History, "history.schema.json"),
    Mirror(protocol.Reply, "reply.schema.json"),
    Mirror(protocol.Error, "error.schema.json"),
    Mirror(growth_report.Growth, "growth.schema.json"),  # covers RunningGrowth, RerunGrowth, GrowingHolder
    Mirror(holders_message.HoldersMessage, "holders.schema.json"),  # covers DeviceHolders, HolderLine
    Mirror(watch_session.WatchEvent, "watch_event.schema.json"),
    Mirror(protocol.Open, "open.schema.json", added=frozenset({"type"}), parsed=True),
    Mirror(protocol.Request, "request.schema.json", added=frozenset({"type"}), parsed=True),
    Mirror(protocol.ProcessRef, "request.schema.json#/$defs/process_ref", parsed=True),
    Mirror(protocol.ChildProcess, "reply.schema.json#/$defs/child"),
    Mirror(protocol.ProcessState, "reply.schema.json#/$defs/process_state"),
    Mirror(protocol.Refusal, "reply.schema.json#/$defs/refusal"),
    Mirror(protocol.Terminated, "reply.schema.json#/$defs/terminate_result"),
    Mirror(protocol.TimelineExportArgs, "request.schema.json#/$defs/timeline_export_args", parsed=True),
    Mirror(protocol.TimelineExport, "reply.schema.json#/$defs/timeline_export_result"),
    # the clear report (covers Holder and DeviceMemory)
    Mirror(reclaim.ClearReport, "clear.schema.json", added=frozenset({"version", "reclaimed"})),
    # the OOM checklist's parts (oom_bundle puts them under version/summary/info/diagnosis/steps)
    Mirror(oom_parse.OomInfo, "oom.schema.json#/$defs/info", added_later=frozenset({"family"})),
    Mirror(
        oom_diagnosis.Diagnosis,
        "oom.schema.json#/$defs/diagnosis",
        added_later=frozenset({"causes", "evaluation", "this_kernel_pids"}),
    ),
    Mirror(oom_step.Step, "oom.schema.json#/$defs/step", added_later=frozenset({"not_applicable", "figure"})),
    # %gpumem analyze, autobatch, benchmark
    Mirror(
        analysis_report.AnalysisReport,
        "analysis.schema.json",
        added=frozenset({"model"}),
        moved={
            "model_name": "model.name",
            "parameter_count": "model.parameter_count",
            "trainable_parameter_count": "model.trainable_parameter_count",
            "parameters_by_dtype": "model.parameters_by_dtype",
            "buffers_by_dtype": "model.buffers_by_dtype",
            "largest_layer": "model.largest_layer",
        },
        # advice: only an advised analysis has it (the magic with --advise, or a step that will not fit)
        added_later=frozenset({"config_yaml", "accumulation_code", "evaluation", "llm", "sequence_search", "advice"}),
    ),
    Mirror(
        search.AutobatchResult, "autobatch.schema.json", added_later=frozenset({"config_yaml", "round", "round_source"})
    ),
    Mirror(benchmark_result.BenchmarkResult, "benchmark.schema.json", added_later=frozenset({"config_yaml"})),
    Mirror(benchmark_config.BenchmarkConfig, "benchmark.schema.json#/properties/config"),
    # the memory timeline (covers its device, peak, bands, small points, holders, stacks and frames)
    Mirror(timeline_payload.TimelinePayload, "timeline.schema.json"),
    # the server extension's answer to "why did this kernel die" (its checklist is an oom.schema.json payload)
    Mirror(exits.KernelExit, "kernel_exit.schema.json#/$defs/exit"),
]


# --- schemas ----------------------------------------------------------------------------------------------


def _load(name: str) -> Dict[str, Any]:
    return json.loads((SCHEMAS / name).read_text("utf-8"))


def _resolve(file: str, ref: str) -> Tuple[str, Dict[str, Any]]:
    """(file, subschema) that `ref` in `file` points at: "sample.schema.json", "#/$defs/device", ..."""
    target, _, pointer = ref.partition("#")
    file = target or file
    node: Any = _load(file)
    for part in [p for p in pointer.split("/") if p]:
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return file, node


def _deref(file: str, schema: Mapping[str, Any]) -> Tuple[str, Mapping[str, Any]]:
    while "$ref" in schema:
        file, schema = _resolve(file, schema["$ref"])
    return file, schema


_JSON_TYPE_OF_VALUE = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"), (type(None), "null"))


def _json_type(value: Any) -> str:
    for cls, name in _JSON_TYPE_OF_VALUE:
        if isinstance(value, cls):
            return name
    return "array" if isinstance(value, list) else "object"


def _schema_types(file: str, schema: Mapping[str, Any]) -> FrozenSet[str]:
    """The JSON types a subschema admits (type, const, enum, $ref, oneOf/anyOf branches)."""
    file, schema = _deref(file, schema)
    if "type" in schema:
        kinds = schema["type"]
        return frozenset([kinds] if isinstance(kinds, str) else kinds)
    if "const" in schema:
        return frozenset({_json_type(schema["const"])})
    if "enum" in schema:
        return frozenset(_json_type(v) for v in schema["enum"])
    for keyword in ("oneOf", "anyOf"):
        if keyword in schema:
            return frozenset().union(*(_schema_types(file, branch) for branch in schema[keyword]))
    return frozenset()  # anything


def _object_branch(file: str, schema: Mapping[str, Any]) -> Tuple[str, Mapping[str, Any]]:
    """The object-typed subschema of `schema` (itself, or its non-null oneOf/anyOf branch)."""
    file, schema = _deref(file, schema)
    for keyword in ("oneOf", "anyOf"):
        for branch in schema.get(keyword, []):
            if "object" in _schema_types(file, branch):
                return _deref(file, branch)
    return file, schema


def _item_schema(file: str, schema: Mapping[str, Any]) -> Tuple[str, Mapping[str, Any]]:
    file, schema = _deref(file, schema)
    for keyword in ("oneOf", "anyOf"):
        for branch in schema.get(keyword, []):
            if "array" in _schema_types(file, branch):
                return _item_schema(file, branch)
    return file, schema.get("items", {})


# --- Python types -----------------------------------------------------------------------------------------


def _is_record(cls: Any) -> bool:
    """A dataclass or a NamedTuple: an object with named, typed fields."""
    return isinstance(cls, type) and (dataclasses.is_dataclass(cls) or hasattr(cls, "_fields"))


def _fields(cls: type) -> Dict[str, Any]:
    hints = typing.get_type_hints(cls)
    if dataclasses.is_dataclass(cls):
        return {f.name: hints[f.name] for f in dataclasses.fields(cls)}
    return {name: hints[name] for name in cls._fields}


def _has_default(cls: type, name: str) -> bool:
    if not dataclasses.is_dataclass(cls):
        return name in getattr(cls, "_field_defaults", {})
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING


def _split_optional(hint: Any) -> Tuple[Any, bool]:
    """(the type without None, whether None is allowed)."""
    if typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        nullable = len(args) < len(typing.get_args(hint))
        return (args[0] if len(args) == 1 else typing.Union[tuple(args)]), nullable
    return hint, hint is type(None)


_PY_TYPES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"))


def _py_types(hint: Any) -> Optional[FrozenSet[str]]:
    """The JSON types a (non-None) annotation produces; None for Any."""
    if hint is Any:
        return None
    origin = typing.get_origin(hint)
    if origin is typing.Union:
        parts = [_py_types(a) for a in typing.get_args(hint)]
        return None if None in parts else frozenset().union(*parts)
    if origin in (list, tuple) or hint in (list, tuple):
        return frozenset({"array"})
    if origin in (dict,) or hint is dict or _is_record(hint):
        return frozenset({"object"})
    for cls, name in _PY_TYPES:
        if hint is cls:
            return frozenset({name})
    raise TypeError(f"no JSON type for the annotation {hint!r}")


# --- the comparison ---------------------------------------------------------------------------------------


def _compare_value(hint: Any, file: str, schema: Mapping[str, Any], where: str, problems: List[str]) -> None:
    """One value: nullability, basic type, and what is inside (fields, items, map values)."""
    inner, nullable = _split_optional(hint)
    allowed = _schema_types(file, schema)
    if allowed and nullable != ("null" in allowed):
        problems.append(
            f"{where}: Python {'allows' if nullable else 'never sends'} None, the schema admits {sorted(allowed)}"
        )
    produced = _py_types(inner)
    if allowed and produced is not None and produced != allowed - {"null"}:
        problems.append(f"{where}: Python sends {sorted(produced)}, the schema admits {sorted(allowed - {'null'})}")
        return
    if _is_record(inner):
        sub_file, sub = _object_branch(file, schema)
        nested = Mirror(inner, sub_file, added_later=NESTED_ADDED_LATER.get(inner, frozenset()))
        _compare_record(nested, sub_file, sub, where, problems)
    elif typing.get_origin(inner) in (list, tuple):
        args = typing.get_args(inner)
        if args and args[0] is not Any:
            item_file, item = _item_schema(file, schema)
            _compare_value(args[0], item_file, item, f"{where}[]", problems)
    elif typing.get_origin(inner) is dict:
        value_hint = typing.get_args(inner)[1]
        if value_hint is Any:
            return
        obj_file, obj = _object_branch(file, schema)
        extra = obj.get("additionalProperties")
        if isinstance(extra, dict):
            _compare_value(value_hint, obj_file, extra, f"{where}[*]", problems)
        for name, sub in obj.get("properties", {}).items():
            _compare_value(value_hint, obj_file, sub, f"{where}[{name!r}]", problems)


def _compare_record(mirror: Mirror, file: str, schema: Mapping[str, Any], where: str, problems: List[str]) -> None:
    """A dataclass against an object schema: names, required fields, then each field's value."""
    fields = _fields(mirror.cls)
    properties: Dict[str, Any] = dict(schema.get("properties", {}))
    required = set(schema.get("required", []))
    # fields that to_payload moves into a nested object are compared there
    for target in mirror.moved.values():
        outer, _, inner = target.partition(".")
        properties.setdefault(f"{outer}.{inner}", _deref(file, properties[outer])[1]["properties"][inner])
        if inner in _deref(file, properties[outer])[1].get("required", []):
            required.add(f"{outer}.{inner}")
    field_names = {mirror.moved.get(name, name) for name in fields}
    for name in sorted(field_names - set(properties)):
        problems.append(f"{where}.{name}: a field of {mirror.cls.__name__} that the schema ({file}) does not name")
    for name in sorted(
        set(properties) - field_names - mirror.added - {t.partition(".")[0] for t in mirror.moved.values()}
    ):
        problems.append(f"{where}.{name}: in the schema ({file}) but no field of {mirror.cls.__name__}")
    for name in sorted(mirror.added - set(properties)):
        problems.append(f"{where}.{name}: listed as added by to_payload, but the schema ({file}) does not name it")
    for name, hint in fields.items():
        key = mirror.moved.get(name, name)
        if key not in properties:
            continue
        here = f"{where}.{key}"
        if key not in required:
            if mirror.parsed:
                if not _has_default(mirror.cls, name):
                    problems.append(f"{here}: optional in the schema, but {mirror.cls.__name__}.{name} has no default")
            elif key not in mirror.added_later:
                problems.append(f"{here}: the kernel always sends it, but the schema ({file}) does not require it")
        if mirror.parsed and key not in required:
            # None stands for "absent": nullability is not compared
            hint = _split_optional(hint)[0]
            allowed = _schema_types(file, properties[key]) - {"null"}
            produced = _py_types(hint)
            if allowed and produced is not None and produced != allowed:
                problems.append(f"{here}: Python reads {sorted(produced)}, the schema admits {sorted(allowed)}")
            continue
        _compare_value(hint, file, properties[key], here, problems)
    for name in sorted(mirror.added_later - set(properties)):
        problems.append(f"{where}.{name}: listed as added later, but the schema ({file}) does not name it")
    for name in sorted(mirror.added_later & required):
        problems.append(f"{where}.{name}: listed as added later, but the schema ({file}) requires it")


@pytest.mark.parametrize("mirror", MIRRORS, ids=lambda m: f"{m.cls.__name__}-{m.ref}")
def test_dataclass_matches_its_schema(mirror: Mirror) -> None:
    file, schema = _resolve(mirror.ref.partition("#")[0], "#" + mirror.ref.partition("#")[2])
    file, schema = _object_branch(file, schema)
    problems: List[str] = []
    _compare_record(mirror, file, schema, mirror.cls.__name__, problems)
    assert not problems, "\n".join(problems)


def test_every_schema_file_is_compared() -> None:
    compared = {m.ref.partition("#")[0] for m in MIRRORS}
    # oom.schema.json's top level is built as a dict by oom_bundle from the dataclasses compared above
    assert compared | {"oom.schema.json"} == {p.name for p in SCHEMAS.glob("*.schema.json")}


# --- the comparison finds differences -----------------------------------------------------------------------


@dataclass
class _Child:
    pid: int
    create_time: float
    name: Optional[str]
    rss: int  # the schema allows null
    gpu_used: Optional[float]  # the schema says integer


@dataclass
class _ChildWithExtra:
    pid: int
    create_time: float
    name: Optional[str]
    rss: Optional[int]
    gpu_used: Optional[int]
    colour: str


@dataclass
class _ChildMissingOne:
    pid: int
    create_time: float
    name: Optional[str]
    rss: Optional[int]


@dataclass
class _TraceInfo:
    frames: int
    tensors: int
    bytes: int
    by_device: Dict[str, float]  # the schema says integer values


@dataclass
class _Diagnosis:
    traceback: Optional[_TraceInfo]


def _problems(mirror: Mirror, subschema: Optional[Mapping[str, Any]] = None) -> List[str]:
    file, schema = _resolve(mirror.ref.partition("#")[0], "#" + mirror.ref.partition("#")[2])
    problems: List[str] = []
    _compare_record(mirror, file, subschema or _object_branch(file, schema)[1], mirror.cls.__name__, problems)
    return problems


def test_a_wrong_type_or_nullability_is_named():
    assert _problems(Mirror(_Child, "reply.schema.json#/$defs/child")) == [
        "_Child.rss: Python never sends None, the schema admits ['integer', 'null']",
        "_Child.gpu_used: Python sends ['number'], the schema admits ['integer']",
    ]


def test_a_field_on_one_side_only_is_named():
    assert _problems(Mirror(_ChildWithExtra, "reply.schema.json#/$defs/child")) == [
        "_ChildWithExtra.colour: a field of _ChildWithExtra that the schema (reply.schema.json) does not name"
    ]
    assert _problems(Mirror(_ChildMissingOne, "reply.schema.json#/$defs/child")) == [
        "_ChildMissingOne.gpu_used: in the schema (reply.schema.json) but no field of _ChildMissingOne"
    ]


def test_nested_dataclasses_and_map_values_are_compared():
    schema = {
        "type": "object",
        "properties": {"traceback": {"oneOf": [{"type": "null"}, {"$ref": "#/$defs/traceback"}]}},
    }
    problems: List[str] = []
    _compare_record(
        Mirror(_Diagnosis, "oom.schema.json"), "oom.schema.json", {**schema, "required": ["traceback"]}, "D", problems
    )
    assert problems == ["D.traceback.by_device[*]: Python sends ['number'], the schema admits ['integer']"]


def test_an_optional_property_the_kernel_always_sends_is_named():
    schema = _resolve("reply.schema.json", "#/$defs/child")[1]
    loose = {**schema, "required": [name for name in schema["required"] if name != "rss"]}
    assert _problems(Mirror(protocol.ChildProcess, "reply.schema.json#/$defs/child"), loose) == [
        "ChildProcess.rss: the kernel always sends it, but the schema (reply.schema.json) does not require it"
    ]
