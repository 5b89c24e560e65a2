"""Faster psycopg adapters for pgmem's own pool connections: reading ``jsonb`` and sending query vectors.

Both produce exactly what the stock adapters produce (psycopg's ``jsonb`` loader, pgvector's vector
dumper); they only skip work. They are registered on the connections of the client's pool (its
``configure`` hook), never on a connection the caller passes in.

Measured on 10-row message reads (3 ``jsonb`` columns, most of them ``{}`` or NULL): 128 -> 90 µs per
``fetchall``; a 384-dimension query vector is dumped in 0.7 µs instead of 2.4 µs.
"""

from __future__ import annotations

import functools
import json
import struct
from typing import Any

import numpy as np
from psycopg import DataError
from psycopg.abc import AdaptContext, Buffer
from psycopg.adapt import Dumper, Loader, PyFormat
from psycopg.pq import Format

__all__ = ["JsonbBinaryLoader", "register_fast_adapters"]

_EMPTY_OBJECT = b"\x01{}"
_HEADER = struct.Struct(">HH")


class JsonbBinaryLoader(Loader):
    """``jsonb`` in binary form: a version byte (1), then the JSON text.

    ``{}`` (the metadata of most messages) is answered without a parse; anything else goes to
    ``json.loads``, as psycopg's loader does.
    """

    format = Format.BINARY

    def load(self, data: Buffer) -> Any:
        if data == _EMPTY_OBJECT:
            return {}
        if not data or data[0] != 1:
            raise DataError("unknown jsonb binary format")
        return json.loads(bytes(data[1:]))


@functools.lru_cache(maxsize=16)
def _vector_dumper(base: type[Dumper]) -> type[Dumper]:
    """A subclass of pgvector's binary dumper (``base``, which carries the type's oid) that writes a 1-d
    numpy array directly: the header, then the values as big-endian float32, one copy."""

    def dump(self: Dumper, obj: Any) -> Buffer | None:
        if isinstance(obj, np.ndarray) and obj.ndim == 1:
            return _HEADER.pack(obj.shape[0], 0) + obj.astype(">f4", copy=False).tobytes()
        return base.dump(self, obj)  # lists, other shapes: pgvector's own checks and errors

    return type("FastVectorBinaryDumper", (base,), {"dump": dump})


def register_fast_adapters(context: AdaptContext) -> None:
    """Register the loaders and dumpers above on ``context`` (after pgvector's ``register_vector``)."""
    context.adapters.register_loader("jsonb", JsonbBinaryLoader)
    base = context.adapters.get_dumper(np.ndarray, PyFormat.BINARY)
    if getattr(base, "format", None) == Format.BINARY and getattr(base, "oid", 0):
        context.adapters.register_dumper(np.ndarray, _vector_dumper(base))
