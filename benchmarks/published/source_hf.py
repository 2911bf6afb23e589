"""Hugging Face, "Efficient Training on a Single GPU" (the January 2022 page): bert-large-uncased, sequences of 512,
trained with the Trainer on a Tesla V100-SXM2-16GB, NVML's used memory printed after each run.

Source of every figure and setting below: https://huggingface.co/docs/transformers/perf_train_gpu_one, as
docs/source/en/perf_train_gpu_one.mdx of huggingface/transformers (commit 0016acf7ef421c7fe8eff7945de52c71896c3b01):
`nvidia-smi` of "Tue Jan 11 08:58:05 2022", driver 460.91.03, CUDA 11.2; "GPU memory occupied: 1343 MB" after
`torch.ones((1, 1)).to("cuda")`, 2631 MB with the model; each run's TrainingArguments and its figure are quoted
per row. The stack of that date: torch 1.10 (1.10.1, December 2021), transformers 4.15/4.16, bitsandbytes 0.26
(blocksize 2048, parameters under 4096 elements in 32 bits)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Tuple

URL = "https://huggingface.co/docs/transformers/perf_train_gpu_one"
MDX = (
    "https://github.com/huggingface/transformers/blob/0016acf7ef421c7fe8eff7945de52c71896c3b01/"
    "docs/source/en/perf_train_gpu_one.mdx"
)
GPU = "V100 16GB"  # Tesla V100-SXM2-16GB (gpu_table.py)
TORCH = "1.10"  # the torch of January 2022 (1.10.1): softmax kept its input (torch_rules)
CUDA = "11.2"  # nvidia-smi's CUDA: < 11.7, no lazy module loading
CONTEXT_MIB = 1341  # 1343 MB with a (1, 1) tensor, less its 2 MiB block (analysis/gpus/cuda_context.py CALIBRATION)
MODEL_MIB = 2631
SEQUENCE = 512

# bert-large-uncased's config.json (huggingface.co/bert-large-uncased): written out, nothing downloaded
BERT_LARGE: Dict[str, Any] = dict(
    vocab_size=30522,
    hidden_size=1024,
    num_hidden_layers=24,
    num_attention_heads=16,
    intermediate_size=4096,
    hidden_act="gelu",
    hidden_dropout_prob=0.1,
    attention_probs_dropout_prob=0.1,
    max_position_embeddings=512,
    type_vocab_size=2,
    initializer_range=0.02,
    layer_norm_eps=1e-12,
    pad_token_id=0,
    num_labels=2,  # AutoModelForSequenceClassification's default head
)


@dataclass(frozen=True)
class Row:
    name: str
    published_mib: int  # "GPU memory occupied: N MB." after trainer.train()
    batch: int  # per_device_train_batch_size
    accum: int = 1  # gradient_accumulation_steps
    checkpointing: bool = False  # gradient_checkpointing=True
    fp16: bool = False  # fp16=True
    optim: str = "adamw_hf"  # the Trainer's default of 4.16; "adafactor"; "Adam8bit" (bitsandbytes, passed in)
    quote: str = ""  # the page's TrainingArguments

    def settings(self) -> Dict[str, Any]:
        return {
            "batch": self.batch,
            "grad_accum": self.accum,
            "checkpointing": self.checkpointing,
            "amp": "fp16" if self.fp16 else None,
            "optimizer": self.optim,
            "sequence": SEQUENCE,
            "TrainingArguments": self.quote,
        }


ROWS: Tuple[Row, ...] = (
    Row("vanilla", 14949, 4, quote="per_device_train_batch_size=4"),
    Row("accumulation", 8681, 1, 4, quote="per_device_train_batch_size=1, gradient_accumulation_steps=4"),
    Row("+ checkpointing", 6775, 1, 4, True, quote="... gradient_accumulation_steps=4, gradient_checkpointing=True"),
    Row("fp16", 13939, 4, fp16=True, quote="per_device_train_batch_size=4, fp16=True"),
    Row("all combined", 7275, 1, 4, True, True, quote="batch 1, accumulation 4, gradient_checkpointing, fp16"),
    Row("Adafactor", 12295, 4, optim="adafactor", quote='per_device_train_batch_size=4, optim="adafactor"'),
    Row("Adafactor combined", 4847, 1, 4, True, True, "adafactor", 'batch 1, accumulation 4, ckpt, fp16, "adafactor"'),
    Row("Adam8bit", 13085, 4, optim="Adam8bit", quote="batch 4, optimizers=(bnb.optim.Adam8bit(...), None)"),
    Row("Adam8bit combined", 5363, 1, 4, True, True, "Adam8bit", "batch 1, accumulation 4, ckpt, fp16, Adam8bit"),
)
