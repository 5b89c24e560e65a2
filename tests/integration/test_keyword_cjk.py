"""Keyword search in the seeds' languages (issue 21): Chinese, Japanese, Korean and mixed text beside
English, through every API that runs the keyword leg (``messages.search_text``, ``vectors.hybrid_search``
text-only, with vectors, logged, without a memory), and BM25's document frequencies."""

from __future__ import annotations

import asyncio
import importlib.util
import math
import re
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pgmem
from pgmem import Message

DOCS = [
    "请编写一个命令行贪吃蛇游戏",
    "支付超时后订单自动取消",
    "支付成功，订单已发货",
    "订单超时未支付",
    "東京タワーに行きました",
    "京都の寺を見ました",
    "用Python写贪吃蛇",
    "한국어 검색 테스트",
    "Write a cli snake game",
    "The payment service times out under load",
]


def contents(messages: list[Message]) -> list[str]:
    return [m.content for m in messages]


@pytest.fixture
def memory(client: pgmem.Client) -> str:
    client.messages.add_many("m", [Message(content=d) for d in DOCS])
    return "m"


@pytest.mark.parametrize(
    ("query", "first"),
    [
        ("贪吃蛇", {"请编写一个命令行贪吃蛇游戏", "用Python写贪吃蛇"}),
        ("支付超时", {"支付超时后订单自动取消"}),
        ("東京タワー", {"東京タワーに行きました"}),
        ("タワー", {"東京タワーに行きました"}),
        ("用Python写贪吃蛇", {"用Python写贪吃蛇"}),
        ("검색", {"한국어 검색 테스트"}),
        ("snake", {"Write a cli snake game"}),
        ("timing out", {"The payment service times out under load"}),  # English stemming, as before
    ],
)
def test_search_text_finds_the_message_holding_the_words(
    client: pgmem.Client, memory: str, query: str, first: set[str]
) -> None:
    found = contents(client.messages.search_text(memory, query))
    assert set(found[: len(first)]) == first, found


def test_a_cjk_query_matches_any_bigram_and_ranks_the_whole_word_first(client: pgmem.Client, memory: str) -> None:
    found = contents(client.messages.search_text(memory, "支付超时"))
    # Every message holding 支付 or 超时 is found; the one holding both (the whole word) comes first.
    assert found[0] == "支付超时后订单自动取消"
    assert set(found) == {"支付超时后订单自动取消", "支付成功，订单已发货", "订单超时未支付"}
    assert "请编写一个命令行贪吃蛇游戏" not in found


def test_a_single_character_and_script_boundaries(client: pgmem.Client, memory: str) -> None:
    assert set(contents(client.messages.search_text(memory, "蛇"))) == {
        "请编写一个命令行贪吃蛇游戏",
        "用Python写贪吃蛇",
    }
    assert contents(client.messages.search_text(memory, "寺")) == ["京都の寺を見ました"]
    # "python" is an English word of a mixed message: found by the English part, case-folded.
    assert contents(client.messages.search_text(memory, "PYTHON")) == ["用Python写贪吃蛇"]
    # Punctuation separates runs: 功订 spans "，" and is no bigram of the message.
    assert contents(client.messages.search_text(memory, "功订")) == []


