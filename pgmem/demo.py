"""``pgmem demo``: a small software team of agent processes sharing one memory.

Four roles run as separate OS processes — product manager, architect, engineer, reviewer — and talk
only through pgmem: each publishes to the shared ``team`` memory and keeps its own ``role:<name>``
memory, finding what is new for it with ``find_news`` and what it cares about with ``get_by_action``
(MetaGPT's ``rc.watch``). The "LLM" is a deterministic stand-in, or OpenAI's chat API when
``OPENAI_API_KEY`` is set (model ``PGMEM_DEMO_MODEL``, default ``gpt-4o-mini``). At the end the parent
prints, from SQL, what the team did.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import time
from dataclasses import dataclass
from typing import Any

import psycopg
from rich.console import Console
from rich.table import Table

from pgmem import queries
from pgmem._sync.client import connect
from pgmem.errors import redact
from pgmem.metagpt.memory import Memory
from pgmem.models import Message, any_to_str

TEAM = "team"
DEADLINE_SECONDS = 50.0
POLL_SECONDS = 0.05


# The actions, named like MetaGPT's (cause_by becomes "pgmem.demo.WritePRD" and so on).
class UserRequirement: ...


class WritePRD: ...


class WriteDesign: ...


class WriteCode: ...


class WriteCodeReview: ...


@dataclass(frozen=True)
class RoleSpec:
    name: str
    watch: tuple[type, ...]


ROLES = (
    RoleSpec("ProductManager", (UserRequirement,)),
    RoleSpec("Architect", (WritePRD,)),
    RoleSpec("Engineer", (WriteDesign, WriteCodeReview)),
    RoleSpec("Reviewer", (WriteCode,)),
)


def _llm(prompt: str, fallback: str) -> str:
    """The real model when OPENAI_API_KEY is set, else (or on any failure) the deterministic text."""
    if not os.environ.get("OPENAI_API_KEY"):
        return fallback
    try:
        import openai

        client = openai.OpenAI(timeout=20.0, max_retries=1)
        answer = client.chat.completions.create(
            model=os.environ.get("PGMEM_DEMO_MODEL", "gpt-4o-mini"),
            messages=[{"role": "user", "content": prompt}],
            max_tokens=400,
        )
        return answer.choices[0].message.content or fallback
    except Exception as exc:  # noqa: BLE001 - the demo must finish without a model; say why
        print(f"warning: the model failed ({type(exc).__name__}: {exc}); using the offline stand-in")
        return fallback


def _files_of(design: str) -> list[str]:
    return re.findall(r"^- (\w+\.py):", design, flags=re.MULTILINE)


def _respond(role: str, msg: Message) -> list[Message]:
    """What ``role`` answers to ``msg``: the team's deterministic script, with the model's words when
    there is a model."""
    reply = {"reply_to": msg.id}
    if role == "ProductManager":
        idea = msg.content
        text = _llm(
            f"Write a short PRD for: {idea}",
            f"PRD: {idea}\nGoals: playable in a terminal, fun in a minute.\n"
            "Requirements:\nR1 arrow keys move the tiles\nR2 equal tiles merge and score\nR3 game over when stuck",
        )
        return [
            Message(
                content=text,
                role=role,
                cause_by=any_to_str(WritePRD),
                sent_from=role,
                send_to={"Architect"},
                metadata=reply,
            )
        ]
    if role == "Architect":
        design = (
            "Design\n- game.py: Board (4x4 grid), move(direction), merge rules, score\n"
            "- main.py: input loop, rendering, game-over message\n"
        )
        text = _llm(f"Write a short software design for this PRD:\n{msg.content}", design)
        if not _files_of(text):
            text = design  # the engineer needs the file list; keep the script's if the model dropped it
        return [
            Message(
                content=text,
                role=role,
                cause_by=any_to_str(WriteDesign),
                sent_from=role,
                send_to={"Engineer"},
                metadata=reply,
            )
        ]
    if role == "Engineer":
        if msg.cause_by.endswith("WriteDesign"):
            out = []
            for name in _files_of(msg.content):
                code = _llm(f"Write {name} for this design:\n{msg.content}", f"# {name}\ndef main():\n    pass\n")
                out.append(
                    Message(
                        content=code,
                        role=role,
                        cause_by=any_to_str(WriteCode),
                        sent_from=role,
                        send_to={"Reviewer"},
                        metadata={**reply, "file": name, "version": 1},
                    )
                )
            return out
        if msg.content.startswith("CHANGES REQUESTED"):
            name = msg.metadata["file"]
            code = _llm(f"Fix {name}: {msg.content}", f"# {name}\ndef main():\n    handle_invalid_input()\n")
            return [
                Message(
                    content=code,
                    role=role,
                    cause_by=any_to_str(WriteCode),
                    sent_from=role,
                    send_to={"Reviewer"},
                    metadata={**reply, "file": name, "version": msg.metadata["version"] + 1},
                )
            ]
        return []
    if role == "Reviewer":
        name, version = msg.metadata["file"], msg.metadata["version"]
        if name == "main.py" and version == 1:
            verdict = "CHANGES REQUESTED: main.py must reject keys other than the arrows"
        else:
            verdict = f"LGTM: {name} v{version}"
        return [
            Message(
                content=verdict,
                role=role,
                cause_by=any_to_str(WriteCodeReview),
                sent_from=role,
                send_to={"Engineer"},
                metadata={**reply, "file": name, "version": version},
            )
        ]
    return []


def role_process(dsn: str, namespace: str, role_name: str, stop: Any) -> None:
    """One agent: poll the team memory, act on news it watches, publish its answers."""
    spec = next(r for r in ROLES if r.name == role_name)
    with connect(dsn, namespace=namespace, min_size=1, max_size=2) as client:
        team = Memory(TEAM, client=client)
        own = Memory(f"role:{role_name}", client=client)
        deadline = time.monotonic() + DEADLINE_SECONDS
        while not stop.is_set() and time.monotonic() < deadline:
            watched = team.get_by_actions(spec.watch)  # index scan on cause_by
            news = own.find_news(watched)  # one query: what this role has not seen yet
            for msg in news:
                if msg.sent_from == role_name:
                    continue
                addressed = msg.send_to & {role_name, "<all>"}
                if not addressed:
                    continue
                own.add(msg)
                answers = _respond(role_name, msg)
                if answers:
                    team.add_batch(answers)  # all answers to one message, atomically
                    own.add_batch(answers)
            if not news:
                time.sleep(POLL_SECONDS)


def _finished(client: Any) -> bool:
    """Done when every file's latest version has been approved."""
    reviews = Memory(TEAM, client=client).get_by_action(WriteCodeReview)
    code = Memory(TEAM, client=client).get_by_action(WriteCode)
    latest: dict[str, int] = {}
    for m in code:
        latest[m.metadata["file"]] = max(latest.get(m.metadata["file"], 0), m.metadata["version"])
    approved = {(m.metadata["file"], m.metadata["version"]) for m in reviews if m.content.startswith("LGTM")}
    return bool(latest) and all((f, v) in approved for f, v in latest.items())


