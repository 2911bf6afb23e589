"""The GPU suite (issue 10): one command that measures every CUDA promise of jupyterlab-gpumem.

    python3 -m benchmarks.gpu --out DIR          # on a machine with an NVIDIA GPU and a CUDA build of torch
    python3 -m benchmarks.gpu --dry-run --out DIR  # the same logic on the CPU, with stand-ins (CI runs this)

See benchmarks/gpu/README.md. Importing this package is cheap: no torch, no NVML.
"""
