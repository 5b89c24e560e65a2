"""``pgmem demo``: a small software team of agent processes sharing one memory.

Four roles run as separate OS processes — product manager, architect, engineer, reviewer — and talk
only through pgmem, the way a MetaGPT team talks through its ``Environment``:

* **Routing.** Each role subscribes with its name and its ``rc.watch`` (``client.queues.subscribe``);
  every message goes out with ``client.queues.publish``, which stores it once in the shared ``team``
  memory and delivers it, in the same statement, to the inbox queue of every role it is addressed to.
* **Queues.** A role works its inbox as a queue worker: it claims messages with a lease (woken by
  LISTEN/NOTIFY), and publishes its answers and acknowledges the message in one transaction, so a role
  that dies half-way leaves the message to be claimed again and never answers twice. A failure worth
  retrying is ``nack``-ed with a delay; a message the role cannot act on goes to the dead letters.
  Two faults are scripted so that both show: the stand-in model times out on the architect's first call
  (retried), and the human also asks the engineer directly for code (refused: dead letter). The
  engineer keeps its coding tasks in MetaGPT's ``MessageQueue`` (``todo:Engineer``), one per file.
* **Long-term memory.** Each role's memory is MetaGPT's ``LongTermMemory``: what it watches is kept in
  ``ltm:<role>`` with embeddings (the offline hashing embedder by default), and before it answers, a role
  recalls the related long-term messages with a logged search (``pgmem.retrieval_log``, label
  ``<role>:<action>``); the answer names them in ``metadata["recalled"]``.
* **Summaries.** At the end the team's history is compressed into summary rows (``pgmem.summaries``).

The "LLM" is a deterministic stand-in that writes short texts derived from the idea, or OpenAI's chat API
when ``OPENAI_API_KEY`` is set (model ``PGMEM_DEMO_MODEL``, default ``gpt-4o-mini``). At the end the
parent prints, from SQL (``sql/demo.sql``), what the team did; ``pgmem demo`` also writes the HTML report
of the run, in which every panel has data.
"""

from __future__ import annotations

import importlib
import logging
import multiprocessing as mp
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, LiteralString

import psycopg
from rich.console import Console
from rich.table import Table
from rich.text import Text

from pgmem import Client, connect
from pgmem.errors import DemoIncomplete, MissingExtra, redact
from pgmem.examples import demo_model
from pgmem.integrations.metagpt.longterm import LongTermMemory
from pgmem.integrations.metagpt.memory import Memory
from pgmem.integrations.metagpt.message_queue import MessageQueue
from pgmem.models import MESSAGE_ROUTE_TO_ALL, Message, any_to_str
from pgmem.ops import analytics
from pgmem.planning import statements as queries
from pgmem.planning.queues import QueueItem
from pgmem.planning.rows import ActionFlowRow, RoleActionRow

__all__ = ["DemoIncomplete", "run"]

TEAM = "team"
# Bounds, not expectations (the whole run takes seconds): a role process that is still starting is waited
# for as long as it lives, up to START_LIMIT_SECONDS (a busy machine is slow, not broken); the team fails
# if no message comes for STALL_SECONDS once it works (a real model's call may take ~20 s, retried once).
START_LIMIT_SECONDS = 300.0
STALL_SECONDS = 60.0
WAIT_SECONDS = 0.5  # a role waits this long on its inbox (woken at once by NOTIFY) between checks of `stop`
LEASE_SECONDS = 30.0  # a claimed message not acknowledged by then is claimed again
RETRY_SECONDS = 0.5  # the delay before a message whose handling timed out is retried
RECALL_K = 3  # long-term messages a role recalls before it answers
# What a role's client imports on its first connection (the vector adapters), imported before the roles are
# forked: once instead of four times, and never by a pool's thread while the role's own thread imports too
# (two threads importing numpy for the first time can see it half-initialised).
PRELOAD = ("numpy", "pgvector.psycopg")


# The actions, named like MetaGPT's (cause_by becomes "pgmem.examples.demo.WritePRD" and so on).
class UserRequirement: ...


class WritePRD: ...


class WriteDesign: ...


class WriteCode: ...


class WriteCodeReview: ...


class CodingTask:
    """The engineer's own to-do items (MetaGPT's ``Engineer.code_todos``), one per file to write."""


class ModelTimeout(Exception):
    """The model did not answer in time: worth retrying."""


class NotMyJob(Exception):
    """A message the role cannot act on: retrying would not help, it goes to the dead letters."""


