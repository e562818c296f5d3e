"""The one table format every benchmark prints (Markdown, so it pastes into the README as is)."""


def print_table(rows: list[tuple[str, str]]) -> None:
    """Print ``(measure, value)`` rows as a two-column Markdown table."""
    width = max(len(name) for name, _ in rows)
    print(f"| {'measure'.ljust(width)} | value |\n|{'-' * (width + 2)}|-------|")
    for name, value in rows:
        print(f"| {name.ljust(width)} | {value} |")
