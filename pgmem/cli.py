"""The ``pgmem`` command line (typer)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from pgmem import server as _server
from pgmem.errors import PgmemError, redact
from pgmem.settings import get_settings

app = typer.Typer(help="pgmem: Postgres-native memory for LLM agents.", no_args_is_help=True)
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
    from pgmem._sync.client import _resolve_dsn

    return _resolve_dsn(dsn)


@app.command()
def migrate(dsn: DsnOption = None) -> None:
    """Apply pgmem's migrations (safe to run from many processes at once)."""
    from pgmem import migrate as _migrate

    resolved = _dsn(dsn)
    revision = _migrate.upgrade(resolved)
    console.print(f"schema at revision {revision} ({redact(resolved)})", highlight=False)


@app.command("purge-brains")
def purge_brains(dsn: DsnOption = None) -> None:
    """Retention job: delete expired BrainMemory rows (every namespace) with their history and summaries."""
    import pgmem

    with pgmem.connect(_dsn(dsn), min_size=0, max_size=1) as client:
        purged = client.brains.purge_expired()
    console.print(f"purged {purged} expired brain{'' if purged == 1 else 's'}", highlight=False)


@app.command()
def stats(
    dsn: DsnOption = None,
    namespace: Annotated[str | None, typer.Option("--namespace", "-n", help="Only this namespace.")] = None,
) -> None:
    """Message counts by namespace, memory, role and action."""
    import pgmem

    with pgmem.connect(_dsn(dsn), namespace=namespace or "default", min_size=0, max_size=1) as client:
        rows = client.messages.stats(all_namespaces=namespace is None)
    table = Table(title="messages by namespace, memory, role and action")
    for column in ("namespace", "memory", "role", "action", "messages"):
        table.add_column(column, justify="right" if column == "messages" else "left")
    for ns, memory, role, action, count in rows:
        table.add_row(ns, memory, role, action or "-", str(count))
    console.print(table)
    console.print(f"{sum(r[4] for r in rows)} message references in {len({(r[0], r[1]) for r in rows})} memories")


@app.command()
def embed(
    dsn: DsnOption = None,
    namespace: Annotated[
        str | None, typer.Option("--namespace", "-n", help="Only this namespace (default: every one).")
    ] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Texts per provider call.")] = 256,
) -> None:
    """Fill missing embeddings: embed every queued message (e.g. after the provider was down).

    Uses the configured embedder (PGMEM_EMBEDDER); messages queued for other models are left queued and
    counted. Earlier backoffs are ignored: a backfill retries everything now.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    import pgmem

    with pgmem.connect(_dsn(dsn), namespace=namespace or "default", min_size=0, max_size=2) as client:
        if namespace is None:
            namespaces = [r[0] for r in client.vectors._rows("outbox_namespaces", {}, None)]
        else:
            namespaces = [namespace]
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
        console.print(f"queued for other models (set PGMEM_EMBEDDER to embed them): {', '.join(others)}")
    if failed:
        raise typer.Exit(code=1)


@app.command()
def demo(
    dsn: DsnOption = None,
    namespace: Annotated[str, typer.Option("--namespace", "-n", help="Namespace of the demo run.")] = "demo",
    idea: Annotated[str, typer.Option("--idea", help="What the team builds.")] = "a 2048 game in the terminal",
) -> None:
    """Run a small software team as separate processes sharing one memory, then report from SQL."""
    from pgmem.demo import run

    run(_dsn(dsn), namespace=namespace, console=console, idea=idea)


def main() -> None:
    try:
        app()
    except PgmemError as exc:
        Console(stderr=True).print(f"[red]error:[/red] {type(exc).__name__}: {exc}", highlight=False)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