@dataclass(frozen=True)
class RoleSpec:
    """A role: its name (its address in ``send_to``) and the actions it watches (MetaGPT's ``rc.watch``:
    the broadcasts it receives, and what its long-term memory keeps)."""

    name: str
    watch: tuple[type, ...]


ROLES = (
    RoleSpec("ProductManager", (UserRequirement,)),
    RoleSpec("Architect", (WritePRD,)),
    RoleSpec("Engineer", (WriteDesign, WriteCodeReview)),
    RoleSpec("Reviewer", (WriteCode,)),
)


def _reply(
    role: str, reply_to: str, action: type, send_to: str, content: str, recalled: list[Message], **extra: Any
) -> Message:
    """A message of ``role`` answering the message ``reply_to`` (its id: what sql/demo.sql's flow joins on),
    naming the long-term messages the role recalled before it answered."""
    return Message(
        content=content,
        role=role,
        cause_by=any_to_str(action),
        sent_from=role,
        send_to={send_to},
        metadata={"reply_to": reply_to, "recalled": [m.id for m in recalled], **extra},
    )


class _Role:
    """One agent process: its inbox (claimed with leases), its MetaGPT memories, its to-do queue."""

    def __init__(self, client: Client, spec: RoleSpec) -> None:
        self.client, self.spec, self.name = client, spec, spec.name
        # The subscription comes first: a message published before it would reach nobody's inbox.
        client.queues.subscribe(spec.name, watch=spec.watch)
        self.memory = LongTermMemory(f"role:{spec.name}", client=client)
        self.memory.recover_memory(spec.name, spec)  # what the role watches goes to ltm:<role> too
        # MetaGPT's MessageQueue pops at most once (take and acknowledge in one statement): a task popped
        # by an engineer that dies before publishing its code is lost, as in MetaGPT; the inbox has leases.
        self.todo = MessageQueue(f"todo:{spec.name}", client=client)
        self.timeouts = 1 if spec.name == "Architect" else 0  # the scripted fault: the first call times out

    def step(self) -> None:
        """Do one to-do item, else handle what the inbox has (waiting up to WAIT_SECONDS for it)."""
        task = self.todo.pop() if self.name == "Engineer" else None
        if task is not None:
            self._publish(None, self._code(task))
            return
        for item in self.client.queues.inbox(self.name, n=4, lease=LEASE_SECONDS, timeout=WAIT_SECONDS):
            self._handle(item)

    def drain(self) -> None:
        """Handle what was delivered before the stop (the engineer's last approval): nothing stays behind."""
        for item in self.client.queues.inbox(self.name, n=100, lease=LEASE_SECONDS):
            self._handle(item)

    def _handle(self, item: QueueItem) -> None:
        msg = item.message
        try:
            answers, todos = self._respond(msg)
        except ModelTimeout as exc:
            self.client.queues.nack(item, error=str(exc), retry_in=RETRY_SECONDS)
            return
        except NotMyJob as exc:
            self.client.queues.nack(item, error=str(exc), dead=True)
            return
        self.memory.add(msg)
        for task in todos:
            self.todo.push(task)  # its id derives from the message: pushed again while it waits, nothing is added
        self._publish(item, answers)

    def _publish(self, item: QueueItem | None, answers: list[Message]) -> None:
        """Publish the answers and acknowledge ``item`` in one transaction: both happen, or neither."""
        with self.client.transaction() as conn:
            for answer in answers:
                self.client.queues.publish(TEAM, answer, connection=conn)
            if item is not None:
                self.client.queues.ack(item, connection=conn)
        self.memory.add_batch(answers)

    def _recall(self, query: str, action: type) -> list[Message]:
        """The long-term messages most related to ``query`` (a logged search, labelled role:action)."""
        self.client.vectors.wait()  # this role's own long-term writes are embedded in the background
        hits = self.client.vectors.search(
            query, memory=self.memory.memory_storage.key, k=RECALL_K, label=f"{self.name}:{action.__name__}"
        )
        return [h.message for h in hits]

    def _respond(self, msg: Message) -> tuple[list[Message], list[Message]]:
        """What the role publishes in answer to ``msg``, and the to-do items it adds."""
        role = self.name
        if role == "ProductManager":
            idea = msg.content
            recalled = self._recall(idea, WritePRD)
            prd = demo_model.llm(
                f"Write a short PRD (goal, 3 numbered requirements) for: {idea}", demo_model.prd(idea), recalled
            )
            return [_reply(role, msg.id, WritePRD, "Architect", prd, recalled, idea=idea)], []
        if role == "Architect":
            if self.timeouts:
                self.timeouts -= 1
                raise ModelTimeout("the model did not answer in time (scripted: the architect's first call)")
            idea = msg.metadata.get("idea", "the product")
            recalled = self._recall(msg.content, WriteDesign)
            design = demo_model.llm(
                "Write a short software design for this PRD, one line per Python file, "
                f"formatted '- name.py: purpose':\n{msg.content}",
                demo_model.design(idea),
                recalled,
            )
            if not demo_model.files_of(design):
                # The engineer needs the file list: keep the script's if the model dropped it.
                design = demo_model.design(idea)
            return [_reply(role, msg.id, WriteDesign, "Engineer", design, recalled)], []
        if role == "Engineer":
            if msg.cause_by == any_to_str(WriteDesign):
                return [], [_task(msg, name, purpose, 1) for name, purpose in demo_model.files_of(msg.content)]
            if msg.cause_by == any_to_str(WriteCodeReview):
                if msg.content.startswith("CHANGES REQUESTED"):
                    meta = msg.metadata
                    return [], [_task(msg, meta["file"], meta["purpose"], meta["version"] + 1)]
                return [], []  # an approval: nothing to do
            action = msg.cause_by.rpartition(".")[2]
            raise NotMyJob(f"the Engineer codes from designs and reviews, not from {action}: ask the ProductManager")
        if role == "Reviewer":
            name, purpose, version = msg.metadata["file"], msg.metadata["purpose"], msg.metadata["version"]
            recalled = self._recall(msg.content, WriteCodeReview)  # earlier versions, other files
            verdict = demo_model.review(name, msg.content, version)
            meta = {"file": name, "purpose": purpose, "version": version}
            return [_reply(role, msg.id, WriteCodeReview, "Engineer", verdict, recalled, **meta)], []
        raise NotMyJob(f"no role named {role}")

    def _code(self, task: Message) -> list[Message]:
        """The engineer's answer to a to-do item: the file, to the reviewer."""
        name, purpose, version = task.metadata["file"], task.metadata["purpose"], task.metadata["version"]
        recalled = self._recall(task.content, WriteCode)  # the design, earlier reviews
        code = demo_model.llm(task.content, demo_model.code(name, purpose, version), recalled)
        meta = {"file": name, "purpose": purpose, "version": version}
        # It answers the design or review the task came from.
        return [_reply("Engineer", task.metadata["reply_to"], WriteCode, "Reviewer", code, recalled, **meta)]


