"""``pgmem demo``: a small software team of agent processes sharing one memory.

Four roles run as separate OS processes — product manager, architect, engineer, reviewer — and talk
only through pgmem: each publishes to the shared ``team`` memory and keeps its own ``role:<name>``
memory, finding what is new for it with ``find_news`` and what it cares about with ``get_by_action``
(MetaGPT's ``rc.watch``). The "LLM" is a deterministic stand-in that writes short texts derived from the
idea, or OpenAI's chat API when ``OPENAI_API_KEY`` is set (model ``PGMEM_DEMO_MODEL``, default
``gpt-4o-mini``). At the end the parent prints, from SQL (``sql/demo.sql``), what the team did.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from rich.console import Console
from rich.table import Table
from rich.text import Text

from pgmem import connect
from pgmem.errors import DemoIncomplete, redact
from pgmem.integrations.metagpt.memory import Memory
from pgmem.models import MESSAGE_ROUTE_TO_ALL, Message, any_to_str
from pgmem.planning import statements as queries
from pgmem.planning.rows import ActionFlowRow, RoleActionRow

__all__ = ["DemoIncomplete", "run"]

TEAM = "team"
START_SECONDS = 30.0  # for the role processes to import pgmem and connect
DEADLINE_SECONDS = 45.0  # for the team's work, once every role is ready
POLL_SECONDS = 0.05  # LISTEN/NOTIFY wake-ups come with queues; the demo polls


# The actions, named like MetaGPT's (cause_by becomes "pgmem.examples.demo.WritePRD" and so on).
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
    except Exception as exc:  # noqa: BLE001 - the demo must finish without a model; it says why
        print(f"warning: the model failed ({type(exc).__name__}: {exc}); using the offline stand-in", file=sys.stderr)
        return fallback


_FILE_RE = re.compile(r"^- (\w+\.py): *(.*)$", re.MULTILINE)


def _files_of(design: str) -> list[tuple[str, str]]:
    """The ``(file, purpose)`` lines of a design."""
    return [(m.group(1), m.group(2).strip()) for m in _FILE_RE.finditer(design)]


def _reply(role: str, to: Message, action: type, send_to: str, content: str, **extra: Any) -> Message:
    """A message of ``role`` answering ``to``; ``metadata["reply_to"]`` is what sql/demo.sql's flow joins on."""
    return Message(
        content=content,
        role=role,
        cause_by=any_to_str(action),
        sent_from=role,
        send_to={send_to},
        metadata={"reply_to": to.id, **extra},
    )


# The stand-in "LLM": short, deterministic texts derived from the idea. The review rule is part of the
# script (it asks for one fix) so that the flow is the same with a real model and always ends.
def _prd(idea: str) -> str:
    return (
        f"PRD: {idea}\n"
        f"Goal: a first version of {idea} that someone can try within a minute.\n"
        "Requirements:\n"
        f"- R1 the core rules of {idea}, testable without any user interface\n"
        "- R2 one command starts it\n"
        "- R3 invalid input gets a clear message, never a crash\n"
    )


def _design(idea: str) -> str:
    return (
        f"Design for {idea}\n"
        f"- core.py: state and rules of {idea} as pure functions (R1)\n"
        "- main.py: entry point and the input loop that drives core.py (R2, R3)\n"
    )


def _code(name: str, purpose: str, version: int) -> str:
    body = '    raise NotImplementedError("first cut")\n'
    if version > 1:
        body = (
            "    for line in sys.stdin:\n"
            "        if not is_valid(line):\n"
            '            print("invalid input: " + line.strip())  # R3\n'
        )
    return f'"""{name}: {purpose}"""\n\nimport sys\n\n\ndef main() -> None:\n{body}'


def _review(name: str, code: str, version: int) -> str:
    if version == 1 and "input" in code and "invalid" not in code:
        return f"CHANGES REQUESTED: {name} must reject invalid input with a message (R3)"
    return f"LGTM: {name} v{version}"


