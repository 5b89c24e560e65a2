"""Removing one message from a memory reads a few index entries, whatever the planner's statistics say.

A pop right after a memory was filled (autovacuum has not analyzed the tables yet, as in a fresh
database) was planned as a walk of every entry of the memory, then of every entry of the namespace for
the orphan check: 0.4 ms of a 0.7 ms statement at 800 entries, growing with the memory. The statements
probe the entry and its message by key (a scalar subquery on the CTE that locked the entry) and check
references by the message id (subqueries the planner keeps per row), so each scan reads a few rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import pgmem
from pgmem.planning import statements

Q = statements.load("messages")

#: Rows a scan node may read (returned or filtered out) for the removal of one message.
FEW = 3


def scans(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if "Scan" in node["Node Type"]:
        yield node
    for child in node.get("Plans", ()):
        yield from scans(child)


def rows_read(node: dict[str, Any]) -> float:
    keys = ("Actual Rows", "Rows Removed by Filter", "Rows Removed by Index Recheck")
    return float(sum(node.get(key, 0) for key in keys)) * float(max(1, node.get("Actual Loops", 1)))


def explain(client: pgmem.Client, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """The scan nodes of ``name`` run once, in a transaction rolled back."""
    with client.transaction() as conn, conn.transaction(force_rollback=True):
        cur = psycopg.ClientCursor(conn)
        [(plan,)] = cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + Q[name], {"ns": "test", **params}).fetchall()
    nodes = [n for n in scans(plan[0]["Plan"]) if n["Node Type"] != "CTE Scan"]
    assert nodes
    return nodes


@pytest.mark.parametrize("analyzed", [False, True], ids=["fresh", "analyzed"])
def test_removing_one_message_reads_a_few_rows(client: pgmem.Client, analyzed: bool) -> None:
    messages = [pgmem.Message(id=f"m{i}", content=f"message {i}") for i in range(2000)]
    client.messages.add_many("chat", messages)
    client.messages.add_many("other", messages[::2])  # half of them held by a second memory
    if analyzed:
        with client.transaction() as conn:
            conn.execute("ANALYZE pgmem.memory_entries, pgmem.messages")
    cases: dict[str, dict[str, Any]] = {
        "delete_newest": {"memory": "chat"},
        "delete_at_position": {"memory": "chat", "offset": 0},
        "delete_at_position_from_end": {"memory": "chat", "offset": 1},
        "delete": {"memory": "chat", "id": "m1000"},
        "delete_oldest": {"memory": "chat", "n": 1},
    }
    for name, params in cases.items():
        for node in explain(client, name, params):
            where = f"{name}: {node['Node Type']} on {node.get('Relation Name', node.get('Index Name'))}"
            assert rows_read(node) <= FEW, (where, rows_read(node))
    # The statements still do what they say (nothing above was kept).
    assert client.messages.count("chat") == 2000
    popped = client.messages.delete_newest("chat")
    assert popped is not None and popped.id == "m1999"
    assert client.messages.count("other") == 1000