def _task(source: Message, name: str, purpose: str, version: int) -> Message:
    """A coding task for the engineer's to-do queue; its id derives from the message it answers."""
    what = f"Write {name} ({purpose})" if version == 1 else f"Rewrite {name} ({purpose}): {source.content}"
    return Message(
        id=f"{source.id}:{name}",
        content=f"{what}\n{source.content}" if version == 1 else what,
        role="Engineer",
        cause_by=any_to_str(CodingTask),
        sent_from="Engineer",
        send_to={"Engineer"},
        metadata={"reply_to": source.id, "file": name, "purpose": purpose, "version": version},
    )


def role_process(dsn: str, namespace: str, role_name: str, go: Any, ready: Any, stop: Any) -> None:
    """One agent: claim what its inbox holds, act on it, publish its answers.

    It connects at once, then waits for ``go`` (the parent has emptied the namespace meanwhile) before it
    subscribes. It runs until the parent sets ``stop`` (when every file is approved) or the parent is gone:
    a role cannot know alone that nobody will ask it anything more.
    """
    spec = next(r for r in ROLES if r.name == role_name)
    parent = mp.parent_process()
    # MetaGPT's "the long-term memory is empty" warning, on every fresh run: the demo empties it on purpose.
    logging.getLogger("pgmem.integrations.metagpt").setLevel(logging.ERROR)

    def going() -> bool:
        return not stop.is_set() and (parent is None or parent.is_alive())

    with connect(dsn, namespace=namespace, min_size=1, max_size=3, retrieval_log=True) as client:
        while not go.wait(WAIT_SECONDS):
            if not going():
                return
        agent = _Role(client, spec)
        ready.set()
        while going():
            agent.step()
        agent.drain()


def _start_method() -> str:
    """``fork`` where it is safe and cheapest (Linux, and this process has no other thread: nothing a child
    could inherit half-done; the children connect with clients of their own), else ``forkserver`` (one
    interpreter imports pgmem, the roles are forked from it), else ``spawn`` (each role imports pgmem)."""
    methods = mp.get_all_start_methods()
    if sys.platform == "linux" and "fork" in methods and threading.active_count() == 1:
        return "fork"
    return "forkserver" if "forkserver" in methods else "spawn"


