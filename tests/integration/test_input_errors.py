"""Bad input gets a typed error and leaves every table unchanged."""

from __future__ import annotations

import math
from typing import Any

import psycopg
import pytest

import pgmem
from pgmem.integrations.metagpt import Memory
from tests.conftest import table_counts

NUL = "a\x00b"
SURROGATE = "a\ud800b"


def _seed(client: pgmem.Client) -> None:
    client.messages.add_many("seed", [pgmem.Message(content=f"seed {i}") for i in range(3)])


BAD_MESSAGES: list[tuple[str, dict[str, Any]]] = [
    ("nul in content", {"content": NUL}),
    ("surrogate in content", {"content": SURROGATE}),
    ("nul in role", {"content": "x", "role": NUL}),
    ("surrogate in cause_by", {"content": "x", "cause_by": SURROGATE}),
    ("nul in sent_from", {"content": "x", "sent_from": NUL}),
    ("nul in send_to", {"content": "x", "send_to": {"ok", NUL}}),
    ("nul in name", {"content": "x", "name": NUL}),
    ("surrogate in tool_call_id", {"content": "x", "tool_call_id": SURROGATE}),
    ("nul in metadata value", {"content": "x", "metadata": {"k": NUL}}),
    ("nul in metadata key", {"content": "x", "metadata": {NUL: 1}}),
    ("surrogate in metadata", {"content": "x", "metadata": {"k": [SURROGATE]}}),
    ("NaN in metadata", {"content": "x", "metadata": {"k": math.nan}}),
    ("inf in metadata", {"content": "x", "metadata": {"k": math.inf}}),
    ("object in metadata", {"content": "x", "metadata": {"k": object()}}),
    ("bytes in metadata", {"content": "x", "metadata": {"k": b"raw"}}),
    ("nul in instruct_content", {"content": "x", "instruct_content": {"k": NUL}}),
    ("nul in tool_calls", {"content": "x", "tool_calls": [{"id": NUL}]}),
    ("content too large", {"content": "x" * (pgmem.MAX_CONTENT_BYTES + 1)}),
    ("multibyte content too large", {"content": "é" * (pgmem.MAX_CONTENT_BYTES // 2 + 1)}),
    ("metadata too large", {"content": "x", "metadata": {"k": "y" * pgmem.MAX_JSON_BYTES}}),
    ("role too long", {"content": "x", "role": "r" * (pgmem.MAX_NAME_CHARS + 1)}),
    ("bad id characters", {"content": "x", "id": "has space"}),
    ("id with reserved ~", {"content": "x", "id": "0~abc"}),
    ("id too long", {"content": "x", "id": "i" * 129}),
]


@pytest.mark.parametrize(("case", "fields"), BAD_MESSAGES, ids=[c for c, _ in BAD_MESSAGES])
def test_bad_message_is_rejected_and_nothing_written(
    client: pgmem.Client, dsn: str, case: str, fields: dict[str, Any]
) -> None:
    _seed(client)
    before = table_counts(dsn)
    message = pgmem.Message(**fields)
    with pytest.raises(pgmem.InvalidInput):
        client.messages.add("m", message)
    # The same message in the middle and at the end of a batch rejects the whole batch.
    good = [pgmem.Message(content=f"good {i}") for i in range(10)]
    with pytest.raises(pgmem.InvalidInput, match="message 5"):
        client.messages.add_many("m", good[:5] + [message] + good[5:])
    with pytest.raises(pgmem.InvalidInput, match="message 5"):
        client.messages.append("m", good[:5] + [message] + good[5:])
    with pytest.raises(pgmem.InvalidInput):
        client.queues.push("q", message)
    with pytest.raises(pgmem.InvalidInput):
        client.queues.publish("team", message)
    assert table_counts(dsn) == before


def test_limits_are_inclusive(client: pgmem.Client) -> None:
    at_limit = [
        pgmem.Message(content="x" * pgmem.MAX_CONTENT_BYTES),
        pgmem.Message(content="x", role="r" * pgmem.MAX_NAME_CHARS),
        # {"k":"..."} is 8 bytes of JSON around the value.
        pgmem.Message(content="x", metadata={"k": "y" * (pgmem.MAX_JSON_BYTES - 8)}),
    ]
    assert client.messages.add_many("limits", at_limit) == 3
    stored = client.messages.last("limits")
    assert len(stored[0].content) == pgmem.MAX_CONTENT_BYTES
    assert len(stored[2].metadata["k"]) == pgmem.MAX_JSON_BYTES - 8
    fresh = [pgmem.Message(content=m.content, role=m.role, metadata=m.metadata) for m in at_limit]
    assert client.messages.append("limits", fresh) == 3
    assert [(m.content, m.role, m.metadata) for m in client.messages.last("limits", 3)] == [
        (m.content, m.role, m.metadata) for m in at_limit
    ]


def test_invalid_message_last_in_a_large_batch(client: pgmem.Client, dsn: str) -> None:
    before = table_counts(dsn)
    batch = [pgmem.Message(content=f"m{i}") for i in range(10_000)] + [pgmem.Message(content=NUL)]
    with pytest.raises(pgmem.InvalidInput, match="message 10000"):
        client.messages.add_many("big", batch)
    assert table_counts(dsn) == before


@pytest.mark.parametrize("namespace", ["", "has space", "-lead", "ns;drop", "n" * 64, "ns\x00", "é"])
def test_bad_namespace(dsn: str, namespace: str) -> None:
    with pytest.raises(pgmem.InvalidInput):
        pgmem.connect(dsn, namespace=namespace)
    with pgmem.connect(dsn, namespace="ok") as client, pytest.raises(pgmem.InvalidInput):
        client.with_namespace(namespace)


@pytest.mark.parametrize("key", ["", " ", "a b", "k" * 256, "x'; DROP TABLE pgmem.messages; --", "\x00", "é"])
def test_bad_memory_key(client: pgmem.Client, dsn: str, key: str) -> None:
    before = table_counts(dsn)
    for call in (
        lambda: client.messages.add(key, pgmem.Message(content="x")),
        lambda: client.messages.add_many(key, [pgmem.Message(content="x")]),
        lambda: client.messages.append(key, [pgmem.Message(content="x")]),
        lambda: client.messages.last(key),
        lambda: client.messages.clear(key),
        lambda: client.queues.push(key, pgmem.Message(content="x")),
    ):
        with pytest.raises(pgmem.InvalidInput):
            call()
    assert table_counts(dsn) == before


def test_wrong_types_and_ranges(client: pgmem.Client, dsn: str) -> None:
    before = table_counts(dsn)
    with pytest.raises(pgmem.InvalidInput):
        client.messages.add("m", "just a string")  # type: ignore[arg-type]
    with pytest.raises(pgmem.InvalidInput):
        client.messages.add_many("m", [pgmem.Message(content="ok"), {"content": "dict"}])  # type: ignore[list-item]
    for bad_k in (-1, 1.5, True, "3"):
        with pytest.raises(pgmem.InvalidInput):
            client.messages.last("m", bad_k)  # type: ignore[arg-type]
    with pytest.raises(pgmem.InvalidInput):
        client.messages.at("m", "0")  # type: ignore[arg-type]
    with pytest.raises(pgmem.InvalidInput):
        client.messages.search_text("m", "q", limit=0)
    with pytest.raises(pgmem.InvalidInput):
        client.messages.by_content("m", NUL)
    with pytest.raises(pgmem.InvalidInput):
        client.messages.trim("m", -1)
    with pytest.raises(pgmem.InvalidInput):
        Memory(client=client).add(42)
    assert table_counts(dsn) == before


def test_malformed_message_fields_are_pydantic_errors() -> None:
    with pytest.raises(ValueError):
        pgmem.Message(content=123)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        pgmem.Message(content="x", metadata="not a dict")  # type: ignore[arg-type]


def test_closed_client(dsn: str) -> None:
    client = pgmem.connect(dsn, namespace="test")
    memory = Memory("m", client=client)
    client.close()
    client.close()  # idempotent
    assert client.closed
    with pytest.raises(pgmem.ClientClosed):
        client.messages.add("m", pgmem.Message(content="x"))
    with pytest.raises(pgmem.ClientClosed):
        client.messages.count("m")
    with pytest.raises(pgmem.ClientClosed):
        memory.get()
    with pytest.raises(pgmem.ClientClosed):
        client.queues.push("q", pgmem.Message(content="x"))


async def test_closed_async_client(dsn: str) -> None:
    client = await pgmem.aconnect(dsn, namespace="test")
    await client.close()
    with pytest.raises(pgmem.ClientClosed):
        await client.messages.add("m", pgmem.Message(content="x"))


def test_closed_caller_connection(client: pgmem.Client, dsn: str) -> None:
    conn = psycopg.connect(dsn)
    conn.close()
    with pytest.raises(pgmem.ClientClosed):
        client.messages.add("m", pgmem.Message(content="x"), connection=conn)


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://alice:s3cretpw@127.0.0.1:1/db",
        "host=127.0.0.1 port=1 dbname=db user=alice password=s3cretpw",
    ],
)
def test_unreachable_dsn_names_host_and_cause_not_password(dsn: str) -> None:
    with pytest.raises(pgmem.ConnectionFailed) as info:
        pgmem.connect(dsn)
    message = str(info.value)
    assert "127.0.0.1" in message and "s3cretpw" not in message
    assert "refused" in message.lower() or "connect" in message.lower()


async def test_unreachable_dsn_async() -> None:
    with pytest.raises(pgmem.ConnectionFailed) as info:
        await pgmem.aconnect("postgresql://alice:s3cretpw@127.0.0.1:1/db")
    assert "s3cretpw" not in str(info.value)


def test_error_tree() -> None:
    for cls in (
        pgmem.InvalidInput,
        pgmem.NotFound,
        pgmem.Conflict,
        pgmem.SchemaOutOfDate,
        pgmem.ConnectionFailed,
        pgmem.ClientClosed,
    ):
        assert issubclass(cls, pgmem.PgmemError)
    assert issubclass(pgmem.InvalidInput, ValueError)


# -- secrets: nothing pgmem prints, logs, raises or reprs holds a password or an API key -----------------

BAD_URL = "postgresql://alice:S3cret%zz@h/db"  # a password with a bad percent-escape: libpq cannot parse it


def _with_password(dsn: str, password: str) -> str:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    return make_conninfo(**{**conninfo_to_dict(dsn), "password": password})


def _all_text(exc: BaseException) -> str:
    import traceback

    return "".join(traceback.format_exception(exc)) + repr(exc)


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (BAD_URL, "S3cret"),
        ("host=h password='bob S3cret pw' dbname=x", "S3cret"),
        ("host=h password='it\\'s S3cret' dbname=x", "S3cret"),
        ("host=h password='unterminated S3cret", "S3cret"),
        ("postgresql://a:p@ss-S3cret@h:5432/db?sslmode=require", "S3cret"),
        ("postgresql://h/db?user=u&password=S3cret&sslmode=disable", "S3cret"),
        ("{'host': 'h', 'password': 'S3cret pw'}", "S3cret"),
        ('{"password": "S3cret"}', "S3cret"),
        ("PGPASSWORD=S3cret psql", "S3cret"),
        ("OPENAI_API_KEY=sk-proj-S3cretS3cret openai", "S3cret"),
        ("Incorrect API key provided: sk-S3cretS3cretS3cret.", "S3cret"),
    ],
)
def test_redact_every_form(text: str, secret: str) -> None:
    from pgmem.errors import redact

    assert secret not in redact(text)


