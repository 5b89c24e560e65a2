"""psycopg adapters of pgmem's own pool connections: pgvector's types, known without a query, and faster
adapters for reading ``jsonb`` and sending query vectors.

pgvector's ``register_vector`` looks its four types up on every connection (a transaction of three
statements per type: 12 round trips, 3-7 ms of a cold start). Their oids are the same on every connection
to one database, so pgmem reads them once, in the schema check's query on the pool's first connection
(``pgmem._async.client.check_schema``), and :func:`register_vector_types` registers pgvector's own
adapters from them with no I/O. Nothing here imports numpy: the vector dumper is registered under the
name ``"numpy.ndarray"`` (as pgvector does), so numpy is loaded by the first vector, not by connecting.

The faster adapters produce exactly what the stock ones produce (psycopg's ``jsonb`` loader, pgvector's
vector dumper); they only skip work. They are registered on the connections of the client's pool (its
``configure`` hook), never on a connection the caller passes in.

Measured on 10-row message reads (3 ``jsonb`` columns, most of them ``{}`` or NULL): 128 -> 90 µs per
``fetchall``; a 384-dimension query vector is dumped in 0.7 µs instead of 2.4 µs.
"""

from __future__ import annotations

import functools
import struct
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from psycopg import DataError
from psycopg.abc import AdaptContext, Buffer
from psycopg.adapt import Dumper, Loader
from psycopg.pq import Format
from psycopg.types import TypeInfo

from pgmem.checks import load_json

__all__ = [
    "VECTOR_TYPE_NAMES",
    "JsonbBinaryLoader",
    "register_fast_adapters",
    "register_vector_types",
    "vector_types",
]

_EMPTY_OBJECT = b"\x01{}"
_HEADER = struct.Struct(">HH")

#: The types pgvector's ``register_vector`` registers (``bit`` is built in; the others are the extension's).
VECTOR_TYPE_NAMES = ("vector", "bit", "halfvec", "sparsevec")


class JsonbBinaryLoader(Loader):
    """``jsonb`` in binary form: a version byte (1), then the JSON text.

    ``{}`` (the metadata of most messages) is answered without a parse; anything else goes to
    ``json.loads``, as psycopg's loader does, through :func:`pgmem.checks.load_json` (which undoes the
    tags :func:`pgmem.checks.dump_json` writes for an exact round trip).
    """

    format = Format.BINARY

    def load(self, data: Buffer) -> Any:
        if data == _EMPTY_OBJECT:
            return {}
        if not data or data[0] != 1:
            raise DataError("unknown jsonb binary format")
        return load_json(bytes(data[1:]))


def vector_types(rows: Iterable[tuple[Any, ...]]) -> dict[str, TypeInfo]:
    """pgvector's types from ``(name, oid, array oid, regtype, delimiter)`` rows of ``pg_type`` (the
    columns ``TypeInfo.fetch`` reads), by name; rows of NULLs (no such type) are skipped."""
    return {
        name: TypeInfo(name, oid, array_oid, regtype=regtype, delimiter=delimiter)
        for name, oid, array_oid, regtype, delimiter in rows
        if name is not None
    }


def register_vector_types(context: AdaptContext, types: Mapping[str, TypeInfo]) -> None:
    """What pgvector's ``register_vector`` does, from types already known (:func:`vector_types`): no I/O.

    Raises ``psycopg.ProgrammingError`` (pgvector's own) when the database has no ``vector`` type.
    """
    from pgvector.psycopg.bit import register_bit_info
    from pgvector.psycopg.halfvec import register_halfvec_info
    from pgvector.psycopg.sparsevec import register_sparsevec_info
    from pgvector.psycopg.vector import register_vector_info

    conn: Any = context  # pgvector annotates a connection; it only uses ``context.adapters``
    register_vector_info(conn, types.get("vector"))
    register_bit_info(conn, types.get("bit"))
    if (halfvec := types.get("halfvec")) is not None:
        register_halfvec_info(conn, halfvec)
    if (sparsevec := types.get("sparsevec")) is not None:
        register_sparsevec_info(conn, sparsevec)


@functools.lru_cache(maxsize=16)
def _vector_dumper(oid: int) -> type[Dumper]:
    """A subclass of pgvector's binary vector dumper for the type ``oid`` that writes a 1-d numpy array
    directly: the header, then the values as big-endian float32, one copy."""
    from pgvector.psycopg.vector import VectorBinaryDumper

    def dump(self: VectorBinaryDumper, obj: Any) -> Buffer | None:
        np = sys.modules.get("numpy")  # loaded: ``obj`` is one of its arrays (or not an array at all)
        if np is not None and isinstance(obj, np.ndarray) and obj.ndim == 1:
            data: bytes = _HEADER.pack(obj.shape[0], 0) + obj.astype(">f4", copy=False).tobytes()
            return data
        return VectorBinaryDumper.dump(self, obj)  # lists, other shapes: pgvector's own checks and errors

    return type("FastVectorBinaryDumper", (VectorBinaryDumper,), {"oid": oid, "dump": dump})


def register_fast_adapters(context: AdaptContext) -> None:
    """Register the loader and dumper above on ``context`` (the dumper once pgvector's ``vector`` type is
    registered on it: by ``register_vector`` or :func:`register_vector_types`)."""
    context.adapters.register_loader("jsonb", JsonbBinaryLoader)
    info = context.adapters.types.get("vector")
    if info is not None:
        # By name, as pgvector registers it, unless numpy is loaded: a lookup may then have replaced
        # pgvector's name by the class, which would win over a name. A numpy that another thread is still
        # importing (a pool's worker configures a connection meanwhile) has no ndarray yet: by name then.
        ndarray = getattr(sys.modules.get("numpy"), "ndarray", None)
        context.adapters.register_dumper("numpy.ndarray" if ndarray is None else ndarray, _vector_dumper(info.oid))
