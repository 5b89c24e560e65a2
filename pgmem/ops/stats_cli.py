"""``pgmem stats``: the figures of the analytics views (docs/analytics.md), printed as tables, one JSON object
or CSV rows, once or every few seconds (``--watch``).

:func:`figures` reads every figure in one place (one read transaction); :data:`SECTIONS` says how each is
titled and which columns the table shows. A new figure is a new key of both.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import time
from collections.abc import Callable
from datetime import date, datetime, timedelta
from typing import Any

import psycopg
from rich.console import Console

from pgmem.errors import InvalidInput, translate
from pgmem.ops import analytics
from pgmem.ops.cli_parts import print_table
from pgmem.planning import statements

__all__ = ["FORMATS", "SECTIONS", "Figures", "figures", "render", "run"]

#: What ``--format`` takes.
FORMATS = ("table", "json", "csv")

#: The figures ``figures`` reads: key -> (the table's title, {column: header}). The JSON object and the CSV
#: rows carry every column the query returns; the table shows these.
SECTIONS: dict[str, tuple[str, dict[str, str]]] = {
    "messages_by_memory": (
        "messages by namespace, memory, role and action",
        {"namespace": "namespace", "memory": "memory", "role": "role", "action": "action", "messages": "messages"},
    ),
    "agents": (
        "agents (each message once)",
        {
            "agent": "agent",
            "messages": "messages",
            "characters": "characters",
            "tokens": "tokens (counted)",
            "tokens_estimated": "tokens (est.)",
            "first_seen": "first",
            "last_seen": "last",
        },
    ),
    "flow": (
        "action flow (largest memory of each namespace)",
        {"from_action_name": "from", "to_action_name": "to", "edges": "edges", "median_delay_s": "median delay (s)"},
    ),
    "talk": ("who talks to whom", {"sender": "sender", "recipient": "recipient", "messages": "messages"}),
    "queues": (
        "queue health (now)",
        {
            "namespace": "namespace",
            "queue": "queue",
            "depth": "depth",
            "available": "available",
            "leased": "leased",
            "delayed": "delayed",
            "dead": "dead",
            "acked": "acked",
            "oldest_pending_s": "oldest (s)",
            "retries": "retries",
            "acked_last_minute": "acked/1m",
        },
    ),
    "retrievals": ("logged searches", {"label": "label", "searches": "searches", "hits": "hits"}),
    "recall": (
        "search recall (sampled searches: PGMEM_RECALL_SAMPLE)",
        {
            "namespace": "namespace",
            "model": "model",
            "kind": "kind",
            "strategy": "strategy",
            "mean_recall": "recall@k",
            "min_recall": "min",
            "samples": "samples",
            "unchecked": "unchecked",
            "checked_ago_s": "last check (s ago)",
        },
    ),
    "summaries": (
        "summaries (compression per memory and level)",
        {
            "namespace": "namespace",
            "memory": "memory",
            "level": "level",
            "summaries": "summaries",
            "source_chars": "chars summarised",
            "char_ratio": "chars ratio",
            "token_ratio": "tokens ratio",
        },
    ),
}

#: Sections the table prints only when they have rows.
_OPTIONAL = frozenset({"queues", "retrievals", "recall", "summaries"})

Figures = dict[str, list[dict[str, Any]]]


def figures(conn: psycopg.Connection[Any], scope: analytics.Scope) -> Figures:
    """Every figure of ``pgmem stats`` for ``scope``, read in one transaction (one snapshot): section key
    (:data:`SECTIONS`) -> rows. ``conn`` sees the scope's namespace (or every one: the tables' owner)."""
    with translate(), conn.transaction():
        analytics.scope_transaction(conn, scope)
        return {name: analytics.fetch(conn, name, scope) for name in SECTIONS}


def namespace_is_empty(conn: psycopg.Connection[Any], namespace: str) -> bool:
    """Whether ``namespace`` holds no memory, message, queue item or item (a mistyped name, most likely)."""
    with translate(), conn.transaction():
        analytics.scope_transaction(conn, analytics.Scope(namespace))
        row = conn.execute(statements.load("portability")["namespace_has_rows"], {"ns": namespace}).fetchone()
    return not (row and row[0])


def _summary(found: Figures) -> dict[str, int]:
    by_memory = found["messages_by_memory"]
    return {
        "message_references": sum(r["messages"] for r in by_memory),
        "memories": len({(r["namespace"], r["memory"]) for r in by_memory}),
    }


def _json_value(value: object) -> object:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    return str(value)


def render(found: Figures, fmt: str, console: Console) -> None:
    """Print ``found`` as ``fmt``: rich tables, one JSON object (the sections' rows and the totals), or CSV
    (a header, then one row per table row: its section first, then the union of the sections' columns)."""
    if fmt == "json":
        document = {**found, "totals": _summary(found)}
        console.out(json.dumps(document, default=_json_value, ensure_ascii=False), highlight=False)
        return
    if fmt == "csv":
        columns: dict[str, None] = {"section": None}
        for rows in found.values():
            for row in rows:
                columns.update(dict.fromkeys(row))
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=list(columns), lineterminator="\n")
        writer.writeheader()
        for section, rows in found.items():
            for row in rows:
                writer.writerow(
                    {"section": section, **{k: v.isoformat() if hasattr(v, "isoformat") else v for k, v in row.items()}}
                )
        console.out(buffer.getvalue(), end="", highlight=False)
        return
    for section, (title, columns_shown) in SECTIONS.items():
        rows = found.get(section, [])
        if section in _OPTIONAL and not rows:
            continue
        if section == "messages_by_memory":
            rows = [{**r, "action": r.get("action") or "-"} for r in rows]
        print_table(console, title, rows, columns_shown)
        if section == "messages_by_memory":
            totals = _summary(found)
            console.print(
                f"{totals['message_references']} message references in {totals['memories']} memories", highlight=False
            )


def run(
    dsn: str,
    *,
    namespace: str | None,
    since: str | None,
    fmt: str,
    watch: float | None,
    console: Console,
    warn: Callable[[str], None],
) -> None:
    """The ``pgmem stats`` command: read and print the figures, once, or every ``watch`` seconds until
    Ctrl-C (which ends it normally)."""
    import pgmem
    from pgmem.checks import check_namespace

    if fmt not in FORMATS:
        raise InvalidInput(f"--format takes {', '.join(FORMATS)}, got {fmt!r}")
    if watch is not None and not watch > 0:
        raise InvalidInput(f"--watch takes a number of seconds above 0, got {watch}")
    if namespace is not None:
        check_namespace(namespace)
    with pgmem.connect(dsn, namespace=namespace or "default", min_size=0, max_size=1) as client:

        def read() -> Figures:
            # A replica's connection when PGMEM_REPLICA_DSNS names one that answers: the scans leave the
            # primary. Every namespace (no --namespace) is the tables' owner's view: a plain connection as
            # the DSN's role (a client's connections act as the application role, held by row-level security
            # to one namespace).
            scope = analytics.Scope(namespace, analytics.parse_since(since))
            reading: contextlib.AbstractContextManager[psycopg.Connection[Any]] = (
                client.read_connection() if namespace else psycopg.connect(dsn)
            )
            with translate(), reading as conn:
                found = figures(conn, scope)
                if namespace is not None and not any(found.values()) and namespace_is_empty(conn, namespace):
                    warn(
                        f"namespace {namespace!r} has no rows: no memory, message, queue item or item; "
                        "check the name / PGMEM_NAMESPACE"
                    )
            return found

        if watch is None:
            render(read(), fmt, console)
            return
        try:
            while True:
                found = read()
                if fmt == "table" and console.is_terminal:
                    console.clear()
                render(found, fmt, console)
                if fmt == "table":
                    console.print(f"(every {watch:g}s; Ctrl-C to stop)", style="dim", highlight=False)
                console.file.flush()
                time.sleep(watch)
        except KeyboardInterrupt:
            return
