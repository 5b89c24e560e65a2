"""Framework adapters against the frameworks' own Postgres stores, on the same server, interleaved.

python -m benchmarks.integrations                      # every part
python -m benchmarks.integrations --parts history,session --quick

Parts (each system gets a fresh database of the same server; the same messages, real English lines):
* history: ``PgmemChatMessageHistory`` vs langchain-postgres' ``PostgresChatMessageHistory`` (a JSONB row
  per message; sync psycopg connection): add 1 / 10 messages, read 100 / 1,000.
* floor: where a history add's time goes on the server (``bench_floor``): the add's statement as shipped,
  the same statement on a schema stripped to the message model's keys, and langchain-postgres' INSERT.
* session: ``PgmemSession`` (on an AsyncClient) vs the Agents SDK's ``SQLAlchemySession`` (psycopg async
  driver): add 1 / 10 items, get 20 of 1,000, pop.
* chatstore: ``PgmemChatStore`` vs ``PostgresChatStore`` of llama-index-storage-chat-store-postgres (one
  array of messages per key, rewritten on each change; sync): add at 10 and at 1,000 messages, get at 10
  and 1,000, delete the last at 10 and 1,000.
* store: LangGraph's store, by ``benchmarks/integrations_store.py`` (its ``run_store(dsn, items=...,
  samples=...)``; ``--quick``: 5,000 items), skipped when that module is absent.

Speed-up = their p50 / pgmem's p50 (above 1: pgmem is faster). langchain-postgres pins pgvector < 0.4 and
cannot share an environment's resolver with pgmem; install it with ``pip install --no-deps
langchain-postgres`` (its chat history needs only psycopg).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import importlib.util
import itertools
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import Jsonb

import pgmem
from benchmarks._common import bench_database, texts, timed_together, write_json
from pgmem.ops import server
from pgmem.security import APP_GROUP

#: Targets as minimum speed-ups (their time / pgmem's): "<= 1.2x its time" is 1/1.2, "no slower" 1.
TARGETS = {
    ("history", "add 1"): 1 / 1.2,
    ("history", "add 10"): 1 / 1.2,
    ("history", "read 100"): 1.0,
    ("history", "read 1000"): 1.0,
    ("session", "add 1"): 2.0,
    ("session", "add 10"): 2.0,
    ("session", "get 20 of 1000"): 2.0,
    ("session", "pop"): 2.0,
    ("chatstore", "add at 10"): 1 / 1.2,
    ("chatstore", "add at 1000"): 5.0,
    ("chatstore", "get at 10"): 1 / 1.2,
    ("chatstore", "get at 1000"): 1 / 1.2,
    ("chatstore", "delete last at 10"): 1 / 1.2,
    ("chatstore", "delete last at 1000"): 1 / 1.2,
}


def _lines() -> Iterator[str]:
    try:
        lines = texts()
    except OSError:  # no shared data set: made-up lines of a similar length
        lines = [f"line {i}: " + "the quick brown fox jumps over the lazy dog " * 2 for i in range(1000)]
    return itertools.cycle(lines)


def _sqlalchemy_url(dsn: str, driver: str) -> str:
    """A SQLAlchemy URL for ``dsn`` (a unix socket directory as the ``host`` query parameter)."""
    params = conninfo_to_dict(dsn)
    user = params.get("user", "postgres")
    host, port, db = params.get("host", ""), params.get("port", "5432"), params.get("dbname", "postgres")
    if host.startswith("/"):
        return f"postgresql+{driver}://{user}@/{db}?host={host}&port={port}"
    return f"postgresql+{driver}://{user}@{host}:{port}/{db}"


def _compare(
    part: str, ops: dict[str, tuple[Callable[[], Any], Callable[[], Any]]], iterations: int, warmup: int = 10
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for op, (ours, theirs) in ops.items():
        timed = timed_together({"pgmem": ours, "theirs": theirs}, iterations=iterations, warmup=warmup)
        speedup = timed["theirs"]["p50_us"] / timed["pgmem"]["p50_us"]
        target = TARGETS.get((part, op))
        out[op] = {
            **timed,
            "speedup": round(speedup, 2),
            "target": None if target is None else round(target, 2),
            "met": None if target is None else speedup >= target,
        }
    return out


# -- LangChain -------------------------------------------------------------------------------------------------


def bench_history(server_dsn: str, iterations: int) -> dict[str, Any]:
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
    from langchain_postgres import PostgresChatMessageHistory

    from pgmem.integrations.langchain import PgmemChatMessageHistory

    lines = _lines()

    def batch(n: int) -> list[BaseMessage]:
        return [(HumanMessage if i % 2 == 0 else AIMessage)(content=next(lines)) for i in range(n)]

    with (
        bench_database(server_dsn, "_lc_pgmem") as ours_dsn,
        bench_database(server_dsn, "_lc_theirs") as theirs_dsn,
        pgmem.connect(ours_dsn, max_size=2) as client,
        psycopg.connect(theirs_dsn) as conn,
    ):
        PostgresChatMessageHistory.create_tables(conn, "chat_history")

        def ours(session: str) -> PgmemChatMessageHistory:
            return PgmemChatMessageHistory(session, client=client)

        def theirs(session: str) -> PostgresChatMessageHistory:
            return PostgresChatMessageHistory("chat_history", str(uuid.uuid5(uuid.NAMESPACE_URL, session)),
                                              sync_connection=conn)  # fmt: skip

        for n in (100, 1000):
            sent = batch(n)
            ours(f"read{n}").add_messages(sent)
            theirs(f"read{n}").add_messages(sent)
        a, b = ours("add"), theirs("add")
        r100, t100, r1000, t1000 = ours("read100"), theirs("read100"), ours("read1000"), theirs("read1000")
        one, ten = batch(1), batch(10)
        return _compare(
            "history",
            {
                "add 1": (lambda: a.add_messages(one), lambda: b.add_messages(one)),
                "add 10": (lambda: a.add_messages(ten), lambda: b.add_messages(ten)),
                "read 100": (lambda: r100.messages, lambda: t100.messages),
                "read 1000": (lambda: r1000.messages, lambda: t1000.messages),
            },
            iterations,
        )


#: What a pgmem message write keeps beyond its two keys (messages by (namespace, id) and (namespace, seq);
#: entries by (namespace, memory, message_id) and (namespace, memory, seq)): the DDL that removes it, for the
#: floor part. Each is something the design asks for (DESIGN.md: "Indexes where the seeds scan", keyword
#: search, the vector log and outbox fed by the trigger, references that cannot dangle).
_FLOOR_DROPS = (
    "ALTER TABLE pgmem.memory_entries DISABLE TRIGGER memory_entries_added",
    "ALTER TABLE pgmem.memory_entries DROP CONSTRAINT memory_entries_memory_fkey",
    "ALTER TABLE pgmem.memory_entries DROP CONSTRAINT memory_entries_message_fkey",
    "ALTER TABLE pgmem.messages DROP COLUMN tsv CASCADE",  # its GIN index goes with it
)
_FLOOR_INDEXES = (
    "messages_id_hash_idx", "messages_cause_by_idx", "messages_role_idx", "messages_sent_from_idx",
    "messages_content_hash_idx", "messages_send_to_idx", "messages_created_idx",
    "memory_entries_cause_by_idx", "memory_entries_message_idx",
)  # fmt: skip


#: The floor part's ablations: the shipped schema without one of the things a message write keeps (as
#: ``pgmem_app``, like the shipped contender; "pgmem, owner" is the one without row-level security). Each
#: contender's p50 against the shipped one's is what that thing costs a write.
_WITHOUT = {
    "without the trigger": ("ALTER TABLE pgmem.memory_entries DISABLE TRIGGER memory_entries_added",),
    "without the entry's foreign keys": _FLOOR_DROPS[1:3],
    "without tsv and its GIN index": _FLOOR_DROPS[3:],
    "without the other GIN index (send_to)": ("DROP INDEX pgmem.messages_send_to_idx",),
    "without five btree indexes (cause_by, role, sender, content hash, created)": tuple(
        f"DROP INDEX pgmem.{name}"
        for name in (
            "messages_cause_by_idx", "messages_role_idx", "messages_sent_from_idx", "messages_content_hash_idx",
            "messages_created_idx",
        )
    ),
}  # fmt: skip


def bench_floor(server_dsn: str, iterations: int) -> dict[str, Any]:
    """Where a history add's time goes on the server: the statements alone, prepared, each in its own
    transaction with its commit (the WAL flush), interleaved in a shuffled order.

    * pgmem: the adapter's ``messages.append`` statement for LangChain messages, as shipped, acting as
      ``pgmem_app`` as a client does (row-level security checks every row written);
    * pgmem, owner: the same as the tables' owner, whom row-level security does not hold;
    * pgmem floor: the same statement on a copy of the schema without anything the message model does not
      need to hold the rows (``_FLOOR_DROPS`` and ``_FLOOR_INDEXES``: the trigger, the entry's foreign keys,
      ``tsv``, the nine secondary indexes), so no schema change can make a write cheaper than this;
    * pgmem without X (``_WITHOUT``): the shipped schema without one thing, acting as ``pgmem_app``: what
      that one thing costs a write (``cost of X``: the shipped p50 minus this one's);
    * langchain-postgres: its one-row INSERT per message (``executemany``) into its table, then COMMIT.
    The target ratio of the history adds is their time <= 1.2x langchain-postgres' whole call."""
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, message_to_dict

    from pgmem.integrations.langchain import PgmemChatMessageHistory
    from pgmem.planning import statements
    from pgmem.planning.rows import json_rows

    append = statements.load("messages")["append"]
    lines = _lines()
    out: dict[str, Any] = {}
    with (
        contextlib.ExitStack() as stack,
        bench_database(server_dsn, "_floor_shipped") as shipped_dsn,
        bench_database(server_dsn, "_floor_bare") as bare_dsn,
        bench_database(server_dsn, "_floor_theirs") as theirs_dsn,
        psycopg.connect(shipped_dsn, autocommit=True) as shipped,
        psycopg.connect(shipped_dsn, autocommit=True) as owner,
        psycopg.connect(bare_dsn, autocommit=True) as bare,
        psycopg.connect(theirs_dsn) as theirs,
    ):
        for statement in _FLOOR_DROPS:
            bare.execute(statement)
        for index in _FLOOR_INDEXES:
            bare.execute(sql.SQL("DROP INDEX pgmem.{}").format(sql.Identifier(index)))
        without: dict[str, psycopg.Connection[Any]] = {}
        for number, (name, statements_) in enumerate(_WITHOUT.items()):
            variant_dsn = stack.enter_context(bench_database(server_dsn, f"_floor_without{number}"))
            conn = without[name] = stack.enter_context(psycopg.connect(variant_dsn, autocommit=True))
            for statement in statements_:
                conn.execute(statement)
        for conn in (shipped, *without.values()):
            conn.execute("SELECT set_config('role', %s, false)", (APP_GROUP,))
        for conn in (shipped, owner, bare, *without.values()):
            conn.execute("SELECT set_config('pgmem.namespace', 'bench', false)")
        theirs.execute(
            "CREATE TABLE chat_history (id serial PRIMARY KEY, session_id uuid NOT NULL, message jsonb NOT NULL,"
            " created_at timestamptz NOT NULL DEFAULT now())"
        )
        theirs.execute("CREATE INDEX chat_history_session_id_idx ON chat_history (session_id)")
        theirs.commit()
        history = PgmemChatMessageHistory("floor", client=None)  # converts only: no client is used
        session = uuid.uuid4()

        def batch(n: int) -> list[BaseMessage]:
            return [(HumanMessage if i % 2 == 0 else AIMessage)(content=next(lines)) for i in range(n)]

        for n in (1, 10):
            calls = iterations + 40
            ours_rows = [json_rows(history._stored(batch(n))) for _ in range((3 + len(without)) * calls)]
            their_rows = [[(session, Jsonb(message_to_dict(m))) for m in batch(n)] for _ in range(calls)]
            ours_iter, their_iter = iter(ours_rows), iter(their_rows)

            def pgmem_call(conn: psycopg.Connection[Any]) -> Callable[[], Any]:
                return lambda: conn.execute(
                    append, {"ns": "bench", "memory": "langchain:floor", "rows": next(ours_iter)}, prepare=True
                )

            def theirs_call() -> None:
                with theirs.cursor() as cur:
                    cur.executemany("INSERT INTO chat_history (session_id, message) VALUES (%s, %s)", next(their_iter))
                theirs.commit()

            timed = timed_together(
                {
                    "pgmem": pgmem_call(shipped),
                    "pgmem, owner": pgmem_call(owner),
                    "pgmem floor": pgmem_call(bare),
                    **{f"pgmem {name}": pgmem_call(conn) for name, conn in without.items()},
                    "langchain-postgres": theirs_call,
                },
                iterations=iterations,
                shuffle=True,
            )
            base = timed["langchain-postgres"]["p50_us"]
            out[f"add {n}"] = {
                **timed,
                "pgmem / theirs": round(timed["pgmem"]["p50_us"] / base, 2),
                "owner / theirs": round(timed["pgmem, owner"]["p50_us"] / base, 2),
                "floor / theirs": round(timed["pgmem floor"]["p50_us"] / base, 2),
                "cost of": {
                    "row-level security": round(timed["pgmem"]["p50_us"] - timed["pgmem, owner"]["p50_us"], 1),
                    **{
                        name.removeprefix("without "): round(
                            timed["pgmem"]["p50_us"] - timed[f"pgmem {name}"]["p50_us"], 1
                        )
                        for name in without
                    },
                },
            }
    return out


# -- OpenAI Agents SDK -------------------------------------------------------------------------------------------


def bench_session(server_dsn: str, iterations: int) -> dict[str, Any]:
    from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession

    from pgmem.integrations.openai_agents import PgmemSession

    lines = _lines()

    def items(n: int) -> list[Any]:
        return [
            {"role": "user", "content": next(lines)}
            if i % 2 == 0
            else {
                "id": f"msg_{i}",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": next(lines), "annotations": []}],
            }
            for i in range(n)
        ]

    loop = asyncio.new_event_loop()
    run = loop.run_until_complete
    with bench_database(server_dsn, "_ag_pgmem") as ours_dsn, bench_database(server_dsn, "_ag_theirs") as theirs_dsn:
        client = run(pgmem.aconnect(ours_dsn, max_size=2))
        engine_url = _sqlalchemy_url(theirs_dsn, "psycopg")
        try:

            def theirs(session: str) -> SQLAlchemySession:
                return SQLAlchemySession.from_url(session, url=engine_url, create_tables=True)

            ours: dict[str, PgmemSession] = {}
            their: dict[str, SQLAlchemySession] = {}
            for name in ("add", "get", "pop"):
                ours[name] = PgmemSession(name, async_client=client)
                their[name] = theirs(name)
            shared_engine = their["add"].engine
            for name in ("get", "pop"):  # one engine (one pool) for every SQLAlchemySession, as an app would
                their[name] = SQLAlchemySession(name, engine=shared_engine, create_tables=True)
            filled = items(1000)
            pops = items(iterations + 20)
            for session in (ours, their):
                run(session["get"].add_items(filled))  # type: ignore[attr-defined]
                run(session["pop"].add_items(pops))  # type: ignore[attr-defined]
            one, ten = items(1), items(10)
            result = _compare(
                "session",
                {
                    "add 1": (
                        lambda: run(ours["add"].add_items(one)),
                        lambda: run(their["add"].add_items(one)),
                    ),
                    "add 10": (
                        lambda: run(ours["add"].add_items(ten)),
                        lambda: run(their["add"].add_items(ten)),
                    ),
                    "get 20 of 1000": (
                        lambda: run(ours["get"].get_items(20)),
                        lambda: run(their["get"].get_items(20)),
                    ),
                    "pop": (lambda: run(ours["pop"].pop_item()), lambda: run(their["pop"].pop_item())),
                },
                iterations,
                warmup=5,
            )
            run(shared_engine.dispose())
            return result
        finally:
            run(client.close())
            loop.close()


# -- LlamaIndex ------------------------------------------------------------------------------------------------------


def bench_chatstore(server_dsn: str, iterations: int) -> dict[str, Any]:
    from llama_index.core.llms import ChatMessage, MessageRole
    from llama_index.storage.chat_store.postgres import PostgresChatStore

    from pgmem.integrations.llama_index import PgmemChatStore

    lines = _lines()

    def batch(n: int) -> list[ChatMessage]:
        return [
            ChatMessage(role=MessageRole.USER if i % 2 == 0 else MessageRole.ASSISTANT, content=next(lines))
            for i in range(n)
        ]

    keys = 16  # each op cycles over 16 keys, so a key grows by a few percent at most during a run
    with (
        bench_database(server_dsn, "_li_pgmem") as ours_dsn,
        bench_database(server_dsn, "_li_theirs") as theirs_dsn,
        pgmem.connect(ours_dsn, max_size=2) as client,
    ):
        ours = PgmemChatStore(client=client)
        theirs = PostgresChatStore.from_params(
            connection_string=_sqlalchemy_url(theirs_dsn, "psycopg"),
            async_connection_string=_sqlalchemy_url(theirs_dsn, "asyncpg"),
            table_name="chatstore",
        )
        ops: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {}
        for size in (10, 1000):
            for store in (ours, theirs):
                for k in range(keys):
                    store.set_messages(f"s{size}-{k}", batch(size))
            message = batch(1)[0]
            for op, call in (
                ("add at", lambda s, key: s.add_message(key, message)),
                ("get at", lambda s, key: s.get_messages(key)),
                ("delete last at", lambda s, key: s.delete_last_message(key)),
            ):
                ours_keys = itertools.cycle([f"s{size}-{k}" for k in range(keys)])
                their_keys = itertools.cycle([f"s{size}-{k}" for k in range(keys)])
                ops[f"{op} {size}"] = (
                    lambda call=call, it=ours_keys: call(ours, next(it)),  # type: ignore[misc]
                    lambda call=call, it=their_keys: call(theirs, next(it)),  # type: ignore[misc]
                )
        return _compare("chatstore", ops, iterations)


# -- LangGraph store (another module) --------------------------------------------------------------------------------


def bench_store(server_dsn: str, iterations: int, quick: bool) -> dict[str, Any] | None:
    if importlib.util.find_spec("benchmarks.integrations_store") is None:
        print("store: skipped (benchmarks/integrations_store.py is not there yet)")
        return None
    module = importlib.import_module("benchmarks.integrations_store")
    kwargs: dict[str, Any] = {"samples": iterations}
    if quick:
        kwargs["items"] = 5_000
    result: dict[str, Any] = module.run_store(server_dsn, **kwargs)
    return result


# -- output ----------------------------------------------------------------------------------------------------------


def print_table(results: dict[str, Any]) -> None:
    print(
        f"{'part':<10} {'operation':<22} {'pgmem p50/p99 us':>20} {'theirs p50/p99 us':>20}"
        f" {'speed-up':>9} {'target':>7}"
    )
    for part in ("history", "session", "chatstore"):
        for op, row in (results.get(part) or {}).items():
            ours, theirs = row["pgmem"], row["theirs"]
            met = "" if row["met"] is None else (" ok" if row["met"] else " MISSED")
            print(
                f"{part:<10} {op:<22} {ours['p50_us']:>10.0f}/{ours['p99_us']:<9.0f}"
                f" {theirs['p50_us']:>10.0f}/{theirs['p99_us']:<9.0f} {row['speedup']:>8.2f}x"
                f" {'>=' + format(row['target'], '.2f') if row['target'] else '':>7}{met}"
            )


@contextlib.contextmanager
def _server(dsn: str | None) -> Iterator[str]:
    """The server every part uses: ``dsn``, else one embedded server for the whole run."""
    import os

    dsn = dsn or os.environ.get("PGMEM_BENCH_DSN")
    if dsn:
        yield dsn
        return
    home = Path(tempfile.mkdtemp(prefix="pgmem-bench-"))
    try:
        yield server.ensure_server(home)
    finally:
        server.stop(home)
        shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=None, help="server to use (default: $PGMEM_BENCH_DSN, else embedded)")
    parser.add_argument("--parts", default="history,session,chatstore,store")
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--quick", action="store_true", help="50 samples a point")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/integrations.json"))
    args = parser.parse_args()
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = set(parts) - {"history", "floor", "session", "chatstore", "store"}
    if unknown:
        parser.error(f"unknown parts: {', '.join(sorted(unknown))}")
    iterations = 50 if args.quick else args.samples
    results: dict[str, Any] = {"started": datetime.now(UTC).isoformat(), "samples": iterations}
    with _server(args.dsn) as server_dsn:
        for part in parts:
            if part == "history":
                if importlib.util.find_spec("langchain_postgres") is None:
                    print("history: skipped (pip install --no-deps langchain-postgres to compare with it)")
                    continue
                results["history"] = bench_history(server_dsn, iterations)
            elif part == "floor":
                if importlib.util.find_spec("langchain_core") is None:
                    print("floor: skipped (pip install 'pgmem[langchain]')")
                    continue
                results["floor"] = bench_floor(server_dsn, iterations)
            elif part == "session":
                results["session"] = bench_session(server_dsn, iterations)
            elif part == "chatstore":
                results["chatstore"] = bench_chatstore(server_dsn, iterations)
            else:
                results["store"] = bench_store(server_dsn, iterations, args.quick)
    write_json(args.out, results)
    print_table(results)
    for op, row in (results.get("floor") or {}).items():
        names = ("pgmem", "pgmem, owner", "pgmem floor", "langchain-postgres")
        cells = "  ".join(f"{name} {row[name]['p50_us']:.0f}" for name in names)
        print(f"floor      {op:<8} p50 us: {cells}; pgmem / theirs {row['pgmem / theirs']}x,"
              f" owner / theirs {row['owner / theirs']}x,"
              f" floor / theirs {row['floor / theirs']}x (target of the adds: <= 1.2x)")  # fmt: skip
        costs = ", ".join(f"{name} {us:.0f}" for name, us in row["cost of"].items())
        print(f"           {op:<8} what each costs the shipped write (us of its p50): {costs}")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
