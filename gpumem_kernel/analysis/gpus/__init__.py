"""The GPUs an analysis plans for: the table of cards, the lookup by name, and the CUDA context a process holds on
one."""
