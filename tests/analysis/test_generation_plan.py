"""Generation plans (analysis.plan_generation): generate()'s prefill and last decode step traced on fake tensors equal,
to the byte, the same loop on real CPU tensors (the storage tracker's counts), for Llama-, GPT-2- and Qwen2-shaped
models from the shipped configs, both cache classes and batches above 1; the KV cache equals the one a real
model.generate() returns, and its peak is generate()'s within the few small tensors the loop leaves out; the picks move
the way memory does; the magic's table, --json payload and one-line errors."""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Any, Tuple

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from IPython.utils.capture import capture_output  # noqa: E402

from conftest import gpumem_shell  # noqa: E402
from gpumem_kernel.analysis import GenerationPlan, make_tracker, plan_generation  # noqa: E402
from gpumem_kernel.analysis.trace.generation import GenerationTrace, trace_generation  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "hf_configs"
FAMILIES = ("llama", "gpt2", "qwen2")
FIGURES = ("weights_bytes", "prefill_peak_bytes", "decode_peak_bytes", "kv_cache_bytes", "logits_bytes")
# what generate() holds beyond the traced loop at its peak: the attention mask of ones (batch x length int64), the
# stopping criteria's flags, unfinished_sequences, cache_position; a few KiB for these tiny models, never the cache
GENERATE_EXTRAS = 16 << 10


def _model(family: str) -> Any:
    """A real model from the shipped config (its own dtype), weights random: the values never matter."""
    torch.manual_seed(0)
    config = transformers.AutoConfig.from_pretrained(str(CONFIGS / family / "config.json"))
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def _both(model: Any, **options: Any) -> Tuple[GenerationTrace, GenerationTrace]:
    return trace_generation(model, fake=True, **options), trace_generation(model, fake=False, **options)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("cache", ("dynamic", "static"))
@pytest.mark.parametrize("batch", (1, 3))
def test_the_fake_trace_equals_the_real_one_to_the_byte(family: str, cache: str, batch: int) -> None:
    fake, real = _both(_model(family), prompt=20, new=7, batch_size=batch, cache=cache)
    assert {f: getattr(fake, f) for f in FIGURES} == {f: getattr(real, f) for f in FIGURES}
    assert fake.cache_length == real.cache_length == 26  # prompt + new - 1
    assert fake.device.peak_reserved == real.device.peak_reserved
    assert fake.decode_peak_bytes > fake.weights_bytes + fake.kv_cache_bytes  # the step's own tensors on top


def _real_generate(model: Any, prompt: int, new: int, batch: int, cache: str) -> Tuple[int, int]:
    """(the storage tracker's peak over model.generate(), the bytes of the cache it returns)."""
    ids = torch.randint(3, model.config.vocab_size, (batch, prompt))
    tracker = make_tracker()
    try:
        with tracker:
            tracker.register(list(model.parameters()) + list(model.buffers()))
            tracker.register(ids)
            static = {"cache_implementation": "static"} if cache == "static" else {}
            out = model.generate(
                ids,
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=False,
                pad_token_id=0,
                return_dict_in_generate=True,
                **static,
            )
        peak = tracker.peak
    finally:
        tracker.close()
    returned = getattr(out, "cache", None) or out.past_key_values  # 5.x (which warns on the old name) | 4.x
    kv = sum(t.untyped_storage().nbytes() for layer in returned.layers for t in (layer.keys, layer.values))
    del out, returned
    gc.collect()
    return peak, kv


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("cache", ("dynamic", "static"))
def test_the_kv_cache_is_the_one_generate_returns_and_the_peak_is_generates(family: str, cache: str) -> None:
    model = _model(family)
    fake = trace_generation(model, prompt=20, new=7, batch_size=2, cache=cache)
    peak, kv = _real_generate(model, 20, 7, 2, cache)
    assert fake.kv_cache_bytes == kv
    assert 0 <= peak - fake.peak_bytes <= GENERATE_EXTRAS


