"""LitGPT's resource table, "Single-GPU Inference": phi-1.5 to Llama-2-70B, bf16 and bitsandbytes nf4 / nf4-dq, on an
A100-SXM4-40GB, `torch.cuda.max_memory_allocated() / 1e9` printed after `litgpt generate` (then generate/base.py).

Source: tutorials/resource-tables.md of Lightning-AI/litgpt at commit 069f6584 (the table as added in 0cc02afa,
October 2023; its figures unchanged since): "Lit-GPT version: commit 8641822", "PyTorch 2.1.0+cu121", "Bitsandbytes
0.41.1", `--precision bf16-true`. The table names no prompt or length: generate/base.py at 8641822 ran with its
defaults, prompt "Hello, my name is", max_new_tokens=50, num_samples=1, batch 1 (`model.set_kv_cache(batch_size=1)`),
the KV cache allocated at prompt + 50 positions before the first token (`model.max_seq_length =
max_returned_tokens`), as a static cache is. The peak was never reset: it covers loading the checkpoint too, which
in bf16 copies into the weights in place and with 4-bit layers re-quantises each from an fp16 copy of its weight on
the GPU, one layer at a time: less than the prompt's forward holds when it dequantises the lm_head (an fp16 and a
bf16 copy), so the peak is the prompt's.
The 4-bit rows are planned as Fabric 2.1's BitsandbytesPrecision ran them: every nn.Linear quantised, the lm_head
too, each from fp16 (the model built with its Linear weights in fp16, the rest in bf16), for the bitsandbytes the
table names (0.41.1): its rules (analysis/model/bnb_rules.py), among them 4bit-forward-casts, a forward that
dequantised into fp16 and cast that to bf16, are applied, and each 4-bit row names them (`rule`).

The models are transformers models built from configs equivalent to LitGPT's (lit_gpt/config.py at 8641822, each
written out below with its LitGPT fields beside it): the generation plan traces a transformers model's forward with
its cache classes (generate()'s loop), which LitGPT's own GPT (`forward(idx, input_pos)`, its own KVCache) does not
take. The parameter counts are LitGPT's (the test checks them): two separate embeddings where LitGPT keeps an
lm_head beside wte (Falcon's included), the same fused or split projections' sizes, biases and norms. Where LitGPT
differs at run time, the row says so (`CAUSES`, in the `note` of a row that misses).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from benchmarks.published.runner import bnb_rule, relative_error

COMMIT = "8641822b3249bb94f068c254aa5d13decbc9f0a0"  # the LitGPT the table names
TABLE_COMMIT = "069f6584a2a99609e288c32cb49c028bcf35b747"
URL = f"https://github.com/Lightning-AI/litgpt/blob/{TABLE_COMMIT}/tutorials/resource-tables.md"
GENERATE_URL = f"https://github.com/Lightning-AI/litgpt/blob/{COMMIT}/generate/base.py"
GPU = "A100 40GB"  # NVIDIA A100-SXM4-40GB (gpu_table.py)
TORCH = "2.1"  # 2.1.0+cu121
PROMPT = "Hello, my name is"  # generate/base.py's default prompt
NEW = 50  # generate/base.py's default max_new_tokens
BNB = "0.41"  # bitsandbytes 0.41.1, the table's "Bitsandbytes 0.41.1"

SOURCE: Dict[str, str] = {
    "name": "LitGPT resource tables: single-GPU inference (October 2023)",
    "url": URL,
    "text": f"{URL} (with {GENERATE_URL})",
    "gpu": "NVIDIA A100-SXM4-40GB, driver 525.125.06",
    "stack": "torch 2.1.0+cu121, Lightning 2.1.0.rc0, bitsandbytes 0.41.1 (the 4-bit rows planned with its rules), "
    "lit-gpt 8641822",
    "measure": "torch.cuda.max_memory_allocated() / 1e9 (GB) after generating, loading included",
    "open": (
        "the table names no prompt or length: generate/base.py's defaults assumed (prompt 'Hello, my name is', "
        "50 new tokens, batch 1); the prompt's tokens counted per tokenizer (Llama's SentencePiece with BOS: 6, the "
        "BPE tokenizers of phi-1.5, StableLM and Falcon: 5), a few KB of cache either way; Llama 2 base or chat not "
        "said (same shapes); flash-attn 2 not installed (not in requirements-all.txt): torch's SDPA"
    ),
}
TARGET = 0.05  # every row: bf16 and nf4 / nf4-dq alike (the table pins its stack: no setting left to assume)

# lit_gpt/config.py at 8641822, written out: (transformers class, its config, the LitGPT fields it stands for)
CONFIGS: Dict[str, Tuple[str, Dict[str, Any], str]] = {
    "phi-1_5": (
        "Phi",
        dict(
            vocab_size=51200,
            hidden_size=2048,
            intermediate_size=8192,
            num_hidden_layers=24,
            num_attention_heads=32,
            partial_rotary_factor=0.5,
            max_position_embeddings=2048,
            hidden_act="gelu_new",
            tie_word_embeddings=False,
        ),
        "padded_vocab_size=51200, n_embd=2048, n_layer=24, n_head=32, rotary_percentage=0.5, "
        "shared_attention_norm=True, lm_head_bias=True, gelu_approximate='tanh', block_size=2048",
    ),
    "stablelm-base-alpha-3b": (
        "GPTNeoX",
        dict(
            vocab_size=50688,
            hidden_size=4096,
            num_hidden_layers=16,
            num_attention_heads=32,
            intermediate_size=16384,
            rotary_pct=0.25,
            max_position_embeddings=4096,
            use_parallel_residual=True,
            layer_norm_eps=1e-5,
            tie_word_embeddings=False,
        ),
        "the Config defaults: vocab 50254 padded to 50688 (multiple 512), n_embd=4096, n_layer=16, n_head=32, "
        "rotary_percentage=0.25, parallel_residual, bias, LayerNorm, GptNeoxMLP (4 x n_embd), block_size=4096",
    ),
    "Llama-2-7b-hf": (
        "Llama",
        dict(
            vocab_size=32000,
            hidden_size=4096,
            intermediate_size=11008,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=32,
            max_position_embeddings=4096,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
        ),
        "vocab_size=32000, n_layer=32, n_embd=4096, n_head=32, RMSNorm, LLaMAMLP intermediate_size=11008, no bias",
    ),
    "Llama-2-13b-hf": (
        "Llama",
        dict(
            vocab_size=32000,
            hidden_size=5120,
            intermediate_size=13824,
            num_hidden_layers=40,
            num_attention_heads=40,
            num_key_value_heads=40,
            max_position_embeddings=4096,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
        ),
        "vocab_size=32000, n_layer=40, n_embd=5120, n_head=40, RMSNorm, LLaMAMLP intermediate_size=13824, no bias",
    ),
    "CodeLlama-34b-hf": (
        "Llama",
        dict(
            vocab_size=32000,
            hidden_size=8192,
            intermediate_size=22016,
            num_hidden_layers=48,
            num_attention_heads=64,
            num_key_value_heads=8,
            max_position_embeddings=16384,
            rope_theta=1e6,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
        ),
        "block_size=16384, vocab_size=32000, n_layer=48, n_embd=8192, n_head=64, n_query_groups=8, RMSNorm, "
        "LLaMAMLP intermediate_size=22016, rope_base=1000000",
    ),
    "falcon-40b": (
        "Falcon",
        dict(
            vocab_size=65024,
            hidden_size=8192,
            num_hidden_layers=60,
            num_attention_heads=128,
            num_kv_heads=8,
            new_decoder_architecture=True,
            parallel_attn=True,
            bias=False,
            alibi=False,
            max_position_embeddings=2048,
            tie_word_embeddings=False,
        ),
        "block_size=2048, vocab_size=65024, n_layer=60, n_head=128, n_embd=8192, n_query_groups=8, "
        "rotary_percentage=1.0, bias=False, parallel_residual with two norms; lm_head separate from wte",
    ),
    "Llama-2-70b-hf": (
        "Llama",
        dict(
            vocab_size=32000,
            hidden_size=8192,
            intermediate_size=28672,
            num_hidden_layers=80,
            num_attention_heads=64,
            num_key_value_heads=8,
            max_position_embeddings=4096,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
        ),
        "vocab_size=32000, n_layer=80, n_embd=8192, n_head=64, n_query_groups=8, RMSNorm, LLaMAMLP "
        "intermediate_size=28672",
    ),
}
# parameters of LitGPT's GPT for each config (its lm_head and wte both counted)
PARAMETERS: Dict[str, int] = {
    "phi-1_5": 1_418_270_720,
    "stablelm-base-alpha-3b": 3_637_321_728,
    "Llama-2-7b-hf": 6_738_415_616,
    "Llama-2-13b-hf": 13_015_864_320,
    "CodeLlama-34b-hf": 33_743_970_304,
    "falcon-40b": 41_835_970_560,
    "Llama-2-70b-hf": 68_976_648_192,
}
PROMPT_TOKENS = {"phi-1_5": 5, "stablelm-base-alpha-3b": 5, "falcon-40b": 5}  # Llama's SentencePiece adds BOS: 6


def prompt_tokens(model: str) -> int:
    return PROMPT_TOKENS.get(model, 6)


@dataclass(frozen=True)
class Row:
    model: str  # the name in lit_gpt/config.py
    quantize: Optional[str]  # None, "bnb.nf4", "bnb.nf4-dq"
    published_gb: float

    @property
    def name(self) -> str:
        return f"{self.model} {self.quantize or 'bf16'} generate"

    @property
    def plan_quantize(self) -> Optional[str]:
        """The plan's quantize option for LitGPT's mode: nf4 with (nf4-dq) or without double quantisation, the
        compute dtype Fabric's BitsandbytesPrecision was given (bf16-true)."""
        if not self.quantize:
            return None
        double = "on" if self.quantize.endswith("-dq") else "off"
        return f"nf4,double={double},compute=bf16"

    @property
    def target(self) -> float:
        return TARGET

    def settings(self) -> Dict[str, Any]:
        return {
            "model": self.model,
            "precision": "bf16-true",
            "quantize": self.quantize,
            "batch": 1,
            "prompt": prompt_tokens(self.model),
            "new": NEW,
            "cache": "static",
            "lm_head": "quantised" if self.quantize else "bf16",
        }


