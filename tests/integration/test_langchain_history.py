"""LangChain's BaseChatMessageHistory on pgmem: the scenarios of langchain-postgres' chat-history tests
and of langchain-core's RunnableWithMessageHistory tests, run against PgmemChatMessageHistory."""

from __future__ import annotations

import math
import subprocess
import sys
from typing import Any

import psycopg
import pytest

import pgmem
from tests.conftest import table_counts

pytest.importorskip("langchain_core", reason="LangChain is not installed: pip install 'pgmem[langchain]'")

from langchain_core.chat_history import BaseChatMessageHistory  # noqa: E402
from langchain_core.language_models.fake_chat_models import FakeListChatModel  # noqa: E402
from langchain_core.messages import (  # noqa: E402
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder  # noqa: E402
from langchain_core.runnables.history import RunnableWithMessageHistory  # noqa: E402

from pgmem.integrations.langchain import PgmemChatMessageHistory  # noqa: E402

# langchain-core 1.6.4 deprecated RunnableWithMessageHistory (and BaseChatMessageHistory, whose subclasses
# it does not warn about) in favour of LangGraph's persistence; both still ship and are what this covers.
pytestmark = pytest.mark.filterwarnings("ignore:RunnableWithMessageHistory is deprecated")


def every_kind() -> list[BaseMessage]:
    return [
        SystemMessage(content="You are terse.", id="sys-1"),
        HumanMessage(
            content=[
                {"type": "text", "text": "What is "},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                {"type": "text", "text": "in this picture? 🌍"},
            ],
            id="h-1",
            name="ada",
            additional_kwargs={"trace": {"n": [1, 2.5, None, True]}},
        ),
        AIMessage(
            content="",
            id="ai-1",
            tool_calls=[{"name": "look", "args": {"x": 1}, "id": "call-1", "type": "tool_call"}],
            response_metadata={"model_name": "fake", "finish_reason": "tool_calls"},
            usage_metadata={"input_tokens": 10, "output_tokens": 3, "total_tokens": 13},
        ),
        ToolMessage(content="a cat", tool_call_id="call-1", artifact={"boxes": [[0, 0, 4, 4]]}, status="success"),
        FunctionMessage(content="42", name="answer"),
        ChatMessage(content="noted", role="critic"),
        AIMessage(content="A cat.", id="ai-2"),
        AIMessageChunk(content="streamed", id="chunk-1"),
    ]


def rows(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            """SELECT e.memory, m.role, m.content, m.name, m.tool_call_id, m.tool_calls
               FROM pgmem.memory_entries e JOIN pgmem.messages m ON m.namespace = e.namespace AND m.id = e.message_id
               ORDER BY e.seq"""
        ).fetchall()


def test_it_is_a_chat_message_history(client: pgmem.Client) -> None:
    assert isinstance(PgmemChatMessageHistory("s", client=client), BaseChatMessageHistory)


def test_messages_round_trip_and_fill_the_columns(client: pgmem.Client, dsn: str) -> None:
    history = PgmemChatMessageHistory("session-1", client=client)
    assert history.messages == []
    sent = every_kind()
    history.add_messages(sent)
    assert history.messages == sent
    assert [type(m) for m in history.messages] == [type(m) for m in sent]
    assert PgmemChatMessageHistory("session-1", client=client).messages == sent  # a new object reads it back
    stored = rows(dsn)
    assert {r[0] for r in stored} == {"langchain:session-1"}
    assert [r[1] for r in stored] == [
        "system",
        "user",
        "assistant",
        "tool",
        "function",
        "critic",
        "assistant",
        "assistant",
    ]
    assert stored[1][2] == "What is in this picture? 🌍"  # the text blocks of list content
    assert stored[1][3] == "ada"
    assert stored[2][5] == [{"name": "look", "args": {"x": 1}, "id": "call-1", "type": "tool_call"}]
    assert stored[3][4] == "call-1"
    assert stored[4][3] == "answer"


def test_adds_append_duplicates_and_sessions_are_apart(client: pgmem.Client) -> None:
    a = PgmemChatMessageHistory("a", client=client)
    b = PgmemChatMessageHistory("b", client=client)
    hello = HumanMessage(content="hello", id="same-id")
    a.add_message(hello)
    a.add_messages([hello, hello])
    a.add_user_message("hi")
    a.add_ai_message("hey")
    b.add_ai_message("other")
    assert a.messages == [hello, hello, hello, HumanMessage(content="hi"), AIMessage(content="hey")]
    assert b.messages == [AIMessage(content="other")]
    a.add_messages([])
    a.clear()
    assert a.messages == []
    assert b.messages == [AIMessage(content="other")]
    a.clear()  # clearing an empty session is fine
    assert "other" in str(b)


@pytest.mark.parametrize(
    "session_id",
    ["plain-id_1", "with spaces", "ünïcødé 会话 🌍", "#starts-with-hash", "a/b:c@d", "x" * 200, "tab\there\nnewline"],
)
def test_any_session_id(client: pgmem.Client, session_id: str) -> None:
    history = PgmemChatMessageHistory(session_id, client=client)
    history.add_user_message(session_id)
    other = PgmemChatMessageHistory(session_id[:-1] + "!", client=client)
    other.add_user_message("other")
    assert [m.content for m in PgmemChatMessageHistory(session_id, client=client).messages] == [session_id]
    assert history.session_id == session_id
    if session_id == "plain-id_1":
        assert history.memory == "langchain:plain-id_1"  # verbatim when already a valid key


@pytest.mark.parametrize("session_id", ["", "x" * 201, "nul\x00byte", "\ud800", None, 42])
def test_bad_session_ids(client: pgmem.Client, session_id: Any) -> None:
    with pytest.raises(pgmem.InvalidInput):
        PgmemChatMessageHistory(session_id, client=client)


class NotJson:
    pass


@pytest.mark.parametrize(
    "bad",
    [
        HumanMessage(content="nul \x00 in text"),
        HumanMessage(content="lone \ud800 surrogate"),
        AIMessage(content="nan", additional_kwargs={"score": math.nan}),
        AIMessage(content="inf", response_metadata={"score": math.inf}),
        AIMessage(content="object", additional_kwargs={"obj": NotJson()}),
        HumanMessage(content="x" * (1 << 20) + "y"),
    ],
)
def test_bad_messages_write_nothing(client: pgmem.Client, dsn: str, bad: BaseMessage) -> None:
    history = PgmemChatMessageHistory("s", client=client)
    history.add_user_message("before")
    before = table_counts(dsn)
    with pytest.raises(pgmem.InvalidInput):
        history.add_messages([HumanMessage(content="fine"), bad])
    assert table_counts(dsn) == before
    assert [m.content for m in history.messages] == ["before"]
    with pytest.raises(pgmem.InvalidInput):
        history.add_messages(["not a message"])  # type: ignore[list-item]


async def test_async_with_an_async_client(aclient: pgmem.AsyncClient) -> None:
    history = PgmemChatMessageHistory("s", async_client=aclient)
    sent = every_kind()
    await history.aadd_messages(sent[:3])
    await history.aadd_messages(sent[3:])
    assert await history.aget_messages() == sent
    await history.aclear()
    assert await history.aget_messages() == []


async def test_async_on_a_sync_client_runs_in_a_thread(client: pgmem.Client) -> None:
    history = PgmemChatMessageHistory("s", client=client)
    await history.aadd_messages([HumanMessage(content="one"), AIMessage(content="two")])
    history.add_user_message("three")  # sync and async see the same session
    assert [m.content for m in await history.aget_messages()] == ["one", "two", "three"]
    await history.aclear()
    assert history.messages == []


def test_the_default_client(default_client_env: str) -> None:
    history = PgmemChatMessageHistory("s")
    history.add_user_message("hello")
    assert [m.content for m in PgmemChatMessageHistory("s").messages] == ["hello"]


def test_clients_are_checked(client: pgmem.Client, aclient: pgmem.AsyncClient) -> None:
    with pytest.raises(pgmem.InvalidInput):
        PgmemChatMessageHistory("s", client=aclient)
    with pytest.raises(pgmem.InvalidInput):
        PgmemChatMessageHistory("s", async_client=client)


def test_messages_added_through_the_core_read_as_their_role(client: pgmem.Client) -> None:
    client.messages.add_many(
        "langchain:s",
        [pgmem.Message(content="q", role="user"), pgmem.Message(content="a", role="assistant"),
         pgmem.Message(content="rule", role="system"), pgmem.Message(content="?", role="judge")],
    )  # fmt: skip
    assert PgmemChatMessageHistory("s", client=client).messages == [
        HumanMessage(content="q"),
        AIMessage(content="a"),
        SystemMessage(content="rule"),
        ChatMessage(content="?", role="judge"),
    ]


# -- RunnableWithMessageHistory ----------------------------------------------------------------------------


def chain_with_history(client: pgmem.Client, responses: list[str]) -> RunnableWithMessageHistory:
    prompt = ChatPromptTemplate.from_messages(
        [("system", "You are helpful."), MessagesPlaceholder("history"), ("human", "{question}")]
    )
    model = FakeListChatModel(responses=responses)
    return RunnableWithMessageHistory(
        prompt | model,
        lambda session_id: PgmemChatMessageHistory(session_id, client=client),
        input_messages_key="question",
        history_messages_key="history",
    )


def test_runnable_with_message_history(client: pgmem.Client) -> None:
    chain = chain_with_history(client, ["first answer", "second answer", "third answer"])
    config: Any = {"configurable": {"session_id": "conv 1"}}
    assert chain.invoke({"question": "one?"}, config).content == "first answer"
    assert chain.invoke({"question": "two?"}, config).content == "second answer"
    assert [m.content for m in PgmemChatMessageHistory("conv 1", client=client).messages] == [
        "one?",
        "first answer",
        "two?",
        "second answer",
    ]
    chain.invoke({"question": "elsewhere"}, {"configurable": {"session_id": "conv 2"}})
    assert len(PgmemChatMessageHistory("conv 2", client=client).messages) == 2
    assert len(PgmemChatMessageHistory("conv 1", client=client).messages) == 4


async def test_runnable_with_message_history_async(client: pgmem.Client) -> None:
    chain = chain_with_history(client, ["a1", "a2"])
    config: Any = {"configurable": {"session_id": "async conv"}}
    assert (await chain.ainvoke({"question": "q1"}, config)).content == "a1"
    assert (await chain.ainvoke({"question": "q2"}, config)).content == "a2"
    history = PgmemChatMessageHistory("async conv", client=client)
    assert [type(m) for m in await history.aget_messages()] == [HumanMessage, AIMessage, HumanMessage, AIMessage]


def test_runnable_with_message_history_of_messages(client: pgmem.Client) -> None:
    """Input and output as messages, no keys: the history is the whole input."""
    chain = RunnableWithMessageHistory(
        FakeListChatModel(responses=["r1", "r2"]),
        lambda session_id: PgmemChatMessageHistory(session_id, client=client),
    )
    config: Any = {"configurable": {"session_id": "m"}}
    chain.invoke([HumanMessage(content="hi")], config)
    chain.invoke("plain string input", config)
    assert [m.content for m in PgmemChatMessageHistory("m", client=client).messages] == [
        "hi",
        "r1",
        "plain string input",
        "r2",
    ]


def test_without_langchain_the_import_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['langchain_core'] = None\n"
        "try:\n    import pgmem.integrations.langchain\n"
        "except ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pgmem[langchain]" in out


def test_the_context_under_a_budget_comes_back_as_langchain_messages(client: pgmem.Client) -> None:
    history = PgmemChatMessageHistory("ctx", client=client)
    call = AIMessage(content="", tool_calls=[{"name": "weather", "args": {"city": "Oslo"}, "id": "t1"}])
    turns = [SystemMessage(content="be brief")]
    for i in range(30):
        turns += [HumanMessage(content=f"question {i} about the weather"), AIMessage(content=f"answer {i}")]
    turns += [HumanMessage(content="and in Oslo?"), call, ToolMessage(content="rain", tool_call_id="t1")]
    history.add_messages(turns)
    got = history.context(60, query="weather")
    assert got[0] == turns[0]  # pinned: the system message
    assert got[-2:] == [call, turns[-1]]  # the newest turn, the call with its result
    assert all(m in turns for m in got)
    budgets = [history.context(b) for b in (1, 10, 100, 1000)]
    assert [len(b) for b in budgets] == sorted(len(b) for b in budgets)
    assert budgets[-1] == turns
