"""pgmem.integrations.metagpt.Memory against the real Postgres, with a MetaGPT-shaped message class.

The message class below copies the parts of ``metagpt.schema.Message`` that matter to ``Memory`` (field
names, the ``cause_by``/``send_to`` validators, the default ``UserRequirement`` action), so the tests need
no MetaGPT install; the facade must return objects of this class.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from pydantic import BaseModel, Field, field_validator

import pgmem
from pgmem.integrations.metagpt import Memory
from pgmem.models import any_to_str, any_to_str_set


class UserRequirement:  # stands in for metagpt.actions.add_requirement.UserRequirement
    pass


class WriteCode:
    pass


class MGMessage(BaseModel):
    id: str = Field(default="", validate_default=True)
    content: str
    instruct_content: BaseModel | None = None
    role: str = "user"
    cause_by: str = Field(default="", validate_default=True)
    sent_from: str = Field(default="", validate_default=True)
    send_to: set[str] = Field(default={"<all>"}, validate_default=True)

    @field_validator("id", mode="before")
    @classmethod
    def check_id(cls, id: str) -> str:
        return id if id else uuid.uuid4().hex

    @field_validator("cause_by", mode="before")
    @classmethod
    def check_cause_by(cls, cause_by: Any) -> str:
        return any_to_str(cause_by if cause_by else UserRequirement)

    @field_validator("sent_from", mode="before")
    @classmethod
    def check_sent_from(cls, sent_from: Any) -> str:
        return any_to_str(sent_from if sent_from else "")

    @field_validator("send_to", mode="before")
    @classmethod
    def check_send_to(cls, send_to: Any) -> set[str]:
        return any_to_str_set(send_to if send_to else {"<all>"})


class PRD(BaseModel):
    title: str
    requirements: list[str]


def test_metagpt_test_memory_sequence(client: pgmem.Client) -> None:
    """MetaGPT's own tests/metagpt/memory/test_memory.py, call for call."""
    memory = Memory(client=client)

    message1 = MGMessage(content="test message1", role="user1")
    message2 = MGMessage(content="test message2", role="user2")
    message3 = MGMessage(content="test message3", role="user1")
    memory.add(message1)
    assert memory.count() == 1

    memory.delete_newest()
    assert memory.count() == 0

    memory.add_batch([message1, message2])
    assert memory.count() == 2
    assert len(memory.index.get(message1.cause_by)) == 2

    messages = memory.get_by_role("user1")
    assert messages[0].content == message1.content

    messages = memory.get_by_content("test message")
    assert len(messages) == 2

    messages = memory.get_by_action(UserRequirement)
    assert len(messages) == 2

    messages = memory.get_by_actions({UserRequirement})
    assert len(messages) == 2

    messages = memory.try_remember("test message")
    assert len(messages) == 2

    messages = memory.get(k=1)
    assert len(messages) == 1

    messages = memory.get(k=5)
    assert len(messages) == 2

    messages = memory.find_news([message3])
    assert len(messages) == 1

    memory.delete(message1)
    assert memory.count() == 1
    messages = memory.get_by_role("user2")
    assert messages[0].content == message2.content

    memory.clear()
    assert memory.count() == 0
    assert len(memory.index) == 0


def test_returns_the_callers_class_with_fields_intact(client: pgmem.Client) -> None:
    memory = Memory("role:Architect", client=client)
    sent = MGMessage(
        content="design",
        cause_by=WriteCode,
        sent_from="Alice",
        send_to={"Bob", "Eve"},
        instruct_content=PRD(title="2048", requirements=["fast", "fun"]),
    )
    memory.add(sent)
    (got,) = memory.get()
    assert type(got) is MGMessage
    assert got.id == sent.id and got.content == "design"
    assert got.cause_by == f"{__name__}.WriteCode" and got.sent_from == "Alice" and got.send_to == {"Bob", "Eve"}
    assert isinstance(got.instruct_content, PRD)
    assert got.instruct_content == sent.instruct_content
    # A new Memory object on the same key (as another process would) reads the same class back,
    # because the class is imported here and its path is stored with the row.
    again = Memory("role:Architect", client=client).get()
    assert type(again[0]) is MGMessage and again[0].instruct_content == sent.instruct_content


def test_add_ignores_a_message_already_present(client: pgmem.Client) -> None:
    memory = Memory(client=client)
    m = MGMessage(content="once")
    memory.add(m)
    memory.add(m)
    memory.add_batch([m, m])
    assert memory.count() == 1


