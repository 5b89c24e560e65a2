"""``pgmem.integrations.metagpt.BrainMemory``: MetaGPT's BrainMemory on Postgres (TTL, concurrent dumps, summaries)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel, Field

import pgmem
from pgmem.errors import SummaryError
from pgmem.integrations.metagpt import BrainMemory
from pgmem.summarizer import CompressionPolicy, OfflineSummarizer
from tests.conftest import table_counts

ROOT = Path(__file__).resolve().parents[2]
KEY = BrainMemory.to_redis_key("chat", "user-1", "chat-1")
WAITING = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
EXPIRE = "UPDATE pgmem.brain_memories SET expires_at = now() - interval '1 second' WHERE redis_key = %s"


class MGMessage(BaseModel):  # stands in for metagpt.schema.Message
    id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    content: str
    role: str = "user"
    cause_by: str = ""


class FailingLLM:
    """Answers ``ok_calls`` prompts, then raises (an LLM outage in the middle of a compression)."""

    def __init__(self, ok_calls: int = 0) -> None:
        self.ok_calls = ok_calls
        self.calls = 0

    async def aask(self, prompt: str) -> str:
        self.calls += 1
        if self.calls > self.ok_calls:
            raise RuntimeError("LLM unavailable")
        return f"summary {self.calls}"


def _scalar(dsn: str, query: Any, params: tuple[Any, ...] = ()) -> Any:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(query, params).fetchone()
        return None if row is None else row[0]


async def _talks(brain: BrainMemory, n: int, prefix: str = "talk") -> None:
    for i in range(n):
        brain.add_talk(MGMessage(content=f"{prefix} {i}: please build feature number {i} of the snake game"))


async def test_dumps_then_loads_round_trip_with_the_callers_class(client: pgmem.Client) -> None:
    brain = await BrainMemory(client=client).loads(KEY)
    assert brain.history == [] and brain.redis_key == KEY and brain.client is client
    brain.add_talk(MGMessage(content="Write a snake game", role="whoever"))
    brain.add_answer(MGMessage(content="Here is the plan"))
    brain.knowledge.append(MGMessage(content="The user likes Python"))
    brain.last_talk = "Write a snake game"
    assert brain.is_dirty
    assert await brain.dumps(KEY, timeout_sec=600) is None
    assert not brain.is_dirty

    loaded = await BrainMemory(client=client).loads(KEY)
    assert loaded.client is client and loaded.redis_key == KEY and not loaded.is_dirty
    assert [(type(m), m.role, m.content) for m in loaded.history] == [
        (MGMessage, "user", "Write a snake game"),
        (MGMessage, "assistant", "Here is the plan"),
    ]
    assert loaded.get_knowledge() == "The user likes Python"
    assert loaded.last_talk == "Write a snake game" and loaded.pop_last_talk() == "Write a snake game"
    assert loaded.exists("Here is the plan") and not loaded.exists("nope")
    assert loaded.history_text == "Write a snake game"
    assert loaded.is_history_available
    # MetaGPT's semantics: not dirty -> nothing to do; empty key -> False; an empty key loads an empty brain
    assert await loaded.dumps(KEY) is None
    loaded.is_dirty = True
    assert await loaded.dumps("") is False
    assert (await loaded.loads("")).redis_key is None


async def test_uncacheable_brain_writes_nothing(client: pgmem.Client, dsn: str) -> None:
    before = table_counts(dsn)
    brain = BrainMemory(client=client, cacheable=False)
    brain.add_talk(MGMessage(content="hello"))
    await brain.dumps(KEY)
    assert not brain.is_dirty
    assert table_counts(dsn) == before


async def test_default_client_and_async_client(default_client_env: str, aclient: pgmem.AsyncClient) -> None:
    brain = BrainMemory()  # the process-wide default client (PGMEM_DSN)
    brain.add_talk(pgmem.Message(content="via the default client"))
    await brain.dumps(KEY)
    assert [m.content for m in (await BrainMemory().loads(KEY)).history] == ["via the default client"]

    abrain = await BrainMemory(client=aclient).loads(KEY)  # same database, namespace "test"
    assert abrain.history == []
    abrain.add_talk(pgmem.Message(content="via an async client"))
    await abrain.dumps(KEY)
    assert [m.content for m in (await abrain.loads(KEY)).history] == ["via an async client"]


async def test_ttl_is_honoured_on_read_and_purged_by_the_retention_job(client: pgmem.Client, dsn: str) -> None:
    before = table_counts(dsn)
    brain = BrainMemory(client=client)
    await _talks(brain, 3)
    brain.knowledge.append(MGMessage(content="a fact"))
    await brain.dumps(KEY, timeout_sec=3600)
    other = BrainMemory(client=client)
    other.add_talk(MGMessage(content="kept"))
    await other.dumps("chat:other:1")  # default TTL: 30 minutes
    expires = _scalar(dsn, "SELECT expires_at - now() FROM pgmem.brain_memories WHERE redis_key = %s", (KEY,))
    assert 3500 < expires.total_seconds() <= 3600

    with psycopg.connect(dsn) as conn:  # let the first one expire (instead of sleeping through a TTL)
        conn.execute(EXPIRE, (KEY,))
    assert (await BrainMemory(client=client).loads(KEY)).history == []

    # writing to an expired key starts a new brain: the expired talks do not come back
    fresh = await BrainMemory(client=client).loads(KEY)
    fresh.add_talk(MGMessage(content="after expiry"))
    await fresh.dumps(KEY)
    assert [m.content for m in (await fresh.loads(KEY)).history] == ["after expiry"]
    assert (await fresh.loads(KEY)).knowledge == []

    with psycopg.connect(dsn) as conn:
        conn.execute(EXPIRE, (KEY,))
    assert client.brains.purge_expired() == 1
    assert client.brains.purge_expired() == 0
    assert [m.content for m in (await BrainMemory(client=client).loads("chat:other:1")).history] == ["kept"]
    after = table_counts(dsn)
    assert after["brain_memories"] == before["brain_memories"] + 1
    assert after["messages"] == before["messages"] + 1  # only the other brain's talk is left
    assert after["memory_entries"] == before["memory_entries"] + 1


async def test_purge_from_the_cli(client: pgmem.Client, dsn: str) -> None:
    brain = BrainMemory(client=client)
    brain.add_talk(MGMessage(content="short-lived"))
    await brain.dumps(KEY, timeout_sec=1)
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE pgmem.brain_memories SET expires_at = now() - interval '1 second'")
    done = subprocess.run(
        [sys.executable, "-m", "pgmem.ops.cli", "purge-brains", "--dsn", dsn],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert "purged 1 expired brain" in done.stdout
    assert _scalar(dsn, "SELECT count(*) FROM pgmem.brain_memories") == 0


@pytest.mark.slow
def test_two_processes_dumping_the_same_key_lose_no_talk(dsn: str, tmp_path: Path) -> None:
    talks = 12
    flag = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.integration.brain_workers", dsn, KEY, str(w), str(talks), str(flag)],
            env=env,
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(2)
    ]
    try:
        deadline = time.monotonic() + 120
        while not all(flag.with_name(f"go.ready{w}").exists() for w in range(2)) and time.monotonic() < deadline:
            if any(proc.poll() is not None for proc in procs):
                break  # a worker died: its error is reported below
            time.sleep(0.01)
        flag.touch()  # both are connected: start them together
        for proc in procs:
            _, err = proc.communicate(timeout=180)
            assert proc.returncode == 0, err
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    with pgmem.connect(dsn, namespace="test") as client:
        import asyncio

        brain = asyncio.run(BrainMemory(client=client).loads(KEY))
    contents = [m.content for m in brain.history]
    expected = {f"{kind} w{w} #{i}" for kind in ("talk", "answer") for w in range(2) for i in range(talks)}
    assert set(contents) == expected and len(contents) == len(expected)
    for w in range(2):  # each worker's own talks keep their order
        mine = [c for c in contents if f" w{w} " in c]
        assert mine == [f"{kind} w{w} #{i}" for i in range(talks) for kind in ("talk", "answer")]
    assert brain.last_talk in {f"w{w} #{talks - 1}" for w in range(2)}


async def test_summarize_keeps_the_raw_history_queryable(client: pgmem.Client) -> None:
    brain = await BrainMemory(client=client).loads(KEY)
    await _talks(brain, 6)
    await brain.dumps(KEY)
    short = await brain.summarize(OfflineSummarizer(), limit=100_000)  # shorter than limit: text as is
    assert short.startswith("talk 0") and len(brain.history) == 6

    summary = await brain.summarize(OfflineSummarizer(words_per_line=2))
    assert summary == brain.historical_summary and brain.history == []
    history_key, _ = client.brains.keys(KEY)
    (row,) = client.summaries.list(history_key)
    entries = client.messages.last(history_key)
    assert len(entries) == 6  # nothing deleted
    assert (row.level, row.first_seq, row.last_seq) == (1, entries[0].seq, entries[-1].seq)
    assert row.content == summary and row.source_tokens > row.summary_tokens > 0

    brain.add_talk(MGMessage(content="one more thing"))
    await brain.dumps(KEY)
    loaded = await brain.loads(KEY)
    assert loaded.historical_summary == summary
    assert [m.content for m in loaded.history] == ["one more thing"]
    assert await loaded.is_related("a", "b", OfflineSummarizer()) is False
    assert await loaded.rewrite("do it", "context", OfflineSummarizer())
    assert await loaded.get_title(OfflineSummarizer(words_per_line=1))


async def test_summary_does_not_hide_a_talk_it_never_saw(client: pgmem.Client) -> None:
    a = await BrainMemory(client=client).loads(KEY)
    a.add_talk(MGMessage(content="first"))
    await a.dumps(KEY)
    b = await BrainMemory(client=client).loads(KEY)
    b.add_talk(MGMessage(content="from b"))
    await b.dumps(KEY)
    a.add_talk(MGMessage(content="second from a"))
    await a.set_history_summary("a summary of what a saw")  # a never saw "from b"
    assert [m.content for m in a.history] == ["from b", "second from a"]
    loaded = await a.loads(KEY)
    assert loaded.historical_summary == "a summary of what a saw"
    assert [m.content for m in loaded.history] == ["from b", "second from a"]


async def test_llm_failure_keeps_the_history(client: pgmem.Client, dsn: str) -> None:
    brain = await BrainMemory(client=client).loads(KEY)
    await _talks(brain, 8)
    await brain.dumps(KEY)
    before = table_counts(dsn)
    with pytest.raises(RuntimeError, match="LLM unavailable"):
        await brain.summarize(FailingLLM())
    assert table_counts(dsn) == before
    assert len((await brain.loads(KEY)).history) == 8

    # hierarchical compression failing half-way: the summaries stored so far stay, nothing is lost
    with pytest.raises(RuntimeError, match="LLM unavailable"):
        await brain.compress_history(FailingLLM(ok_calls=1), policy=CompressionPolicy(chunk=3), force=True)
    history_key, _ = client.brains.keys(KEY)
    stored = client.summaries.list(history_key)
    assert [(s.level, s.content) for s in stored] == [(1, "summary 1")]
    assert client.messages.count(history_key) == 8
    loaded = await brain.loads(KEY)
    assert len(loaded.history) == 8  # the brain's summary marker did not move: still all history
    done = await loaded.compress_history(OfflineSummarizer(), policy=CompressionPolicy(chunk=3), force=True)
    seqs = [m.seq for m in client.messages.last(history_key)]
    assert stored[0].first_seq == seqs[0] and stored[0].last_seq == seqs[2]
    assert [(s.level, s.first_seq, s.last_seq) for s in done] == [(1, seqs[3], seqs[5])]  # a full chunk only
    assert [m.content for m in loaded.history] == [
        f"talk {i}: please build feature number {i} of the snake game" for i in (6, 7)
    ]
    # a MetaGPT-style summary after all that: it covers what the level-1 rows do not, and empties the history
    summary = await loaded.summarize(OfflineSummarizer())
    assert loaded.history == [] and (await loaded.loads(KEY)).historical_summary == summary
    ranges = [(s.first_seq, s.last_seq) for s in client.summaries.list(history_key, level=1)]
    assert ranges == [(seqs[0], seqs[2]), (seqs[3], seqs[5]), (seqs[6], seqs[7])]


async def test_llm_answering_garbage_writes_nothing(client: pgmem.Client, dsn: str) -> None:
    class Garbage:
        async def aask(self, prompt: str) -> Any:
            return 42

    brain = await BrainMemory(client=client).loads(KEY)
    await _talks(brain, 2)
    await brain.dumps(KEY)
    before = table_counts(dsn)
    with pytest.raises(SummaryError):
        await brain.summarize(Garbage())
    with pytest.raises(pgmem.InvalidInput):
        await brain.summarize(object())
    assert table_counts(dsn) == before


async def test_hierarchical_incremental_compression(client: pgmem.Client) -> None:
    brain = await BrainMemory(client=client).loads(KEY)
    await _talks(brain, 21)
    await brain.dumps(KEY)
    policy = CompressionPolicy(chunk=5, fanout=2, max_level=3)
    assert await brain.compress_history(OfflineSummarizer(), max_tokens=10_000, policy=policy) == []  # under budget
    created = await brain.compress_history(OfflineSummarizer(), max_tokens=50, policy=policy)
    history_key, _ = client.brains.keys(KEY)
    seqs = [m.seq for m in client.messages.last(history_key)]
    by_level = {lvl: [(s.first_seq, s.last_seq) for s in created if s.level == lvl] for lvl in (1, 2, 3)}
    assert by_level[1] == [(seqs[i], seqs[i + 4]) for i in range(0, 20, 5)]
    assert by_level[2] == [(seqs[0], seqs[9]), (seqs[10], seqs[19])]
    assert by_level[3] == [(seqs[0], seqs[19])]
    assert [m.content for m in brain.history] == ["talk 20: please build feature number 20 of the snake game"]
    frontier = client.summaries.frontier(history_key)
    assert [(s.level, s.first_seq, s.last_seq) for s in frontier] == [(3, seqs[0], seqs[19])]
    assert brain.historical_summary == frontier[0].content

    # incremental: only the new messages are summarised
    await _talks(brain, 4, prefix="later")
    await brain.dumps(KEY)
    again = await brain.compress_history(OfflineSummarizer(), max_tokens=1, policy=policy)
    assert [(s.level, s.first_seq) for s in again] == [(1, seqs[20])]
    assert brain.history == []
    assert client.messages.count(history_key) == 25
    loaded = await brain.loads(KEY)
    assert loaded.history == [] and loaded.historical_summary == brain.historical_summary


async def test_bad_input_is_refused_and_writes_nothing(client: pgmem.Client, dsn: str) -> None:
    brain = await BrainMemory(client=client).loads(KEY)
    brain.add_talk(MGMessage(content="fine"))
    before = table_counts(dsn)
    for ttl in (0, -5, "60", True, float("nan"), 10**12):
        with pytest.raises(pgmem.InvalidInput):
            await brain.dumps(KEY, timeout_sec=ttl)
    for key in ("bad\x00key", 42, ["k"]):
        with pytest.raises(pgmem.InvalidInput):
            await brain.dumps(key)
        with pytest.raises(pgmem.InvalidInput):
            await brain.loads(key)
    with pytest.raises(pgmem.InvalidInput):
        brain.add_talk(MGMessage(content="nul \x00 byte"))
    with pytest.raises(pgmem.InvalidInput):
        brain.add_talk("just a string")
    with pytest.raises(pgmem.InvalidInput):
        BrainMemory(client=client, history=[MGMessage(content="\ud800 lone surrogate")])
    brain.last_talk = "nul \x00"
    with pytest.raises(pgmem.InvalidInput):
        await brain.dumps(KEY)
    assert table_counts(dsn) == before
    assert [m.content for m in brain.history] == ["fine"]
    brain.last_talk = None
    for summary in ("nul \x00", 42):
        with pytest.raises(pgmem.InvalidInput):
            await brain.set_history_summary(summary)  # type: ignore[arg-type]
    with pytest.raises(pgmem.InvalidInput):
        await brain.summarize(OfflineSummarizer(), max_words=0)
    with pytest.raises(pgmem.InvalidInput):
        await brain.compress_history(OfflineSummarizer(), max_tokens=-1)
    with pytest.raises(pgmem.InvalidInput):
        CompressionPolicy(chunk=0)
    with pytest.raises(pgmem.InvalidInput):
        client.brains.purge_expired(batch_size=0)
    assert table_counts(dsn) == before


def test_dumps_racing_the_retention_job_recreates_the_brain(client: pgmem.Client, dsn: str) -> None:
    import asyncio
    import threading

    brain = BrainMemory(client=client)
    brain.add_talk(MGMessage(content="expired talk"))
    asyncio.run(brain.dumps(KEY))
    history_key, knowledge_key = client.brains.keys(KEY)
    late = asyncio.run(BrainMemory(client=client).loads(KEY))
    late.add_talk(MGMessage(content="talk after the purge"))
    errors: list[BaseException] = []

    def dump() -> None:
        try:
            asyncio.run(late.dumps(KEY))
        except BaseException as exc:  # noqa: BLE001 - reported to the test thread
            errors.append(exc)

    with psycopg.connect(dsn) as purger:  # what purge_expired does: claim the row, then delete the brain
        purger.execute("SELECT 1 FROM pgmem.brain_memories WHERE redis_key = %s FOR UPDATE", (KEY,))
        worker = threading.Thread(target=dump)
        worker.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until the dumps waits for the row lock
            with psycopg.connect(dsn) as probe:
                row = probe.execute(WAITING).fetchone()
            if row and row[0]:
                break
            time.sleep(0.01)
        purger.execute("DELETE FROM pgmem.memories WHERE key = ANY(%s)", ([history_key, knowledge_key],))
        purger.commit()
        worker.join(timeout=60)
    assert not errors, errors
    assert [m.content for m in asyncio.run(BrainMemory(client=client).loads(KEY)).history] == ["talk after the purge"]


async def test_compress_history_in_the_seeds_form(client: pgmem.Client) -> None:
    """MetaGPT's call is compress_history(redis_key): the LLM is self.llm; fewer than 10 messages: nothing."""
    key = f"chat:u:{uuid.uuid4().hex[:6]}"
    brain = BrainMemory(client=client, llm=OfflineSummarizer())
    for i in range(9):
        brain.add_talk(MGMessage(content=f"talk {i}"))
    await brain.dumps(key)
    assert await brain.compress_history(key) == []
    assert brain.historical_summary == "" and len(brain.history) == 9
    brain.add_talk(MGMessage(content="talk 9"))
    assert await brain.compress_history(key) == []
    assert brain.historical_summary and brain.history == []
    loaded = await BrainMemory(client=client).loads(key)
    assert loaded.historical_summary == brain.historical_summary and loaded.history == []
    no_llm = BrainMemory(client=client)
    for i in range(10):
        no_llm.add_talk(MGMessage(content=f"t{i}"))
    with pytest.raises(pgmem.InvalidInput):
        await no_llm.compress_history(key)
    with pytest.raises(pgmem.InvalidInput):
        await no_llm.compress_history()


