"""An unknown --target names only genuinely close GPUs (at most five, closest first), else says there is none
and how to list the table, never the whole table."""

from __future__ import annotations

import pytest

from gpumem_kernel.analysis.gpus import lookup as gpus


def message(name: str) -> str:
    with pytest.raises(ValueError) as error:
        gpus.lookup(name)
    return str(error.value)


@pytest.mark.parametrize("name", ["GTX 9999", "RTX 9999", "Radeon 7900"])
def test_a_name_close_to_nothing_says_so_and_how_to_list_the_table(name):
    text = message(name)
    assert text == (
        f"unknown GPU {name!r}: no close name in the table (gpumem_kernel.analysis.gpus.lookup.names() lists its "
        f"{len(gpus.names())} GPUs); or plan by its memory alone, e.g. --memory 24GiB"
    )
    assert "close names" not in text


def test_a_misspelt_name_gets_at_most_five_close_names_closest_first():
    text = message("RTX 4080 Supr")
    assert text.startswith("unknown GPU 'RTX 4080 Supr'; close names: RTX 4080 Super, ")
    assert len(text.split("close names: ")[1].split(", ")) <= gpus.MAX_CLOSE


@pytest.mark.parametrize("name, first", [("A10O", "A10"), ("H10", "H100"), ("RTX 3075", "RTX 3070")])
def test_a_near_miss_names_the_gpu_it_missed(name, first):
    assert message(name).split("close names: ")[1].startswith(first)


def test_a_long_unknown_name_is_echoed_cut():
    assert len(message("X" * 100_000)) < 300
