"""``pgmem export`` and ``pgmem import``: one namespace's rows as JSON lines, into another database or namespace.

The file: a header line (format, pgmem version, schema revision, namespace, memories, export time), then one
line per row, ``{"type": ..., "row": {column: value}, ...}``, in the order the rows are imported (what a row
refers to comes before it). Each table's columns come from the schema declaration (pgmem/ops/schema.py), so
a column added to a table is carried without a change here, and so is a new table of namespace-scoped rows
(:func:`plan`). What a row's value is:

* every column but ``namespace``, the columns Postgres computes (``tsv``) and identity columns (``seq``,
  ``id``: the target draws its own; the order they give is the order of the lines);
* JSON as it is stored (Postgres writes and reads the text: numbers keep their digits), timestamps in UTC
  with their microseconds, ``bytea`` as base64, arrays as lists;
* a vector as the list of its floats as pgvector prints them (the shortest decimal that reads back as the
  same float4 / float2), with its model by name, dimension and distance (model ids differ between databases);
* a memory entry's ``seq`` as its ``order`` (1, 2, ... over the namespace's entries), and every other column
  named ``*seq`` (a summary's range, a BrainMemory's cut, a fork's or a mark's point: ``memory_entries.seq``
  values) as a position among them, under ``"seqs"``: ``first_*`` columns as the position of the first entry
  at or after the value, the others of the last entry at or before it (0: before every entry);
* an item's past versions (``item_history``, which reads as of a time return) without their ``item_id`` (the
  items' ids are identities the target draws): after the file's items, the import gives each version the id
  of its item's lifetime in the target (the item of the same path, key and ``created_at``), or one new id per
  lifetime of a deleted item. A file written before (the versions with the source's ids, before the items)
  imports the same way, its ids ignored: the format stays 1 (an older importer refuses the new file by name,
  "missing field item_id", and misreads nothing).

Not exported (:data:`NOT_EXPORTED`): logs and audit trails (the vector log, searches, sampled searches,
forgetting's audit, acknowledged queue items, retried writes' keys): a record of what happened in the source
database, which no read of the copy uses, and which the copy keeps of its own from then on (the forget
audit stays with the database where the forgetting was done); state derived from the rows (rebuilt by the
import's triggers); secrets and keys of the namespace; and rows that name embedding models by id other than
embeddings and memory models (items' vectors: derived, an item put again is embedded again).

The file's line types are in :mod:`pgmem.ops.export_format`, the export in :mod:`pgmem.ops.export`, the
import in :mod:`pgmem.ops.importing`; this module is what the CLI calls.
"""

from __future__ import annotations

from pgmem.ops.export import export, export_namespace, export_to
from pgmem.ops.export_format import FORMAT, NOT_EXPORTED, plan
from pgmem.ops.importing import Imported, import_file, import_from, import_lines, read_lines

__all__ = [
    "FORMAT",
    "NOT_EXPORTED",
    "Imported",
    "export",
    "export_namespace",
    "export_to",
    "import_file",
    "import_from",
    "import_lines",
    "plan",
    "read_lines",
]
