"""Will it fit: the measured and traced memory estimators, the storage tracker (also the simulated device of
autobatch and the benchmark), the workbench real training steps run on, the allocator model, the GPU table, and
the analysis output.
"""