# the rows the plan cannot be compared on, with why (said once in the README)
NOT_EXPRESSED = (
    "bf16 CodeLlama-34B, Falcon-40B and Llama-2-70B (OOM on the 40 GB A100) and Llama-2-70B nf4 (a CUBLAS error): "
    "no figure to compare"
)
# the table's rows with a figure
ROWS: Tuple[Row, ...] = (
    Row("phi-1_5", None, 2.86),
    Row("phi-1_5", "bnb.nf4", 1.39),
    Row("phi-1_5", "bnb.nf4-dq", 1.33),
    Row("stablelm-base-alpha-3b", None, 7.30),
    Row("stablelm-base-alpha-3b", "bnb.nf4", 3.20),
    Row("stablelm-base-alpha-3b", "bnb.nf4-dq", 3.04),
    Row("Llama-2-7b-hf", None, 13.52),
    Row("Llama-2-7b-hf", "bnb.nf4", 4.57),
    Row("Llama-2-7b-hf", "bnb.nf4-dq", 4.26),
    Row("Llama-2-13b-hf", None, 26.21),
    Row("Llama-2-13b-hf", "bnb.nf4", 8.32),
    Row("Llama-2-13b-hf", "bnb.nf4-dq", 7.72),
    Row("CodeLlama-34b-hf", "bnb.nf4", 20.52),
    Row("CodeLlama-34b-hf", "bnb.nf4-dq", 18.95),
    Row("falcon-40b", "bnb.nf4", 26.55),
    Row("falcon-40b", "bnb.nf4-dq", 24.63),
    Row("Llama-2-70b-hf", "bnb.nf4-dq", 37.21),
)

