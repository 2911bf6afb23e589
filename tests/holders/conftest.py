"""Every holders test starts and ends without a last report: the hook's module state is the kernel's, and a comm
opened by a later test (tests/channel, tests/wire) would otherwise get a stale `holders` message."""

from __future__ import annotations

from typing import Iterator

import pytest

from gpumem_kernel.holders import hook


@pytest.fixture(autouse=True)
def no_last_holders() -> Iterator[None]:
    hook.forget()
    yield
    hook.forget()
