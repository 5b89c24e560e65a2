"""``client.summaries``: summary rows naming the messages they cover, hierarchical incremental compression."""

from __future__ import annotations

import pytest

import pgmem
from pgmem.summarizer import CompressionPolicy, OfflineSummarizer, Tokenizer, count_tokens, get_tokenizer
from tests.conftest import table_counts

MEMORY = "role:Alice"


def _fill(client: pgmem.Client, n: int, start: int = 0) -> list[int]:
    client.messages.add_many(
        MEMORY, [pgmem.Message(content=f"message {i} about the snake game") for i in range(start, start + n)]
    )
    return [m.seq for m in client.messages.last(MEMORY)]


def test_compress_covers_full_chunks_then_rolls_them_up(client: pgmem.Client) -> None:
    seqs = _fill(client, 12)
    policy = CompressionPolicy(chunk=5, fanout=2)
    created = client.summaries.compress(MEMORY, OfflineSummarizer(), policy)
    assert [(s.level, s.first_seq, s.last_seq) for s in created] == [
        (1, seqs[0], seqs[4]),
        (1, seqs[5], seqs[9]),
        (2, seqs[0], seqs[9]),
    ]
    assert [m.content for m in client.summaries.unsummarized(MEMORY)] == [
        "message 10 about the snake game",
        "message 11 about the snake game",
    ]
    assert [m.content for m in client.summaries.unsummarized(MEMORY, limit=1)] == ["message 10 about the snake game"]
    assert client.summaries.unsummarized(MEMORY, after_seq=seqs[10]) == client.summaries.unsummarized(MEMORY)[1:]
    assert client.summaries.compress(MEMORY, OfflineSummarizer(), policy) == []  # nothing new: incremental
    forced = client.summaries.compress(MEMORY, OfflineSummarizer(), policy, force=True)
    assert [(s.level, s.first_seq, s.last_seq) for s in forced] == [(1, seqs[10], seqs[11])]
    assert [(s.level, s.first_seq) for s in client.summaries.frontier(MEMORY)] == [(2, seqs[0]), (1, seqs[10])]
    assert len(client.summaries.list(MEMORY, level=1)) == 3
    assert client.messages.count(MEMORY) == 12  # the raw history stays queryable
    row = created[0]
    assert row.source_chars == len("\n".join(f"user: message {i} about the snake game" for i in range(5)))
    assert row.source_tokens == count_tokens("\n".join(f"user: message {i} about the snake game" for i in range(5)))
    assert row.summary_tokens == count_tokens(row.content) and row.tokenizer == get_tokenizer().name


def test_a_range_is_summarised_once(client: pgmem.Client) -> None:
    seqs = _fill(client, 4)
    client.summaries.add(
        MEMORY, level=1, first_seq=seqs[0], last_seq=seqs[1], content="s", source_chars=1, source_tokens=1
    )
    for first in (seqs[0], seqs[1]):  # the same start (a racing summariser) or inside the summarised range
        with pytest.raises(pgmem.Conflict):
            client.summaries.add(
                MEMORY, level=1, first_seq=first, last_seq=seqs[3], content="t", source_chars=1, source_tokens=1
            )
    with pytest.raises(pgmem.NotFound):
        client.summaries.add(
            "no-such-memory", level=1, first_seq=1, last_seq=1, content="s", source_chars=1, source_tokens=1
        )
    assert client.summaries.delete_all(MEMORY) == 1


async def test_async_client_compresses_the_same_way(aclient: pgmem.AsyncClient) -> None:
    await aclient.messages.add_many(MEMORY, [pgmem.Message(content=f"m{i}") for i in range(6)])
    created = await aclient.summaries.compress(MEMORY, OfflineSummarizer(), CompressionPolicy(chunk=3, fanout=2))
    assert [s.level for s in created] == [1, 1, 2]
    assert [s.level for s in await aclient.summaries.frontier(MEMORY)] == [2]


def test_llm_failure_mid_compression_loses_nothing(client: pgmem.Client) -> None:
    class FlakyLLM:
        calls = 0

        async def aask(self, prompt: str) -> str:
            self.calls += 1
            if self.calls == 2:
                raise TimeoutError("model timed out")
            return "ok"

    seqs = _fill(client, 9)
    with pytest.raises(TimeoutError):
        client.summaries.compress(MEMORY, FlakyLLM(), CompressionPolicy(chunk=3))
    assert [(s.first_seq, s.last_seq) for s in client.summaries.list(MEMORY)] == [(seqs[0], seqs[2])]
    assert len(client.summaries.unsummarized(MEMORY)) == 6 and client.messages.count(MEMORY) == 9