def test_the_prefill_keeps_the_last_positions_logits_only() -> None:
    fake = trace_generation(_model("llama"), prompt=64, new=4, batch_size=2)
    assert fake.logits_positions == 1
    assert fake.logits_bytes == 2 * 1 * 1000 * 2  # batch x 1 x vocab, bf16


class _AllLogits(transformers.LlamaForCausalLM):
    """A causal LM whose forward takes no logits_to_keep, as before transformers 4.45: logits for every position."""

    def forward(  # type: ignore[override]
        self,
        input_ids: Any = None,
        past_key_values: Any = None,
        use_cache: Any = None,
        cache_position: Any = None,
        return_dict: Any = None,
    ) -> Any:
        import inspect

        takes = inspect.signature(transformers.LlamaForCausalLM.forward).parameters
        keywords = {"cache" if "cache" in takes else "past_key_values": past_key_values, "use_cache": use_cache}
        if "cache_position" in takes:
            keywords["cache_position"] = cache_position
        return super().forward(input_ids=input_ids, return_dict=return_dict, **keywords)


def test_a_forward_without_logits_to_keep_keeps_every_positions_logits() -> None:
    torch.manual_seed(0)
    model = _AllLogits(transformers.LlamaConfig.from_json_file(str(CONFIGS / "llama" / "config.json"))).eval()
    fake, real = _both(model, prompt=64, new=4, batch_size=2)
    assert {f: getattr(fake, f) for f in FIGURES} == {f: getattr(real, f) for f in FIGURES}
    assert fake.logits_positions == 64 and fake.logits_bytes == 2 * 64 * 1000 * 4  # fp32 weights: fp32 logits
    assert any("no logits_to_keep" in note for note in fake.notes)
    kept = trace_generation(_model("llama").float(), prompt=64, new=4, batch_size=2)
    assert fake.prefill_peak_bytes > kept.prefill_peak_bytes
    # at the prefill's end: the weights, the prompt's cache and every position's logits at once
    assert fake.prefill_peak_bytes >= fake.weights_bytes + fake.kv_cache_bytes * 64 // 67 + fake.logits_bytes


def test_a_dynamic_cache_grows_and_a_static_one_is_allocated_up_front() -> None:
    model = _model("llama")
    dynamic = trace_generation(model, prompt=32, new=200, batch_size=2, cache="dynamic")
    static = trace_generation(model, prompt=32, new=200, batch_size=2, cache="static")
    assert dynamic.kv_cache_bytes == static.kv_cache_bytes  # the same positions at the end
    # the static cache is whole during the prefill already; the dynamic one holds the prompt's positions then
    assert static.prefill_peak_bytes - dynamic.prefill_peak_bytes >= static.kv_cache_bytes * 200 // 231 - 4096
    # growing by torch.cat: the decode step holds one layer's old keys beside the grown ones (2 layers here)
    one_layer_keys = dynamic.kv_cache_bytes // 4 * (dynamic.cache_length - 1) // dynamic.cache_length
    assert dynamic.decode_peak_bytes - dynamic.weights_bytes - dynamic.kv_cache_bytes >= one_layer_keys


def test_a_longer_prompt_and_a_larger_batch_take_more_memory() -> None:
    model = _model("qwen2")
    short = plan_generation(model, prompt=64, new=16)
    longer = plan_generation(model, prompt=512, new=16)
    wider = plan_generation(model, prompt=64, new=16, batch_size=4)
    assert longer.kv_cache_bytes > short.kv_cache_bytes and longer.peak_bytes > short.peak_bytes
    assert wider.kv_cache_bytes == 4 * short.kv_cache_bytes and wider.peak_bytes > short.peak_bytes
    assert short.weights_bytes == longer.weights_bytes == wider.weights_bytes
    assert short.fits is None and short.longest is None  # no device: no picks