def _finished(team: Memory) -> bool:
    """Done when every file of the design has been written and its latest version approved (the engineer
    writes one file at a time: the first approval can come before the last file)."""
    designs = team.get_by_action(WriteDesign)
    files = {name for d in designs for name, _ in demo_model.files_of(d.content)}
    latest: dict[str, int] = {}
    for m in team.get_by_action(WriteCode):
        latest[m.metadata["file"]] = max(latest.get(m.metadata["file"], 0), m.metadata["version"])
    approved = {
        (m.metadata["file"], m.metadata["version"])
        for m in team.get_by_action(WriteCodeReview)
        if m.content.startswith("LGTM")
    }
    return bool(files) and files <= latest.keys() and all((f, v) in approved for f, v in latest.items())


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
    """Run the team in ``namespace`` (its memories, queues and retrieval log are emptied first), wait for
    it, and print the report; with ``report``, also write the HTML report of the namespace there (``pgmem
    report``) and say where (without the ``plotly`` package, ``pip install 'pgmem[report]'``, it says that
    instead). It says what it is doing as it goes: the role processes starting, each one ready, every
    message, the summaries, the report.

    Raises:
        InvalidInput: ``report`` cannot be written there (:func:`pgmem.ops.report.check_report`); nothing was
            started.
        DemoIncomplete: a role process died, or the team stopped making progress (after the report).
    """
    console = console or Console()
    no_report = None
    if report is not None:
        # loaded here: the report's module is not the demo's start
        from pgmem.ops.report import chart_library, check_report

        check_report(report)
        try:
            chart_library()
        except MissingExtra as exc:  # the team still runs; its end says how to get the charts
            no_report, report = str(exc), None
    started = time.monotonic()
    console.print(f"[bold]pgmem demo[/bold]: {len(ROLES)} agent processes, idea: {idea!r}", highlight=False)
    method = _start_method()
    if method == "fork":
        for module in PRELOAD:  # once here, not in every role (see PRELOAD)
            importlib.import_module(module)
    ctx: Any = mp.get_context(method)  # typeshed: a BaseContext (no Process) for a method not spelt out
    if method == "forkserver":
        ctx.set_forkserver_preload([__name__, *PRELOAD])  # imported once, in the server the roles are forked from
    go, stop = ctx.Event(), ctx.Event()
    ready = {r.name: ctx.Event() for r in ROLES}
    procs = [
        ctx.Process(target=role_process, args=(dsn, namespace, r.name, go, ready[r.name], stop), name=r.name)
        for r in ROLES
    ]
    failure = None
    try:
        # The roles start first (before this process connects: a fork copies no connection, no thread):
        # they import and connect while this process empties the namespace, then wait for `go`.
        for p in procs:
            p.start()
        console.print(f"  starting {len(procs)} role processes ({method})…", highlight=False)
        with (
            console.status("emptying the namespace…") as status,
            connect(dsn, namespace=namespace, min_size=1, max_size=2) as client,
        ):
            _reset(client)  # a fresh run each time: the same report for the same idea
            go.set()
            failure = _wait_ready(procs, ready, console, status, started)
            if failure is None:
                failure = _work(client, procs, console, status, idea)
            if failure is None:
                stop.set()  # the roles finish while this process summarises
                status.update("summarising the team's history…")
                _summarise(client, console)
    finally:
        stop.set()
        for p in procs:
            if p.pid is None:
                continue  # never started
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
    _report(dsn, namespace, console, time.monotonic() - started)
    if report is not None:
        with console.status("writing the HTML report…"):
            from pgmem.ops.report import write_report

            written = write_report(dsn, report, namespace=namespace)
        console.print("charts of this run, with the SQL behind them:", highlight=False)
        console.print(f"  {written.path.resolve().as_uri()}", highlight=False, soft_wrap=True, markup=False)
    elif no_report:
        console.print(f"no HTML report: {no_report}", highlight=False, soft_wrap=True, markup=False)
    if failure:
        console.print(f"[red]{failure}[/red]", highlight=False)
        raise DemoIncomplete(failure)


