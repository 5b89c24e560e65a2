"""A lint of the migrated schema: what Citus needs to distribute pgmem by namespace (docs/scale-out.md).

Citus shards a distributed table by one column and enforces a primary key, unique index or foreign key
only when it includes that column (each shard checks its own rows), joins two distributed tables cheaply
only when they are colocated and joined on it, and refuses triggers on distributed tables unless
``citus.enable_unsafe_triggers`` is on. Reference tables (copied to every node) may be the target of a
foreign key from any distributed table.

Checked on the database migrated to head, from the catalog (not from ``schema.py``: a migration that
creates an index by hand is covered too). Every rule names the object that breaks it, so a new table or
index that would not distribute fails here, on one node, in CI, rather than on the day a Citus cluster
refuses it.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

#: The distribution column of every distributed table.
DISTRIBUTION_COLUMN = "namespace"

#: Tables copied whole to every node (``create_reference_table``): small, global, read by every shard.
#: ``alembic_version`` is alembic's bookkeeping: it stays on the coordinator (a local table).
REFERENCE_TABLES = frozenset({"embedding_models"})
LOCAL_TABLES = frozenset({"alembic_version"})
#: Distributed tables without a primary key. Citus distributes a table without one; pgmem.doorbell is a
#: transient queue of wake-ups, written by every hot write and emptied whole by one reader, that no
#: statement looks up by key: an index would only cost each ring an insert into it.
KEYLESS_TABLES = frozenset({"doorbell"})

#: Triggers pgmem keeps on one node. On Citus they are dropped and their work moves into the statements
#: that write the table (docs/scale-out.md, "Trigger work"); a trigger that is not listed here has no such
#: plan and fails the lint.
SINGLE_NODE_TRIGGERS = frozenset(
    {
        ("memory_entries", "memory_entries_added"),
        ("memory_entries", "memory_entries_removed"),
        ("memory_entries", "memory_entries_counted"),
        ("memory_entries", "memory_entries_uncounted"),
        ("memory_entries", "memory_entries_recounted"),
        ("embeddings", "embeddings_added"),
        ("memories", "memory_removed"),
        # Forks (migration 0020): the copy-on-remove work moves into the removing statements on Citus.
        ("memory_entries", "memory_entries_left_forks"),
        ("memory_entries", "memory_entries_moved_forks"),
        ("memories", "memories_forks_kept"),
        # Item history (migration 0022): on Citus the item writes insert the old versions themselves.
        ("items", "items_history_updated"),
        ("items", "items_history_deleted"),
    }
)

_TABLES = """
SELECT c.relname
FROM pg_class AS c
WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relkind IN ('r', 'p')
ORDER BY 1"""

#: Unique indexes (primary keys and unique constraints are backed by one) with their key columns.
_UNIQUE = """
SELECT t.relname, i.relname, x.indisprimary,
       array(SELECT a.attname FROM unnest(x.indkey[:x.indnkeyatts - 1]) AS k(attnum)
             JOIN pg_attribute AS a ON a.attrelid = t.oid AND a.attnum = k.attnum)::text[],
       x.indexprs IS NOT NULL
FROM pg_index AS x
JOIN pg_class AS t ON t.oid = x.indrelid
JOIN pg_class AS i ON i.oid = x.indexrelid
WHERE t.relnamespace = 'pgmem'::regnamespace AND x.indisunique
ORDER BY 1, 2"""

#: Foreign keys: (table, constraint, referenced table, local columns, referenced columns).
_FOREIGN_KEYS = """
SELECT c.conrelid::regclass::text, c.conname, r.relname,
       array(SELECT a.attname FROM unnest(c.conkey) WITH ORDINALITY AS k(attnum, n)
             JOIN pg_attribute AS a ON a.attrelid = c.conrelid AND a.attnum = k.attnum ORDER BY k.n)::text[],
       array(SELECT a.attname FROM unnest(c.confkey) WITH ORDINALITY AS k(attnum, n)
             JOIN pg_attribute AS a ON a.attrelid = c.confrelid AND a.attnum = k.attnum ORDER BY k.n)::text[]