def test_the_picks_fit_and_one_step_more_does_not() -> None:
    model = _model("llama")
    plan = plan_generation(model, prompt=64, new=16, batch_size=2, memory="560MiB")
    assert isinstance(plan, GenerationPlan) and plan.fits is True
    assert plan.longest == plan.longest_prompt + 16 and plan.longest_prompt % 64 == 0
    limit = plan.total_bytes - plan.context_bytes

    def reserved(prompt: int, batch: int) -> int:
        return trace_generation(model, prompt=prompt, new=16, batch_size=batch).device.peak_reserved

    assert reserved(plan.longest_prompt, 2) <= limit < reserved(plan.longest_prompt + 64, 2)
    assert reserved(64, plan.largest_batch) <= limit < reserved(64, plan.largest_batch + 1)
    # a larger batch leaves room for a shorter context only
    wider = plan_generation(model, prompt=64, new=16, batch_size=8, memory="560MiB")
    assert wider.longest < plan.longest
    payload = json.loads(json.dumps(plan.to_payload()))
    assert payload["kind"] == "generation_plan" and payload["largest_batch"] == plan.largest_batch


def test_a_quantised_plan_holds_smaller_weights() -> None:
    pytest.importorskip("bitsandbytes", reason="only for the quantised layer's planning class when present")
    model = _model("llama")
    plain = plan_generation(model, prompt=32, new=8)
    nf4 = plan_generation(model, prompt=32, new=8, quantize="nf4")
    assert nf4.weights_bytes < plain.weights_bytes and nf4.quantize.startswith("nf4")


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(prompt=0, new=4), "prompt must be a positive whole number"),
        (dict(prompt=8, new=4, cache="paged"), "cache 'paged': use dynamic or static"),
        (dict(prompt=8, new=4, batch_size=True), "batch_size must be a positive whole number"),
    ],
)
def test_bad_arguments_get_one_line(options: Any, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        plan_generation(_model("llama"), **options)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_name_is_built_first() -> None:
    with pytest.raises(ValueError, match="build it first"):
        plan_generation("hf:meta-llama/Meta-Llama-3-8B", prompt=8, new=4)


# --- the magic ----------------------------------------------------------------------------------------------------


def test_the_magic_shows_the_plan_as_a_table() -> None:
    config = CONFIGS / "llama" / "config.json"
    with gpumem_shell() as shell:
        with capture_output() as table:
            shell.run_cell(f"%gpumem analyze {config} --generate --prompt 100 --new 20 --cache static")
        with capture_output() as raw:
            shell.run_cell(f"%gpumem analyze {config} --generate --prompt 100 --new 20 -b 2 --json")
    assert table.stderr == "" and len(table.outputs) == 1
    bundle = table.outputs[0].data
    assert "Generation plan:" in bundle["text/plain"] and "KV cache (StaticCache)" in bundle["text/plain"]
    assert "Peak reserved" in bundle["text/html"] and "<script" not in bundle["text/html"]
    payload = json.loads(raw.stdout)
    assert payload["batch_size"] == 2 and payload["prompt"] == 100 and payload["new"] == 20
    assert payload["kv_cache_bytes"] == 2 * 119 * 256  # batch x (prompt + new - 1) x 256 B per token
    assert payload["cache"] == "dynamic" and payload["fits"] is None


@pytest.mark.parametrize(
    "rest, message",
    [
        ("--generate --prompt 10", "--generate needs --prompt N and --new M"),
        ("--prompt 10 --new 3", "--prompt and --new go with --generate"),
        ("--generate --prompt 10 --new 3 --lora r=8", "drop --lora"),
        ("--generate --prompt 10 --new 3 --step train_step", "drop --step"),
        ("--generate --prompt 10 --new 3 --search seq", "drop --search seq"),
        ("--generate --prompt 10 --new 3 --input 128", "drop --input (use --prompt)"),
    ],
)
def test_the_magic_refuses_bad_combinations_in_one_line(rest: str, message: str) -> None:
    config = CONFIGS / "llama" / "config.json"
    with gpumem_shell() as shell, capture_output() as captured:
        shell.run_cell(f"%gpumem analyze {config} {rest}")
    assert captured.stderr.startswith("UsageError: gpumem analyze: ") and captured.outputs == []
    assert message in captured.stderr and captured.stderr.strip().count("\n") == 0, captured.stderr