def _respond(role: str, msg: Message) -> list[Message]:
    """What ``role`` publishes in answer to ``msg``."""
    if role == "ProductManager":
        idea = msg.content
        prd = _llm(f"Write a short PRD (goal, 3 numbered requirements) for: {idea}", _prd(idea))
        return [_reply(role, msg, WritePRD, "Architect", prd, idea=idea)]
    if role == "Architect":
        idea = msg.metadata.get("idea", "the product")
        design = _llm(
            "Write a short software design for this PRD, one line per Python file, "
            f"formatted '- name.py: purpose':\n{msg.content}",
            _design(idea),
        )
        if not _files_of(design):
            design = _design(idea)  # the engineer needs the file list; keep the script's if the model dropped it
        return [_reply(role, msg, WriteDesign, "Engineer", design)]
    if role == "Engineer":
        if msg.cause_by == any_to_str(WriteDesign):
            return [
                _reply(
                    role,
                    msg,
                    WriteCode,
                    "Reviewer",
                    _llm(f"Write {name} ({purpose}) for this design:\n{msg.content}", _code(name, purpose, 1)),
                    file=name,
                    purpose=purpose,
                    version=1,
                )
                for name, purpose in _files_of(msg.content)
            ]
        if msg.content.startswith("CHANGES REQUESTED"):
            name, purpose, version = msg.metadata["file"], msg.metadata["purpose"], msg.metadata["version"] + 1
            code = _llm(f"Rewrite {name} ({purpose}): {msg.content}", _code(name, purpose, version))
            return [_reply(role, msg, WriteCode, "Reviewer", code, file=name, purpose=purpose, version=version)]
        return []  # an approval: nothing to do
    if role == "Reviewer":
        name, purpose, version = msg.metadata["file"], msg.metadata["purpose"], msg.metadata["version"]
        verdict = _review(name, msg.content, version)
        return [_reply(role, msg, WriteCodeReview, "Engineer", verdict, file=name, purpose=purpose, version=version)]
    return []


def role_process(dsn: str, namespace: str, role_name: str, ready: Any, stop: Any) -> None:
    """One agent: poll the team memory, act on the news it watches, publish its answers.

    It runs until the parent sets ``stop`` (when every file is approved) or its own deadline passes: a role
    cannot know alone that nobody will ask it anything more.
    """
    spec = next(r for r in ROLES if r.name == role_name)
    with connect(dsn, namespace=namespace, min_size=1, max_size=2) as client:
        team = Memory(TEAM, client=client)
        own = Memory(f"role:{role_name}", client=client)
        ready.set()
        deadline = time.monotonic() + START_SECONDS + DEADLINE_SECONDS
        while not stop.is_set() and time.monotonic() < deadline:
            watched = team.get_by_actions(spec.watch)  # index scan on cause_by
            news = [  # one query: what this role has not seen yet, then only what is addressed to it
                m
                for m in own.find_news(watched)
                if m.sent_from != role_name and m.send_to & {role_name, MESSAGE_ROUTE_TO_ALL}
            ]
            for msg in news:
                own.add(msg)
                answers = _respond(role_name, msg)
                if answers:
                    team.add_batch(answers)  # all answers to one message, atomically
                    own.add_batch(answers)
            if not news:
                time.sleep(POLL_SECONDS)


def _finished(team: Memory) -> bool:
    """Done when every file's latest version has been approved."""
    latest: dict[str, int] = {}
    for m in team.get_by_action(WriteCode):
        latest[m.metadata["file"]] = max(latest.get(m.metadata["file"], 0), m.metadata["version"])
    approved = {
        (m.metadata["file"], m.metadata["version"])
        for m in team.get_by_action(WriteCodeReview)
        if m.content.startswith("LGTM")
    }
    return bool(latest) and all((f, v) in approved for f, v in latest.items())


def _progress(console: Console, m: Message) -> None:
    first = m.content.strip().splitlines()[0] if m.content.strip() else ""
    line = Text.assemble(
        f"  {m.sent_from:>14} -> {','.join(sorted(m.send_to)):<10} ",
        (f"{m.cause_by.rpartition('.')[2]:<15}", "cyan"),
        f" {first}",
    )
    console.print(line, no_wrap=True, overflow="ellipsis")  # Text: model output is never read as markup