def test_plain_words_match_any_word_phrases_and_exclusions_keep_their_meaning(
    client: pgmem.Client, memory: str
) -> None:
    # Plain words (how agents ask): a message holding any of them; the one holding more comes first.
    assert set(contents(client.messages.search_text(memory, "snake payment"))) == {
        "The payment service times out under load",
        "Write a cli snake game",
    }
    assert contents(client.messages.search_text(memory, "which game has a snake in it?"))[0] == "Write a cli snake game"
    assert contents(client.messages.search_text(memory, "java 贪吃蛇"))[:2] == [
        "用Python写贪吃蛇",
        "请编写一个命令行贪吃蛇游戏",
    ]
    # A quoted phrase is required, a -word or -"phrase" excluded; the other words stay optional.
    client.messages.add(memory, Message(content="a snake hid in the game room"))
    assert set(contents(client.messages.search_text(memory, "snake game"))) == {
        "Write a cli snake game",
        "a snake hid in the game room",
    }
    assert contents(client.messages.search_text(memory, 'Which tool wrote a "snake game"?')) == [
        "Write a cli snake game"
    ]
    assert contents(client.messages.search_text(memory, '"game snake"')) == []
    assert contents(client.messages.search_text(memory, 'snake -"snake game"')) == ["a snake hid in the game room"]
    assert contents(client.messages.search_text(memory, "payment -load")) == []
    assert contents(client.messages.search_text(memory, "payment snake -load")) == [
        "a snake hid in the game room",
        "Write a cli snake game",
    ]
    both = ["用Python写贪吃蛇", "请编写一个命令行贪吃蛇游戏"]
    assert contents(client.messages.search_text(memory, "python 贪吃蛇 -java"))[:2] == both  # optional words
    assert contents(client.messages.search_text(memory, '"python" 贪吃蛇')) == ["用Python写贪吃蛇"]
    assert contents(client.messages.search_text(memory, '"贪吃蛇游戏"')) == ["请编写一个命令行贪吃蛇游戏"]
    assert contents(client.messages.search_text(memory, "-snake")) == []  # only an exclusion: nothing asked
    # AND or OR in capitals: boolean search (websearch rules), every bare word required.
    assert contents(client.messages.search_text(memory, "snake AND payment")) == []
    assert len(contents(client.messages.search_text(memory, "snake OR payment"))) == 3
    assert contents(client.messages.search_text(memory, "java AND 贪吃蛇")) == []
    assert contents(client.messages.search_text(memory, "python AND 贪吃蛇")) == ["用Python写贪吃蛇"]
    # Nothing to look for: punctuation, or stop words only.
    assert contents(client.messages.search_text(memory, "，。！")) == []
    assert contents(client.messages.search_text(memory, "what is it?")) == []


def test_rank_uses_document_frequency(client: pgmem.Client) -> None:
    """A rare term outranks a common one: each message holds one of the two query words once, in a message
    of the same length, so only their document frequencies (idf) tell them apart."""
    rows = [Message(content=f"普通 记录{i:03d}") for i in range(30)] + [Message(content="罕见 记录999")]
    client.messages.add_many("df", rows)
    assert client.messages.search_text("df", "普通 罕见", limit=3)[0].content == "罕见 记录999"
    assert client.messages.search_text("df", "罕见 普通", limit=3)[0].content == "罕见 记录999"
    # The same in English (stems "common" and "rare").
    client.messages.add_many("en", [Message(content=f"common entry {i}") for i in range(30)])
    client.messages.add("en", Message(content="rare entry 999"))
    assert client.messages.search_text("en", "common or rare", limit=3)[0].content == "rare entry 999"


def test_rank_uses_term_frequency_and_length(client: pgmem.Client) -> None:
    client.messages.add_many(
        "tf",
        [
            Message(content="超时" + "，无关的内容" * 20),
            Message(content="超时"),
            Message(content="超时，超时，又超时"),
        ],
    )
    assert contents(client.messages.search_text("tf", "超时")) == [
        "超时，超时，又超时",
        "超时",
        "超时" + "，无关的内容" * 20,
    ]


_LEXEME = re.compile(r"'((?:[^']|'')*)'(?::([0-9A-D,]+))?")


def _reference_bm25(docs: dict[str, str], terms: list[str], hits: set[str], n: int) -> dict[str, float]:
    """BM25 as the README defines it, from each message's tsvector (its text: ``'lexeme':1,4 ...``): k1 = 1.2,
    b = 0.75, df counted among the hits, N the scope's size, tf a lexeme's positions, a message's length its
    number of distinct lexemes against their mean over the hits."""
    parsed = {
        i: {lex.replace("''", "'"): len(pos.split(",")) if pos else 1 for lex, pos in _LEXEME.findall(tsv)}
        for i, tsv in docs.items()
        if i in hits
    }
    avgdl = max(sum(len(p) for p in parsed.values()) / len(parsed), 1.0)
    n = max(n, len(parsed))
    df = {t: sum(1 for p in parsed.values() if t in p) for t in set(terms)}
    return {
        i: sum(
            math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) * p[t] * 2.2 / (p[t] + 1.2 * (0.25 + 0.75 * len(p) / avgdl))
            for t in set(terms)
            if t in p
        )
        for i, p in parsed.items()
    }


