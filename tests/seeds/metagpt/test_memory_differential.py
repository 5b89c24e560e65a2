"""MetaGPT 0.8.2's ``metagpt.memory.Memory`` and pgmem's facade, driven by the same random operation
sequences of real ``metagpt.schema.Message`` objects caused by real MetaGPT actions.

Every answer is compared with MetaGPT's (messages compared with MetaGPT's own ``==``), exceptions
included. Documented differences (README, "MetaGPT's Memory, durable and shared"), asserted here:
``get_by_actions`` returns messages in memory order (MetaGPT: grouped by action, in set order, so the
comparison is of multisets); ``index`` is a read-only mapping without MetaGPT's empty entries.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

pytest.importorskip("metagpt.memory", reason="MetaGPT is not installed (bash .ci/seeds installs metagpt==0.8.2)")

import pgmem  # noqa: E402
from pgmem.metagpt import Memory as PgMemory  # noqa: E402
from tests.seeds.metagpt.upstream import Memory, Message, UserRequirement, WriteCode, WriteDesign, WritePRD  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SEQUENCES = 60
OPERATIONS = 30
ACTIONS = [UserRequirement, WritePRD, WriteDesign, WriteCode]
ROLES = ["user", "assistant", "Alice", "Bob"]


class Generator:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.made: list[Message] = []

    def message(self) -> Message:
        rng = self.rng
        if self.made and rng.random() < 0.25:
            old = rng.choice(self.made)
            if rng.random() < 0.5:
                return old.model_copy()  # the same message again
            # a reused id with other content (MetaGPT stores both)
            return Message(id=old.id, content=old.content + " v2", role=old.role, cause_by=old.cause_by)
        message = Message(
            content=rng.choice(["Write a PRD", "设计 API", "fix bug", "LGTM", "x" * 40]) + str(rng.randrange(4)),
            role=rng.choice(ROLES),
            cause_by=rng.choice(ACTIONS),
            sent_from=rng.choice(["", "Alice", "Bob"]),
            send_to=rng.choice([{"<all>"}, {"Bob"}, {"Alice", "Bob"}]),
        )
        self.made.append(message)
        return message

    def operation(self) -> tuple[Any, ...]:
        rng = self.rng
        r = rng.random()
        if r < 0.3:
            return ("add", self.message())
        if r < 0.4:
            return ("add_batch", [self.message() for _ in range(rng.randint(0, 3))])
        if r < 0.47:
            return ("delete", rng.choice(self.made) if self.made else self.message())
        if r < 0.5:
            return ("delete_newest",)
        if r < 0.52:
            return ("clear",)
        if r < 0.62:
            return ("get", rng.randint(-3, 5))
        if r < 0.72:
            observed = [self.message() if rng.random() < 0.3 else rng.choice(self.made) for _ in range(3) if self.made]
            return ("find_news", observed, rng.randint(-2, 4))
        if r < 0.77:
            return ("get_by_role", rng.choice(ROLES))
        if r < 0.82:
            return ("get_by_content", rng.choice(["PRD", "API", "v2", "x", "1"]))
        if r < 0.9:
            return ("get_by_action", rng.choice(ACTIONS + ["metagpt.actions.write_prd.WritePRD", "nothing"]))
        if r < 0.95:
            return ("get_by_actions", set(rng.sample(ACTIONS, rng.randint(0, 3))))
        return ("count",)


def apply(memory: Any, op: tuple[Any, ...]) -> Any:
    name, *args = op
    if name in ("add", "delete"):
        # Each memory gets its own copy: MetaGPT's `add` may mutate the message (ignore_id).
        args = [args[0].model_copy()]
    elif name == "add_batch":
        args = [[m.model_copy() for m in args[0]]]
    try:
        return ("ok", getattr(memory, name)(*args))
    except ValueError as exc:
        return ("ValueError", type(exc).__name__ if not isinstance(exc, pgmem.PgmemError) else "InvalidInput")


@pytest.mark.parametrize("ignore_id", [False, True], ids=["by-id", "ignore-id"])
def test_random_operation_sequences(client: pgmem.Client, ignore_id: bool) -> None:
    rng = random.Random(2024 + ignore_id)
    compared = raised = 0
    for sequence in range(SEQUENCES):
        gen = Generator(rng)
        upstream = Memory(ignore_id=ignore_id)
        ours = PgMemory(f"mg:{ignore_id:d}:{sequence}", client=client, ignore_id=ignore_id)
        for _ in range(OPERATIONS):
            op = gen.operation()
            want, got = apply(upstream, op), apply(ours, op)
            assert want[0] == got[0], (sequence, op, want, got)  # both raise (ValueError) or both answer
            if want[0] == "ValueError":
                raised += 1
            elif op[0] == "get_by_actions":
                assert Counter(m.id + m.content for m in got[1]) == Counter(m.id + m.content for m in want[1])
            else:
                assert got[1] == want[1], (sequence, op)
                if isinstance(got[1], list):
                    assert all(type(m) is Message for m in got[1])
            assert ours.get() == upstream.storage, (sequence, op)
            assert ours.count() == upstream.count()
            assert {k: v for k, v in dict(ours.index).items()} == {k: v for k, v in upstream.index.items() if v}
            compared += 1
    assert compared == SEQUENCES * OPERATIONS
    assert raised > 0  # deletes of messages not stored happen, and raise in both


def test_a_reused_id_with_other_content_is_another_message(client: pgmem.Client) -> None:
    first = Message(content="v1", cause_by=WritePRD)
    second = Message(id=first.id, content="v2", cause_by=WritePRD)
    upstream, ours = Memory(), PgMemory("mg:reused", client=client)
    for memory in (upstream, ours):
        memory.add(first)
        memory.add(second)
        memory.add(first.model_copy())  # already there: ignored
    assert ours.get() == upstream.get() == [first, second]
    assert ours.find_news([first, second, Message(id=first.id, content="v3")]) == upstream.find_news(
        [first, second, Message(id=first.id, content="v3")]
    )
    # The core repository keeps its own rule: one row per id; another content under a stored id is a
    # Conflict and writes nothing (the facade above stores MetaGPT's messages under content-derived ids).
    client.messages.add("core", pgmem.Message(id="same", content="v1"))
    with pytest.raises(pgmem.Conflict):
        client.messages.add("core", pgmem.Message(id="same", content="v2"))
    assert [m.content for m in client.messages.last("core")] == ["v1"]


def test_delete_of_a_message_not_stored_raises_value_error(client: pgmem.Client) -> None:
    with pytest.raises(ValueError):
        Memory().delete(Message(content="never added"))
    with pytest.raises(ValueError):
        PgMemory("mg:delete", client=client).delete(Message(content="never added"))


def test_get_with_a_negative_k_slices_like_metagpt(client: pgmem.Client) -> None:
    messages = [Message(content=f"m{i}") for i in range(4)]
    upstream, ours = Memory(), PgMemory("mg:slice", client=client)
    upstream.add_batch(messages)
    ours.add_batch(messages)
    for k in range(-6, 6):
        assert ours.get(k) == upstream.get(k), k
