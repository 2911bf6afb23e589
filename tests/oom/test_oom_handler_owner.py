"""Who owns a shell's OOM handler: the loaded extension's Kernel, or, installed without the extension, the weak
per-shell record in gpumem_kernel.current; nothing is stuck on the IPython shell either way."""

from __future__ import annotations

from typing import Any

from conftest import gpumem_shell
from gpumem_kernel import current, extension
from gpumem_kernel.oom.handler import handler_of, install_oom_handler, uninstall_oom_handler
from ipython_shell import fresh_shell


def gpumem_attributes(shell: Any) -> list:
    return [name for name in vars(shell) if "gpumem" in name]


def test_installed_without_the_extension_the_handler_is_kept_for_that_shell_only():
    with fresh_shell() as shell:
        assert install_oom_handler(shell, probe=lambda: None) == "OOM checklist installed"
        handler = handler_of(shell)
        assert handler is not None and gpumem_attributes(shell) == []
        assert install_oom_handler(shell) == "the OOM checklist is already installed"
        assert uninstall_oom_handler(shell) == "OOM checklist removed"
        assert handler_of(shell) is None and current.oom_handler(shell) is None


def test_with_the_extension_loaded_its_kernel_owns_the_handler():
    with gpumem_shell() as shell:
        loaded = extension.current()
        assert loaded is not None and loaded.oom_handler is not None
        assert handler_of(shell) is loaded.oom_handler and gpumem_attributes(shell) == []
        assert install_oom_handler(shell) == "the OOM checklist is already installed"
    assert handler_of(shell) is None  # the unload removed it with the Kernel