@pytest.mark.parametrize("query", ["report", "report payment", "payment -refund", "支付超时", "report or 订单"])
def test_scores_are_bm25_computed_from_the_definition(client: pgmem.Client, query: str) -> None:
    """Differential: every hit's score from keyword_search, and search_text's order, against BM25 computed
    here from the messages' tsvectors (repeated words, lengths from 1 to 40 words, a word in every message)."""
    words = ["report", "payment", "refund", "timeout", "支付超时", "订单", "ledger", "audit"]
    texts = [
        " ".join(words[(i * j) % len(words)] for j in range(1 + (i * 7) % 40)) + f" report entry{i}" for i in range(60)
    ]
    client.messages.add_many("bm", [Message(content=t) for t in texts])
    client.messages.add("other", Message(content="report report report"))  # another memory: not in N nor df
    with client.connection() as conn:
        (terms,) = conn.execute("SELECT pgmem.fts_terms(%s)", (query,)).fetchone()
        rows = conn.execute(
            "SELECT m.id, m.tsv::text, m.tsv @@ pgmem.fts_query(%s) FROM pgmem.messages AS m "
            "JOIN pgmem.memory_entries AS e ON e.namespace = m.namespace AND e.message_id = m.id "
            "WHERE e.memory = 'bm'",
            (query,),
        ).fetchall()
    hits = {i for i, _, hit in rows if hit}
    expected = _reference_bm25({i: tsv for i, tsv, _ in rows}, terms, hits, len(texts))
    assert hits
    found = client.vectors.keyword_search(query, memory="bm", k=len(texts))
    assert {h.message.id: h.score for h in found} == pytest.approx(expected, rel=1e-9, abs=1e-12)
    ordered = client.messages.search_text("bm", query, limit=len(texts))
    scores = [expected[m.id] for m in ordered]
    assert len(ordered) == len(hits) and scores == sorted(scores, reverse=True)


def test_hybrid_text_only_scores_the_messages_that_hold_the_word(client: pgmem.Client, memory: str) -> None:
    client.vectors.enable(memory)
    client.vectors.flush()
    hits = client.vectors.hybrid_search("支付超时", memory=memory, w_vector=0, k=len(DOCS))
    scored = [h.message.content for h in hits if h.score > 0]
    assert scored[0] == "支付超时后订单自动取消"
    assert hits[0].score == pytest.approx(1.0)  # coverage: it holds every bigram of the query
    assert all(0 < h.score < 1 for h in hits[1:] if h.score > 0)
    assert set(scored) == {"支付超时后订单自动取消", "支付成功，订单已发货", "订单超时未支付"}
    # With vectors too: the message holding the word gets both lists' first places.
    fused = client.vectors.hybrid_search("支付超时后订单自动取消", memory=memory, k=3)
    assert fused[0].message.content == "支付超时后订单自动取消"
    assert fused[0].score == pytest.approx(2.0)  # closest vector (1) and every bigram (1)
    rrf = client.vectors.hybrid_search("支付超时后订单自动取消", memory=memory, k=3, fusion="rrf")
    assert rrf[0].score == pytest.approx(2 / 61, rel=1e-6)
    # Japanese, mixed, a namespace-wide search (no memory) and a filter, logged with a label.
    for query, want in (("東京タワー", "東京タワーに行きました"), ("用Python写贪吃蛇", "用Python写贪吃蛇")):
        assert client.vectors.hybrid_search(query, memory=memory, w_vector=0)[0].message.content == want
        assert client.vectors.hybrid_search(query, w_vector=0, label="kw")[0].message.content == want
    assert client.vectors.hybrid_search("贪吃蛇", w_vector=0, role="user")[0].score == pytest.approx(1.0)


