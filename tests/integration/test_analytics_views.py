"""The analytics views (sql/views.sql) on a scripted conversation and a scripted queue history."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest

import pgmem
from pgmem import Message

T0 = datetime(2026, 1, 5, 10, 0, 0, tzinfo=UTC)
UR = "metagpt.actions.add_requirement.UserRequirement"
PRD = "metagpt.actions.write_prd.WritePRD"
DESIGN = "metagpt.actions.design_api.WriteDesign"
CODE = "metagpt.actions.write_code.WriteCode"


def _conversation() -> list[Message]:
    """MetaGPT's pipeline: the requirement, a PRD, a design, then two files of code.

    The first four follow each other; the second file names the design it answers (metadata reply_to).
    """
    ur = Message(id="m1", content="Build a 2048 game", role="Human", cause_by=UR, sent_from="Human", created_at=T0)
    prd = Message(
        id="m2",
        content="PRD: 2048 with undo",
        role="ProductManager",
        cause_by=PRD,
        sent_from="ProductManager",
        send_to={"Architect"},
        created_at=T0 + timedelta(seconds=10),
    )
    design = Message(
        id="m3",
        content="Design: core.py, main.py",
        role="Architect",
        cause_by=DESIGN,
        sent_from="Architect",
        send_to={"Engineer"},
        created_at=T0 + timedelta(seconds=40),
    )
    code1 = Message(
        id="m4",
        content="def move(board): ...",
        role="Engineer",
        cause_by=CODE,
        sent_from="Engineer",
        send_to={"QaEngineer"},
        created_at=T0 + timedelta(seconds=100),
    )
    code2 = Message(
        id="m5",
        content="def main(): ...",
        role="Engineer",
        cause_by=CODE,
        sent_from="Engineer",
        send_to={"QaEngineer"},
        metadata={"reply_to": "m3"},
        created_at=T0 + timedelta(seconds=130),
    )
    return [ur, prd, design, code1, code2]


@pytest.fixture
def conversation(dsn: str) -> str:
    msgs = _conversation()
    with pgmem.connect(dsn, namespace="acme") as client:
        client.messages.add_many("team", msgs)
        client.messages.add_many("role:Engineer", msgs[2:])
        other = client.with_namespace("other")
        other.messages.add("team", Message(content="noise", cause_by=UR, sent_from="Human", created_at=T0))
        other.messages.add("team", Message(content="noise 2", cause_by=PRD, sent_from="Bob", created_at=T0))
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE pgmem.messages SET tokens = 7 WHERE namespace = 'acme' AND id = 'm2'")
    return dsn


def _rows(dsn: str, query: str, params: Any = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(query, params).fetchall()  # type: ignore[arg-type]


def test_conversation_facts_one_row_per_message_and_memory(conversation: str) -> None:
    rows = _rows(
        conversation,
        "SELECT memory, seq, message_id, role, sender, recipients, action, action_name, reply_to, created_at,"
        " characters, tokens, tokens_estimated FROM pgmem.conversation_facts"
        " WHERE namespace = 'acme' AND memory = 'team' ORDER BY seq",
    )
    assert [r[2] for r in rows] == ["m1", "m2", "m3", "m4", "m5"]
    assert rows[0][3:10] == ("Human", "Human", ["<all>"], UR, "UserRequirement", None, T0)
    assert rows[1][5] == ["Architect"] and rows[1][7] == "WritePRD"
    assert rows[4][8] == "m3"
    assert [r[10] for r in rows] == [len(m.content) for m in _conversation()]
    # tokens: as stored (only m2 was counted); the estimate falls back to ceil(characters / 4).
    assert [r[11] for r in rows] == [None, 7, None, None, None]
    assert [r[12] for r in rows] == [math.ceil(len(m.content) / 4) if m.id != "m2" else 7 for m in _conversation()]
    by_memory = dict(
        _rows(conversation, "SELECT memory, count(*) FROM pgmem.conversation_facts WHERE namespace = 'acme' GROUP BY 1")
    )
    assert by_memory == {"team": 5, "role:Engineer": 3}


def test_conversation_facts_keeps_messages_outside_memories(conversation: str) -> None:
    with pgmem.connect(conversation, namespace="acme") as client:
        client.queues.push("jobs", Message(id="q1", content="queued only", sent_from="Boss"))
    rows = _rows(conversation, "SELECT memory, sender FROM pgmem.conversation_facts WHERE message_id = 'q1'")
    assert rows == [(None, "Boss")]


def test_role_and_action_activity_per_minute(conversation: str) -> None:
    roles = _rows(
        conversation,
        "SELECT agent, minute, messages, characters, tokens, tokens_estimated, first_seen, last_seen"
        " FROM pgmem.role_activity WHERE namespace = 'acme' ORDER BY minute, agent",
    )
    msgs = {m.id: m for m in _conversation()}

    def est(*ids: str) -> int:
        return sum(7 if i == "m2" else math.ceil(len(msgs[i].content) / 4) for i in ids)

    minute = timedelta(minutes=1)
    assert [r[:3] for r in roles] == [
        ("Architect", T0, 1),
        ("Human", T0, 1),
        ("ProductManager", T0, 1),
        ("Engineer", T0 + minute, 1),
        ("Engineer", T0 + 2 * minute, 1),
    ]
    assert roles[2][3:6] == (len(msgs["m2"].content), 7, est("m2"))
    assert roles[0][4] is None and roles[0][5] == est("m3")
    assert roles[3][6] == roles[3][7] == T0 + timedelta(seconds=100)
    actions = _rows(
        conversation,
        "SELECT action_name, sum(messages), min(first_seen), max(last_seen), sum(tokens_estimated)"
        " FROM pgmem.action_activity WHERE namespace = 'acme' GROUP BY 1 ORDER BY 3",
    )
    assert actions == [
        ("UserRequirement", 1, T0, T0, est("m1")),
        ("WritePRD", 1, T0 + timedelta(seconds=10), T0 + timedelta(seconds=10), est("m2")),
        ("WriteDesign", 1, T0 + timedelta(seconds=40), T0 + timedelta(seconds=40), est("m3")),
        ("WriteCode", 2, T0 + timedelta(seconds=100), T0 + timedelta(seconds=130), est("m4", "m5")),
    ]


def test_action_flow_shows_the_metagpt_pipeline(conversation: str) -> None:
    rows = _rows(
        conversation,
        "SELECT memory, from_action_name, to_action_name, edges, median_delay_s, min_delay_s, max_delay_s"
        " FROM pgmem.action_flow WHERE namespace = 'acme' ORDER BY memory, first_seq",
    )
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
        ("role:Engineer", "WriteDesign", "WriteCode", 2),
        ("team", "UserRequirement", "WritePRD", 1),
        ("team", "WritePRD", "WriteDesign", 1),
        ("team", "WriteDesign", "WriteCode", 2),
    ]
    delays = {(r[0], r[1]): (r[4], float(r[5]), float(r[6])) for r in rows}
    assert delays[("team", "UserRequirement")] == (10.0, 10.0, 10.0)
    assert delays[("team", "WritePRD")] == (30.0, 30.0, 30.0)
    # m4 follows the design (60 s later), m5 names it (90 s later): median 75 s.
    assert delays[("team", "WriteDesign")] == (75.0, 60.0, 90.0)
    assert delays[("role:Engineer", "WriteDesign")] == (75.0, 60.0, 90.0)
    full = _rows(
        conversation,
        "SELECT from_action, to_action FROM pgmem.action_flow WHERE namespace = 'acme' AND memory = 'team'"
        " ORDER BY first_seq",
    )
    assert full == [(UR, PRD), (PRD, DESIGN), (DESIGN, CODE)]


def test_who_talks_to_whom(conversation: str) -> None:
    rows = _rows(
        conversation,
        "SELECT sender, recipient, messages, first_at, last_at FROM pgmem.who_talks_to_whom"
        " WHERE namespace = 'acme' ORDER BY first_at",
    )
    assert [r[:3] for r in rows] == [
        ("Human", "<all>", 1),
        ("ProductManager", "Architect", 1),
        ("Architect", "Engineer", 1),
        ("Engineer", "QaEngineer", 2),
    ]
    assert rows[3][3:] == (T0 + timedelta(seconds=100), T0 + timedelta(seconds=130))
    assert _rows(conversation, "SELECT count(*) FROM pgmem.who_talks_to_whom WHERE namespace = 'other'") == [(2,)]


def test_queue_health_matches_a_scripted_history(dsn: str) -> None:
    with pgmem.connect(dsn, namespace="ops") as client:
        q = client.queues
        ids = [q.push("jobs", Message(content=f"job {i}")).id for i in range(5)]
        q.push("jobs", Message(content="later"), delay=3600)
        q.push("other", Message(content="waiting"))
        first = q.claim("jobs", 3, lease=600)
        assert [i.id for i in first] == ids[:3]
        q.ack(first[:2])
        assert q.nack(first[2], retry_in=0) == "ready"
        (again,) = q.claim("jobs", 1, lease=600)
        assert again.id == ids[2] and again.attempts == 2
        q.ack(again)
        (doomed,) = q.claim("jobs", 1, lease=600)
        assert q.nack(doomed, dead=True) == "dead"
        (held,) = q.claim("jobs", 1, lease=600)
        assert held.id == ids[4]
    rows = _rows(
        dsn,
        "SELECT queue, depth, available, leased, delayed, dead, acked, claims, retries, acked_last_minute,"
        " acked_per_minute_10m, oldest_pending_s, last_acked_at IS NOT NULL FROM pgmem.queue_health"
        " WHERE namespace = 'ops' ORDER BY queue",
    )
    jobs, other = rows
    # jobs: 0,1 acked at once; 2 acked on its second claim; 3 dead; 4 leased; the delayed one waits.
    assert jobs[:11] == ("jobs", 2, 0, 1, 1, 1, 3, 6, 1, 3, Decimal("0.30"))
    assert 0 <= jobs[11] < 60 and jobs[12] is True
    assert other[:11] == ("other", 1, 1, 0, 0, 0, 0, 0, 0, 0, Decimal("0.00"))
    assert other[12] is False
    throughput = _rows(
        dsn,
        "SELECT queue, sum(acked), sum(claims) FROM pgmem.queue_throughput WHERE namespace = 'ops' GROUP BY 1",
    )
    assert throughput == [("jobs", 3, 4)]


def _scans(plan: dict[str, Any]) -> list[tuple[str, str]]:
    """(node type, relation) of every scan in an EXPLAIN (FORMAT JSON) plan."""
    out = [(plan["Node Type"], plan["Relation Name"])] if "Relation Name" in plan else []
    for child in plan.get("Plans", []):
        out += _scans(child)
    return out


@pytest.mark.slow
def test_views_filtered_by_namespace_use_indexes_at_100k_messages(dsn: str) -> None:
    """The main views, filtered as users filter them, never scan whole tables (100k messages in 100
    namespaces; benchmarks/views.py times them at 100k and 1M)."""
    from benchmarks.views import VIEWS, load
    from pgmem.ops import analytics

    with psycopg.connect(dsn) as conn:
        load(conn, 100_000, 100)
        filtered = {name: (query, None) for name, query in VIEWS.items() if "all namespaces" not in name}
        scope = analytics.Scope("ns1", T0).params()
        for name in ("agents", "talk", "messages_by_memory", "flow"):
            filtered[f"stats: {name}"] = (analytics.query_text(name), scope)
        for name, (query, params) in filtered.items():
            (plan,) = conn.execute("EXPLAIN (FORMAT JSON) " + query, params).fetchone()  # type: ignore[misc]
            scans = _scans(plan[0]["Plan"])
            assert scans, name
            assert not [s for s in scans if s[0] == "Seq Scan"], (name, scans)
            assert any("Index" in node or "Bitmap" in node for node, _ in scans), (name, scans)


def test_summary_compression_per_memory_and_level(dsn: str) -> None:
    from pgmem.summarizer import CompressionPolicy, OfflineSummarizer

    with pgmem.connect(dsn, namespace="acme") as client:
        client.messages.add_many("team", [Message(content=f"message {i} " + "word " * 40) for i in range(12)])
        created = client.summaries.compress("team", OfflineSummarizer(), CompressionPolicy(chunk=5, fanout=2))
        client.with_namespace("other").messages.add("team", Message(content="not summarised"))
    assert [s.level for s in created] == [1, 1, 2]
    rows = _rows(
        dsn,
        "SELECT namespace, memory, level, summaries, first_seq, last_seq, source_chars, summary_chars,"
        " source_tokens, summary_tokens, char_ratio, token_ratio FROM pgmem.summary_compression ORDER BY level",
    )
    assert [r[:4] for r in rows] == [("acme", "team", 1, 2), ("acme", "team", 2, 1)]
    level1 = [s for s in created if s.level == 1]
    first = rows[0]
    assert (first[4], first[5]) == (level1[0].first_seq, level1[1].last_seq)
    assert first[6] == sum(s.source_chars for s in level1)
    assert first[7] == sum(len(s.content) for s in level1)
    assert first[8] == sum(s.source_tokens for s in level1)
    assert first[9] == sum(s.summary_tokens for s in level1)
    assert first[10] == round(Decimal(first[6]) / Decimal(first[7]), 2) and first[10] > 1
    assert first[11] == round(Decimal(first[8]) / Decimal(first[9]), 2)