def test_ignore_id_dedups_by_content_and_deletes_by_content(client: pgmem.Client) -> None:
    memory = Memory(client=client, ignore_id=True)
    memory.add(MGMessage(content="same"))
    memory.add(MGMessage(content="same"))
    memory.add(MGMessage(content="other"))
    assert memory.count() == 2
    assert [m.id for m in memory.get()] == [pgmem.IGNORED_MESSAGE_ID] * 2
    # As MetaGPT's: find_news compares the observed messages as they are (their own ids), so only one
    # carrying the ignored id can be known already.
    observed = [MGMessage(id=pgmem.IGNORED_MESSAGE_ID, content="same"), MGMessage(content="same")]
    assert [m.id for m in memory.find_news(observed)] == [observed[1].id]
    # delete sets the id to the ignored one, as MetaGPT's, and removes the equal message.
    memory.delete(MGMessage(content="same"))
    assert [m.content for m in memory.get()] == ["other"]
    with pytest.raises(ValueError):
        memory.delete(MGMessage(content="same"))


def test_get_k_find_news_k_and_positions(client: pgmem.Client) -> None:
    memory = Memory(client=client)
    msgs = [MGMessage(content=f"m{i}") for i in range(6)]
    memory.add_batch(msgs)
    assert [m.content for m in memory.get(0)] == [f"m{i}" for i in range(6)]
    assert [m.content for m in memory.get(2)] == ["m4", "m5"]
    # find_news(observed, k): observed not among the last k (order and duplicates of observed kept).
    observed = [msgs[1], msgs[5], MGMessage(content="x"), msgs[1]]
    assert [m.content for m in memory.find_news(observed, k=2)] == ["m1", "x", "m1"]
    assert [m.content for m in memory.find_news(observed)] == ["x"]
    assert memory.get_by_position(0).content == "m0"
    assert memory.get_by_position(-1).content == "m5"
    assert memory.get_by_position(-6).content == "m0"
    assert memory.get_by_position(6) is None and memory.get_by_position(-7) is None


def test_index_mapping(client: pgmem.Client) -> None:
    memory = Memory(client=client)
    memory.add(MGMessage(content="a", cause_by=WriteCode))
    memory.add(MGMessage(content="b"))
    memory.add(MGMessage(content="c", cause_by=WriteCode))
    write_code = f"{__name__}.WriteCode"
    assert len(memory.index) == 2
    assert set(memory.index) == {write_code, f"{__name__}.UserRequirement"}
    assert [m.content for m in memory.index[write_code]] == ["a", "c"]
    assert memory.index.get("nothing") is None and memory.index["nothing"] == []
    assert write_code in memory.index
    assert [m.content for m in memory.get_by_actions([WriteCode, UserRequirement])] == ["a", "b", "c"]
    assert memory.storage == memory.get()


def test_delete_newest_returns_it(client: pgmem.Client) -> None:
    memory = Memory(client=client)
    assert memory.delete_newest() is None
    memory.add(MGMessage(content="old"))
    memory.add(MGMessage(content="new"))
    newest = memory.delete_newest()
    assert isinstance(newest, MGMessage) and newest.content == "new"
    assert [m.content for m in memory.get()] == ["old"]


def test_message_stored_once_for_many_memories(client: pgmem.Client, dsn: str) -> None:
    import psycopg

    shared = MGMessage(content="to everyone")
    for role in ("pm", "architect", "engineer", "qa", "reviewer"):
        Memory(f"role:{role}", client=client).add(shared)
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pgmem.messages").fetchone() == (1,)
        assert conn.execute("SELECT count(*) FROM pgmem.memory_entries").fetchone() == (5,)
    # Deleting from one memory keeps the message for the others; the row goes with the last reference.
    Memory("role:pm", client=client).delete(shared)
    assert Memory("role:qa", client=client).count() == 1
    for role in ("architect", "engineer", "qa", "reviewer"):
        Memory(f"role:{role}", client=client).clear()
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pgmem.messages").fetchone() == (0,)


def test_default_client_from_environment(default_client_env: str) -> None:
    memory = Memory("team")
    memory.add(MGMessage(content="via the default client"))
    with pgmem.connect(default_client_env, namespace="default") as other:
        assert [m.content for m in other.messages.last("team")] == ["via the default client"]


@pytest.mark.parametrize("bad_key", ["", "has space", "x" * 300, "semi;colon", "new\nline"])
def test_bad_memory_key(client: pgmem.Client, bad_key: str) -> None:
    with pytest.raises(pgmem.InvalidInput):
        Memory(bad_key, client=client)


def test_context_is_get_under_a_token_budget(client: pgmem.Client) -> None:
    memory = Memory("role:Engineer", client=client)
    sent = [MGMessage(content="You write code.", role="system")]
    sent += [MGMessage(content=f"write module {i} of the snake game", cause_by=WriteCode) for i in range(40)]
    memory.add_batch(sent)
    got = memory.context(80, query="module 3")
    assert type(got[-1]) is MGMessage and got[-1].id == sent[-1].id  # the newest message, the caller's class
    assert got[0].id == sent[0].id  # the system message, pinned
    assert 2 < len(got) < len(sent)
    assert [m.id for m in memory.context(1_000_000)] == [m.id for m in sent]