FROM pg_constraint AS c
JOIN pg_class AS r ON r.oid = c.confrelid
WHERE c.contype = 'f' AND c.connamespace = 'pgmem'::regnamespace
ORDER BY 1, 2"""

_EXCLUSION = """
SELECT c.conrelid::regclass::text, c.conname
FROM pg_constraint AS c
WHERE c.contype = 'x' AND c.connamespace = 'pgmem'::regnamespace"""

_TRIGGERS = """
SELECT c.relname, t.tgname
FROM pg_trigger AS t
JOIN pg_class AS c ON c.oid = t.tgrelid
WHERE c.relnamespace = 'pgmem'::regnamespace AND NOT t.tgisinternal
ORDER BY 1, 2"""

_NAMESPACE_COLUMN = """
SELECT c.relname, a.attnotnull, format_type(a.atttypid, a.atttypmod)
FROM pg_class AS c
LEFT JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attname = %s AND NOT a.attisdropped
WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relkind IN ('r', 'p')"""

_SEQUENCES = """
SELECT c.relname, a.attname, a.attidentity, format_type(a.atttypid, a.atttypmod)
FROM pg_attribute AS a
JOIN pg_class AS c ON c.oid = a.attrelid
WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
  AND (a.attidentity <> '' OR pg_get_serial_sequence(c.oid::regclass::text, a.attname) IS NOT NULL)"""


def read_catalog(dsn: str) -> dict[str, list[tuple[Any, ...]]]:
    """The catalog rows the rules read."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {
            "tables": conn.execute(_TABLES).fetchall(),
            "unique": conn.execute(_UNIQUE).fetchall(),
            "foreign_keys": conn.execute(_FOREIGN_KEYS).fetchall(),
            "exclusion": conn.execute(_EXCLUSION).fetchall(),
            "triggers": conn.execute(_TRIGGERS).fetchall(),
            "namespace": conn.execute(_NAMESPACE_COLUMN, (DISTRIBUTION_COLUMN,)).fetchall(),
            "sequences": conn.execute(_SEQUENCES).fetchall(),
        }


Catalog = dict[str, list[tuple[Any, ...]]]


def _distributed(catalog: Catalog) -> set[str]:
    tables = {row[0] for row in catalog["tables"]}
    return tables - REFERENCE_TABLES - LOCAL_TABLES


def namespace_columns(catalog: Catalog) -> list[str]:
    """Distributed tables without a non-null text ``namespace``."""
    distributed = _distributed(catalog)
    return sorted(
        f"{table}: {'no namespace column' if kind is None else f'namespace is {kind}, nullable={not notnull}'}"
        for table, notnull, kind in catalog["namespace"]
        if table in distributed and (kind != "text" or not notnull)
    )


def unique_keys(catalog: Catalog) -> list[str]:
    """Unique indexes of distributed tables without ``namespace`` among their keys, and tables without a
    primary key."""
    distributed = _distributed(catalog)
    wrong = [
        f"{table}.{index}" + (" (an expression index)" if expression else "")
        for table, index, _primary, columns, expression in catalog["unique"]
        if table in distributed and DISTRIBUTION_COLUMN not in columns
    ]
    wrong += [
        f"{table}: no primary key"
        for table in distributed - KEYLESS_TABLES
        if not any(row[0] == table and row[2] for row in catalog["unique"])
    ]
    return sorted(wrong)


def foreign_keys(catalog: Catalog) -> list[str]:
    """Foreign keys that neither pair ``namespace`` with ``namespace`` (colocated) nor point at a
    reference table."""
    distributed = _distributed(catalog)
    wrong = []
    for table, name, target, columns, target_columns in catalog["foreign_keys"]:
        source = table.removeprefix("pgmem.")
        if target in REFERENCE_TABLES:
            continue  # distributed -> reference: allowed, checked on the node that holds the row
        if source in REFERENCE_TABLES and target in distributed:
            wrong.append(f"{source}.{name}: a reference table cannot refer to a distributed one")
        elif target in distributed and (
            DISTRIBUTION_COLUMN not in columns
            or DISTRIBUTION_COLUMN not in target_columns
            or columns.index(DISTRIBUTION_COLUMN) != target_columns.index(DISTRIBUTION_COLUMN)
        ):
            wrong.append(f"{source}.{name} -> {target} ({', '.join(columns)})")
    return sorted(wrong)


