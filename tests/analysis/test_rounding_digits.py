"""A --round of a million digits is an unknown rounding in one short line, not Python's integer-conversion limit."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError

from gpumem_kernel.analysis.report.picks import parse_rounding
from gpumem_kernel.magics.options import analyze_arguments
from gpumem_kernel.magics.parsing import parse


def test_a_million_digit_rounding_is_an_unknown_rounding():
    with pytest.raises(ValueError) as error:
        parse_rounding("7" * 1_000_000)
    text = str(error.value)
    assert text.startswith("unknown rounding '777") and "pow2" in text and "limit" not in text and len(text) < 200


def test_the_magic_says_the_same_in_one_line():
    with pytest.raises(UsageError) as error:
        parse(analyze_arguments, "analyze", "model --round " + "9" * 5000)
    assert str(error.value).startswith("gpumem analyze: argument --round: unknown rounding '999")
    assert "limit" not in str(error.value)


@pytest.mark.parametrize("text, multiple", [("8", 8), ("0064", 64), ("1048576", 1048576)])
def test_multiples_in_range_are_read_as_before(text, multiple):
    assert parse_rounding(text).multiple == multiple