def test_async_search_text(dsn: str) -> None:
    async def run() -> list[str]:
        async with await pgmem.aconnect(dsn, namespace="a") as client:
            await client.messages.add_many("m", [Message(content=d) for d in DOCS])
            return contents(await client.messages.search_text("m", "贪吃蛇"))

    assert set(asyncio.run(run())) == {"请编写一个命令行贪吃蛇游戏", "用Python写贪吃蛇"}


def test_keyword_search_stays_in_its_namespace_and_memory(client: pgmem.Client, memory: str) -> None:
    other = client.with_namespace("other")
    other.messages.add("m", Message(content="另一个贪吃蛇"))
    client.messages.add("n", Message(content="第二个贪吃蛇"))
    assert "另一个贪吃蛇" not in contents(client.messages.search_text(memory, "贪吃蛇"))
    assert "第二个贪吃蛇" not in contents(client.messages.search_text(memory, "贪吃蛇"))
    assert contents(other.messages.search_text("m", "贪吃蛇")) == ["另一个贪吃蛇"]


def test_bad_queries(client: pgmem.Client, memory: str) -> None:
    with pytest.raises(pgmem.InvalidInput):
        client.messages.search_text(memory, "贪吃\x00蛇")
    with pytest.raises(pgmem.InvalidInput):
        client.vectors.hybrid_search("  ", memory=memory)
    assert contents(client.messages.search_text(memory, "")) == []


def test_the_tsvector_of_a_message(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:

        def doc(text: str) -> str:
            row: Any = conn.execute("SELECT pgmem.fts_document(%s)::text", (text,)).fetchone()
            return str(row[0])

        # No CJK: exactly the english configuration's tsvector.
        english = "Write a cli snake game, running"
        assert doc(english) == conn.execute("SELECT to_tsvector('english', %s)::text", (english,)).fetchone()[0]  # type: ignore[index]
        # Characters and bigrams, a bigram at its first character's position, a gap between runs, after the
        # English words; ，and ・ separate runs.
        got = dict(item.split(":") for item in doc("用Go写蛇，タワー・東京").replace("'", "").split(" "))
        assert got["go"] == "1"
        assert {k for k in got if k != "go"} == {
            "用",
            "写",
            "写蛇",
            "蛇",
            "タ",
            "タワ",
            "ワ",
            "ワー",
            "ー",
            "東",
            "東京",
            "京",
        }
        assert got["写"] == got["写蛇"] and int(got["蛇"]) == int(got["写"]) + 1
        assert int(got["タ"]) > int(got["蛇"]) + 1  # the comma's gap: no phrase across it
        # A long text fits a tsvector: positions stop at 16383 (about the first 16,000 CJK characters).
        many = "".join(chr(0x4E00 + (i * 7919) % 20000) for i in range(100_000))
        size = conn.execute("SELECT pg_column_size(pgmem.fts_document(%s))", (many,)).fetchone()[0]  # type: ignore[index]
        assert size < 1 << 20
        # Queries: plain words and CJK bigrams ORed; a quoted phrase required (every bigram of a CJK one);
        # in boolean search, English words through websearch AND a CJK bigram; a run of one character as itself.
        query = conn.execute("SELECT pgmem.fts_query(%s)::text", ("python 贪吃蛇",)).fetchone()[0]  # type: ignore[index]
        assert query == "'python' | '吃蛇' | '贪吃'"
        query = conn.execute("SELECT pgmem.fts_query(%s)::text", ('"python" 贪吃蛇',)).fetchone()[0]  # type: ignore[index]
        assert query == "'python'"
        query = conn.execute("SELECT pgmem.fts_query(%s)::text", ('"贪吃蛇" -java',)).fetchone()[0]  # type: ignore[index]
        assert query == "'吃蛇' & '贪吃' & !'java'"
        query = conn.execute("SELECT pgmem.fts_query(%s)::text", ("python AND 贪吃蛇",)).fetchone()[0]  # type: ignore[index]
        assert query == "'python' & ( '吃蛇' | '贪吃' )"
        # A lexeme holding a quote or a backslash is quoted, not parsed.
        query = conn.execute("SELECT pgmem.fts_query(%s)::text", ("e-mail o'brien back\\slash",)).fetchone()[0]  # type: ignore[index]
        assert set(query.split(" | ")) == {"'back'", "'brien'", "'e'", "'e-mail'", "'mail'", "'o'", "'slash'"}
        assert conn.execute("SELECT pgmem.fts_query('蛇')::text").fetchone()[0] == "'蛇'"  # type: ignore[index]
        assert conn.execute("SELECT pgmem.fts_query('，')").fetchone()[0] is None  # type: ignore[index]


def test_the_gin_index_finds_rare_words(client: pgmem.Client, dsn: str) -> None:
    """pgmem.fts_query of the query is folded into a tsquery constant when the statement is planned, so the
    planner estimates from the tsv statistics and takes the GIN index for a rare word."""
    words = ["日志", "记录", "订单", "用户", "系统", "错误", "请求", "服务"]
    rows = [Message(content=f"{words[i % 8]}{words[i * 5 % 8]}第{i}条 entry {i}") for i in range(20_000)]
    client.messages.add_many("big", rows)
    client.messages.add_many("other", [Message(content="贪吃蛇游戏"), Message(content="贪吃蛇 snake")])
    client.messages.add("big", Message(content="贪吃蛇游戏"))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE pgmem.messages")
        conn.execute("ANALYZE pgmem.memory_entries")
        text = pgmem.planning.statements.load("messages")["search_text"]
        for query in ("贪吃蛇", "snake"):
            params = {"ns": client.namespace, "memory": "big", "query": query, "limit": 10, "upto": None}
            plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + text, params))  # type: ignore[operator]
            assert "messages_tsv_idx" in plan, plan
    assert contents(client.messages.search_text("big", "贪吃蛇")) == ["贪吃蛇游戏"]


