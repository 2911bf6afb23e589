"""Will it fit: the measured and traced memory estimators, the allocator model, the GPU table, and the analysis output."""
