"""MetaGPT's long-term memories on Postgres (``MemoryStorage``, ``LongTermMemory``, ``RoleZeroLongTermMemory``).

MetaGPT's own ``test_memory_storage`` and ``test_longterm_memory`` scenarios are reproduced with the
offline embedder and the MetaGPT-shaped message class of ``test_metagpt_memory``; the role context is
anything with a ``watch`` set, as MetaGPT's ``RoleContext``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

import pgmem
from pgmem.integrations.metagpt import LongTermMemory, MemoryStorage, RoleZeroLongTermMemory
from pgmem.models import any_to_str
from tests.integration.test_metagpt_memory import PRD, MGMessage, UserRequirement, WriteCode


class WritePRD:
    pass


@dataclass
class RoleContext:
    watch: set[str] = field(default_factory=set)


def test_memory_storage_idea_message(client: pgmem.Client) -> None:
    # MetaGPT: tests/metagpt/memory/test_memory_storage.py::test_idea_message
    storage = MemoryStorage(client=client)
    assert storage.is_initialized is False
    assert storage.recover_memory("UTUser1(Product Manager)") == []
    assert storage.is_initialized is True  # as MetaGPT's: recovery opens the (empty) storage
    message = MGMessage(role="User", content="Write a cli snake game", cause_by=UserRequirement)
    assert storage.add(message) is True
    assert storage.is_initialized is True

    async def similar(content: str) -> list[Any]:
        return await storage.search_similar(MGMessage(role="User", content=content, cause_by=UserRequirement))

    import asyncio

    found = asyncio.run(similar("Write a game of cli snake"))
    assert [m.content for m in found] == ["Write a cli snake game"]
    assert isinstance(found[0], MGMessage)
    assert asyncio.run(similar("Write a 2048 web game")) == []
    storage.clean()
    assert storage.is_initialized is False
    assert asyncio.run(similar("Write a game of cli snake")) == []


async def test_memory_storage_action_output(client: pgmem.Client) -> None:
    # MetaGPT: test_actionout_message — instruct_content survives the round trip and the recovery
    storage = MemoryStorage(client=client)
    storage.recover_memory("UTUser2(Architect)")
    prd = PRD(title="snake", requirements=["move", "grow"])
    content = "The user has requested the creation of a command-line interface (CLI) snake game"
    storage.add(MGMessage(content=content, instruct_content=prd, role="user", cause_by=WritePRD))
    storage.persist()
    again = MemoryStorage(client=client)
    (recovered,) = again.recover_memory("UTUser2(Architect)")
    assert again.is_initialized
    assert recovered.instruct_content == prd
    assert recovered.cause_by == any_to_str(WritePRD)
    same = MGMessage(content=content, role="user", cause_by=WritePRD)
    assert [m.content for m in await again.search_similar(same)] == [content]


async def test_longterm_memory_scenario(client: pgmem.Client) -> None:
    # MetaGPT: tests/metagpt/memory/test_longterm_memory.py::test_ltm_search
    role_id = "UTUserLtm(Product Manager)"
    rc = RoleContext(watch={any_to_str(UserRequirement)})
    ltm = LongTermMemory(client=client)
    ltm.recover_memory(role_id, rc)

    message = MGMessage(role="BOSS", content="Write a cli snake game", cause_by=UserRequirement)
    assert len(await ltm.find_news([message])) == 1
    ltm.add(message)

    sim_message = MGMessage(role="BOSS", content="Write a game of cli snake", cause_by=UserRequirement)
    assert len(await ltm.find_news([sim_message])) == 0
    ltm.add(sim_message)

    new_message = MGMessage(role="BOSS", content="Write a 2048 web game", cause_by=UserRequirement)
    assert len(await ltm.find_news([new_message])) == 1
    ltm.add(new_message)

    # a new instance (as after a restart) recovers the role's long-term memory from Postgres
    ltm_new = LongTermMemory(client=client)
    ltm_new.recover_memory(role_id, rc)
    assert ltm_new.get() == []  # as MetaGPT's: recovery does not fill the short-term memory
    assert len(await ltm_new.find_news([message])) == 0
    ltm_new.recover_memory(role_id, rc)
    assert len(await ltm_new.find_news([sim_message])) == 0
    battle = MGMessage(role="BOSS", content="Write a Battle City", cause_by=UserRequirement)
    assert len(await ltm_new.find_news([battle])) == 1
    ltm_new.clear()
    assert ltm_new.memory_storage.is_initialized is False
    assert LongTermMemory(client=client).memory_storage.recover_memory(role_id) == []


async def test_longterm_memory_watch_recover_delete(client: pgmem.Client) -> None:
    rc = RoleContext(watch={any_to_str(UserRequirement)})
    ltm = LongTermMemory(client=client)
    ltm.recover_memory("role", rc)
    watched = MGMessage(content="Build a chess engine", cause_by=UserRequirement)
    unwatched = MGMessage(content="def main(): pass", cause_by=WriteCode)
    ltm.add(watched)
    ltm.add(unwatched)
    assert ltm.count() == 2
    storage = client.messages.last(ltm.memory_storage.key)
    assert [m.content for m in storage] == ["Build a chess engine"]  # only watched actions
    # recovering leaves the short-term memory empty (MetaGPT's); load=True adds the long-term messages to
    # it, without storing them again
    other = LongTermMemory(client=client)
    other.recover_memory("role", rc)
    assert other.get() == []
    other.recover_memory("role", rc, load=True)
    assert [m.content for m in other.get()] == ["Build a chess engine"]
    assert client.messages.count(ltm.memory_storage.key) == 1
    # delete removes from long-term storage too (MetaGPT's TODO)
    ltm.delete(watched)
    assert client.messages.count(ltm.memory_storage.key) == 0
    assert [m.content for m in ltm.get()] == ["def main(): pass"]


async def test_find_news_is_one_batched_search(client: pgmem.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    rc = RoleContext(watch={any_to_str(UserRequirement)})
    ltm = LongTermMemory(client=client)
    ltm.recover_memory("batched", rc)
    ltm.add_batch([MGMessage(content=f"Write feature {i} of the shop", cause_by=UserRequirement) for i in range(5)])
    calls: list[int] = []
    original = client.vectors.search_many

    def counting(queries: Any, **kwargs: Any) -> Any:
        calls.append(len(queries))
        return original(queries, **kwargs)

    monkeypatch.setattr(client.vectors, "search_many", counting)
    monkeypatch.setattr(client.vectors, "search", lambda *a, **k: pytest.fail("one query per message"))
    observed = [MGMessage(content=f"Write feature {i} of the shop", cause_by=UserRequirement) for i in range(3)]
    observed += [MGMessage(content=f"Something new number {i}", cause_by=UserRequirement) for i in range(4)]
    news = await ltm.find_news(observed)
    assert calls == [7]
    assert [m.content for m in news] == [f"Something new number {i}" for i in range(4)]
    assert [m.content for m in await ltm.find_news(observed, k=2)] == [
        "Something new number 2",
        "Something new number 3",
    ]


def test_role_zero_long_term_memory(client: pgmem.Client) -> None:
    memory = RoleZeroLongTermMemory(client=client, memory_k=3, similarity_top_k=2)
    topics = ["snake game rules", "billing invoices", "snake game graphics", "weather report", "lunch menu"]
    for topic in topics:
        memory.add(MGMessage(content=topic, role="assistant", cause_by=WriteCode))
    memory.add(MGMessage(content="make the snake game faster", role="user", cause_by=UserRequirement))
    assert memory.count() == 6
    # long-term = the entries before the last memory_k=3: the three oldest
    got = memory.get(k=2)
    short = [m.content for m in got[-2:]]
    assert short == ["lunch menu", "make the snake game faster"]
    related = [m.content for m in got[:-2]]
    assert related == ["snake game rules", "snake game graphics"]  # by creation time, from long-term only
    assert all(isinstance(m, MGMessage) for m in got)
    # k=0, or a last message that is not a user requirement: the short-term part only
    assert [m.content for m in memory.get()] == topics + ["make the snake game faster"]
    memory.add(MGMessage(content="snake game review", role="assistant", cause_by=WriteCode))
    assert [m.content for m in memory.get(k=1)] == ["snake game review"]
    # the re-ranking hook sees the query and the related messages
    seen: list[tuple[str, list[str]]] = []

    def rerank(query: str, messages: list[Any]) -> list[Any]:
        seen.append((query, [m.content for m in messages]))
        return list(reversed(messages))

    ranked = RoleZeroLongTermMemory(memory.key, client=client, memory_k=3, similarity_top_k=3, rerank=rerank)
    ranked.add(MGMessage(content="snake game once more", role="user", cause_by=UserRequirement))
    out = [m.content for m in ranked.get(k=1)]
    assert seen and seen[0][0] == "snake game once more"
    assert out[-1] == "snake game once more"
    assert out[:-1] == list(reversed(seen[0][1]))


def test_long_term_bad_input(client: pgmem.Client) -> None:
    storage = MemoryStorage(client=client)
    with pytest.raises(pgmem.InvalidInput):
        storage.add(MGMessage(content="before recover"))
    with pytest.raises(pgmem.InvalidInput):
        storage.recover_memory("")
    with pytest.raises(pgmem.InvalidInput):
        MemoryStorage(client=client, threshold=-1)
    with pytest.raises(pgmem.InvalidInput):
        RoleZeroLongTermMemory(client=client, memory_k=0)
    with pytest.raises(pgmem.InvalidInput):
        LongTermMemory(client=client).recover_memory("r", object())


def test_default_client_and_embedder(default_client_env: str) -> None:
    storage = MemoryStorage()  # keyword-only, every argument defaulted
    storage.recover_memory("defaults")
    storage.add(MGMessage(content="hello from the default client"))
    storage.persist()
    assert storage.client.vectors.pending(storage.key) == {}
    assert storage.client.embedder.model == "pgmem-hash-384"


class RankingLLM:
    """Names documents by number, as MetaGPT's LLM ranker expects of an LLM; records the prompts."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.prompts: list[str] = []

    async def aask(self, prompt: str) -> str:
        self.prompts.append(prompt)
        return self.answer


