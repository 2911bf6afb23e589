"""Measuring without side effects: NVML, the devices CUDA sees, host memory, torch's allocator statistics (only when
the user initialised CUDA), processes, and the sampler thread.
"""
