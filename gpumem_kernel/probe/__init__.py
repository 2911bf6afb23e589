"""Measuring without side effects: NVML, the devices CUDA sees, host memory, torch's allocator statistics (only when
the user initialised CUDA: torchstats is the one place that decides), processes, the sampler thread and the sample
taken through it (snapshot), and who holds GPU memory in the user's namespace (holders).
"""