def test_bad_input_is_refused(client: pgmem.Client, dsn: str) -> None:
    seqs = _fill(client, 2)
    before = table_counts(dsn)
    good = {
        "level": 1,
        "first_seq": seqs[0],
        "last_seq": seqs[1],
        "content": "s",
        "source_chars": 1,
        "source_tokens": 1,
    }
    for bad in (
        {"level": 0},
        {"level": "1"},
        {"first_seq": seqs[1] + 1, "last_seq": seqs[1]},
        {"content": "nul \x00"},
        {"content": 42},
        {"source_tokens": -1},
        {"summary_tokens": True},
    ):
        with pytest.raises(pgmem.InvalidInput):
            client.summaries.add(MEMORY, **{**good, **bad})
    for key in ("", "bad key", None):
        with pytest.raises(pgmem.InvalidInput):
            client.summaries.list(key)  # type: ignore[arg-type]
    with pytest.raises(pgmem.InvalidInput):
        client.summaries.unsummarized(MEMORY, limit=0)
    with pytest.raises(pgmem.InvalidInput):
        client.summaries.compress(MEMORY, "not an llm", force=True)
    assert table_counts(dsn) == before


def test_token_counting_falls_back_offline() -> None:
    approx = Tokenizer("approx")
    assert approx.name == "approx:utf8/4"
    assert approx.count("abcd" * 10) == 10 and approx.count("é") == 1 and approx.count("") == 0
    assert Tokenizer("no-such-encoding").name == "approx:utf8/4"  # unknown (or not installed): the fallback


def test_a_racing_summariser_is_not_an_error(client: pgmem.Client) -> None:
    seqs = _fill(client, 6)

    class RacingLLM:
        """While it 'thinks', another summariser stores the same range first."""

        raced = False

        async def aask(self, prompt: str) -> str:
            if not self.raced:
                self.raced = True
                client.summaries.add(
                    MEMORY,
                    level=1,
                    first_seq=seqs[0],
                    last_seq=seqs[2],
                    content="theirs",
                    source_chars=1,
                    source_tokens=1,
                )
            return "mine"

    created = client.summaries.compress(MEMORY, RacingLLM(), CompressionPolicy(chunk=3, fanout=5))
    assert [(s.first_seq, s.last_seq, s.content) for s in created] == [(seqs[3], seqs[5], "mine")]
    assert [s.content for s in client.summaries.list(MEMORY)] == ["theirs", "mine"]


def test_openai_summarizer_against_a_local_compatible_server(client: pgmem.Client) -> None:
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from pgmem.summarizer import OpenAISummarizer

    prompts: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            prompts.append(body["messages"][0]["content"])
            answer = {
                "id": "c1",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "A summary."}}
                ],
            }
            data = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        llm = OpenAISummarizer("test-model", api_key="sk-test", base_url=f"http://127.0.0.1:{server.server_port}/v1")
        _fill(client, 3)
        (summary,) = client.summaries.compress(MEMORY, llm, CompressionPolicy(chunk=3))
        assert summary.content == "A summary." and llm.ask("hello") == "A summary."
        _fill(client, 3, start=3)  # a second run: each sync compress drives the LLM on a new event loop
        (again,) = client.summaries.compress(MEMORY, llm, CompressionPolicy(chunk=3))
        assert again.content == "A summary."
    finally:
        server.shutdown()
        server.server_close()
    assert "message 2 about the snake game" in prompts[0] and prompts[1] == "hello"


def _coverage(client: pgmem.Client, memory: str) -> dict[int, int]:
    """How many level-1 summaries cover each entry of ``memory``."""
    ranges = [(s.first_seq, s.last_seq) for s in client.summaries.list(memory, level=1)]
    seqs = [m.seq for m in client.messages.last(memory)]
    return {seq: sum(first <= seq <= last for first, last in ranges) for seq in seqs}


def test_an_entry_committed_after_a_later_one_is_not_skipped(dsn: str, client: pgmem.Client) -> None:
    """A writer draws a number, a second writer draws the next and commits first: the summariser waits for
    the first instead of summarising past it (which would skip it forever)."""
    import threading

    import psycopg

    _fill(client, 2)
    with psycopg.connect(dsn) as slow:
        client.messages.add(MEMORY, pgmem.Message(content="numbered first, committed last"), connection=slow)
        client.messages.add(MEMORY, pgmem.Message(content="numbered last, committed first"))
        done: list[object] = []
        summariser = threading.Thread(
            target=lambda: done.append(
                client.summaries.compress(MEMORY, OfflineSummarizer(), CompressionPolicy(chunk=2, fanout=10))
            )
        )
        summariser.start()
        summariser.join(0.5)
        assert summariser.is_alive()  # waiting for the entry still in flight
        slow.commit()
    summariser.join(10)
    assert not summariser.is_alive() and len(done) == 1
    assert set(_coverage(client, MEMORY).values()) == {1}  # all four, each once


@pytest.mark.slow
def test_summaries_under_concurrent_writers_cover_every_entry_once(dsn: str, client: pgmem.Client) -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    writers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.integration.summary_workers", dsn, str(w), "120"],
            env=env,
            cwd=root,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(3)
    ]
    policy = CompressionPolicy(chunk=7, fanout=3)
    try:
        while any(w.poll() is None for w in writers):
            client.summaries.compress("team", OfflineSummarizer(), policy)
        for w in writers:
            _, err = w.communicate(timeout=120)
            assert w.returncode == 0, err
    finally:
        for w in writers:
            if w.poll() is None:
                w.kill()
    client.summaries.compress("team", OfflineSummarizer(), policy, force=True)
    coverage = _coverage(client, "team")
    assert len(coverage) == 360
    assert {seq: n for seq, n in coverage.items() if n != 1} == {}
