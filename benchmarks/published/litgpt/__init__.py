"""LitGPT's model, LoRA and loss code at commit 8641822 (Apache-2.0, each file's header says what changed): the code
the resource table's LoRA rows ran, traced by benchmarks/published/source_litgpt.py."""