def test_unparsable_dsn_is_invalid_input_without_the_password() -> None:
    """The issue's DSN raised psycopg's ProgrammingError quoting "S3cret%zz"."""
    for dsn in (BAD_URL, "host=h password='bob S3cret pw"):
        with pytest.raises(pgmem.InvalidInput) as info:
            pgmem.connect(dsn)
        assert "S3cret" not in _all_text(info.value)
        assert info.value.__cause__ is None and info.value.__suppress_context__


async def test_unparsable_dsn_async() -> None:
    with pytest.raises(pgmem.InvalidInput) as info:
        await pgmem.aconnect(BAD_URL)
    assert "S3cret" not in _all_text(info.value)


def test_client_conninfo_and_settings_repr_hide_the_password(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The test server trusts local connections, so a password in the DSN is accepted and ignored.
    secret_dsn = _with_password(dsn, "bob S3cret pw")
    with pgmem.connect(secret_dsn, namespace="s") as client:
        assert "S3cret" not in (client.conninfo or "") and "password" in (client.conninfo or "")
        assert "S3cret" not in repr(client) and "S3cret" not in repr(client.with_namespace("t").conninfo)
        # The one for opening connections (the FAISS cache's) keeps it.
        assert "S3cret" in (client.secret_conninfo() or "")
        assert client.with_namespace("t").secret_conninfo() == client.secret_conninfo()
        # The real one still opens connections: a queue consumer waits on its own LISTEN connection.
        client.queues.push("q", pgmem.Message(content="hello"))
        assert [i.message.content for i in client.queues.wait("q", timeout=5.0)] == ["hello"]
    # A password from the environment (PGPASSWORD) reaches a client built on the caller's connection.
    monkeypatch.setenv("PGPASSWORD", "S3cretFromEnv")
    with psycopg.connect(dsn) as conn:
        client = pgmem.connect(conn, namespace="s")
        assert "S3cretFromEnv" not in (client.conninfo or "")
        assert "S3cretFromEnv" in (client.secret_conninfo() or "")
    monkeypatch.setenv("PGMEM_DSN", secret_dsn)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-S3cretS3cretS3cret")
    assert "S3cret" not in repr(pgmem.settings.get_settings())


def test_cli_never_prints_the_password(dsn: str) -> None:
    import subprocess
    import sys

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pgmem.ops.cli", *args], capture_output=True, text=True, timeout=120
        )

    bad = run("migrate", "--dsn", BAD_URL)
    assert bad.returncode == 1 and "InvalidInput" in bad.stderr
    assert "Traceback" not in bad.stderr and "S3cret" not in bad.stdout + bad.stderr
    good = run("migrate", "--dsn", _with_password(dsn, "bob S3cret pw"))
    assert good.returncode == 0, good.stderr
    assert "schema at revision" in good.stdout and "S3cret" not in good.stdout + good.stderr
    unreachable = run("migrate", "--dsn", "host=127.0.0.1 port=1 user=alice password='bob S3cret pw'")
    assert unreachable.returncode == 1 and "S3cret" not in unreachable.stdout + unreachable.stderr


