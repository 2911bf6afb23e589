"""transformers' docs, "Optimizing LLMs for Speed and Memory": bigcode/octocoder (GPTBigCode, 15.5B parameters,
multi-query attention) generating 60 tokens through a text-generation pipeline on one GPU, in bf16, 8-bit and 4-bit
weights, then with a long prompt with and without Flash Attention; `torch.cuda.max_memory_allocated()` printed after
each, divided by 1024 ** 3 (the page's `bytes_to_giga_bytes`: GiB, though it says GB).

Source: docs/source/en/llm_tutorial_optimization.md of huggingface/transformers (commit 008f5c8c, the page as written
in September 2023 from the blog post of the same name, its outputs unchanged since). Its cells, in order:
- bf16: `from_pretrained("bigcode/octocoder", torch_dtype=torch.bfloat16, device_map="auto")`, `pipe(prompt,
  max_new_tokens=60)` -> 29.0260648727417; no flush before it, so loading is in the peak (bf16 loading adds none).
- 8-bit: flush(), `from_pretrained(..., load_in_8bit=True)` -> 15.219234466552734.
- 4-bit: flush(), `from_pretrained(..., load_in_4bit=True, low_cpu_mem_usage=True)` -> 9.543574333190918:
  BitsAndBytesConfig's defaults then, fp4, no double quantisation, compute dtype float32.
- long prompt, eager attention: flush(), bf16 again, `pipe(long_prompt, max_new_tokens=60)` -> 37.668193340301514.
- long prompt, Flash Attention: flush() (the peak reset with the model loaded), `model.to_bettertransformer()`
  (torch's SDPA), under `sdp_kernel(enable_flash=True, enable_math=False, enable_mem_efficient=False)` ->
  32.617331981658936.
The quantised loads name no torch_dtype: transformers then loads the other weights in float16.

The prompt is given as text only, so its tokens are counted: the short prompt is 20 tokens (the page's own KV-cache
cell prints "length of key-value cache 20" for it), the long one `10 * system_prompt + prompt` 5,610 tokens,
counted with the StarCoder-family byte-level BPE: the 49,152-token vocabulary llama.cpp ships as
models/ggml-vocab-starcoder.gguf (its metadata names starcoder2; rebuilt with the tokenizers package it gives
llama.cpp's expected ids for all 47 of its test strings, and 20 tokens for the short prompt, as the page printed);
1,994 characters of system prompt, 559 tokens.
The page's transformers (4.33/4.34 in September 2023) computed the logits of every prompt position in the prefill
(generate() had no logits_to_keep): the model here takes no logits_to_keep either.
"""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from benchmarks.published.runner import bnb_rule, relative_error

COMMIT = "008f5c8c29be84d4721dc6d1e0fcd72300580be4"
URL = "https://huggingface.co/docs/transformers/llm_tutorial_optimization"
TEXT = f"https://github.com/huggingface/transformers/blob/{COMMIT}/docs/source/en/llm_tutorial_optimization.md"
GPU = "A100 40GB"  # "can be run on a single 40 GB A100 GPU device chip"
TORCH = "2.0"  # the page's pip line pins nothing; torch 2.0.1 was current in September 2023 (2.1: October)
# tokens of "Question: Please write a function in Python that transforms bytes to Giga bytes.\n\nAnswer:"
SHORT_PROMPT = 20
LONG_PROMPT = 5610  # 10 * system_prompt (559 tokens each) + the short prompt
NEW = 60  # max_new_tokens=60 in every cell
# the page prints no bitsandbytes version: 0.41.1 (August 2023) was the release current in September 2023, and any
# 0.41.x or 0.42 plans the same (the bitsandbytes rules change at 0.43.0)
BNB = "0.41"

