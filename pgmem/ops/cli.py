"""The ``pgmem`` command line (typer)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from pgmem.checks import check_key, check_namespace
from pgmem.errors import InvalidInput, PgmemError, redact
from pgmem.ops import server as _server
from pgmem.ops.cli_parts import cutoff as _cutoff
from pgmem.ops.cli_parts import print_table as _print_table
from pgmem.settings import get_settings

# Typer's rich tracebacks show every frame's local variables by default: a DSN among them, with its password.
app = typer.Typer(
    help="pgmem: Postgres-native memory for LLM agents.", no_args_is_help=True, pretty_exceptions_show_locals=False
)
server_app = typer.Typer(help="The embedded PostgreSQL server (used when PGMEM_DSN is not set).", no_args_is_help=True)
app.add_typer(server_app, name="server")
console = Console()

DsnOption = Annotated[
    str | None, typer.Option("--dsn", help="PostgreSQL DSN (default: $PGMEM_DSN, else the embedded server).")
]
HomeOption = Annotated[
    Path | None, typer.Option("--home", help="Data directory of the embedded server (default: $PGMEM_HOME).")
]


def _home(home: Path | None) -> Path:
    return home or get_settings().home


def _version(value: bool) -> None:
    if value:
        from pgmem import __version__
        from pgmem.revision import SCHEMA_REVISION

        console.print(f"pgmem {__version__} (schema revision {SCHEMA_REVISION})", highlight=False)
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """pgmem: Postgres-native memory for LLM agents."""


@app.command()
def doctor(
    dsn: DsnOption = None,
    embedder: Annotated[bool, typer.Option(help="Also embed a text with the configured embedder.")] = True,
) -> None:
    """Check what a deployment needs: the server and pgvector, the schema's revision, the app role, the schema
    against what its revision declares (one line per category: tables … grants, metadata filters),
    connections, autovacuum, the embedding backlog, the doorbell, the embedder. Each line OK or what to do;
    exits 1 when a check fails."""
    from pgmem.ops.doctor import run_checks

    checks = run_checks(_dsn(dsn), embedder=embedder)
    marks = {"ok": "[green]ok[/green]  ", "warn": "[yellow]warn[/yellow]", "fail": "[red]FAIL[/red]"}
    for check in checks:
        console.print(f"{marks[check.status]} {check.name}: {check.found}", highlight=False, soft_wrap=True)
        if check.advice:
            console.print(f"       -> {check.advice}", highlight=False, soft_wrap=True)
    if any(check.status == "fail" for check in checks):
        raise typer.Exit(code=1)


@server_app.command("start")
def server_start(home: HomeOption = None) -> None:
    """Start the embedded server (or find it running) and print its DSN."""
    dsn = _server.ensure_server(_home(home))
    console.print(dsn, highlight=False, soft_wrap=True)


@server_app.command("stop")
def server_stop(home: HomeOption = None) -> None:
    """Stop the embedded server."""
    if _server.stop(_home(home)):
        console.print("stopped")
    else:
        console.print("not running")


@server_app.command("status")
def server_status(home: HomeOption = None) -> None:
    """Say whether the embedded server runs, with its pid and DSN."""
    status = _server.status(_home(home))
    if status.running:
        console.print(f"running (pid {status.pid}, data {status.pgdata})", highlight=False)
        console.print(status.dsn, highlight=False, soft_wrap=True)
    else:
        console.print(f"not running (data {status.pgdata})", highlight=False)
        raise typer.Exit(code=3)


def _dsn(dsn: str | None) -> str:
    from pgmem.connecting import resolve_dsn

    return resolve_dsn(dsn)


@app.command()
def migrate(
    dsn: DsnOption = None,
    repair: Annotated[
        bool, typer.Option("--repair", help="Bring a schema that differs from its revision to it, keeping the data.")
    ] = False,
    sql: Annotated[
        bool, typer.Option("--sql", help="Print the SQL the migrations would run (for a DBA) and run nothing.")
    ] = False,
    start: Annotated[
        str | None,
        typer.Option(
            "--from",
            help="With --sql: the revision to start from (base: an empty database; default: the database's).",
            metavar="REV",
        ),
    ] = None,
) -> None:
    """Apply pgmem's migrations (safe to run from many processes at once), check that the schema is what its
    revision declares (exits 1 naming each difference; --repair fixes them, as the tables' owner), then build
    the HNSW index of every registered embedding model that lacks one (clients of the application role
    leave them to the owner). With --sql, print the migrations' SQL script instead (one transaction, with
    the migrations' lock and the revision stamp) and change nothing; the HNSW indexes are not in it."""
    from pgmem.ops import migrate as _migrate
    from pgmem.ops.cli_parts import report_schema

    if start is not None and not sql:
        raise InvalidInput("--from goes with --sql")
    if sql:
        if start is None:
            start = _migrate.current_revision(_dsn(dsn))
        print(_migrate.sql_script(None if start == "base" else start), end="")
        return
    resolved = _dsn(dsn)
    revision = _migrate.upgrade(resolved, check=False)
    console.print(f"schema at revision {revision} ({redact(resolved)})", highlight=False)
    if not report_schema(console, resolved, revision, repair=repair):
        raise typer.Exit(code=1)
    for index in _migrate.build_model_indexes(resolved):
        console.print(f"built index pgmem.{index}", highlight=False)


roles_app = typer.Typer(help="Database roles for row-level security (pgmem.security).", no_args_is_help=True)
app.add_typer(roles_app, name="roles")


@roles_app.command("create")
def roles_create(
    name: Annotated[str, typer.Option("--name", help="The LOGIN role to create (a member of pgmem_app).")],
    password_env: Annotated[
        str | None,
        typer.Option("--password-env", help="Environment variable holding its password (never on the command line)."),
    ] = None,
    dsn: DsnOption = None,
) -> None:
    """Create a least-privilege LOGIN role for agents (idempotent): held by row-level security, it sees one
    namespace per transaction. Run it with a DSN of the tables' owner or a superuser."""
    import os

    import psycopg

    from pgmem.security import check_role_name, create_app_role

    check_role_name(name)
    password = None
    if password_env is not None:
        password = os.environ.get(password_env)
        if not password:
            raise InvalidInput(f"--password-env {password_env}: the variable is unset or empty")
    resolved = _dsn(dsn)
    try:
        with psycopg.connect(resolved, autocommit=True) as conn:
            created = create_app_role(conn, name, password=password)
    except psycopg.OperationalError as exc:
        raise PgmemError(f"cannot connect ({redact(resolved)}): {redact(str(exc)).strip()}") from None
    console.print(f"role {name} {'created' if created else 'already existed'}; member of pgmem_app", highlight=False)


@app.command("purge-brains")
def purge_brains(dsn: DsnOption = None) -> None:
    """Retention job: delete expired BrainMemory rows (every namespace: the tables' owner's DSN) with their
    history and summaries."""
    import pgmem.admin

    with _owner_connection(dsn) as conn:
        purged = sum(pgmem.admin.purge_expired(conn).values())
    console.print(f"purged {purged} expired brain{'' if purged == 1 else 's'}", highlight=False)


def _owner_connection(dsn: str | None) -> Any:
    """A plain autocommit connection as the DSN's own role (a client's pooled connections act as the
    application role): what pgmem.admin's cross-namespace operations need, the tables' owner."""
    import psycopg

    from pgmem.errors import translate

    resolved = _dsn(dsn)
    with translate():
        return psycopg.connect(resolved, autocommit=True)


retention_app = typer.Typer(help="Retention policies (client.retention.set_policy).", no_args_is_help=True)
app.add_typer(retention_app, name="retention")


@retention_app.command("run")
def retention_run(
    dsn: DsnOption = None,
    namespace: Annotated[
        list[str] | None, typer.Option("--namespace", "-n", help="This namespace (repeatable).")
    ] = None,
    all_namespaces: Annotated[
        bool, typer.Option("--all-namespaces", help="Every namespace with a policy (the tables' owner's DSN).")
    ] = False,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Rows per transaction.")] = 1000,
    actor: Annotated[str | None, typer.Option("--actor", help="Who runs it, for the audit row.")] = None,
) -> None:
    """Apply the retention policies now, in short batches; prints the rows removed per namespace and target."""
    import pgmem
    import pgmem.admin

    if bool(namespace) == all_namespaces:
        raise InvalidInput("give --namespace NS (repeatable) or --all-namespaces")
    for ns in namespace or ():
        check_namespace(ns)
    if all_namespaces:
        with _owner_connection(dsn) as conn:
            removed = pgmem.admin.run_retention(conn, batch_size=batch_size, actor=actor)
    else:
        with pgmem.connect(_dsn(dsn), min_size=0, max_size=1) as client:
            removed = {
                ns: client.with_namespace(ns).retention.run(batch_size=batch_size, actor=actor)
                for ns in namespace or ()
            }
    targets = sorted({t for counts in removed.values() for t in counts})
    _print_table(
        console,
        "removed",
        [{"namespace": ns, **c} for ns, c in removed.items()],
        {"namespace": "namespace", **{t: t for t in targets}},
    )
    total = sum(sum(c.values()) for c in removed.values())
    console.print(
        f"removed {total} rows in {len(removed)} namespace{'' if len(removed) == 1 else 's'}", highlight=False
    )


def _age_option(name: str, what: str) -> Any:
    return typer.Option(name, help=f"Delete {what} older than this: an age (90s, 15m, 2h, 7d, 1w) or an ISO time.")


@app.command()
def purge(
    dsn: DsnOption = None,
    namespace: Annotated[
        list[str] | None,
        typer.Option(
            "--namespace", "-n", help="This namespace (repeatable; default: every one holding something to purge)."
        ),
    ] = None,
    queue_archive: Annotated[str | None, _age_option("--queue-archive", "acknowledged queue items")] = None,
    queue: Annotated[str | None, typer.Option("--queue", help="Only this queue's archive.")] = None,
    vector_log: Annotated[str | None, _age_option("--vector-log", "vector log rows (FAISS caches' replay)")] = None,
    retrieval_log: Annotated[str | None, _age_option("--retrieval-log", "logged searches")] = None,
    brains: Annotated[bool, typer.Option("--brains", help="Delete expired BrainMemory state.")] = False,
) -> None:
    """Retention: purge what pgmem keeps only for a while, with explicit cutoffs, namespace by namespace.

    Clients sweep the vector log (and the retrieval log, when PGMEM_RETRIEVAL_LOG_RETENTION is set) on
    their own; this command is for the rest and for one-off clean-ups. Prints the rows removed.
    """
    import pgmem

    cutoffs = {
        "queue archive": _cutoff(queue_archive, "--queue-archive"),
        "vector log": _cutoff(vector_log, "--vector-log"),
        "retrieval log": _cutoff(retrieval_log, "--retrieval-log"),
    }
    if queue is not None and queue_archive is None:
        raise InvalidInput("--queue selects the archive of one queue: give --queue-archive too")
    if not brains and all(c is None for c in cutoffs.values()):
        raise InvalidInput("nothing to purge: give --queue-archive, --vector-log, --retrieval-log or --brains")
    # Every name is checked before the first purge: a bad one further down the list must not stop the
    # command half-way.
    for ns in namespace or ():
        check_namespace(ns)
    if queue is not None:
        check_key(queue, "queue name")
    headers = {
        "queue archive": "queue items",
        "brains": "expired brains",
        "vector log": "vector log rows",
        "retrieval log": "logged searches",
    }
    removed: dict[str, dict[str, int]] = {}
    if not namespace:  # every namespace: an administrator's listing (the tables' owner's DSN)
        import pgmem.admin

        with _owner_connection(dsn) as conn:
            namespace = pgmem.admin.namespaces(conn)
    with pgmem.connect(_dsn(dsn), min_size=0, max_size=1) as client:
        for ns in namespace:
            retention = client.with_namespace(ns).retention
            counts = removed[ns] = {}
            if (age := cutoffs["queue archive"]) is not None:
                counts["queue archive"] = retention.purge_queue_archive(age, queue=queue)
            if brains:
                counts["brains"] = retention.purge_expired_brains()
            if (age := cutoffs["vector log"]) is not None:
                counts["vector log"] = retention.purge_vector_log(age)
            if (age := cutoffs["retrieval log"]) is not None:
                counts["retrieval log"] = retention.purge_retrieval_log(age)
    kinds = [k for k in headers if cutoffs.get(k) is not None or (k == "brains" and brains)]
    rows: list[dict[str, object]] = [{"namespace": ns, **counts} for ns, counts in removed.items()]
    _print_table(console, "purged", rows, {"namespace": "namespace", **{k: headers[k] for k in kinds}})
    totals = ", ".join(f"{headers[k]} {sum(c[k] for c in removed.values())}" for k in kinds)
    console.print(f"purged in {len(removed)} namespace{'' if len(removed) == 1 else 's'}: {totals}", highlight=False)


SinceOption = Annotated[
    str | None,
    typer.Option(
        "--since", help="Only messages since then: a span back from now (90s, 15m, 2h, 7d, 1w) or an ISO time."
    ),
]


@app.command()
def stats(
    dsn: DsnOption = None,
    namespace: Annotated[
        str | None,
        typer.Option(
            "--namespace",
            "-n",
            help="Only this namespace. One with no rows at all gets a warning on stderr (exit code 0).",
        ),
    ] = None,
    since: SinceOption = None,
    fmt: Annotated[str, typer.Option("--format", help="table (default), json (one object) or csv.")] = "table",
    watch: Annotated[
        float | None,
        typer.Option(
            "--watch",
            help="Print again every SECONDS (e.g. --watch 2) until Ctrl-C, which exits 0.",
            metavar="SECONDS",
        ),
    ] = None,
) -> None:
    """The main figures from pgmem's analytics views (docs/analytics.md), as tables, JSON or CSV.

    Messages by namespace, memory, role and action; agents; the action flow; who talks to whom; queue
    health; logged searches; summaries. `-n NS` naming a namespace that holds nothing prints a warning on
    stderr ("namespace 'x' has no rows: ... check the name / PGMEM_NAMESPACE") and exits 0.
    """
    from pgmem.ops import stats_cli

    def warn(text: str) -> None:
        Console(stderr=True).print(f"[yellow]warning:[/yellow] {text}", highlight=False, soft_wrap=True)

    stats_cli.run(_dsn(dsn), namespace=namespace, since=since, fmt=fmt, watch=watch, console=console, warn=warn)


@app.command("export")
def export_(
    namespace: Annotated[str, typer.Option("--namespace", "-n", help="The namespace to export.")],
    dsn: DsnOption = None,
    memory: Annotated[
        list[str] | None,
        typer.Option("--memory", help="Only this memory, its messages, vectors and summaries (repeatable)."),
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write here (default: standard output).")] = None,
) -> None:
    """Export a namespace as JSON lines, for `pgmem import` into another database or namespace: memories,
    messages (every column, exactly), entries in order, embeddings (by model name and dimension), memories'
    models, summaries, queue items (with their state), items (with TTLs), BrainMemory state, stores,
    subscriptions, retention policies, forks and marks: every table but those listed here.

    Not exported: logs and audit (vector log, retrieval log, recall samples, forget audit, acknowledged queue
    items, idempotency keys), state the import rebuilds (memory counts, the embedding queue), the doorbell,
    the namespace's notification key, and items' vectors. Read as the namespace's role, in one snapshot.
    """
    from pgmem.ops import portability

    written = portability.export_to(_dsn(dsn), namespace, out, memories=memory)
    Console(stderr=True).print(f"exported {written} lines of namespace {namespace!r}", highlight=False)


@app.command("import")
def import_(
    source: Annotated[str, typer.Argument(help="The export's file, or - for standard input.", metavar="FILE|-")],
    dsn: DsnOption = None,
    namespace: Annotated[
        str | None, typer.Option("--namespace", "-n", help="Import into this namespace (default: the file's).")
    ] = None,
) -> None:
    """Import a `pgmem export` file, in one transaction: a bad line (not JSON, unknown type, missing field,
    wrong dimension, a newer format) is an InvalidInput naming its line, and a row the namespace already
    holds (a message id, a memory, an item) a Conflict; either way nothing is imported."""
    from pgmem.ops import portability

    target, done = portability.import_from(_dsn(dsn), source, namespace=namespace)
    counts = ", ".join(f"{n} {kind}" for kind, n in done.rows.items()) or "no rows"
    console.print(f"imported {done.lines} lines into namespace {target!r}: {counts}", highlight=False, soft_wrap=True)


@app.command()
def report(
    out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the HTML page.")] = Path("pgmem-report.html"),
    dsn: DsnOption = None,
    namespace: Annotated[str | None, typer.Option("--namespace", "-n", help="Only this namespace.")] = None,
    since: SinceOption = None,
    memory: Annotated[
        str | None, typer.Option("--memory", help="Draw this memory's action flow (default: each namespace's largest).")
    ] = None,
) -> None:
    """Write a self-contained HTML report (charts and the SQL behind them); opens offline in any browser.
    Needs the plotly package: pip install 'pgmem\\[report]'."""
    from pgmem.ops import analytics
    from pgmem.ops.report import write_report

    written = write_report(
        _dsn(dsn),
        out,
        namespace=namespace,
        since=analytics.parse_since(since),
        memory=memory,
        replicas=get_settings().replica_list,
    )
    console.print(
        f"report on {written.messages} messages in memories (+{written.queue_only} only in queues) written to"
        f" {written.path.resolve()}",
        highlight=False,
        soft_wrap=True,
    )


@app.command()
def embed(
    dsn: DsnOption = None,
    namespace: Annotated[
        str | None, typer.Option("--namespace", "-n", help="Only this namespace (default: every one).")
    ] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Texts per provider call.")] = 256,
) -> None:
    """Fill missing embeddings: embed every queued message (e.g. after the provider was down).

    Without --namespace, every namespace's: listing them takes the tables' owner's DSN.

    Uses the configured embedder (PGMEM_EMBEDDER); messages queued for other models are left queued and
    counted. Earlier backoffs are ignored: a backfill retries everything now.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    import pgmem

    if namespace is None:  # every namespace: an administrator's listing (the tables' owner's DSN)
        import pgmem.admin

        with _owner_connection(dsn) as conn:
            namespaces = pgmem.admin.namespaces_with_pending(conn)
    else:
        namespaces = [namespace]
    with pgmem.connect(_dsn(dsn), namespace=namespace or "default", min_size=0, max_size=2) as client:
        model = client.embedder.model
        totals = {ns: client.with_namespace(ns).vectors.pending() for ns in namespaces}
        todo = sum(p.get(model, 0) for p in totals.values())
        embedded = failed = 0
        errors: list[str] = []
        with Progress(
            TextColumn("[bold]embedding[/bold] {task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        ) as progress:
            task = progress.add_task(model, total=todo)
            for ns in namespaces:
                scoped = client.with_namespace(ns)
                report = scoped.vectors.embed_pending(
                    batch_size=batch_size, retry_now=True, progress=lambda n: progress.advance(task, n)
                )
                embedded += report.embedded
                failed += report.failed
                errors += report.errors
        remaining = {ns: client.with_namespace(ns).vectors.pending() for ns in namespaces}
    left = sum(sum(p.values()) for p in remaining.values())
    console.print(f"{embedded} embedded with {model}, {failed} failed, {left} still queued", highlight=False)
    for error in errors[:5]:
        console.print(f"[red]provider error:[/red] {error}", highlight=False)
    others = sorted({name for p in remaining.values() for name in p if name != model})
    if others:
        console.print(
            f"queued for other models: {', '.join(others)} (set PGMEM_EMBEDDER to embed them; "
            "a Precomputed model's vectors come with the messages: add(..., embedding=...))"
        )
    if failed:
        raise typer.Exit(code=1)


@app.command("eval")
def eval_(
    cases: Annotated[Path, typer.Argument(help="JSON lines: {memory, query, relevant: [message ids]} per line.")],
    dsn: DsnOption = None,
    namespace: Annotated[str, typer.Option("--namespace", "-n", help="The namespace the memories are in.")] = "default",
    k: Annotated[int, typer.Option("--k", "-k", help="Results per search; the metrics' cut-off.")] = 10,
    retrievers: Annotated[str, typer.Option(help="Comma-separated: vector, keyword, hybrid, cache.")] = "",
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the report here as JSON.")] = None,
) -> None:
    """Score each search on an evaluation set: recall@k, NDCG@k, hit@k, MRR and p50/p99 latency per retriever.

    The vector retrievers embed the queries with the configured embedder (PGMEM_EMBEDDER), once, beforehand.
    """
    import json

    import pgmem
    from pgmem import eval as evaluation

    check_namespace(namespace)
    names = [r.strip() for r in retrievers.split(",") if r.strip()] or list(evaluation.RETRIEVERS)
    todo = evaluation.read_cases(cases)
    with pgmem.connect(_dsn(dsn), namespace=namespace, min_size=0, max_size=1) as client:
        with console.status(f"{len(todo):,} queries x {len(names)} retrievers"):
            report = evaluation.evaluate(client, todo, k=k, retrievers=names)
    console.print(report.table(), highlight=False, markup=False)
    if json_out is not None:
        json_out.write_text(json.dumps(report.as_dict(), indent=2) + "\n", encoding="utf-8")


@app.command()
def mcp(
    dsn: DsnOption = None,
    namespace: Annotated[str, typer.Option("--namespace", "-n", help="The namespace served.")] = "default",
    transport: Annotated[str, typer.Option(help="stdio, or http (streamable, at /mcp).")] = "stdio",
    host: Annotated[str, typer.Option(help="HTTP: the address.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="HTTP: the port.")] = 8000,
    vectors: Annotated[bool, typer.Option(help="Embed what remember stores (PGMEM_EMBEDDER).")] = True,
) -> None:
    """Serve one namespace's memory to MCP clients: remember, search, recent, list_memories, forget."""
    try:
        from pgmem.ops.mcp import serve
    except ImportError as exc:  # the extra is missing
        raise InvalidInput(f"the MCP server needs the mcp package: pip install 'pgmem[mcp]' ({exc.name})") from None
    serve(_dsn(dsn), namespace, transport=transport, host=host, port=port, vectors=vectors)  # type: ignore[arg-type]


@app.command()
def demo(
    dsn: DsnOption = None,
    namespace: Annotated[str, typer.Option("--namespace", "-n", help="Namespace of the demo run.")] = "demo",
    idea: Annotated[str, typer.Option("--idea", help="What the team builds.")] = "a 2048 game in the terminal",
    report: Annotated[
        Path, typer.Option("--report", help="Where to write the run's HTML report (see `pgmem report`).")
    ] = Path("pgmem-demo-report.html"),
) -> None:
    """Run a small software team as separate processes sharing one memory, then report from SQL."""
    from pgmem.examples.demo import run
    from pgmem.ops.report import check_report

    check_report(report)  # before anything starts: a path that cannot be written fails now, not after the run
    if not dsn and not get_settings().dsn and not _server.status(get_settings().home).running:
        # The one wait before the demo's own progress: say what it is (seconds the first time: initdb).
        console.print(f"starting the embedded PostgreSQL under {get_settings().home}…", highlight=False)
    run(_dsn(dsn), namespace=namespace, console=console, idea=idea, report=report)


def main() -> None:
    try:
        app()
    except PgmemError as exc:
        # escape: a message's own brackets (pip install 'pgmem[report]') are text, not rich markup
        Console(stderr=True).print(
            f"[red]error:[/red] {type(exc).__name__}: {escape(redact(str(exc)))}", highlight=False
        )
        raise SystemExit(1) from None
    except Exception as exc:  # noqa: BLE001 - a bug or a driver error: its traceback, with no password in it
        import traceback

        text = "".join(traceback.format_exception(exc))
        Console(stderr=True).print(redact(text), highlight=False, markup=False, end="")
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
