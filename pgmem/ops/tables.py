"""Tables the command line prints (rich): cells formatted alike, numbers right-aligned."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

__all__ = ["cell", "print_table"]


def cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".")
    if isinstance(value, int):
        return f"{value:,}"
    if hasattr(value, "isoformat"):
        return str(value.isoformat(sep=" ", timespec="seconds"))
    return str(value)


def print_table(console: Console, title: str, rows: list[dict[str, object]], columns: dict[str, str]) -> None:
    """A rich table of ``rows`` (``columns``: key -> header); numbers right-aligned."""
    table = Table(title=title, title_justify="left")
    numeric = {k for k in columns if any(isinstance(r.get(k), int | float) for r in rows)}
    for key, header in columns.items():
        table.add_column(header, justify="right" if key in numeric else "left")
    for row in rows:
        table.add_row(*(cell(row.get(k)) for k in columns))
    console.print(table)
