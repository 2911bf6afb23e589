"""Where a fake CPU trace differs from a CUDA run, and how it answers: value reads and data-dependent sizes, CUDA's
kernels and autocast policy, older torch's rules, oneDNN's RNN workspace."""
