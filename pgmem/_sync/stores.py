# Generated from pgmem/_async by tools/gen_sync.py: edit the async source, then regenerate.
"""The store repository: the records of named memory stores (``pgmem.memory_stores``) and of the files a
file store indexed (``pgmem.store_files``). A store's items are messages of its memory (``store:<name>``),
read and written with :attr:`AsyncClient.messages`; ChatDev DevAll's stores are built on these
(:mod:`pgmem.integrations.chatdev`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import Connection

from pgmem._sync.base import Repository
from pgmem.checks import check_text, dump_json, load_json
from pgmem.errors import InvalidInput, NotFound
from pgmem.planning import statements
from pgmem.planning.rows import LockedFileRow, StoreFileRow, StoreRow

__all__ = ["StoreRepository"]

#: ``list[StoreFileRow]`` (the repository's ``list`` method shadows the builtin in its class body).
StoreFiles = list[StoreFileRow]


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"a store {what} must be a non-empty string, got {value!r}")
    check_text(value, what, "store ")
    return value


class StoreRepository(Repository):
    """Named memory stores of one namespace and the files they indexed.

    Example:
        >>> await client.stores.register("convo", "simple", {"top_k": 3})
        'simple'
    """

    queries = statements.load("stores")

    def register(
        self, name: str, type: str, config: dict[str, Any], *, connection: Connection[Any] | None = None
    ) -> str:
        """Record the store ``name`` of ``type`` with its latest ``config``; return the type recorded for
        the name (another type: the name is taken by a store of that type, and nothing changed)."""
        params = {"name": _name(name, "name"), "type": _name(type, "type"), "config": dump_json(config, "config")}
        return str(self._scalar("register", params, connection))

    def list(self, *, connection: Connection[Any] | None = None) -> list[StoreRow]:
        """Every store of the namespace, by name."""
        return [
            StoreRow(r.name, r.type, load_json(r.config) if isinstance(r.config, str) else r.config, r.created_at)
            for r in map(StoreRow._make, self._rows("stores", {}, connection))
        ]

    def files(self, store: str, *, connection: Connection[Any] | None = None) -> StoreFiles:
        """What the file store ``store`` has indexed: path, content hash and chunk (message) ids."""
        return [
            StoreFileRow._make(row) for row in self._rows("files", {"store": _name(store, "name")}, connection)
        ]

    def lock_file(
        self, store: str, path: str, *, connection: Connection[Any] | None = None
    ) -> LockedFileRow | None:
        """The indexed state of ``path``, locked until the transaction of ``connection`` ends (call it
        inside ``client.transaction()``); None when the file is not indexed."""
        rows = self._rows("lock_file", {"store": _name(store, "name"), "path": _name(path, "path")}, connection)
        return LockedFileRow._make(rows[0]) if rows else None

    def save_file(
        self,
        store: str,
        path: str,
        *,
        sha256: bytes,
        size: int,
        chunk_ids: Sequence[str],
        connection: Connection[Any] | None = None,
    ) -> None:
        """Record (or update) what ``path`` was indexed as."""
        if not isinstance(sha256, bytes) or len(sha256) != 32:
            raise InvalidInput("sha256 must be the 32 bytes of a SHA-256 digest")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise InvalidInput(f"size must be a non-negative integer, got {size!r}")
        params = {
            "store": _name(store, "name"),
            "path": _name(path, "path"),
            "sha256": sha256,
            "size": size,
            "chunk_ids": list(chunk_ids),
        }
        try:
            self._rows("upsert_file", params, connection)
        except NotFound as exc:
            # Row-level security on memory_stores keeps the key out of PostgreSQL's message: name it here.
            raise NotFound(f"no store {store!r} in namespace {self.namespace!r}: register it first") from exc

    def delete_file(self, store: str, path: str, *, connection: Connection[Any] | None = None) -> None:
        """Forget that ``path`` was indexed (its chunks are removed from the memory by the caller)."""
        self._rows("delete_file", {"store": _name(store, "name"), "path": _name(path, "path")}, connection)
