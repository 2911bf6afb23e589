"""A value that looks negative (`--memory -1GiB`) is read as the option's value, and its check says what is wrong
with it, in the magic and in the terminal command alike (argparse alone says "expected one argument")."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError

from gpumem_kernel import cli
from gpumem_kernel.magics.options import analyze_arguments
from gpumem_kernel.magics.parsing import attach_negative_values, parse


def usage_line(rest: str) -> str:
    with pytest.raises(UsageError) as error:
        parse(analyze_arguments, "analyze", rest)
    return str(error.value)


@pytest.mark.parametrize("size", ["-1GiB", "-0.5GB", "-16", "-.5GiB", "0GiB"])
def test_a_negative_memory_is_one_clear_line(size):
    line = usage_line(f"model -b 1 --memory {size}")
    assert line == f"gpumem analyze: argument --memory: memory size must be positive, got '{size}'"
    assert "expected one argument" not in line


def test_a_size_that_is_no_size_still_says_how_to_write_one():
    assert "cannot read memory size 'huge'; write e.g. '16GiB'" in usage_line("model --memory huge")


def test_a_positive_memory_and_the_other_options_read_as_before():
    args = parse(analyze_arguments, "analyze", 'model -b 4 --memory 16GiB --target "RTX 4090" --checkpointing')
    assert (args.memory, args.batch, args.target, args.checkpointing) == ("16GiB", 4, "RTX 4090", True)


def test_a_negative_batch_is_read_as_the_batch():
    assert "argument -b/--batch: expected an integer from 1" in usage_line("model -b -4GiB")


def test_only_options_that_take_a_value_are_joined():
    parser = analyze_arguments.parser
    words = ["model", "--checkpointing", "-1", "--memory", "-1GiB", "--target", "-x"]
    assert attach_negative_values(parser, words) == [
        "model",
        "--checkpointing",
        "-1",
        "--memory=-1GiB",
        "--target",  # '-x' does not look like a number: an option, as argparse reads it
        "-x",
    ]


def test_the_terminal_command_says_the_same(capsys):
    code = cli.main(["analyze", "--model", "mypkg:build", "--batch", "1", "--memory", "-1GiB"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "argument --memory: memory size must be positive, got '-1GiB'" in err
