"""Whether a database's schema is what its revision declares, what differs, and the repair (issue 34).

The revision a database is stamped with (``pgmem.alembic_version``) says which migrations ran, and a stamp
can lie: a database migrated while revisions 0004-0007 were empty placeholders was stamped 0007, and the
next ``pgmem migrate`` ran only the later ones, leaving tables without row-level security, policies and
grants. So after migrating, pgmem checks the live catalog against the declaration of the revision it
needs (the head): pgmem/ops/schema.py for tables, sql/ for the database's code, the migrations' rules for
the rest:

========================  ======================================================================================
tables, columns, indexes  alembic's autogenerate comparison with pgmem/ops/schema.py, configured as
and constraints           migrations/env.py (per-model HNSW indexes are built at run time: not drift);
                          CHECK constraints by name, UNLOGGED, storage parameters (pgmem.ops.drift_schema)
row-level security,       enabled and forced, both policies as migration 0004 writes them (and no other
policies                  permissive one) on every table keyed by namespace (pgmem.ops.drift_access)
grants                    what ``pgmem_app`` may do: migrations 0004, 0012 and 0013 (pgmem.ops.drift_access)
functions, triggers,      sql/'s declarations replayed in a savepoint and compared as Postgres prints them;
views                     views run with the caller's rights (pgmem.ops.drift_code, pgmem.ops.drift_access)
metadata filters          migration 0016's containment function, operator, operator class and indexes
keyword search            migration 0027's match function, operator, operator class and index
========================  ======================================================================================

A difference is ``drift`` (the schema lacks or contradicts what its revision declares: ``pgmem migrate``
fails and says to repair) or a ``warning`` (something extra, left as it is; a comment or a storage
parameter; what only a superuser can create). :func:`repair` brings a drifted schema to its revision in
the caller's transaction: it creates what is missing from the declarations and never drops data (an extra
table, column or index stays; pgmem's own index or constraint of another definition is built again).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast

import psycopg
from psycopg import sql

from pgmem.errors import PermissionDenied, PgmemError

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

__all__ = ["CATEGORIES", "Difference", "Fix", "Verification", "owner_of", "raw", "repair", "running", "verify"]

Severity = Literal["drift", "warning"]

#: The categories of differences, in the order they are reported (and repaired, but for the code: see
#: :func:`repair`).
CATEGORIES = (
    "tables",
    "columns",
    "indexes",
    "constraints",
    "functions",
    "triggers",
    "views",
    "row-level security",
    "policies",
    "grants",
    "metadata filters",
    "keyword search",
)

#: What brings one difference to the declaration, run in the repairing transaction.
Fix = Callable[["Connection"], None]


@dataclass(frozen=True)
class Difference:
    """One way the live schema differs from what its revision declares.

    Attributes:
        category: one of :data:`CATEGORIES`.
        subject: what differs (``pgmem.messages``, ``pgmem.messages.role``, ``pgmem.fts_query(p_query text)``).
        detail: how (``row-level security not forced``, ``missing``).
        severity: ``drift`` or ``warning``.
        fix: what :func:`repair` runs for it (None: it does not, e.g. a column of another type).
    """

    category: str
    subject: str
    detail: str
    severity: Severity = "drift"
    fix: Fix | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return f"{self.category}: {self.subject}: {self.detail}"


@dataclass(frozen=True)
class Verification:
    """What :func:`verify` found: every difference, and what it could not compare (``notes``)."""

    differences: tuple[Difference, ...]
    notes: tuple[str, ...] = ()

    @property
    def drift(self) -> tuple[Difference, ...]:
        return tuple(d for d in self.differences if d.severity == "drift")

    @property
    def warnings(self) -> tuple[Difference, ...]:
        return tuple(d for d in self.differences if d.severity == "warning")

    def grouped(self, severity: Severity | None = None) -> dict[str, list[Difference]]:
        """The differences (of ``severity``) by category, in the order of :data:`CATEGORIES`."""
        groups: dict[str, list[Difference]] = {c: [] for c in CATEGORIES}
        for difference in self.differences:
            if severity is None or difference.severity == severity:
                groups.setdefault(difference.category, []).append(difference)
        return {c: found for c, found in groups.items() if found}

    def summary(self, severity: Severity | None = "drift") -> str:
        """``"164 differences (row-level security 21, policies 42, grants 101)"`` (None: of any severity)."""
        groups = self.grouped(severity)
        total = sum(map(len, groups.values()))
        counts = ", ".join(f"{category} {len(found)}" for category, found in groups.items())
        return f"{total} difference{'' if total == 1 else 's'}" + (f" ({counts})" if counts else "")


def running(*statements: sql.SQL | sql.Composed) -> Fix:
    """The fix that runs ``statements``."""

    def fix(connection: Connection) -> None:
        for statement in statements:
            raw(connection).execute(statement)

    return fix


def raw(connection: Connection) -> psycopg.Connection[Any]:
    """The psycopg connection under a SQLAlchemy one (same transaction)."""
    return cast(psycopg.Connection[Any], connection.connection.driver_connection)


@dataclass(frozen=True)
class Owner:
    """Who runs the check: whether a superuser, the tables' owner (the role that owns
    ``pgmem.alembic_version``: the migrating role) and whether the current role may act as it."""

    user: str
    superuser: bool
    owner: str
    acts_as_owner: bool


_OWNER = """
SELECT current_user::text, r.rolsuper, pg_get_userbyid(c.relowner)::text, r.rolsuper OR pg_has_role(c.relowner, 'USAGE')
FROM pg_class AS c, pg_roles AS r
WHERE c.oid = 'pgmem.alembic_version'::regclass AND r.rolname = current_user"""


def owner_of(conn: psycopg.Connection[Any]) -> Owner:
    row = conn.execute(_OWNER).fetchone()
    assert row is not None
    return Owner(*row)


def verify(connection: Connection, *, code: bool = True) -> Verification:
    """Every difference between the live schema and the revision's declaration, read in the caller's
    transaction (what it replays to compare the code is rolled back).

    Args:
        connection: a SQLAlchemy connection over psycopg to a database at the head revision.
        code: compare the definitions of functions, triggers and views (the owner only; another role's
            check, or ``False``, compares their presence).
    """
    from pgmem.ops import drift_access, drift_code, drift_schema

    conn = raw(connection)
    who = owner_of(conn)
    found: list[Difference] = [*drift_schema.differences(connection), *drift_access.differences(conn, who)]
    notes: list[str] = []
    definitions = code and who.acts_as_owner
    if code and not who.acts_as_owner:
        notes.append(
            f"definitions of functions, triggers and views not compared: that takes {who.owner} or a superuser"
        )
    try:
        findings = drift_code.compare(conn, definitions=definitions)
    except (psycopg.errors.LockNotAvailable, psycopg.errors.DeadlockDetected) as exc:
        notes.append(f"definitions of functions, triggers and views not compared: {type(exc).__name__}")
        findings = drift_code.compare(conn, definitions=False)
    for finding in findings:
        severity: Severity = "warning" if finding.severity == "warning" else "drift"
        fix = None if severity == "warning" else _replay
        found.append(Difference(finding.kind + "s", finding.subject, finding.detail, severity, fix))
    order = {c: i for i, c in enumerate(CATEGORIES)}
    found.sort(key=lambda d: (order.get(d.category, len(order)), d.subject, d.detail))
    return Verification(tuple(found), tuple(notes))


def _replay(connection: Connection) -> None:
    from pgmem.ops import drift_code

    conn = raw(connection)
    failed = drift_code.replay(conn, recreate_views=True)
    # What the role may not declare (a function's SET of a custom setting takes a superuser on PostgreSQL 15+)
    # stays as it is: the verification after the repair says whether it differs.
    failed = {b: e for b, e in failed.items() if not isinstance(e, psycopg.errors.InsufficientPrivilege)}
    if failed:
        block, exc = next(iter(failed.items()))
        message = (exc.diag.message_primary or str(exc)).strip()
        error = PgmemError(f"repairing: the declaration {block.name} of {block.where} fails: {message}")
        error.sqlstate = exc.sqlstate
        raise error from exc


def _run(fixes: list[Fix], connection: Connection) -> None:
    done: set[int] = set()
    for fix in fixes:
        if id(fix) not in done:  # one fix may serve many differences (the code's replay, the missing tables)
            done.add(id(fix))
            fix(connection)


def repair(connection: Connection) -> Verification:
    """Bring the schema to its revision's declaration in the caller's transaction (commit it after);
    return what was found before (its notes say what else was done). Idempotent: a schema that matches
    changes nothing.

    In order: the declared functions (a generated column needs ``pgmem.fts_document``), the tables,
    columns, indexes and constraints, the triggers and views, then row-level security, the policies, the
    grants, the metadata filters and keyword search, each fixed where it differs; last, ``messages.tsv`` is
    recomputed if a function that computes it changed.

    Raises:
        PermissionDenied: the role is neither a superuser nor the tables' owner.
    """
    from pgmem.ops import drift_code, drift_schema

    conn = raw(connection)
    who = owner_of(conn)
    if not who.acts_as_owner:
        raise PermissionDenied(
            f"repairing the schema takes its owner: {who.user} is neither a superuser nor {who.owner}; run "
            f"`pgmem migrate --repair` with a DSN of {who.owner} or of a superuser"
        )
    before = verify(connection)
    if not any(d.fix for d in before.differences):
        return before
    code = any(d.fix is _replay for d in before.differences)
    printed = drift_code.snapshot(conn)
    if code:  # what the tables need; what needs the tables fails here and is replayed below
        drift_code.replay(conn, only=lambda block: block.group == "text_search")
    structure = {"tables", "columns", "indexes", "constraints"}
    _run([d.fix for d in verify(connection, code=False).differences if d.fix and d.category in structure], connection)
    if code:
        _replay(connection)
    for _ in range(3):  # a role created in one round gets its grants in the next
        fixes = [d.fix for d in verify(connection, code=False).differences if d.fix and d.fix is not _replay]
        if not fixes:
            break
        _run(fixes, connection)
    notes = list(before.notes)
    if code and (rows := drift_schema.recompute_tsv(connection, printed, drift_code.snapshot(conn))) is not None:
        notes.append(f"pgmem.messages.tsv recomputed for {rows} messages: a function that computes it changed")
    return Verification(before.differences, tuple(notes))
