"""The memory log: the sampler's samples as CSV rows in a file (`%gpumem log`, `gpumem_kernel.log_gpu_memory`)."""