def _migration(name: str) -> Any:
    path = Path(__file__).parents[2] / "migrations" / "versions" / name
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_plpgsql_document_equals_the_sql_one(dsn: str) -> None:
    """Migration 0008 rewrote pgmem.fts_document in PL/pgSQL (the SQL one was planned again for every INSERT)
    without a rewrite of messages.tsv: that holds only if both return the same tsvector for every text."""
    old = _migration("0008_fts_document_plpgsql.py")._SQL.replace("pgmem.fts_document(", "pg_temp.fts_document_sql(")
    texts = [
        "",
        " ",
        "，。「」",
        "Write a cli snake game, running",
        "The quick brown fox jumps over the lazy dog; it isn't running.\nSecond line: 42 items, e-mail a@b.com",
        "用Go写蛇，タワー・東京",
        "贪吃蛇游戏 snake game 第3条",
        "한국어 문장입니다 and English",
        "ｶﾀｶﾅ half width, 々〆〇 marks",
        "\U00020000\U00020001 extension B 𠀀",
        "emoji 🐍 only",
        "x" * 5000,
        "日志" * 3000,
        "mixed 東京2026年 Tokyo 2026",
    ]
    with psycopg.connect(dsn) as conn:
        language = conn.execute(
            "SELECT l.lanname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang"
            " WHERE p.oid = 'pgmem.fts_document(text)'::regprocedure"
        ).fetchone()
        assert language == ("plpgsql",)
        conn.execute(old)
        for text in texts:
            row: Any = conn.execute(
                "SELECT pgmem.fts_document(%s)::text, pg_temp.fts_document_sql(%s)::text", (text, text)
            ).fetchone()
            assert row[0] == row[1], text[:40]
        row = conn.execute("SELECT pgmem.fts_document(NULL), pg_temp.fts_document_sql(NULL)").fetchone()
        assert row == (None, None)