# How LitGPT's run differs from the plan of the equivalent transformers model, said in the rows that miss.
CAUSES = {
    "gqa_cache": "LitGPT 8641822 caches keys and values for all n_head heads under GQA (build_kv_cache: heads = "
    "n_head unless n_query_groups == 1), the StaticCache of the equivalent Llama for the n_query_groups heads: "
    "{extra:.3f} GB more",
}


def hf_class(kind: str) -> Tuple[Any, Any]:
    import transformers

    return getattr(transformers, f"{kind}Config"), getattr(transformers, f"{kind}ForCausalLM")


def _every_linear_quantised(cls: Any) -> Any:
    """The model class with no output embeddings to leave out: Fabric's BitsandbytesPrecision (no ignore_modules)
    replaced every nn.Linear by a 4-bit layer, the lm_head too, where transformers' quantisation keeps it."""

    def get_output_embeddings(self: Any) -> None:
        return None

    return type(cls.__name__, (cls,), {"get_output_embeddings": get_output_embeddings})


def build(model: str, quantised: bool = False) -> Any:
    """The transformers equivalent of LitGPT's GPT on the meta device, in bf16 (Fabric's bf16-true)."""
    import torch

    kind, config, _ = CONFIGS[model]
    config_cls, model_cls = hf_class(kind)
    if quantised:
        model_cls = _every_linear_quantised(model_cls)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("meta"):
            built = model_cls(config_cls(**config))
    finally:
        torch.set_default_dtype(previous)
    if quantised:
        # Fabric's _Linear4bit._quantize_weight quantised each weight from `.to(dtype=torch.half)`: bitsandbytes'
        # quant state records fp16, the dtype a forward dequantises into before casting to the compute dtype
        for module in built.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.data = module.weight.data.to(torch.float16)
    return built.eval()


