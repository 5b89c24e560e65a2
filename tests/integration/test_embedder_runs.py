"""Which writes start a run of the client's background embedder, and what a run that claims nothing reads.

A write to a memory with embedding models starts the writing client's embedder after commit. A client with
no embedder for any of the models the write queued (a publisher beside a process that embeds) starts none:
each run read the outbox for nothing, on the connection the writer waits for, and ran the orphan purge,
which read the namespace's whole queue (benchmarks/writers.py, publish: 222 against 1,100 publishes/s by
hand on one connection). The purge reads only the available rows of the models a run tried.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
import pytest

import pgmem
from pgmem import Message
from pgmem.embeddings import HashingEmbedder, Vectors
from pgmem.errors import EmbeddingError


class Other(HashingEmbedder):
    """An offline embedder under another model's name, and a switch that makes it fail like a lost API."""

    def __init__(self) -> None:
        super().__init__(384)
        self.model = "other-model"
        self.down = False

    def embed(self, texts: Sequence[str]) -> Vectors:
        if self.down:
            raise EmbeddingError("provider unreachable (test)")
        return super().embed(texts)


def _count_runs(client: pgmem.Client, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the runs of ``client``'s background embedder (its outbox's embed_pending, which every run calls)."""
    outbox = client.vectors.outbox
    runs: list[int] = []
    real = outbox.embed_pending

    def counted(*args: Any, **kwargs: Any) -> Any:
        runs.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(outbox, "embed_pending", counted)
    return runs


def _queued(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM pgmem.embedding_outbox").fetchone()
    assert row is not None
    return int(row[0])


def test_writes_queued_only_for_models_a_client_cannot_embed_start_no_run(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = Other()
    with (
        pgmem.connect(dsn, namespace="test", embedder=other) as embedder,
        pgmem.connect(dsn, namespace="test") as writer,  # the offline default: not the memory's model
    ):
        embedder.vectors.enable("team")
        embedder.vectors.wait()  # its own run (the backfill of enable) is over: nothing else wakes it
        writer.queues.subscribe("bob")
        runs = _count_runs(writer, monkeypatch)
        writer.messages.add("team", Message(id="first", content="the first write", send_to={"bob"}))
        writer.vectors.wait()
        assert runs == [1]  # a model this client had not seen: one run, which learns it cannot embed it
        writer.messages.add("team", Message(id="a", content="an add"))
        writer.messages.add_many("team", [Message(id="b", content="a batch"), Message(id="c", content="of two")])
        writer.messages.append("team", [Message(id="d", content="an append")])
        writer.queues.publish("team", Message(id="e", content="a publish", send_to={"bob"}))
        writer.messages.remember("team", Message(id="f", content="a remembered note"), threshold=0.05)
        writer.vectors.wait()
        assert runs == [1]
        assert writer.vectors.pending("team") == {other.model: 7}
        # The process with the model's embedder embeds them all.
        report = embedder.vectors.embed_pending()
        assert (report.embedded, report.remaining) == (7, 0)
        # Once the client has an embedder for the model, its writes start its runs again and are embedded.
        writer.vectors.registry.embedder(Other())
        writer.messages.add("team", Message(id="g", content="now embedded by the writer"))
        writer.vectors.wait()
        assert runs == [1, 1]
        assert writer.vectors.pending("team") == {}
        assert [h.message.id for h in writer.search("now embedded by the writer", memory="team", k=1)] == ["g"]


def test_a_write_to_a_memory_with_a_model_of_its_own_still_starts_a_run(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beside a memory of a model it cannot embed, a client's writes to a memory of its own model are
    embedded by its own runs."""
    with (
        pgmem.connect(dsn, namespace="test", embedder=Other()) as embedder,
        pgmem.connect(dsn, namespace="test") as writer,
    ):
        embedder.vectors.enable("team")
        embedder.vectors.wait()  # its own run (the backfill of enable) is over: nothing else wakes it
        writer.messages.add("team", Message(id="first", content="learn the model"))
        writer.vectors.wait()
        writer.vectors.enable("mine")  # the writer's own offline model
        runs = _count_runs(writer, monkeypatch)
        writer.messages.add("mine", Message(id="a", content="mine to embed"))
        writer.vectors.wait()
        assert runs  # a run, and one more when the first embedded something
        assert writer.vectors.pending("mine") == {}


def test_the_orphan_purge_reads_only_available_rows_of_the_models_tried(dsn: str) -> None:
    other = Other()
    with (
        pgmem.connect(dsn, namespace="test", embedder=other) as embedder,
        pgmem.connect(dsn, namespace="test") as writer,
    ):
        embedder.vectors.enable("team")
        embedder.vectors.wait()  # its own run (the backfill of enable) is over: nothing else wakes it
        other.down = True
        embedder.messages.add_many("team", [Message(id=f"x{i}", content=f"queued {i}") for i in range(3)])
        embedder.vectors.wait()  # the background run failed: the three rows wait out a backoff
        embedder.messages.delete("team", "x1")  # its queued row is left behind (the outbox has no foreign key)
        # A client with no embedder for the model purges none of its rows; neither does a run whose rows all
        # wait out their backoff: the orphan is still queued.
        writer.vectors.embed_pending()
        report = embedder.vectors.embed_pending()
        assert report.embedded + report.failed == 0
        assert _queued(dsn) == 3
        # Available again (retried now), the batch is embedded; the next run that claims nothing purges it.
        other.down = False
        report = embedder.vectors.embed_pending(retry_now=True)
        assert (report.embedded, report.remaining) == (2, 0)  # pending() counts no orphan
        assert _queued(dsn) == 1
        assert embedder.vectors.embed_pending().embedded == 0
        assert _queued(dsn) == 0


_RECORD_COMMIT_MODE = """
CREATE TABLE public.commit_modes (message_id text, mode text);
CREATE FUNCTION public.record_commit_mode() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    INSERT INTO public.commit_modes SELECT n.message_id, current_setting('synchronous_commit') FROM new_rows n;
    RETURN NULL;
END $$;
CREATE TRIGGER record_commit_mode AFTER INSERT ON pgmem.embeddings
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.record_commit_mode()"""


def test_background_runs_commit_asynchronously_a_callers_run_does_not(dsn: str) -> None:
    """The background embedder's stores commit without waiting for their WAL flush (issue 38: the memory's
    revision is not held through it); ``embed_pending``, which a caller waits for, waits for it."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(_RECORD_COMMIT_MODE)
    with (
        pgmem.connect(dsn, namespace="test", embedder=Other()) as embedder,
        pgmem.connect(dsn, namespace="test") as writer,  # no embedder of the memory's model: no run embeds
    ):
        embedder.vectors.enable("n")
        embedder.vectors.wait()  # the backfill run of enable is over: on a busy machine it embedded "caller"
        writer.messages.add("n", Message(id="caller", content="embedded by the caller's call"))
        writer.vectors.wait()
        assert embedder.vectors.embed_pending().embedded == 1
        embedder.messages.add("n", Message(id="background", content="embedded in the background"))
        embedder.vectors.wait()
        assert embedder.vectors.pending("n") == {}
    with psycopg.connect(dsn) as conn:
        modes = dict(conn.execute("SELECT message_id, mode FROM public.commit_modes").fetchall())
    assert modes == {"caller": "on", "background": "off"}
