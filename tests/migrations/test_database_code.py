"""The views, functions and triggers a migrated database holds are the ones the runtime declares.

Migrations inline the text of what they create (they never read ``sql/``), so editing ``sql/views.sql``
or ``sql/triggers.sql`` without a migration that makes the same change would leave every database
migrated to head with the old code. Database A is an empty database migrated to head. Database B is
migrated the same way (a clone of the session's template), then loses every view, function and trigger of
schema ``pgmem`` and gets them back from the declarations, executed as written: A and B must then hold the
same objects with the same definitions, as Postgres prints them back (``pg_get_viewdef``,
``pg_get_functiondef``, ``pg_get_triggerdef``) and with the same comments.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg

from pgmem.ops import migrate
from pgmem.planning import statements

#: The runtime's declarations of the database's code, executed in this order (a view after what it reads).
DECLARATIONS = ("leakproof", "text_search", "triggers", "views")

_VIEWS = """
SELECT c.relname, pg_get_viewdef(c.oid), obj_description(c.oid, 'pg_class'), c.reloptions
FROM pg_class AS c
WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relkind IN ('v', 'm')
ORDER BY 1"""
_FUNCTIONS = """
SELECT p.proname, p.oid::regprocedure::text, pg_get_functiondef(p.oid), obj_description(p.oid, 'pg_proc')
FROM pg_proc AS p
WHERE p.pronamespace = 'pgmem'::regnamespace
ORDER BY 2"""
_TRIGGERS = """
SELECT t.tgname, c.relname, pg_get_triggerdef(t.oid), obj_description(t.oid, 'pg_trigger')
FROM pg_trigger AS t
JOIN pg_class AS c ON c.oid = t.tgrelid
WHERE c.relnamespace = 'pgmem'::regnamespace AND NOT t.tgisinternal
ORDER BY 2, 1"""
# Every trigger, view and function of schema pgmem, dropped (the list is built before the first drop),
# but the functions a table or an operator depends on (pgmem.fts_document computes messages.tsv,
# pgmem.jsonb_contains and pgmem.ts_match are the operators pgmem.@> and pgmem.@@): their declarations,
# CREATE OR REPLACE, replace them with the declared text, which is then compared all the same.
_DROP_CODE = """
DO $$
DECLARE
    stmt text;
BEGIN
    FOR stmt IN SELECT unnest(
        ARRAY(SELECT format('DROP TRIGGER %I ON %s', t.tgname, t.tgrelid::regclass)
              FROM pg_trigger AS t JOIN pg_class AS c ON c.oid = t.tgrelid
              WHERE c.relnamespace = 'pgmem'::regnamespace AND NOT t.tgisinternal)
        || ARRAY(SELECT format('DROP VIEW IF EXISTS %s CASCADE', c.oid::regclass)
                 FROM pg_class AS c WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relkind = 'v')
        || ARRAY(SELECT format('DROP FUNCTION %s', p.oid::regprocedure)
                 FROM pg_proc AS p WHERE p.pronamespace = 'pgmem'::regnamespace
                   AND NOT EXISTS (SELECT 1 FROM pg_depend AS d
                                   WHERE d.refclassid = 'pg_proc'::regclass AND d.refobjid = p.oid
                                     AND d.classid IN ('pg_class'::regclass, 'pg_attrdef'::regclass,
                                                       'pg_operator'::regclass))))
    LOOP
        EXECUTE stmt;
    END LOOP;
END $$"""

_DECLARED = {
    "view": re.compile(r"^\s*CREATE\s+(?:OR\s+REPLACE\s+)?VIEW\s+pgmem\.(\w+)", re.IGNORECASE | re.MULTILINE),
    "function": re.compile(r"^\s*CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+pgmem\.(\w+)", re.IGNORECASE | re.MULTILINE),
    "trigger": re.compile(r"^\s*CREATE\s+(?:OR\s+REPLACE\s+)?TRIGGER\s+(\w+)", re.IGNORECASE | re.MULTILINE),
}


def _declarations() -> list[str]:
    return [statement for group in DECLARATIONS for statement in statements.load(group).values()]


def _code(dsn: str) -> dict[str, Any]:
    with psycopg.connect(dsn) as conn:
        return {
            "views": {r[0]: r[1:] for r in conn.execute(_VIEWS)},
            "functions": {r[1]: r[2:] for r in conn.execute(_FUNCTIONS)},
            "triggers": {(r[1], r[0]): r[2:] for r in conn.execute(_TRIGGERS)},
            "names": {
                "view": {r[0] for r in conn.execute(_VIEWS)},
                "function": {r[0] for r in conn.execute(_FUNCTIONS)},
                "trigger": {r[0] for r in conn.execute(_TRIGGERS)},
            },
        }


def test_the_migrated_views_functions_and_triggers_are_the_declared_ones(empty_dsn: str, dsn: str) -> None:
    migrate.upgrade(empty_dsn)
    migrated = _code(empty_dsn)
    declarations = _declarations()

    declared = {kind: {m for s in declarations for m in pattern.findall(s)} for kind, pattern in _DECLARED.items()}
    assert migrated["names"] == declared, "the migrations create other objects than sql/ declares"
    assert all(migrated["names"].values()), "nothing compared: the catalog queries or the parsing found nothing"

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(_DROP_CODE)
        # Those a generated column (messages.tsv, items.path_key) or an operator depends on stay.
        kept = {"fts_document", "jsonb_contains", "path_key", "ts_match"}
        assert _code(dsn)["names"] == {"view": set(), "function": kept, "trigger": set()}
        for statement in declarations:
            conn.execute(statement)
    redeclared = _code(dsn)

    for kind in ("views", "functions", "triggers"):
        assert migrated[kind].keys() == redeclared[kind].keys(), kind
        differ = sorted(str(name) for name in migrated[kind] if migrated[kind][name] != redeclared[kind][name])
        assert not differ, (
            f"{kind} {', '.join(differ)}: the database migrated to head differs from sql/ "
            "(a change to sql/views.sql or sql/triggers.sql needs a migration that makes it)"
        )