def run(
    dsn: str,
    *,
    namespace: str = "demo",
    console: Console | None = None,
    idea: str = "a 2048 game in the terminal",
    report: Path | None = None,
) -> None:
    """Run the team in ``namespace`` (its memories are cleared first), wait for it, and print the report;
    with ``report``, also write the HTML report of the namespace there (``pgmem report``) and say where.

    Raises:
        DemoIncomplete: a role process died, or the team did not finish in time (after the report).
    """
    console = console or Console()
    started = time.monotonic()
    failure = None
    with connect(dsn, namespace=namespace, min_size=1, max_size=2) as client:
        for key in client.messages.memories():
            client.messages.clear(key)  # a fresh run each time: the same report for the same idea
            client.summaries.delete_all(key)
        team = Memory(TEAM, client=client)
        ctx = mp.get_context("spawn")
        stop = ctx.Event()
        ready = {r.name: ctx.Event() for r in ROLES}
        procs = [
            ctx.Process(target=role_process, args=(dsn, namespace, r.name, ready[r.name], stop), name=r.name)
            for r in ROLES
        ]
        console.print(f"[bold]pgmem demo[/bold]: {len(procs)} agent processes, idea: {idea!r}", highlight=False)
        for p in procs:
            p.start()
        try:
            for p in procs:
                while not ready[p.name].wait(0.1):
                    if not p.is_alive() or time.monotonic() - started > START_SECONDS:
                        failure = f"{p.name} did not start (exit code {p.exitcode})"
                        break
                if failure:
                    break
            if failure is None:
                console.print(f"  team ready in {time.monotonic() - started:.1f} s", highlight=False)
                team.add(
                    Message(
                        content=idea,
                        role="user",
                        cause_by=any_to_str(UserRequirement),
                        sent_from="Human",
                        send_to={MESSAGE_ROUTE_TO_ALL},
                    )
                )
                work_started = time.monotonic()
                seen = 0
                while True:
                    messages = team.get()
                    for m in messages[seen:]:
                        _progress(console, m)
                    seen = len(messages)
                    if _finished(team):
                        break
                    dead = [p for p in procs if not p.is_alive()]
                    if dead:
                        failure = f"{dead[0].name} exited early (exit code {dead[0].exitcode})"
                        break
                    if time.monotonic() - work_started > DEADLINE_SECONDS:
                        failure = f"the team did not finish in {DEADLINE_SECONDS:.0f} s"
                        break
                    time.sleep(0.1)
        finally:
            stop.set()
            for p in procs:
                p.join(timeout=10)
                if p.is_alive():
                    p.kill()
                    p.join()
        if failure is None:
            _summarise(client, console)
    _report(dsn, namespace, console, time.monotonic() - started)
    if report is not None:
        from pgmem.ops.report import write_report

        written = write_report(dsn, report, namespace=namespace)
        console.print("charts of this run, with the SQL behind them:", highlight=False)
        console.print(f"  {written.path.resolve().as_uri()}", highlight=False, soft_wrap=True, markup=False)
    if failure:
        console.print(f"[red]{failure}[/red]", highlight=False)
        raise DemoIncomplete(failure)


def _summarise(client: Any, console: Console) -> None:
    """Compress the team's history into summary rows (``pgmem.summaries``; the messages stay): OpenAI's
    chat API when ``OPENAI_API_KEY`` is set, else the offline summariser."""
    from pgmem.summarizer import CompressionPolicy, OfflineSummarizer, OpenAISummarizer

    llm: Any = (
        OpenAISummarizer(os.environ.get("PGMEM_DEMO_MODEL", "gpt-4o-mini"))
        if os.environ.get("OPENAI_API_KEY")
        else OfflineSummarizer(words_per_line=8)
    )
    client.summaries.compress(TEAM, llm, CompressionPolicy(chunk=4, fanout=2), force=True)
    for s in client.summaries.frontier(TEAM):
        line = Text(f"  summary (level {s.level}, seq {s.first_seq}-{s.last_seq}): {' '.join(s.content.split())}")
        console.print(line, no_wrap=True, overflow="ellipsis")


def _report(dsn: str, namespace: str, console: Console, elapsed: float) -> None:
    q = queries.load("demo")
    params = {"ns": namespace, "memory": TEAM}
    with psycopg.connect(dsn) as conn:
        by_role = [RoleActionRow._make(r) for r in conn.execute(q["messages_by_role_and_action"], params)]
        flow = [ActionFlowRow._make(r) for r in conn.execute(q["action_flow"], params)]
    table = Table(title="messages by role and action (sql/demo.sql: messages_by_role_and_action)")
    for col in ("role", "action", "messages", "characters"):
        table.add_column(col, justify="right" if col in ("messages", "characters") else "left")
    for counts in by_role:
        table.add_row(*(str(v) for v in counts))
    console.print(table)
    edges = Table(title="action flow: which action answered which (sql/demo.sql: action_flow)")
    for col in ("from", "to", "edges", "median delay (s)"):
        edges.add_column(col, justify="right" if col in ("edges", "median delay (s)") else "left")
    for edge in flow:
        edges.add_row(*(str(v) for v in edge))
    console.print(edges)
    console.print(
        f"finished in {elapsed:.1f} s; {sum(r.messages for r in by_role)} messages in namespace {namespace!r}",
        highlight=False,
    )
    # soft_wrap: the command stays on one line, ready to copy.
    console.print("the data stays in PostgreSQL; look at it with:", highlight=False)
    console.print(f'  psql "{redact(dsn)}"', highlight=False, soft_wrap=True, markup=False)