def test_embedding_failure_logged_and_stored_without_the_key(
    client: pgmem.Client, caplog: pytest.LogCaptureFixture
) -> None:
    from pgmem.embeddings import HashingEmbedder

    class LeakyEmbedder(HashingEmbedder):
        def embed(self, texts: Any) -> Any:
            raise RuntimeError("Incorrect API key provided: sk-S3cretS3cretS3cret (api_key=sk-S3cretS3cretS3cret)")

        async def aembed(self, texts: Any) -> Any:
            return self.embed(texts)

    embedder = LeakyEmbedder()
    client.vectors.enable("m", embedder)
    client.messages.add("m", pgmem.Message(content="hello"))
    report = client.vectors.flush(embedder)  # the background worker may have failed the batch first
    assert "S3cret" not in " ".join(report.errors) + caplog.text
    assert "Incorrect API key provided: sk-***" in caplog.text
    with psycopg.connect(client._conninfo or "") as conn:
        stored = conn.execute("SELECT string_agg(last_error, ' ') FROM pgmem.embedding_outbox").fetchone()
    assert stored is not None and "sk-***" in stored[0] and "S3cret" not in stored[0]


# -- mixed versions: a database a newer pgmem migrated -----------------------------------------------------


def test_database_migrated_by_a_newer_pgmem(dsn: str) -> None:
    import subprocess
    import sys

    from pgmem.ops import migrate
    from pgmem.revision import SCHEMA_REVISION

    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE pgmem.alembic_version SET version_num = '0099'")
    for call in (
        lambda: pgmem.connect(dsn),
        lambda: pgmem.connect(dsn, migrate=False),
        lambda: migrate.upgrade(dsn),
    ):
        with pytest.raises(pgmem.SchemaTooNew) as info:
            call()
        assert "0099" in str(info.value) and SCHEMA_REVISION in str(info.value) and "upgrade pgmem" in str(info.value)
        assert isinstance(info.value, pgmem.SchemaOutOfDate)
    cli = subprocess.run(
        [sys.executable, "-m", "pgmem.ops.cli", "migrate", "--dsn", dsn], capture_output=True, text=True, timeout=120
    )
    assert cli.returncode == 1 and "SchemaTooNew" in cli.stderr and "0099" in cli.stderr
    assert "Traceback" not in cli.stderr
    with psycopg.connect(dsn) as conn:  # nothing was changed
        assert conn.execute("SELECT version_num FROM pgmem.alembic_version").fetchone() == ("0099",)