def test_role_zero_accepts_metagpts_arguments_and_ranks_with_an_llm(client: pgmem.Client, tmp_path: Any) -> None:
    llm = RankingLLM("2, 1, 9, 2")
    memory = RoleZeroLongTermMemory(
        client=client,
        persist_path=str(tmp_path / "chroma"),  # accepted; the memory lives in Postgres
        collection_name="role_zero_memory",
        memory_k=2,
        similarity_top_k=2,
        use_llm_ranker=True,
        llm=llm,
    )
    assert not (tmp_path / "chroma").exists()
    same = RoleZeroLongTermMemory(client=client, collection_name="role_zero_memory")
    assert same.key == memory.key  # the collection names the memory, in any process
    for topic in ["snake game rules", "snake game graphics", "weather", "lunch"]:
        memory.add(MGMessage(content=topic, role="assistant", cause_by=WriteCode))
    memory.add(MGMessage(content="make the snake game faster", role="user", cause_by=UserRequirement))
    got = [m.content for m in memory.get(k=1)]
    assert len(llm.prompts) == 1 and "make the snake game faster" in llm.prompts[0]
    # The ranker kept the two documents it named (9 is no document, the repeated 2 counts once), and the
    # kept long-term messages come in creation order before the short-term one.
    assert len(got) == 3 and got[-1] == "make the snake game faster"
    assert set(got[:-1]) <= {"snake game rules", "snake game graphics", "weather"}
    with pytest.raises(pgmem.InvalidInput):
        RoleZeroLongTermMemory(client=client, use_llm_ranker=True)  # no llm to rank with
    with pytest.raises(pgmem.InvalidInput):
        RoleZeroLongTermMemory(client=client, collection_name="")


def test_role_zero_boundary_moves_with_clear_and_delete_newest(client: pgmem.Client) -> None:
    """Long-term is "all but the last memory_k": delete_newest brings the newest long-term message back
    into the short-term window; clear empties both (README, "MetaGPT's long-term memories")."""
    memory = RoleZeroLongTermMemory(client=client, memory_k=2)
    for i in range(4):
        memory.add(MGMessage(content=f"m{i}", role="assistant", cause_by=WriteCode))
    assert [m.content for m in memory.get(k=2)] == ["m2", "m3"]  # m0, m1 are long-term
    memory.delete_newest()
    assert [m.content for m in memory.get(k=2)] == ["m1", "m2"]  # m1 is short-term again
    memory.clear()
    assert memory.count() == 0 and memory.get(k=2) == []


def test_parse_ranking() -> None:
    from pgmem.integrations.metagpt.longterm import parse_ranking

    assert parse_ranking("Doc 3, then 1; 3 again and 7", 4) == [2, 0]
    assert parse_ranking("NONE", 4) == []