def planned_quantize(row: Row) -> Tuple[Any, List[str]]:
    """The row's QuantSpec as bitsandbytes 0.41.1 ran it, and the notes of the rules applied ([] for bf16)."""
    from gpumem_kernel.analysis import parse_quantize, with_bnb_version

    return with_bnb_version(parse_quantize(row.plan_quantize), BNB)


def rule(row: Row) -> str:
    """The bitsandbytes rules the row is planned with, by name ('' for bf16)."""
    return bnb_rule(BNB, bool(planned_quantize(row)[1]))


def analyse(row: Row) -> Any:
    from gpumem_kernel.analysis import plan_generation

    return plan_generation(
        build(row.model, quantised=bool(row.quantize)),
        prompt=prompt_tokens(row.model),
        new=NEW,
        batch_size=1,
        cache="static",
        quantize=planned_quantize(row)[0],
        torch_version=TORCH,  # no target: its longest-context and largest-batch searches are not compared here
        model_name=row.model,
    )


def _gqa_cache_extra(row: Row) -> int:
    """The bytes LitGPT's cache held beyond the plan's: n_head - n_query_groups more heads per layer."""
    _, config, _ = CONFIGS[row.model]
    heads, groups = config["num_attention_heads"], config.get("num_key_value_heads", config["num_attention_heads"])
    if row.model.startswith("falcon"):  # transformers' Falcon caches keys broadcast to all heads, as LitGPT did
        return 0
    head_dim = config["hidden_size"] // heads
    return config["num_hidden_layers"] * 2 * (heads - groups) * head_dim * (prompt_tokens(row.model) + NEW) * 2


def causes(row: Row) -> List[Tuple[str, int]]:
    """(cause, the bytes it leaves out of the plan: 0 where not counted) of this row's difference from LitGPT."""
    found: List[Tuple[str, int]] = []
    gqa = _gqa_cache_extra(row)
    if gqa:
        found.append((CAUSES["gqa_cache"].format(extra=gqa / 1e9), gqa))
    return found


def run(names: Optional[Sequence[str]] = None) -> List[Dict[str, Any]]:
    out = []
    for row in ROWS:
        if names and row.name not in names:
            continue
        started = time.perf_counter()
        plan = analyse(row)
        predicted = int(plan.peak_bytes) / 1e9
        error = relative_error(predicted, row.published_gb)
        seconds = round(time.perf_counter() - started, 1)
        result: Dict[str, Any] = {
            "name": row.name,
            "settings": row.settings(),
            "unit": "GB",
            "published": row.published_gb,
            "predicted": round(predicted, 3),
            "error": error,
            "target": row.target,
            "seconds": seconds,
            "note": "",
            **({"rule": rule(row)} if row.quantize else {}),
        }
        if abs(error) > row.target:
            found = causes(row)
            explained = predicted + sum(extra for _, extra in found) / 1e9
            result["note"] = "; ".join(text for text, _ in found) or "unexplained"
            if any(extra for _, extra in found):
                result["explained"] = round(explained, 3)  # the plan with the bytes the causes name added
                off = relative_error(explained, row.published_gb)
                result["note"] += f" (with them: {explained:.2f} GB, {off:+.1%})"
        out.append(result)
        print(f"{row.name:<40} published {row.published_gb:>6.2f} GB | predicted {predicted:>6.2f} ({error:+.1%})")
    return out
