"""torchtune's "Optimization flags" table: Llama 3.2 3B fine-tuned with full_finetune_single_device at batch 2 x 4096
tokens in bf16 on an A100, torchtune's logged `peak_memory_active` (memory_stats()["active_bytes.all.peak"], GiB)
per row, each technique added on top of the previous one.

Source of every figure and setting below: README.md of pytorch/torchtune at commit
1814feb17a9038e1a8053ce93111bd26774a8db6 (November 2024, the commit that added the table; unchanged since), quoted:
"Baseline uses Recipe=full_finetune_single_device, Model=Llama 3.2 3B, Batch size=2, Max sequence length=4096,
Precision=bf16, Hardware=A100". The recipe at that commit (recipes/full_finetune_single_device.py, `_loss_step` and
`train`): logits = model(tokens); labels shifted by one with an ignore index (-100) appended; logits reshaped to
(tokens, vocabulary); `self._loss_fn(logits, labels)`; `del logits` ("free logits otherwise it peaks backward
memory"); backward; optimizer.step(); zero_grad(set_to_none=True). torchtune's own choices the trace follows: the
model's parameters in bf16 (`dtype: bf16`: no autocast, AdamW's state in bf16 too), the output projection tied to the
embedding (llama3_2 builder, tie_word_embeddings) and its logits cast to fp32 (`self.output(h).float()` in
TransformerDecoder.forward), the loss torch.nn.CrossEntropyLoss until the "Chunked Cross Entropy" row.

From "+ Packed Dataset" on every sample is packed to exactly 4096 tokens, so the rows do not depend on the data; the
baseline pads unpacked Alpaca samples to the batch's longest, a length the page does not give."""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from benchmarks.published.runner import relative_error

COMMIT = "1814feb17a9038e1a8053ce93111bd26774a8db6"
SOURCE: Dict[str, str] = {
    "name": "torchtune, Optimization flags (Llama 3.2 3B, November 2024)",
    "url": "https://github.com/pytorch/torchtune#optimization-flags",
    "text": f"https://github.com/pytorch/torchtune/blob/{COMMIT}/README.md",
    "gpu": "A100 (80 GB: the 60.0 GiB row does not fit a 40 GB one)",
    "stack": "torch 2.5 (CUDA 12.4), torchtune main of November 2024",
    "measure": 'memory_stats()["active_bytes.all.peak"] / 2**30 (peak active GiB), torchtune\'s peak_memory_active',
    "open": "the torch release (2.5, the table's date) and the optimizer (torch.optim.AdamW, foreach: the README's "
    "command passes optimizer=torch.optim.AdamW); the attention: torchtune's packed batches use flex attention "
    "with a block-causal mask, traced as the causal SDPA kernel on the same expanded key/value heads (the same "
    "saved tensors: query, expanded keys and values, output, log-sum-exp)",
}
TARGET = 0.03
GPU = "A100 80GB"
TORCH = "2.5"
CUDA = "12.4"
BATCH = 2
SEQUENCE = 4096
LR = 2e-5  # 3B_full_single_device.yaml
IGNORE_INDEX = -100  # torchtune's CROSS_ENTROPY_IGNORE_IDX

# Llama 3.2 3B's config.json (meta-llama/Llama-3.2-3B-Instruct, the checkpoint the recipe's config loads; the same
# figures as torchtune's llama3_2_3b builder): written out, nothing downloaded
LLAMA_3_2_3B: Dict[str, Any] = dict(
    vocab_size=128256,
    hidden_size=3072,
    intermediate_size=8192,
    num_hidden_layers=28,
    num_attention_heads=24,
    num_key_value_heads=8,
    head_dim=128,
    hidden_act="silu",
    max_position_embeddings=131072,
    rms_norm_eps=1e-5,
    rope_theta=500000.0,
    rope_scaling={
        "factor": 32.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    tie_word_embeddings=True,
    attention_bias=False,
    attention_dropout=0.0,
    mlp_bias=False,
    bos_token_id=128000,
    eos_token_id=[128001, 128008, 128009],
    initializer_range=0.02,
)

# the rows the trace cannot express, with why (said once in the README)
NOT_EXPRESSED = (
    "Baseline: unpacked Alpaca padded to each batch's longest sample, a length the page does not give; "
    "+ Compile and every row after it: compiled (fused kernels keep fewer intermediates than the eager step "
    "traced here); + Activation Offloading, + 8-bit AdamW, LoRA, QLoRA: also offload activations to the host "
    "(enable_activation_offloading), which the trace does not model"
)


ATTENTION = "torchtune_sdpa"


def expanded_kv_attention(
    module: Any, query: Any, key: Any, value: Any, attention_mask: Any, scaling: Any = None, **_: Any
) -> Tuple[Any, None]:
    """torchtune's MultiHeadAttention (modules/attention.py at that commit): the 8 key/value heads expanded to the
    24 query heads (`k.unsqueeze(2).expand(...).flatten(1, 2)`, a copy the attention kernel saves) before the
    fused attention, causal; transformers' own SDPA path passes them unexpanded (enable_gqa) instead."""
    import torch.nn.functional as F
    from transformers.integrations.sdpa_attention import repeat_kv

    groups = module.num_key_value_groups
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    causal = attention_mask is None and query.shape[2] > 1
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, is_causal=causal, scale=scaling)
    return out.transpose(1, 2).contiguous(), None