SOURCE: Dict[str, str] = {
    "name": "transformers docs: Optimizing LLMs for Speed and Memory, bigcode/octocoder (September 2023)",
    "url": URL,
    "text": TEXT,
    "gpu": "A100 40GB (the page: 'can be run on a single 40 GB A100 GPU device chip'; the run's GPU is not printed)",
    "stack": "not printed: transformers 4.33/4.34, torch 2.0, bitsandbytes 0.41.1 (the 4-bit row planned with its "
    "rules), optimum (BetterTransformer) of September 2023 assumed",
    "measure": "torch.cuda.max_memory_allocated() / 1024**3 (GiB; the page calls it GB)",
    "open": (
        "prompts are given as text: the short prompt's 20 tokens are the page's own (its KV-cache cell); the long "
        "prompt's 5,610 were counted here with the StarCoder-family BPE vocabulary (llama.cpp's "
        "ggml-vocab-starcoder.gguf, which gives the page's 20 for the short prompt), not printed by the page; "
        "greedy decoding assumed (the page passes no sampling option); the stack's versions are not printed: "
        "bitsandbytes 0.41.1 assumed, the release current in September 2023 (0.41.2 came in November; any 0.41.x "
        "or 0.42 is planned the same)"
    ),
}
TARGET = 0.05  # every row (Row.target): the quantised ones too, their bitsandbytes settings being the defaults named

# bigcode/octocoder's config.json (StarCoder's architecture), written out: nothing downloaded
OCTOCODER: Dict[str, Any] = dict(
    vocab_size=49152,
    n_positions=8192,
    n_embd=6144,
    n_layer=40,
    n_head=48,
    n_inner=24576,
    multi_query=True,
    activation_function="gelu_pytorch_tanh",
    layer_norm_epsilon=1e-5,
    scale_attention_softmax_in_fp32=True,
    attention_softmax_in_fp32=True,
    bos_token_id=0,
    eos_token_id=0,
)
PARAMETERS = 15_517_456_384  # "15.5B parameter models" (lm_head tied to wte)


@dataclass(frozen=True)
class Row:
    name: str
    published_gib: float  # bytes_to_giga_bytes(torch.cuda.max_memory_allocated())
    prompt: int
    dtype: str  # the weights the quantisation leaves: bfloat16, or float16 (transformers' default for bnb loads)
    quantize: Optional[str] = None  # the plan's option for load_in_8bit / load_in_4bit
    attention: str = "eager"  # eager: GPTBigCode's own attention then; sdpa: BetterTransformer + flash
    target: float = TARGET

    def settings(self) -> Dict[str, Any]:
        return {
            "model": "bigcode/octocoder",
            "dtype": self.dtype,
            "quantize": self.quantize,
            "attention": self.attention,
            "batch": 1,
            "prompt": self.prompt,
            "new": NEW,
            "cache": "dynamic",
        }


# the rows the plan cannot be compared on, with why (said once in the README)
NOT_EXPRESSED = (
    "the page's later cells (generation with the KV cache by hand, the multi-round chat) print no memory figure"
)
ROWS: Tuple[Row, ...] = (
    Row("bf16", 29.0260648727417, SHORT_PROMPT, "bfloat16"),
    Row("8-bit", 15.219234466552734, SHORT_PROMPT, "float16", "int8"),
    Row("4-bit", 9.543574333190918, SHORT_PROMPT, "float16", "fp4,double=off,compute=fp32"),
    Row("long prompt, eager", 37.668193340301514, LONG_PROMPT, "bfloat16"),
    Row("long prompt, Flash Attention", 32.617331981658936, LONG_PROMPT, "bfloat16", attention="sdpa"),
)

# What the page's run did that the plan of today's GPTBigCode does not, said in the rows that miss: (cause, GiB the
# plan leaves out where counted)
SCORES_GIB = 48 * LONG_PROMPT * LONG_PROMPT * 2 / 2**30  # one bf16 tensor of attention scores, heads x N x N
CAUSES: Dict[str, Tuple[str, float]] = {
    "long prompt, eager": (
        "the page's transformers (4.33/4.34) ran GPTBigCode's own attention (baddbmm into a bf16 buffer and a "
        "TorchScript upcast_masked_softmax: the published figure is about 6 bytes per score over the short "
        "prompt's); today's eager_attention_forward, "
        "which the plan traces, scales and masks in bf16 and calls softmax(dtype=float32), which converts a bf16 "
        "input to fp32 before the kernel (ATen's fused half_to_float path is for fp16 only): about 10 bytes per "
        f"score, 48 x {LONG_PROMPT} x {LONG_PROMPT} of them",
        0.0,
    ),
    "long prompt, Flash Attention": (
        "not located: the run holds about one bf16 tensor of attention scores (48 x N x N, "
        f"{SCORES_GIB:.2f} GiB) more than today's sdpa attention traced with the flash kernel; the page's attention "
        "was optimum's BetterTransformer GPTBigCode layer of 2023, whose mask and key/value handling the plan does "
        "not trace",
        0.0,
    ),
}


