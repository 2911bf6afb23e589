"""What the model holds and the planning copies of a fine-tune: model states per rank, LoRA adapters, quantised
layers."""