def model() -> Any:
    """LlamaForCausalLM from the written-out config, in bf16 (torchtune loads and trains it in bf16), on meta, its
    attention torchtune's (expanded_kv_attention, registered under ATTENTION with the SDPA mask rules)."""
    import torch
    from transformers import AttentionInterface, LlamaConfig, LlamaForCausalLM
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTENTION, expanded_kv_attention)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)
    config = LlamaConfig(**LLAMA_3_2_3B, attn_implementation=ATTENTION)
    with torch.device("meta"):
        return LlamaForCausalLM(config).to(torch.bfloat16).train()


def make_batch(batch_size: int) -> Tuple[Any, Any]:
    """A packed batch: every row exactly SEQUENCE tokens, its labels the tokens themselves."""
    import torch

    tokens = torch.randint(0, LLAMA_3_2_3B["vocab_size"], (batch_size, SEQUENCE))
    return tokens, tokens.clone()


def step(net: Any, opt: Any, batch: Any) -> None:
    """full_finetune_single_device's `_loss_step` and step: torchtune's decoder is the Hugging Face model's body,
    its tied output projection cast to fp32 as TransformerDecoder.forward does."""
    import torch
    import torch.nn.functional as F

    tokens, labels = (t.cuda() for t in batch)
    hidden = net.model(input_ids=tokens).last_hidden_state
    logits = net.lm_head(hidden).float()
    ignore = torch.full((labels.shape[0], 1), IGNORE_INDEX, dtype=labels.dtype, device=labels.device)
    labels = torch.hstack((labels[..., 1:], ignore)).reshape(-1)
    logits = logits.reshape(-1, logits.size(-1))
    loss = F.cross_entropy(logits, labels, ignore_index=IGNORE_INDEX)
    del logits  # the recipe's `del logits`
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


# (row as the README names it, published GiB, what the row adds)
ROWS: Tuple[Tuple[str, float, str], ...] = (
    ("+ Packed Dataset", 60.0, "dataset.packed=True: batch 2 x 4096 tokens, AdamW, torch.nn.CrossEntropyLoss"),
)


def run(names: Optional[Sequence[str]] = None) -> List[Dict[str, Any]]:
    import torch

    from gpumem_kernel.analysis import trace_step

    net = model()
    out = []
    for name, published, adds in ROWS:
        if names and name not in names:
            continue
        started = time.perf_counter()
        opt = torch.optim.AdamW(net.parameters(), lr=LR)
        report = trace_step(
            step,
            net,
            opt,
            batch_size=BATCH,
            input=make_batch,
            target=GPU,
            torch_version=TORCH,
            cuda_version=CUDA,
        )
        predicted = int(report.peak_allocated_bytes) / 2**30
        out.append(
            {
                "name": name,
                "settings": {
                    "model": "Llama 3.2 3B",
                    "batch": BATCH,
                    "sequence": SEQUENCE,
                    "dtype": "bf16",
                    "optimizer": "AdamW (foreach)",
                    "loss": "CrossEntropyLoss on fp32 logits",
                    "adds": adds,
                },
                "unit": "GiB",
                "published": published,
                "predicted": round(predicted, 2),
                "error": relative_error(predicted, published),
                "seconds": round(time.perf_counter() - started, 1),
                "note": "",
            }
        )
        print(f"torchtune {name:<18} published {published} GiB | predicted {predicted:.2f} ({out[-1]['error']:+.1%})")
    return out