async def test_a_summary_keeps_the_brains_expiry(client: pgmem.Client, dsn: str) -> None:
    # set_summary writes through save_keeping_ttl (no TTL given), dumps through save (a new TTL).
    brain = BrainMemory(client=client)
    await _talks(brain, 4)
    await brain.dumps(KEY, timeout_sec=3600)
    query = "SELECT expires_at, version FROM pgmem.brain_memories WHERE redis_key = %s"
    with psycopg.connect(dsn) as conn:
        expires, version = conn.execute(query, (KEY,)).fetchone()
    client.brains.set_summary(KEY, "what was said")
    with psycopg.connect(dsn) as conn:
        kept, bumped = conn.execute(query, (KEY,)).fetchone()
        assert (kept, bumped) == (expires, version + 1)
        conn.execute("UPDATE pgmem.brain_memories SET expires_at = NULL WHERE redis_key = %s", (KEY,))
    client.brains.set_summary(KEY, "still no expiry")
    with psycopg.connect(dsn) as conn:
        assert conn.execute(query, (KEY,)).fetchone()[0] is None
    loaded = await BrainMemory(client=client).loads(KEY)
    loaded.add_talk(MGMessage(content="later"))
    await loaded.dumps(KEY, timeout_sec=60)  # a new TTL
    with psycopg.connect(dsn) as conn:
        renewed = conn.execute(query, (KEY,)).fetchone()[0]
        left = conn.execute("SELECT %s::timestamptz - now()", (renewed,)).fetchone()[0]
    assert 50 < left.total_seconds() <= 60