async def test_database_migrated_by_a_newer_pgmem_async(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE pgmem.alembic_version SET version_num = '0099'")
    with pytest.raises(pgmem.SchemaTooNew):
        await pgmem.aconnect(dsn)


# -- vectors: none that cosine cannot score ------------------------------------------------------------


class _FixedEmbedder:
    """Every text gets the same vector (a test's chosen bad one)."""

    def __init__(self, vector: list[float], model: str) -> None:
        self.vector = vector
        self.dimension = len(vector)
        self.model = model

    def embed(self, texts: Any) -> Any:
        import numpy as np

        return np.array([self.vector] * len(texts), dtype=np.float32)

    async def aembed(self, texts: Any) -> Any:
        return self.embed(texts)


def test_default_embedder_gives_every_text_a_direction(client: pgmem.Client) -> None:
    """ "", "!!!" and "the a of" were zero vectors: stored, then returned by every search with score NaN."""
    import numpy as np

    from pgmem.embeddings import HashingEmbedder

    texts = ["", "!!!", "the a of", "?", "a snake game", "the"]
    vectors = HashingEmbedder().embed(texts)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    client.vectors.enable("m")
    client.messages.add_many("m", [pgmem.Message(content=t) for t in texts])
    report = client.vectors.flush()
    assert not report.errors and report.remaining == 0
    for query in texts:
        hits = client.search(query, memory="m", k=len(texts))
        assert len(hits) == len(texts)
        assert all(math.isfinite(h.score) for h in hits), [(h.message.content, h.score) for h in hits]
        assert hits[0].message.content == query and hits[0].score == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize(
    ("vector", "reason"),
    [([0.0, 0.0, 0.0, 0.0], "is zero"), ([1e-25, 0.0, 0.0, 0.0], "is zero"), ([1e38, 1e38, 0.0, 0.0], "overflows")],
)
def test_vectors_cosine_cannot_score_are_refused(
    client: pgmem.Client, dsn: str, vector: list[float], reason: str
) -> None:
    """A zero vector, one whose float32 squares underflow, and [1e38, 1e38, 0, 0] (finite, but its squared
    length overflows float32: it scored 0.0 against itself) are refused at write, from any embedder, and
    as a query vector."""
    client.vectors.enable("ok", _FixedEmbedder([1.0, 0.0, 0.0, 0.0], "fixed-ok"))
    client.messages.add("ok", pgmem.Message(content="fine"))
    assert not client.vectors.flush(_FixedEmbedder([1.0, 0.0, 0.0, 0.0], "fixed-ok")).errors
    bad = _FixedEmbedder(vector, "fixed-bad")
    client.vectors.enable("m", bad)
    client.messages.add("m", pgmem.Message(content="x"))
    report = client.vectors.flush(bad)
    with psycopg.connect(dsn) as conn:
        stored = conn.execute(
            "SELECT count(*) FROM pgmem.embeddings e JOIN pgmem.embedding_models m ON m.id = e.model_id "
            "WHERE m.name = 'fixed-bad'"
        ).fetchone()
        error = conn.execute("SELECT string_agg(last_error, ' ') FROM pgmem.embedding_outbox").fetchone()
    assert stored == (0,)
    assert error is not None and "EmbeddingError" in error[0] and reason in error[0], (report, error)
    with pytest.raises(pgmem.InvalidInput, match=reason):
        client.search(vector=vector, memory="ok", k=1)
    with pytest.raises(pgmem.InvalidInput, match=reason):
        client.search(vector=vector, k=1, embedder=_FixedEmbedder([1.0, 0.0, 0.0, 0.0], "fixed-ok"))
    from pgmem.embeddings import check_vectors

    with pytest.raises(pgmem.EmbeddingError, match=f"vector 1 .*{reason}"):
        check_vectors([[1.0, 0.0, 0.0, 0.0], vector], 2, 4, "m")


# -- naive created_at -----------------------------------------------------------------------------------


def test_naive_created_at_is_utc_whatever_the_server_time_zone(dsn: str) -> None:
    """A created_at without a time zone is UTC (documented on Message); it was read in the server
    session's TimeZone (here UTC+14)."""
    from datetime import UTC, datetime

    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    far_east = make_conninfo(**{**conninfo_to_dict(dsn), "options": "-c TimeZone=Pacific/Kiritimati"})
    naive = datetime(2026, 1, 1, 12, 0, 0)
    with pgmem.connect(far_east, namespace="tz") as client:
        late = pgmem.Message(id="late", content="assigned later")
        late.created_at = naive  # attributes are checked again when written
        client.messages.add_many(
            "m",
            [
                pgmem.Message(id="naive", content="naive", created_at=naive),
                pgmem.Message(id="iso", content="iso", created_at="2026-01-01T12:00:00"),
                pgmem.Message(id="aware", content="aware", created_at=naive.replace(tzinfo=UTC)),
                late,
            ],
        )
        client.messages.add("one", pgmem.Message(id="single", content="one", created_at=naive))
        client.messages.append("one", [pgmem.Message(id="appended", content="two", created_at=naive)])
        got = {m.id: m.created_at for m in client.messages.last("m") + client.messages.last("one")}
    assert set(got) == {"naive", "iso", "aware", "late", "single", "appended"}
    assert all(value == naive.replace(tzinfo=UTC) for value in got.values()), got
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT DISTINCT to_char(created_at AT TIME ZONE 'UTC', 'HH24:MI') FROM pgmem.messages")
        assert rows.fetchall() == [("12:00",)]
    bad = pgmem.Message(content="x")
    bad.created_at = "yesterday"  # type: ignore[assignment]
    with pgmem.connect(dsn, namespace="tz") as client, pytest.raises(pgmem.InvalidInput, match="created_at"):
        client.messages.add("m", bad)


# -- a message id stored with other content ------------------------------------------------------------


def test_re_adding_an_id_with_other_content_is_a_conflict(client: pgmem.Client, dsn: str) -> None:
    """It returned True and the second memory then served the first content (errors.py promised Conflict)."""
    assert client.messages.add("m1", pgmem.Message(id="n1", content="first"))
    before = table_counts(dsn)
    with pytest.raises(pgmem.Conflict, match="'n1' is already stored with other content"):
        client.messages.add("m2", pgmem.Message(id="n1", content="second"))
    with pytest.raises(pgmem.Conflict, match="n1"):
        client.messages.add_many("m2", [pgmem.Message(id="new", content="x"), pgmem.Message(id="n1", content="2nd")])
    with pytest.raises(pgmem.Conflict, match="repeated in the batch"):
        client.messages.add_many("m3", [pgmem.Message(id="d", content="a"), pgmem.Message(id="d", content="b")])
    with psycopg.connect(dsn) as conn:
        with pytest.raises(pgmem.Conflict):
            client.messages.add("m2", pgmem.Message(id="n1", content="second"), connection=conn)
        conn.rollback()
    assert table_counts(dsn) == before  # no memory m2 or m3, no message "new" or "d"
    # The same id with the same content stays idempotent, in another memory too; other fields are the first's.
    assert client.messages.add("m2", pgmem.Message(id="n1", content="first", role="other"))
    assert not client.messages.add("m2", pgmem.Message(id="n1", content="first"))
    assert client.messages.add_many("m3", [pgmem.Message(id="n1", content="first")] * 2) == 1
    assert [(m.content, m.role) for m in client.messages.last("m2")] == [("first", "user")]


def test_a_conflict_names_the_first_ids_and_how_many(client: pgmem.Client, dsn: str) -> None:
    """A batch of hundreds of clashing ids gives an error message of a readable length, not every id."""
    client.messages.add_many("m1", [pgmem.Message(id=f"c{i:03}", content="first") for i in range(300)])
    before = table_counts(dsn)
    with pytest.raises(pgmem.Conflict) as raised:
        client.messages.add_many("m2", [pgmem.Message(id=f"c{i:03}", content="second") for i in range(300)])
    assert "c000, c001" in str(raised.value) and "(300 in all)" in str(raised.value)
    assert len(str(raised.value)) < 300 and "c299" not in str(raised.value)
    assert table_counts(dsn) == before


def _race_with_an_uncommitted_write(dsn: str, hold: Any, contend: Any) -> object:
    """``hold(holder_client, holder_conn)`` writes in a transaction left open; ``contend()`` runs meanwhile in
    a thread, must be waiting on that transaction, and finishes once it commits. Returns what ``contend``
    returned or raised."""
    import threading

    outcome: list[object] = []

    def other() -> None:
        try:
            outcome.append(contend())
        except pgmem.PgmemError as exc:
            outcome.append(exc)

    with psycopg.connect(dsn) as holder:
        hold(pgmem.connect(holder, namespace="test"), holder)
        thread = threading.Thread(target=other)
        thread.start()
        thread.join(1.0)
        assert thread.is_alive()  # waiting on the uncommitted row
        holder.commit()
        thread.join(30)
    assert len(outcome) == 1
    return outcome[0]


@pytest.mark.parametrize("same", [True, False])
def test_concurrent_adds_of_one_new_id(client: pgmem.Client, dsn: str, same: bool) -> None:
    """A transaction holds an uncommitted message; another process's add of the same id waits for it, then
    passes when the contents are the same and raises Conflict when they differ (the content is checked
    against the row that won, not the snapshot that could not see it)."""
    client.messages.add("m0", pgmem.Message(id="warm", content="w"))  # the pool is connected
    outcome = _race_with_an_uncommitted_write(
        dsn,
        lambda held, conn: held.messages.add("held", pgmem.Message(id="race", content="a"), connection=conn),
        lambda: client.messages.add("m", pgmem.Message(id="race", content="a" if same else "b")),
    )
    if same:
        assert outcome is True
        assert [m.content for m in client.messages.last("m")] == ["a"]
    else:
        assert isinstance(outcome, pgmem.Conflict), outcome
        assert client.messages.last("m") == []


# -- the same rule for the writes of queues: push, push_many, publish --------------------------------


def _queue_writes(client: pgmem.Client) -> dict[str, Any]:
    """Each queue write of one message (or a batch holding it), as a function of the message."""
    client.queues.subscribe("bob", addresses=["Bob"])
    return {
        "push": lambda m: client.queues.push("jobs", m),
        "push with an idempotency key": lambda m: client.queues.push("jobs", m, idempotency_key=f"k-{m.content}"),
        "push_many": lambda m: client.queues.push_many("jobs", [pgmem.Message(id="fresh", content="f"), m]),
        "publish": lambda m: client.queues.publish("env", m),
    }


@pytest.mark.parametrize("write", ["push", "push with an idempotency key", "push_many", "publish"])
def test_a_queue_write_of_an_id_stored_with_other_content_is_a_conflict(
    client: pgmem.Client, dsn: str, write: str
) -> None:
    """A push of an id already stored enqueued the stored message, so its consumer got the first content."""
    run = _queue_writes(client)[write]
    client.messages.add("m1", pgmem.Message(id="n1", content="first", send_to={"Bob"}))
    before = table_counts(dsn)
    with pytest.raises(pgmem.Conflict, match="n1"):
        run(pgmem.Message(id="n1", content="second", send_to={"Bob"}))
    assert table_counts(dsn) == before  # no item, no delivery, no message "fresh", no idempotency key
    # The same id with the same content is the stored message, enqueued again.
    run(pgmem.Message(id="n1", content="first", send_to={"Bob"}))
    queue = "inbox:bob" if write == "publish" else "jobs"
    assert [i.message.content for i in client.queues.peek(queue, 10) if i.message.id == "n1"] == ["first"]


def test_a_batch_push_repeating_an_id_with_other_contents_is_a_conflict(client: pgmem.Client, dsn: str) -> None:
    before = table_counts(dsn)
    with pytest.raises(pgmem.Conflict, match="repeated in the batch.*: d;"):
        client.queues.push_many("jobs", [pgmem.Message(id="d", content="a"), pgmem.Message(id="d", content="b")])
    assert table_counts(dsn) == before
    assert len(client.queues.push_many("jobs", [pgmem.Message(id="d", content="a")] * 2)) == 2


@pytest.mark.parametrize("same", [True, False])
def test_concurrent_pushes_of_one_new_id(client: pgmem.Client, dsn: str, same: bool) -> None:
    """As for add: a push waiting on another transaction's uncommitted message of the same id enqueues
    when the contents are the same and raises Conflict when they differ."""
    client.queues.push("warm", pgmem.Message(id="warm", content="w"))  # the pool is connected
    outcome = _race_with_an_uncommitted_write(
        dsn,
        lambda held, conn: held.queues.push("jobs", pgmem.Message(id="race", content="a"), connection=conn),
        lambda: client.queues.push("jobs", pgmem.Message(id="race", content="a" if same else "b")),
    )
    contents = [i.message.content for i in client.queues.peek("jobs", 10)]
    if same:
        assert outcome.created and contents == ["a", "a"]  # type: ignore[attr-defined]
    else:
        assert isinstance(outcome, pgmem.Conflict), outcome
        assert contents == ["a"]


# -- what the database refuses is one of pgmem's errors, whatever it is ---------------------------------


def test_every_driver_error_comes_out_as_a_pgmem_error(dsn: str) -> None:
    """Errors translate() had no rule for (a refused value, an error raised by a function or trigger, a
    statement the server cannot run) left pgmem as raw psycopg errors."""
    from psycopg import errors as pg_errors

    from pgmem.errors import translate

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TEMP TABLE positive (x int CHECK (x > 0))")
        cases: list[tuple[str, type[pgmem.PgmemError], str, type[Exception]]] = [
            ("SELECT 1 / 0", pgmem.InvalidInput, "division by zero", pg_errors.DivisionByZero),
            ("INSERT INTO positive VALUES (-1)", pgmem.InvalidInput, "check constraint", pg_errors.CheckViolation),
            (
                "DO $$BEGIN RAISE EXCEPTION 'boom'; END$$",
                pgmem.PgmemError,
                "boom .SQLSTATE P0001",
                pg_errors.RaiseException,
            ),
            ("SELEC 1", pgmem.PgmemError, "syntax error", pg_errors.SyntaxError),
        ]
        for statement, kind, message, cause in cases:
            with pytest.raises(kind, match=message) as raised, translate():
                conn.execute(statement)
            assert isinstance(raised.value.__cause__, cause), statement