def run(
    dsn: str, *, namespace: str = "demo", console: Console | None = None, idea: str = "a 2048 game in the terminal"
) -> None:
    """Run the team in ``namespace`` (cleared first), wait for it, and print the report."""
    console = console or Console()
    started = time.monotonic()
    with connect(dsn, namespace=namespace) as client:
        for key in client.messages.memories():
            client.messages.clear(key)  # a fresh run each time: same report for the same idea
        ctx = mp.get_context("spawn")
        stop = ctx.Event()
        procs = [ctx.Process(target=role_process, args=(dsn, namespace, r.name, stop), name=r.name) for r in ROLES]
        for p in procs:
            p.start()
        console.print(f"[bold]pgmem demo[/bold]: {len(procs)} agent processes, idea: {idea!r}")
        Memory(TEAM, client=client).add(
            Message(
                content=idea, role="user", cause_by=any_to_str(UserRequirement), sent_from="Human", send_to={"<all>"}
            )
        )
        seen = 0
        try:
            while time.monotonic() - started < DEADLINE_SECONDS + 5:
                messages = Memory(TEAM, client=client).get()
                for m in messages[seen:]:
                    first = m.content.splitlines()[0] if m.content else ""
                    console.print(
                        f"  {m.sent_from:>14} -> {','.join(sorted(m.send_to)):<10} "
                        f"[cyan]{m.cause_by.rpartition('.')[2]:<15}[/cyan] {first[:60]}",
                        highlight=False,
                    )
                seen = len(messages)
                if _finished(client):
                    break
                time.sleep(0.1)
            else:
                console.print("[red]the team did not finish in time[/red]")
        finally:
            stop.set()
            for p in procs:
                p.join(timeout=10)
                if p.is_alive():
                    p.kill()
        elapsed = time.monotonic() - started
    _report(dsn, namespace, console, elapsed)


def _report(dsn: str, namespace: str, console: Console, elapsed: float) -> None:
    q = queries.load("demo")
    params = {"ns": namespace, "memory": TEAM}
    with psycopg.connect(dsn) as conn:
        by_role = conn.execute(q["messages_by_role_and_action"], params).fetchall()
        flow = conn.execute(q["action_flow"], params).fetchall()
    table = Table(title="messages by role and action (SQL: sql/demo.sql messages_by_role_and_action)")
    for col in ("role", "action", "messages", "characters"):
        table.add_column(col, justify="right" if col in ("messages", "characters") else "left")
    for row in by_role:
        table.add_row(*(str(v) for v in row))
    console.print(table)
    edges = Table(title="action flow (SQL: sql/demo.sql action_flow)")
    for col in ("from", "to", "edges", "median delay (s)"):
        edges.add_column(col)
    for row in flow:
        edges.add_row(*(str(v) for v in row))
    console.print(edges)
    console.print(f"finished in {elapsed:.1f} s; {sum(r[2] for r in by_role)} messages in namespace {namespace!r}")
    console.print(f'the data stays in PostgreSQL; look at it with:\n  psql "{redact(dsn)}"', highlight=False)
