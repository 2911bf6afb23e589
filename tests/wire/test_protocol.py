"""Every message the kernel emits matches its JSON Schema; the schemas reject malformed samples."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import jsonschema
import pytest

from fake_comm import FakeComm, open_msg
from fake_nvml import NVML_ERROR_NOT_SUPPORTED, FakeGpu, GiB
from gpumem_kernel.channel.comm import Channel
from gpumem_kernel.wire.protocol import MESSAGE_TYPES, PROTOCOL_VERSION, load_schema, validate
from gpumem_kernel.probe.sampler import Sampler

SCHEMAS = Path(__file__).resolve().parents[2] / "gpumem_kernel" / "wire" / "schemas"


@pytest.fixture
def sampler(make_prober) -> Sampler:
    gpus = [
        FakeGpu(
            "NVIDIA <b>Test</b> GPU",
            "GPU-1234",
            processes=[(os.getpid(), GiB)],
            fail={"nvmlDeviceGetUtilizationRates": NVML_ERROR_NOT_SUPPORTED},
        )
    ]
    sampler = Sampler(make_prober(gpus))
    sampler.sample_once()
    return sampler


@pytest.fixture
def opened(sampler):
    channel = Channel(sampler, "0.1.0")
    comm = FakeComm()
    channel._on_open(comm, open_msg({"type": "open", "protocol": 1, "interval": 2.0, "client": "test"}))
    return channel, comm


def test_every_message_type_has_a_valid_draft_2020_12_schema():
    for name in MESSAGE_TYPES:
        schema = load_schema(name)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        jsonschema.Draft202012Validator.check_schema(schema)
        assert (SCHEMAS / f"{name}.schema.json").is_file()  # shipped inside the package


def test_open_sends_hello_then_history_then_live_samples(opened, sampler):
    channel, comm = opened
    sampler.sample_once()

    hello, history, live = comm.sent
    assert (hello["type"], hello["protocol"], hello["interval"]) == ("hello", PROTOCOL_VERSION, 2.0)
    assert history["type"] == "history" and [s["seq"] for s in history["samples"]] == [1]
    assert live["type"] == "sample" and live["seq"] == 2
    for message in comm.sent:
        validate(message)


@pytest.mark.parametrize(
    "action, args", [("snapshot", {}), ("history", {}), ("configure", {"interval": 0.5, "history_seconds": 60})]
)
def test_replies_carry_the_request_id_and_validate(opened, action, args):
    _, comm = opened
    comm.browser_sends({"type": "request", "id": f"r-{action}", "action": action, "args": args})

    reply = comm.sent[-1]
    assert (reply["type"], reply["id"], reply["action"]) == ("reply", f"r-{action}", action)
    validate(reply)


def test_configure_changes_the_sampler(opened, sampler):
    _, comm = opened
    comm.browser_sends({"type": "request", "id": "r-1", "action": "configure", "args": {"interval": 0.5}})
    assert comm.sent[-1]["result"] == {"interval": 0.5, "history_seconds": 600}
    assert sampler.interval == 0.5


@pytest.mark.parametrize(
    "data, code, request_id",
    [
        ({"type": "request", "id": "r-9", "action": "explode", "args": {}}, "unknown-action", "r-9"),
        ({"type": "request", "id": "r-8", "action": "configure", "args": {"interval": 0}}, "bad-request", "r-8"),
        ({"type": "request", "id": "r-7", "action": "configure", "args": {"speed": 3}}, "bad-request", "r-7"),
        ({"type": "request", "action": "snapshot"}, "bad-request", None),
        ({"type": "bogus", "id": "r-6"}, "bad-request", "r-6"),
        ("not an object", "bad-request", None),
    ],
)
def test_bad_requests_get_one_error_with_the_request_id(opened, data, code, request_id):
    _, comm = opened
    before = len(comm.sent)
    comm.browser_sends(data)

    assert len(comm.sent) == before + 1
    error = comm.sent[-1]
    assert (error["type"], error["code"], error["id"]) == ("error", code, request_id)
    assert "\n" not in error["message"]
    validate(error)


def test_an_open_with_another_protocol_gets_an_error_and_is_closed(sampler):
    comm = FakeComm()
    Channel(sampler, "0.1.0")._on_open(comm, open_msg({"type": "open", "protocol": 99}))

    assert [m["type"] for m in comm.sent] == ["error"]
    assert "v1" in comm.sent[0]["message"] and "v99" in comm.sent[0]["message"]
    assert comm.closed
    validate(comm.sent[0])


def test_closing_the_comm_stops_its_samples(opened, sampler):
    channel, comm = opened
    comm.browser_closes()
    sent = len(comm.sent)
    sampler.sample_once()
    assert len(comm.sent) == sent and channel.open_comms == 0


def test_two_comms_both_get_samples(opened, sampler):
    channel, first = opened
    second = FakeComm("comm-2")
    channel._on_open(second, open_msg({"type": "open", "protocol": 1}))
    sampler.sample_once()
    assert first.sent[-1]["seq"] == second.sent[-1]["seq"] == 2


@pytest.fixture
def good_sample(sampler) -> dict:
    sample = sampler.history()[0]
    validate(sample)
    return copy.deepcopy(sample)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda s: s["host"].pop("rss"),
        lambda s: s["gpu"]["devices"][0].pop("cuda_index"),
        lambda s: s["gpu"]["devices"][0].__setitem__("used", "1.2 GB"),
        lambda s: s["host"].__setitem__("total", 3.5),
        lambda s: s["gpu"]["devices"][0]["processes"][0].__setitem__("used", "lots"),
        lambda s: s.__setitem__("surprise", 1),
        lambda s: s["gpu"].__setitem__("device_order", "RANDOM"),
    ],
    ids=[
        "missing-host-rss",
        "missing-cuda-index",
        "string-bytes",
        "float-bytes",
        "string-process-bytes",
        "extra-field",
        "bad-enum",
    ],
)
def test_sample_schema_rejects_malformed_samples(good_sample, mutate):
    mutate(good_sample)
    with pytest.raises(jsonschema.ValidationError):
        validate(good_sample)


def test_reply_schema_checks_the_result_against_the_action(opened):
    _, comm = opened
    comm.browser_sends({"type": "request", "id": "r-1", "action": "snapshot", "args": {}})
    reply = copy.deepcopy(comm.sent[-1])
    reply["result"]["host"]["rss"] = "big"
    with pytest.raises(jsonschema.ValidationError):
        validate(reply)
