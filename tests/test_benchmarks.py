"""The benchmark scripts run end to end (tiny settings: this checks they work, not how fast anything is)."""

from __future__ import annotations

import contextlib
import io

from benchmarks import decode
from benchmarks.table import print_table


def test_print_table_is_markdown_with_any_number_of_columns():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_table([("a", "1", "x"), ("bb", "22", "yy")], header=("n", "v", "w"))
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("| n ") and set(lines[1]) <= {"|", "-"} and len(lines) == 4
    assert all(line.count("|") == 4 for line in lines)


def test_decode_benchmark_prints_both_tables():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert decode.main(["--tokens", "4", "--repeats", "1", "--test-sentences", "3", "--sweep", "4,8"]) == 0
    text = out.getvalue()
    assert "speed-up of the cache" in text and "Where the cache pays off" in text
    assert "| 8 tokens" in text and "MiB" in text