def _without_logits_to_keep(cls: Any) -> Any:
    """The model class with a forward that takes no logits_to_keep, as GPTBigCode's forward of 2023 took none:
    the prefill computes the logits of every prompt position (batch x prompt x vocab)."""

    # the KV cache under the name this transformers' forward takes: past_key_values (4.x), cache (5.x, where the old
    # name still works but warns)
    cache_name = "cache" if "cache" in inspect.signature(cls.forward).parameters else "past_key_values"

    def forward(
        self: Any,
        input_ids: Any = None,
        cache: Any = None,
        cache_position: Any = None,
        use_cache: Optional[bool] = None,
        return_dict: Optional[bool] = None,
    ) -> Any:
        return cls.forward(
            self,
            input_ids=input_ids,
            cache_position=cache_position,
            use_cache=use_cache,
            return_dict=return_dict,
            **{cache_name: cache},
        )

    return type(cls.__name__, (cls,), {"forward": forward})


def build(dtype: str = "bfloat16", attention: str = "eager") -> Any:
    """GPTBigCodeForCausalLM from octocoder's config on the meta device, in `dtype`."""
    import torch
    from transformers import GPTBigCodeConfig, GPTBigCodeForCausalLM

    config = GPTBigCodeConfig(**OCTOCODER, attn_implementation=attention)
    model_cls = _without_logits_to_keep(GPTBigCodeForCausalLM)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, dtype))
    try:
        with torch.device("meta"):
            model = model_cls(config)
    finally:
        torch.set_default_dtype(previous)
    return model.eval()


def planned_quantize(row: Row) -> Tuple[Any, List[str]]:
    """The row's QuantSpec as bitsandbytes 0.41 ran it, and the notes of the rules applied ([] but for 4-bit)."""
    from gpumem_kernel.analysis import parse_quantize, with_bnb_version

    return with_bnb_version(parse_quantize(row.quantize), BNB)


def rule(row: Row) -> str:
    """The bitsandbytes rules the row is planned with, by name ('' where none applies: bf16, 8-bit)."""
    return bnb_rule(BNB, bool(planned_quantize(row)[1]))


def analyse(row: Row) -> Any:
    from gpumem_kernel.analysis import plan_generation

    return plan_generation(
        build(row.dtype, row.attention),
        prompt=row.prompt,
        new=NEW,
        batch_size=1,
        cache="dynamic",
        quantize=planned_quantize(row)[0],
        torch_version=TORCH,  # no target: its longest-context and largest-batch searches are not compared here
        model_name="bigcode/octocoder",
    )


def run(names: Optional[Sequence[str]] = None) -> List[Dict[str, Any]]:
    out = []
    for row in ROWS:
        if names and row.name not in names:
            continue
        started = time.perf_counter()
        plan = analyse(row)
        predicted = int(plan.peak_bytes) / 2**30
        error = relative_error(predicted, row.published_gib)
        result: Dict[str, Any] = {
            "name": row.name,
            "settings": row.settings(),
            "unit": "GiB",
            "published": round(row.published_gib, 3),
            "predicted": round(predicted, 3),
            "error": error,
            "target": row.target,
            "seconds": round(time.perf_counter() - started, 1),
            "note": "",
            **({"rule": rule(row)} if rule(row) else {}),
        }
        if abs(error) > row.target:
            cause, extra = CAUSES.get(row.name, ("unexplained", 0.0))
            result["note"] = cause
            if extra:
                result["explained"] = round(predicted + extra, 3)  # the plan with the bytes the cause names added
                explained = relative_error(predicted + extra, row.published_gib)
                result["note"] += f" (with it: {predicted + extra:.2f} GiB, {explained:+.1%})"
        out.append(result)
        print(f"{row.name:<30} published {row.published_gib:>6.2f} GiB | predicted {predicted:>6.2f} ({error:+.1%})")
    return out
