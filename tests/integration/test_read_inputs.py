"""Every read that takes a string checks it as writes do (issue 34, item 1).

A lone surrogate (which UTF-8 cannot encode) or a NUL byte (which PostgreSQL ``text`` cannot hold) in a
read's string raises :class:`pgmem.InvalidInput` naming the parameter, before anything is sent; other
Unicode that trips people up (RTL marks, a BOM, zero-width joiners, U+2028) is ordinary text.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

import pgmem
from pgmem.integrations.llama_index import PgmemChatStore
from pgmem.integrations.metagpt import Memory
from pgmem.integrations.openai_agents import PgmemSession

#: Strings no stored text can equal: lone high and low surrogates, alone, at the end, in the middle; a NUL.
BAD = {
    "high": "\ud800",
    "low": "\udfff",
    "ends high": "question\udbff",
    "middle low": "a\udc00b",
    "nul": "a\x00b",
}
#: Unicode that is easy to get wrong but is ordinary text: accepted.
BENIGN = {"rtl mark": "\u200fمرحبا", "bom": "\ufeffhello", "zwj": "a\u200db", "line separator": "one\u2028two"}

Read = Callable[[pgmem.Client, str], Any]

#: (id, the parameter the error names, the read with the string in that parameter) on a sync client.
READS: list[tuple[str, str, Read]] = [
    ("messages.by_role", "role", lambda c, s: c.messages.by_role("m", s)),
    ("messages.by_sender", "sender", lambda c, s: c.messages.by_sender("m", s)),
    ("messages.by_action", "action", lambda c, s: c.messages.by_action("m", s)),
    ("messages.by_actions", "actions", lambda c, s: c.messages.by_actions("m", ["ok", s])),
    ("messages.by_recipient", "recipient", lambda c, s: c.messages.by_recipient("m", s)),
    ("messages.by_content", "needle", lambda c, s: c.messages.by_content("m", s)),
    ("messages.search_text", "query", lambda c, s: c.messages.search_text("m", s)),
    ("messages.memories", "prefix", lambda c, s: c.messages.memories(prefix=s)),
    ("messages.payloads", "field", lambda c, s: c.messages.payloads("m", s)),
    ("vectors.search query", "query", lambda c, s: c.vectors.search(s, memory="m")),
    ("vectors.search cause_by", "cause_by", lambda c, s: c.vectors.search("q", memory="m", cause_by=s)),
    ("vectors.search role", "role", lambda c, s: c.vectors.search("q", role=s)),
    ("vectors.search sender", "sender", lambda c, s: c.vectors.search("q", sender=s)),
    ("client.search", "query", lambda c, s: c.search(s)),
    ("vectors.search_many queries", "queries", lambda c, s: c.vectors.search_many(["q", s])),
    ("vectors.search_many cause_by", "cause_by", lambda c, s: c.vectors.search_many(["q"], cause_by=s)),
    ("vectors.hybrid_search text", "text", lambda c, s: c.vectors.hybrid_search("q " + s)),
    ("vectors.hybrid_search role", "role", lambda c, s: c.vectors.hybrid_search("q", role=s)),
    ("vectors.hybrid_search sender", "sender", lambda c, s: c.vectors.hybrid_search("q", sender=s)),
    ("items.get path", "path label", lambda c, s: c.items.get(("a", s), "k")),
    ("items.get key", "item key", lambda c, s: c.items.get(("a",), s)),
    ("items.get_many keys", "item key", lambda c, s: c.items.get_many(("a",), ["k", s])),
    ("items.list_paths prefix", "prefix label", lambda c, s: c.items.list_paths(prefix=("a", s))),
    ("items.list_paths suffix", "suffix label", lambda c, s: c.items.list_paths(suffix=(s,))),
    ("items.search prefix", "prefix label", lambda c, s: c.items.search((s,))),
    ("items.search filter field", "filter field", lambda c, s: c.items.search(("a",), filter={s: 1})),
    ("items.search filter value", "filter", lambda c, s: c.items.search(("a",), filter={"f": s})),
    ("items.search query", "query", lambda c, s: c.items.search(("a",), query=s, embedder=c.embedder)),
    ("brains.load", "key", lambda c, s: c.brains.load("chat:" + s)),
    ("stores.files", "store", lambda c, s: c.stores.files(s)),
    # Facades that pass a caller's strings to reads.
    ("metagpt Memory.get_by_role", "role", lambda c, s: Memory(client=c).get_by_role(s)),
    ("metagpt Memory.get_by_content", "needle", lambda c, s: Memory(client=c).get_by_content(s)),
    ("metagpt Memory.try_remember", "needle", lambda c, s: Memory(client=c).try_remember(s)),
    ("metagpt Memory.get_by_action", "action", lambda c, s: Memory(client=c).get_by_action(s)),
    ("metagpt Memory.get_by_actions", "actions", lambda c, s: Memory(client=c).get_by_actions([s])),
    ("llama_index get_messages", "chat key", lambda c, s: PgmemChatStore(client=c).get_messages(s)),
    ("openai_agents session", "session id", lambda c, s: PgmemSession(s, client=c)),
]
IDS = [name for name, _, _ in READS]


def _named(parameter: str) -> str:
    """A pattern for an error naming ``parameter`` (a list's element is named ``parameter[i]``)."""
    return rf"\b{re.escape(parameter)}\b"


@pytest.mark.parametrize(("name", "parameter", "read"), READS, ids=IDS)
def test_bad_string_in_a_read_is_invalid_input(client: pgmem.Client, name: str, parameter: str, read: Read) -> None:
    for case, bad in BAD.items():
        with pytest.raises(pgmem.InvalidInput, match=_named(parameter)):
            read(client, bad)
            pytest.fail(f"{case}: no error")


@pytest.mark.parametrize(("name", "parameter", "read"), READS, ids=IDS)
def test_unusual_unicode_in_a_read_is_accepted(client: pgmem.Client, name: str, parameter: str, read: Read) -> None:
    client.vectors.enable("m")
    for text in BENIGN.values():
        read(client, text)


def test_benign_unicode_round_trips_through_reads(client: pgmem.Client) -> None:
    for text in BENIGN.values():
        client.messages.add("m", pgmem.Message(content=f"says {text}", role=text, cause_by=text, sent_from=text))
    for text in BENIGN.values():
        assert [m.role for m in client.messages.by_role("m", text)] == [text]
        assert [m.cause_by for m in client.messages.by_action("m", text)] == [text]
        assert [m.sent_from for m in client.messages.by_sender("m", text)] == [text]
        assert [m.content for m in client.messages.by_content("m", text)] == [f"says {text}"]


def test_rejected_read_sends_nothing_in_the_callers_transaction(client: pgmem.Client) -> None:
    """Checked before anything is sent: the caller's transaction is not aborted by the bad read."""
    client.messages.add("m", pgmem.Message(content="kept", role="user"))
    with client.transaction() as conn:
        for read in (
            lambda: client.messages.by_role("m", "\ud800", connection=conn),
            lambda: client.messages.by_content("m", "x\udfff", connection=conn),
            lambda: client.vectors.search("q", memory="m", cause_by="\ud800", connection=conn),
            lambda: client.items.get(("a",), "\ud800", connection=conn),
        ):
            with pytest.raises(pgmem.InvalidInput):
                read()
        assert [m.content for m in client.messages.by_role("m", "user", connection=conn)] == ["kept"]


AsyncRead = Callable[[pgmem.AsyncClient, str], Any]

#: A representative subset on the async client (the sync one is generated from it).
AREADS: list[tuple[str, str, AsyncRead]] = [
    ("messages.by_role", "role", lambda c, s: c.messages.by_role("m", s)),
    ("messages.by_sender", "sender", lambda c, s: c.messages.by_sender("m", s)),
    ("messages.by_actions", "actions", lambda c, s: c.messages.by_actions("m", [s])),
    ("messages.by_recipient", "recipient", lambda c, s: c.messages.by_recipient("m", s)),
    ("messages.search_text", "query", lambda c, s: c.messages.search_text("m", s)),
    ("vectors.search query", "query", lambda c, s: c.vectors.search(s, memory="m")),
    ("vectors.search cause_by", "cause_by", lambda c, s: c.vectors.search("q", cause_by=s)),
    ("vectors.search_many queries", "queries", lambda c, s: c.vectors.search_many([s])),
    ("vectors.hybrid_search sender", "sender", lambda c, s: c.vectors.hybrid_search("q", sender=s)),
    ("items.get key", "item key", lambda c, s: c.items.get(("a",), s)),
]


@pytest.mark.parametrize(("name", "parameter", "read"), AREADS, ids=[n for n, _, _ in AREADS])
async def test_bad_string_in_an_async_read_is_invalid_input(
    aclient: pgmem.AsyncClient, name: str, parameter: str, read: AsyncRead
) -> None:
    for case, bad in BAD.items():
        with pytest.raises(pgmem.InvalidInput, match=_named(parameter)):
            await read(aclient, bad)
            pytest.fail(f"{case}: no error")


@pytest.mark.parametrize(("name", "parameter", "read"), AREADS, ids=[n for n, _, _ in AREADS])
async def test_unusual_unicode_in_an_async_read_is_accepted(
    aclient: pgmem.AsyncClient, name: str, parameter: str, read: AsyncRead
) -> None:
    await aclient.vectors.enable("m")
    for text in BENIGN.values():
        await read(aclient, text)


def test_driver_encoding_failure_is_named_invalid_input(client: pgmem.Client) -> None:
    """The backstop under the checks: a statement whose parameter the driver cannot encode raises
    InvalidInput naming it (here a repository's query called directly, past the public checks, with every
    parameter it names: ``upto`` is the point a read stops at, None for now)."""
    with pytest.raises(pgmem.InvalidInput, match=r"\brole\b.*lone surrogate"):
        client.messages._rows("by_role", {"memory": "m", "role": "x\ud800", "upto": None}, None)
