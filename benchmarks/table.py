"""The one table format every benchmark prints (Markdown, so it pastes into the README as is)."""

from typing import Sequence


def print_table(rows: Sequence[tuple[str, ...]], header: tuple[str, ...] = ("measure", "value")) -> None:
    """Print rows as a Markdown table with ``header``; every row has one cell per header column."""
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]

    def line(cells: tuple[str, ...]) -> str:
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    print(line(header))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print(line(row))