def exclusion_constraints(catalog: Catalog) -> list[str]:
    # Citus enforces an exclusion constraint only with the distribution column under `=`; pgmem has none.
    return sorted(f"{table}.{name}" for table, name in catalog["exclusion"])


def triggers(catalog: Catalog) -> list[str]:
    """Triggers without a plan for Citus, and listed ones that no longer exist."""
    found = {(table, name) for table, name in catalog["triggers"]}
    unplanned = [f"{table}.{name}: no distributed plan" for table, name in found - SINGLE_NODE_TRIGGERS]
    gone = [f"{table}.{name}: listed but gone" for table, name in SINGLE_NODE_TRIGGERS - found]
    return sorted(unplanned + gone)


def generated_keys(catalog: Catalog) -> list[str]:
    # Citus supports identity columns on distributed tables only as bigint GENERATED BY DEFAULT (each node
    # draws from its own range); ALWAYS would refuse the values the coordinator routes. Reference tables
    # are written on the coordinator only, so any identity works there.
    distributed = _distributed(catalog)
    return sorted(
        f"{table}.{column} ({kind}, identity {identity or 'serial'})"
        for table, column, identity, kind in catalog["sequences"]
        if table in distributed and (kind != "bigint" or identity == "a")
    )


RULES = (namespace_columns, unique_keys, foreign_keys, exclusion_constraints, triggers, generated_keys)


@pytest.fixture(scope="module")
def catalog(template_dsn: str) -> Catalog:
    """The catalog of the session's template database (migrated to head)."""
    return read_catalog(template_dsn)


def test_the_lint_sees_the_schema(catalog: Catalog) -> None:
    distributed = _distributed(catalog)
    assert {"messages", "memories", "memory_entries", "queue_items", "embeddings"} <= distributed
    assert REFERENCE_TABLES <= {row[0] for row in catalog["tables"]}, "a reference table was renamed or dropped"
    assert catalog["unique"] and catalog["foreign_keys"] and catalog["triggers"], "the catalog queries found nothing"


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.__name__)
def test_the_migrated_schema_is_distributable_by_namespace(catalog: Catalog, rule: Any) -> None:
    assert rule(catalog) == [], rule.__doc__ or rule.__name__


def test_each_rule_catches_what_it_is_for(dsn: str) -> None:
    """The lint on a database where each rule is broken once (so a rule that stopped reading the catalog
    cannot pass silently)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE pgmem.lint_no_ns (id bigint PRIMARY KEY)")
        conn.execute(
            "CREATE TABLE pgmem.lint_bad (namespace text NOT NULL, id int GENERATED ALWAYS AS IDENTITY,"
            " other text, PRIMARY KEY (namespace, id))"
        )
        conn.execute("CREATE UNIQUE INDEX lint_bad_other_key ON pgmem.lint_bad (other)")
        conn.execute(
            "ALTER TABLE pgmem.lint_bad ADD CONSTRAINT lint_bad_memory_fkey FOREIGN KEY (other, namespace)"
            " REFERENCES pgmem.memories (namespace, key)"
        )
        conn.execute("ALTER TABLE pgmem.lint_bad ADD CONSTRAINT lint_bad_excl EXCLUDE (other WITH =)")
        conn.execute("CREATE FUNCTION pgmem.lint_noop() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$")
        conn.execute(
            "CREATE TRIGGER lint_noop AFTER INSERT ON pgmem.lint_bad FOR EACH STATEMENT"
            " EXECUTE FUNCTION pgmem.lint_noop()"
        )
    broken = read_catalog(dsn)
    assert namespace_columns(broken) == ["lint_no_ns: no namespace column"]
    assert unique_keys(broken) == ["lint_bad.lint_bad_other_key", "lint_no_ns.lint_no_ns_pkey"]
    assert foreign_keys(broken) == ["lint_bad.lint_bad_memory_fkey -> memories (other, namespace)"]
    assert exclusion_constraints(broken) == ["pgmem.lint_bad.lint_bad_excl"]
    assert triggers(broken) == ["lint_bad.lint_noop: no distributed plan"]
    assert generated_keys(broken) == ["lint_bad.id (integer, identity a)"]
