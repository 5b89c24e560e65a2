"""OpenTelemetry on the real Postgres: a span per public repository call (sync and async) with the database
semantic conventions' attributes, parents, errors, nothing secret in any of it; the queue and backlog
metrics equal to what SQL counts."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

import pgmem
from pgmem import Message, telemetry

trace = pytest.importorskip("opentelemetry.trace")
from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.util._once import Once  # noqa: E402


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The global tracer provider, recording into memory for this test only."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    yield exporter
    provider.shutdown()
    # Unset again, as OpenTelemetry's own test utilities do: the tests after this one record nothing.
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None


def _ours(exporter: InMemorySpanExporter, *operations: str) -> list[ReadableSpan]:
    """The finished spans of these operations (a background embedder's sweep may add others), in order."""
    return [s for s in exporter.get_finished_spans() if (s.attributes or {}).get("db.operation.name") in operations]


def _database(dsn: str) -> tuple[str, str | None, int | None]:
    parts = conninfo_to_dict(dsn)
    port = parts.get("port")
    host = parts.get("host")
    return str(parts["dbname"]), str(host) if host else None, int(port) if port else None


def _check_common(span: ReadableSpan, dsn: str, operation: str) -> None:
    dbname, host, port = _database(dsn)
    attributes = span.attributes or {}
    assert span.kind == trace.SpanKind.CLIENT
    assert span.name == f"{operation} {dbname}.pgmem"  # {db.operation.name} {target}
    assert attributes["db.system.name"] == "postgresql"
    assert attributes["db.namespace"] == f"{dbname}.pgmem"
    assert attributes["db.operation.name"] == operation
    assert attributes["pgmem.namespace"] == "test"
    if host:
        assert attributes["server.address"] == host.split(",")[0]
    if port:
        assert attributes["server.port"] == port


def test_a_span_per_public_call(client: pgmem.Client, dsn: str, spans: InMemorySpanExporter) -> None:
    client.messages.add("chat:1", Message(content="hello"))
    client.messages.last("chat:1", 5)
    client.queues.push("jobs", Message(content="build"))
    items = client.queues.claim("jobs", n=2)
    client.queues.ack(items)
    hits = client.messages.search_text("chat:1", "hello")
    assert [h.content for h in hits] == ["hello"]

    operations = ["messages.add", "messages.last", "queues.push", "queues.claim", "queues.ack", "messages.search_text"]
    found = _ours(spans, *operations)
    assert [s.attributes["db.operation.name"] for s in found] == operations  # type: ignore[index]
    for span in found:
        _check_common(span, dsn, span.attributes["db.operation.name"])  # type: ignore[index, arg-type]
        assert span.status.is_ok and span.parent is None
    add, last, push, claim = found[:4]
    assert add.attributes["pgmem.memory"] == "chat:1"  # type: ignore[index]
    assert last.attributes["pgmem.memory"] == "chat:1" and last.attributes["pgmem.k"] == 5  # type: ignore[index]
    assert push.attributes["pgmem.queue"] == "jobs"  # type: ignore[index]
    assert claim.attributes["pgmem.queue"] == "jobs" and claim.attributes["pgmem.n"] == 2  # type: ignore[index]


def test_a_call_that_makes_another_is_its_parent(client: pgmem.Client, spans: InMemorySpanExporter) -> None:
    client.queues.subscribe("Bob")
    delivery = client.queues.publish("env", Message(content="for bob", send_to={"Bob"}))
    assert delivery.inboxes
    assert len(client.queues.inbox("Bob", n=5, timeout=0.5)) == 1  # waits through wait() and claim()

    inbox, wait, claim = (_ours(spans, op) for op in ("queues.inbox", "queues.wait", "queues.claim"))
    assert len(inbox) == len(wait) == 1 and claim
    assert wait[0].parent is not None and wait[0].parent.span_id == inbox[0].context.span_id
    assert all(c.parent is not None and c.parent.span_id == wait[0].context.span_id for c in claim)
    assert {s.context.trace_id for s in (*inbox, *wait, *claim)} == {inbox[0].context.trace_id}


def _everything(exporter: InMemorySpanExporter) -> str:
    """Every text a span carries: names, attributes, events, status."""
    parts: list[str] = []
    for span in exporter.get_finished_spans():
        parts += [span.name, repr(dict(span.attributes or {})), str(span.status.description)]
        parts += [repr(dict(event.attributes or {})) + event.name for event in span.events]
    return "\n".join(parts)


def test_no_content_or_secret_in_any_span(dsn: str, spans: InMemorySpanExporter) -> None:
    content, metadata, api_key, query = (secrets.token_hex(12) for _ in range(4))
    key = "sk-" + secrets.token_hex(24)
    with pgmem.connect(dsn, namespace="test", max_size=2) as client:
        message = Message(content=f"content {content}", metadata={"note": metadata, "key": key, api_key: 1})
        client.messages.add("chat:2", message)
        client.messages.search_text("chat:2", query)
        client.queues.push("jobs", Message(content=content), dedup_key=api_key)
        client.messages.get_messages([message.id])
        with pytest.raises(pgmem.Conflict):  # the same id stored with other content: the error names the id
            client.messages.add("chat:2", Message(id=message.id, content=f"other {query}"))
    text = _everything(spans)
    assert "messages.add" in text and "pgmem.Conflict" not in text  # recorded as pgmem.errors.Conflict
    for secret in (content, metadata, api_key, query, key, message.id, conninfo_to_dict(dsn).get("password")):
        if secret:
            assert str(secret) not in text


def test_a_failed_call_is_an_error_span_with_its_message_redacted(
    client: pgmem.Client, spans: InMemorySpanExporter
) -> None:
    hidden = "id-" + secrets.token_hex(8)
    client.messages.add("chat:3", Message(id=hidden, content="first"))
    with pytest.raises(pgmem.Conflict) as raised:
        client.messages.add("chat:3", Message(id=hidden, content="second"))
    assert hidden in str(raised.value)  # the caller sees it; the span must not

    failed = _ours(spans, "messages.add")[-1]
    assert failed.status.status_code == trace.StatusCode.ERROR
    assert failed.attributes["error.type"] == "pgmem.errors.Conflict"  # type: ignore[index]
    (event,) = failed.events
    assert event.name == "exception"
    assert event.attributes["exception.type"] == "pgmem.errors.Conflict"  # type: ignore[index]
    message = str(event.attributes["exception.message"])  # type: ignore[index]
    assert hidden not in message and "***" in message
    assert failed.status.description == f"Conflict: {message}"


def test_a_server_error_carries_its_sqlstate(dsn: str, spans: InMemorySpanExporter) -> None:
    with psycopg.connect(dsn) as conn, pgmem.connect(conn, namespace="test") as client:
        with pytest.raises(psycopg.errors.DivisionByZero):
            conn.execute("SELECT 1 / 0")  # the caller's transaction is now aborted
        with pytest.raises(pgmem.PgmemError) as raised:
            client.messages.count("chat:6")
        conn.rollback()
    assert raised.value.sqlstate == "25P02"
    (failed,) = _ours(spans, "messages.count")
    assert failed.status.status_code == trace.StatusCode.ERROR
    assert failed.attributes["db.response.status_code"] == "25P02"  # type: ignore[index]


@pytest.fixture
async def traced_aclient(dsn: str) -> AsyncIterator[pgmem.AsyncClient]:
    async with await pgmem.aconnect(dsn, namespace="test", max_size=2) as c:
        yield c


async def test_the_async_client_has_the_same_spans(
    traced_aclient: pgmem.AsyncClient, dsn: str, spans: InMemorySpanExporter
) -> None:
    client = traced_aclient
    await client.messages.add("chat:4", Message(content="hi"))
    await client.messages.last("chat:4", 3)
    await client.queues.push("jobs", Message(content="a"))
    await client.queues.claim("jobs")
    found = _ours(spans, "messages.add", "messages.last", "queues.push", "queues.claim")
    assert [s.attributes["db.operation.name"] for s in found] == [  # type: ignore[index]
        "messages.add",
        "messages.last",
        "queues.push",
        "queues.claim",
    ]
    for span in found:
        _check_common(span, dsn, span.attributes["db.operation.name"])  # type: ignore[index, arg-type]
    assert found[1].attributes["pgmem.k"] == 3  # type: ignore[index]


def test_no_span_without_a_tracer_provider(client: pgmem.Client) -> None:
    exporter = InMemorySpanExporter()  # not attached anywhere: the global provider is the API's proxy
    client.messages.add("chat:5", Message(content="x"))
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    assert exporter.get_finished_spans() == ()


# -- metrics ------------------------------------------------------------------------------------------------


def _points(reader: InMemoryMetricReader) -> dict[str, dict[tuple[tuple[str, Any], ...], int]]:
    data = reader.get_metrics_data()
    found: dict[str, dict[tuple[tuple[str, Any], ...], int]] = {}
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    found.setdefault(metric.name, {})[tuple(sorted((point.attributes or {}).items()))] = int(
                        point.value  # type: ignore[union-attr]
                    )
    return found


def _sql_counts(dsn: str) -> dict[str, dict[str, int]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT queue, count(*) FILTER (WHERE status = 'ready'),"
            " count(*) FILTER (WHERE status = 'ready' AND lease_until > now()),"
            " count(*) FILTER (WHERE status = 'dead')"
            " FROM pgmem.queue_items WHERE namespace = 'test' GROUP BY queue"
        ).fetchall()
        backlog = conn.execute(
            "SELECT m.name, count(*) FROM pgmem.embedding_outbox o JOIN pgmem.embedding_models m ON m.id = o.model_id"
            " WHERE o.namespace = 'test' GROUP BY m.name"
        ).fetchall()
    return {
        "pgmem.queue.depth": {q: d for q, d, _, _ in rows},
        "pgmem.queue.claimed": {q: c for q, _, c, _ in rows},
        "pgmem.queue.dead_letters": {q: x for q, _, _, x in rows},
        "pgmem.embedding.backlog": dict(backlog),
    }


def test_metrics_equal_what_sql_counts(dsn: str) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    # On a connection of the caller's the client embeds nothing in the background: the backlog stays.
    with psycopg.connect(dsn, autocommit=True) as conn, pgmem.connect(conn, namespace="test") as client:
        observation = telemetry.observe(client, meter_provider=provider)
        client.vectors.enable("docs")
        client.messages.add_many("docs", [Message(content=f"doc {i}") for i in range(3)])
        client.queues.push_many("jobs", [Message(content=f"job {i}") for i in range(5)])
        client.queues.push_many("mail", [Message(content=f"mail {i}") for i in range(2)])
        claimed = client.queues.claim("jobs", n=3)
        client.queues.nack(claimed[0], dead=True)  # a dead letter
        client.queues.ack(claimed[1])  # archived: no longer counted

        points = _points(reader)
        expected = _sql_counts(dsn)
        assert expected["pgmem.queue.depth"] == {"jobs": 3, "mail": 2}
        assert expected["pgmem.queue.claimed"] == {"jobs": 1, "mail": 0}
        assert expected["pgmem.queue.dead_letters"] == {"jobs": 1, "mail": 0}
        assert sum(expected["pgmem.embedding.backlog"].values()) == 3
        for name, by_name in expected.items():
            label = "pgmem.model" if name == "pgmem.embedding.backlog" else "pgmem.queue"
            assert points[name] == {
                tuple(sorted({"pgmem.namespace": "test", label: k}.items())): v for k, v in by_name.items()
            }

        client.vectors.embed_pending()  # the backlog drains; the next collection reads it again
        assert not any(_points(reader).get("pgmem.embedding.backlog", {}).values())
        observation.close()
        assert all(not v for v in _points(reader).values())  # closed: nothing reported
    provider.shutdown()


async def test_metrics_refuse_an_async_client(traced_aclient: pgmem.AsyncClient) -> None:
    with pytest.raises(pgmem.InvalidInput, match="sync client"):
        telemetry.observe(traced_aclient, meter_provider=MeterProvider())  # type: ignore[arg-type]