def _wait_ready(procs: list[Any], ready: dict[str, Any], console: Console, status: Any, started: float) -> str | None:
    """Wait for every role to be ready, saying so as each one is; the failure, if a role process died or
    is still starting after START_LIMIT_SECONDS (a slow start is not a failure: it is waited for)."""
    waiting = list(procs)
    while waiting:
        for p in list(waiting):
            if ready[p.name].is_set():
                waiting.remove(p)
                console.print(f"  {p.name} ready ({time.monotonic() - started:.1f} s)", highlight=False)
            elif not p.is_alive() and not ready[p.name].is_set():
                return f"the {p.name} process exited (exit code {p.exitcode}) before it was ready: see its error above"
        elapsed = time.monotonic() - started
        status.update(f"starting the roles: {len(procs) - len(waiting)} of {len(procs)} ready ({elapsed:.0f} s)")
        if waiting and elapsed > START_LIMIT_SECONDS:
            names = ", ".join(p.name for p in waiting)
            return f"{names} still starting after {START_LIMIT_SECONDS:.0f} s (alive, but is the machine overloaded?)"
        if waiting:
            time.sleep(0.05)
    console.print(f"  team ready in {time.monotonic() - started:.1f} s", highlight=False)
    status.update("the team at work…")
    return None


def _work(client: Client, procs: list[Any], console: Console, status: Any, idea: str) -> str | None:
    """Give the team its work and print every message as it comes, until every file is approved; the
    failure, if a role process died or no message came for STALL_SECONDS."""
    team = Memory(TEAM, client=client)
    # The requirement goes to every role watching requirements (the product manager); the shortcut to the
    # engineer alone, which refuses it (the scripted dead letter).
    for content, send_to in ((idea, MESSAGE_ROUTE_TO_ALL), (f"Skip the PRD, just code {idea}", "Engineer")):
        human = Message(
            content=content, role="user", cause_by=any_to_str(UserRequirement), sent_from="Human", send_to={send_to}
        )
        client.queues.publish(TEAM, human)
    seen = 0
    last = time.monotonic()
    while True:
        messages = team.get()
        for m in messages[seen:]:
            _progress(console, m)
        if len(messages) > seen:
            seen, last = len(messages), time.monotonic()
            status.update(f"the team at work: {seen} messages so far…")
        if _finished(team):
            return None
        dead = [p for p in procs if not p.is_alive()]
        if dead:
            return f"{dead[0].name} exited early (exit code {dead[0].exitcode})"
        if time.monotonic() - last > STALL_SECONDS:
            return f"the team sent no message for {STALL_SECONDS:.0f} s ({seen} messages in all)"
        time.sleep(0.1)


def _reset(client: Client) -> None:
    """Empty what earlier runs left in the namespace: queues (live and archived), memories, summaries and
    logged searches."""
    for role in ROLES:
        for queue in (f"inbox:{role.name}", f"todo:{role.name}"):
            client.queues.clear(queue)
    client.retention.purge_queue_archive(0)
    client.retention.purge_retrieval_log(0)
    for key in client.messages.memories():
        client.messages.clear(key)
        client.summaries.delete_all(key)


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
    with psycopg.connect(dsn) as conn:
        for name, title in (
            ("queues", "queues: inboxes filled by publish, the engineer's to-do queue"),
            ("dead_letters", "dead letters: messages a role could not act on"),
            ("recalls", "long-term recall before answering (pgmem.retrieval_log)"),
        ):
            console.print(_sql_table(conn, q[name], params, f"{title} (sql/demo.sql: {name})"))
    # The report's headline figures, from its query (sql/analytics.sql: totals), so that both count alike:
    # the engineer's to-do items are messages too, stored for its queue but in no memory.
    with psycopg.connect(dsn) as conn:
        totals = analytics.fetch(conn, "totals", analytics.Scope(namespace))[0]
    console.print(
        f"finished in {elapsed:.1f} s; in namespace {namespace!r}: {totals['in_memories']} messages in memories"
        f" (+{totals['queue_only']} only in queues: the engineer's to-do items), {totals['actions']} actions in"
        " memories",
        highlight=False,
    )
    # soft_wrap: the command stays on one line, ready to copy.
    console.print("the data stays in PostgreSQL; look at it with:", highlight=False)
    console.print(f'  psql "{redact(dsn)}"', highlight=False, soft_wrap=True, markup=False)


def _sql_table(conn: psycopg.Connection[Any], query: LiteralString, params: dict[str, Any], title: str) -> Table:
    """A table of ``query``'s rows under its own column names (printed, not decoded)."""
    cur = conn.execute(query, params)
    table = Table(title=title)
    for column in cur.description or []:
        table.add_column(column.name, overflow="fold")
    for row in cur.fetchall():
        table.add_row(*(Text("" if v is None else str(v)) for v in row))
    return table
