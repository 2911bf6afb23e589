"""Held by: which of the user's variables hold GPU memory.

After each cell where CUDA is in use, the hook (heldby.hook) walks the user's variables within a time budget to
the storages they reach; `%gpumem holders` and `gpumem_kernel.holders()` (heldby.collect.holders) walk on
request. Parts: walk (objects → storages, bounded), describe (a line per holder), collect (charging each storage
once), report (the dataclasses and the table), message (the panel's `holders` message).

The package is not named `holders`: importing a submodule binds the package to its parent's attribute of the
same name, which would replace the public function `gpumem_kernel.holders` once the extension loads.
"""
