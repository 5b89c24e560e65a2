"""The message repository: a namespace's messages and the memories that refer to them."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from psycopg import AsyncConnection
from psycopg import errors as pg_errors

from pgmem._async.base import AsyncRepository
from pgmem.checks import MAX_BATCH, check_key, check_message_id, check_query_text, check_query_texts, load_json
from pgmem.embeddings import Precomputed, given_vectors
from pgmem.errors import Conflict, EmbeddingError, InvalidInput, NotFound, redact
from pgmem.merging import Remembered, check_merge
from pgmem.models import MESSAGE_ROUTE_TO_ALL, Message, any_to_str, storage_id
from pgmem.planning import statements as queries
from pgmem.planning.clashes import APPEND_KEYS, MAX_RACES, listed_ids, message_clash
from pgmem.planning.distances import max_distance
from pgmem.planning.forks import AsOf
from pgmem.planning.rows import (
    INSERT_COLUMNS,
    AddedManyRow,
    AddedRow,
    MessageStatsRow,
    batch_columns,
    decode,
    encode,
    json_rows,
)

if TYPE_CHECKING:  # the search planning (and numpy) load on a vector path's first use, not with the messages
    from pgmem.planning.search import EmbeddingModel

__all__ = ["AsyncMessageRepository"]

Q = queries.load("messages")
log = logging.getLogger("pgmem.messages")
_loads = load_json


def _positive(value: int, name: str, *, allow_zero: bool = True) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < (0 if allow_zero else 1):
        raise InvalidInput(f"{name} must be an integer >= {0 if allow_zero else 1}, got {value!r}")
    return value


class AsyncMessageRepository(AsyncRepository):
    """Messages of one namespace and the memories (named lists of messages) that hold them.

    A message is stored once per namespace; each memory refers to it (``memory_entries``) in the order it
    was added. Every method takes ``connection=``: pass your own connection to run inside your
    transaction (pgmem never commits or rolls it back).

    Example:
        >>> repo = client.messages
        >>> await repo.add("role:Alice", Message(content="hello", cause_by="UserRequirement"))
        True
        >>> [m.content for m in await repo.last("role:Alice", 10)]
        ['hello']
    """

    queries = Q

    async def _messages(
        self, name: str, params: dict[str, Any], connection: AsyncConnection[Any] | None
    ) -> list[Message]:
        return [decode(row) for row in await self._rows(name, params, connection)]

    async def _upto(self, memory: str, as_of: AsOf | None, connection: AsyncConnection[Any] | None) -> int | None:
        """The sequence number a read as of ``as_of`` stops at (None: now): README, "Rewind and branch"."""
        if as_of is None:
            return None
        return await self._client.forks.upto(memory, as_of, connection)

    async def _unfork(self, memory: str, connection: AsyncConnection[Any] | None) -> None:
        """Before a removal: a fork that still reads its parent's entries gets them copied in (once), so the
        removal's statement finds every entry the fork holds among its own (pgmem.materialize_fork)."""
        await self._client.forks.materialize(memory, connection)

    # -- writes ---------------------------------------------------------------------------------------

    async def add(
        self,
        memory: str,
        message: Message,
        *,
        embedding: Any = None,
        model: str | None = None,
        merge: str | None = None,
        threshold: float | None = None,
        connection: AsyncConnection[Any] | None = None,
    ) -> bool:
        """Add ``message`` to ``memory``; return False when the memory already held it (same id, or same
        content for messages carrying MetaGPT's ignored id). One statement, one round trip.

        ``merge="near"`` with ``threshold`` (a minimum score of the memory's model: a cosine similarity, see
        :mod:`pgmem.merging`): a message within ``threshold`` of one the memory holds is not stored again;
        that one's ``seen_count`` grows instead, and this returns False. :meth:`remember` does the same and
        says which message survived. ``merge=None`` (or ``"exact"``): only exact duplicates are skipped.

        A message is stored once per namespace: adding an id that is stored with other content raises
        :class:`pgmem.Conflict` and writes nothing (the same id with the same content is idempotent; its
        other fields are those stored first).

        ``embedding``: your own vector of the message (a list or 1-D array, stored as given) for the memory's
        model named ``model`` (default: its active one; see :class:`pgmem.embeddings.Precomputed`), stored
        in the same statement (all or nothing) and searched as the embedder's, caches included. A message
        the memory held gets it when it has no vector of that model (one it has stays). Another dimension
        than the model's, NaN or a model the memory lacks: :class:`pgmem.EmbeddingError`, nothing written.

        Example:
            >>> await client.vectors.enable("docs", Precomputed("e5-small-v2", 384))
            >>> await client.messages.add("docs", Message(content="refund policy"), embedding=vector)
        """
        check_key(memory)
        if check_merge(merge, threshold) and threshold is not None:
            kept = await self.remember(
                memory, message, threshold=threshold, embedding=embedding, model=model, connection=connection
            )
            return kept.added
        row = dict(zip(INSERT_COLUMNS, encode(message), strict=True))
        params = {"ns": self.namespace, "memory": memory, **row}
        given = None
        if embedding is not None or model is not None:
            given = await self._client.vectors.registry.given(memory, embedding, 1, model, connection, single=True)
            params.update(given)
        for attempt in (1, 2):
            try:
                statement = Q["add_one"] if given is None else Q["add_one_vector"]
                found = await self._client.executor.rows(statement, params, connection)
                added = found[0] if found else None
                break
            except InvalidInput as exc:
                self._client.vectors.registry.lost_model(exc, memory, given)
                raise
            except NotFound as exc:
                # A concurrent delete removed the message row between our insert and the entry's check (the
                # foreign key's violation, translated); retried once on our own connection, reported when it
                # runs in the caller's transaction.
                if not isinstance(exc.__cause__, pg_errors.ForeignKeyViolation):
                    raise
                if connection is not None or attempt == 2:
                    raise Conflict(f"message {message.id} was deleted concurrently; add it again") from exc
            except Conflict as exc:
                # Stored with other content, or stored concurrently (its content unknown to the statement):
                # once more on our own connection, which then sees the stored row and decides.
                if message_clash(exc) is None:
                    raise
                if connection is not None or attempt == 2:
                    raise Conflict(
                        f"message id {message.id!r} is already stored with other content in namespace "
                        f"{self.namespace!r}; nothing was written (give the new message another id)"
                    ) from exc.__cause__
        if given is not None:
            self._client.vectors.changed(memory, connection)  # the vector is the message's as soon as stored
        if added is None or (entry := AddedRow._make(added)).seq is None:
            return False
        message._seq = entry.seq
        if entry.embeds:
            self._client.vectors.written(connection)
        return True

    async def remember(
        self,
        memory: str,
        message: Message,
        *,
        threshold: float,
        embedding: Any = None,
        model: str | None = None,
        connection: AsyncConnection[Any] | None = None,
    ) -> Remembered:
        """Add ``message`` to ``memory`` unless the memory holds a near-duplicate of it; say which message
        the memory keeps for it (:class:`pgmem.merging.Remembered`: ``id``, ``added``, ``merged``,
        ``pending``). :meth:`add` with ``merge="near"`` is this, returning ``added``.

        Near: the message's vector of the memory's model (``model``: another of its models, by name) scores
        at least ``threshold`` against one the memory holds (a cosine similarity in [-1, 1]; for ``l2`` a
        negated Euclidean distance <= 0; for ``inner_product`` the inner product: as a search's
        ``threshold``), by exact distance. The nearest such entry (the oldest among equals) survives: its
        ``seen_count`` grows by one and its ``last_seen_at`` is now; the message is not stored (nor its
        entry). An exact duplicate (the memory holds the id, or the content for MetaGPT's ignored id)
        changes nothing, as :meth:`add`'s: ``added`` False, no count grows.

        The vector: ``embedding`` (yours), else this client's embedder of the model computes it before the
        statement (the one call where an add waits for the provider), else (a model of your own vectors,
        no embedder of it here, or the provider failed) the message is stored now and the background
        embedder decides the merge in the transaction that stores its vector (``pending``).

        Race-free: merge adds of one memory take its merge lock (a transaction-scoped advisory lock) before
        they look, and hold it until they commit; so of N processes adding near-duplicates of one fact at
        once exactly one stores it. Plain adds never take that lock. Several statements in one transaction
        (inside yours when you pass ``connection``, which must be READ COMMITTED).

        Raises:
            InvalidInput: ``threshold`` outside the model's range, the transaction is not READ COMMITTED.
            EmbeddingError: the memory has no embedding model (or none named ``model``), a wrong vector.
                Nothing is written.

        Example:
            >>> found = await client.messages.remember("facts", Message(content="Paris is in France"), threshold=0.9)
            >>> found.merged, found.id
            (True, 'id-of-the-message-first-told')
        """
        from pgmem._async import merging  # the vector wing: loaded by the first merge add, not by every reader

        check_key(memory)
        check_merge("near", threshold)
        registry = self._client.vectors.registry
        chosen = await self._merge_model(memory, embedding, model, connection)
        within = max_distance(chosen.distance, threshold)
        if embedding is None:
            embedder = registry.embedder_for(chosen.name, chosen.dimension)
            if embedder is not None and not isinstance(embedder, Precomputed):
                try:
                    embedding = (await registry.embed(chosen, [message.content], embedder))[0]
                    model = chosen.name
                except Exception as exc:  # noqa: BLE001 - the provider's failure defers the merge, loses nothing
                    log.warning("near-duplicate merge left to the embedder: %s", redact(f"{type(exc).__name__}: {exc}"))
        row = dict(zip(INSERT_COLUMNS, encode(message), strict=True))
        params = {"ns": self.namespace, "memory": memory, **row}
        given = None
        if embedding is not None:
            given = await registry.given(memory, embedding, 1, model, connection, single=True)
            params.update(given)
        statement = Q["add_one"] if given is None else Q["add_one_vector"]
        for attempt in (1, 2):
            try:
                async with self._client.executor.transaction(connection, vectors=given is not None) as block:
                    await merging.lock(block, memory)
                    found = await block.rows(statement, params)
                    entry = AddedRow._make(found[0]) if found else None
                    survivor, embedded = None, True
                    if entry is not None and entry.seq is not None:
                        survivor, embedded = await merging.decide(
                            block, memory, row["id"], chosen, within, pending=False
                        )
                break
            except InvalidInput as exc:
                registry.lost_model(exc, memory, given)
                raise
            except Conflict as exc:  # as in add: once more on our own connection, which sees the stored row
                if message_clash(exc) is None:
                    raise
                if connection is not None or attempt == 2:
                    raise Conflict(
                        f"message id {message.id!r} is already stored with other content in namespace "
                        f"{self.namespace!r}; nothing was written (give the new message another id)"
                    ) from exc.__cause__
        if given is not None or survivor is not None:
            self._client.vectors.changed(memory, connection)
        if entry is None or entry.seq is None:
            return Remembered(row["id"], added=False)
        if survivor is not None:
            return Remembered(survivor, added=False, merged=True)
        message._seq = entry.seq
        if entry.embeds:
            self._client.vectors.written(connection)
        return Remembered(row["id"], added=True, pending=not embedded)

    async def _merge_model(
        self, memory: str, embedding: Any, model: str | None, connection: AsyncConnection[Any] | None
    ) -> EmbeddingModel:
        """The model a merge add of ``memory`` compares vectors of: the one ``embedding`` is given for
        (named ``model``, else the active one), else the active one (or the one named ``model``)."""
        registry = self._client.vectors.registry
        if embedding is not None:
            dimension = int(given_vectors(embedding, 1, single=True).shape[1])
            return await registry.given_model(memory, model, dimension, connection)
        models = [m for status, m in await registry.memory_models(memory, connection) if model in (None, m.name)]
        if not models:
            raise EmbeddingError(
                f"merge='near' compares vectors, and memory {memory!r} has no embedding model"
                + ("" if model is None else f" named {model!r}")
                + ": enable one first (client.vectors.enable); nothing was written"
            )
        return models[0]

    async def add_many(
        self,
        memory: str,
        messages: Iterable[Message],
        *,
        embeddings: Any = None,
        model: str | None = None,
        connection: AsyncConnection[Any] | None = None,
    ) -> int:
        """Add messages in order, all or nothing, in one statement; return how many were new to the memory.

        Every message is validated before anything is sent: one bad message rejects the whole batch.
        An id stored with other content, or repeated in the batch with other contents, raises
        :class:`pgmem.Conflict` and writes nothing.

        ``embeddings``: your own vectors, one per message in order (a list of lists or a 2-D numpy array),
        for the memory's model named ``model`` (default: its active one), stored in the same statement as
        :meth:`add` stores its ``embedding`` (of a message the batch repeats, the first one's). Another
        number of vectors than of messages is an :class:`pgmem.EmbeddingError` too; nothing is written.
        """
        check_key(memory)
        batch = list(messages)
        if len(batch) > MAX_BATCH:
            raise InvalidInput(f"a batch holds at most {MAX_BATCH} messages, got {len(batch)}")
        if not batch:
            if embeddings is not None:
                given_vectors(embeddings, 0)  # no messages: no vectors either
            return 0
        columns: dict[str, Any] = {"ns": self.namespace, "memory": memory, **batch_columns(batch)}
        given = None
        if embeddings is not None or model is not None:
            given = await self._client.vectors.registry.given(memory, embeddings, len(batch), model, connection)
            columns.update(given)
        for attempt in range(1, MAX_RACES + 1):
            try:
                statement = Q["add_many"] if given is None else Q["add_many_vector"]
                found = await self._client.executor.rows(statement, columns, connection)
                row = found[0] if found else None
                break
            except InvalidInput as exc:
                self._client.vectors.registry.lost_model(exc, memory, given)
                raise
            except Conflict as exc:  # as in add: again on our own connection, while only races are found
                if message_clash(exc) is None:
                    raise
                ids = await self._clashing_ids(columns, connection)
                if ids or connection is not None or attempt == MAX_RACES:
                    raise Conflict(
                        f"message ids stored with other content, or repeated in the batch with other contents: "
                        f"{listed_ids(ids)}; nothing was written"
                    ) from exc.__cause__
        if given is not None:
            self._client.vectors.changed(memory, connection)
        if row is None:
            return 0
        result = AddedManyRow._make(row)
        if result.added and result.embeds:
            self._client.vectors.written(connection)
        return int(result.added)

    async def append(
        self, memory: str, messages: Iterable[Message], *, connection: AsyncConnection[Any] | None = None
    ) -> int:
        """Add messages that are new to the namespace to ``memory``, in order, all or nothing, in one
        statement; return how many were added (all of them).

        For writers that mint a fresh id for every message (the framework adapters, whose every add
        appends): nothing is looked up first and the batch travels as one JSON text, which makes it
        cheaper than :meth:`add_many` (benchmarks/README.md, "Framework adapters"). Every message is
        validated before anything is sent. An id already stored in the namespace, or repeated in the batch, raises
        :class:`pgmem.Conflict` and writes nothing (:meth:`add_many` would skip a message the memory holds,
        or compare its content).
        """
        check_key(memory)
        batch = list(messages)
        if len(batch) > MAX_BATCH:
            raise InvalidInput(f"a batch holds at most {MAX_BATCH} messages, got {len(batch)}")
        if not batch:
            return 0
        params = {"ns": self.namespace, "memory": memory, "rows": json_rows(batch)}
        try:
            found = await self._client.executor.rows(Q["append"], params, connection)
            row = found[0] if found else None
        except Conflict as exc:
            cause = exc.__cause__
            if not isinstance(cause, pg_errors.UniqueViolation) or cause.diag.constraint_name not in APPEND_KEYS:
                raise
            raise Conflict(
                f"append stores new messages only: a message id is already stored in namespace "
                f"{self.namespace!r} or repeated in the batch; nothing was written (add_many adds stored ones)"
            ) from exc.__cause__
        result = AddedManyRow._make(row) if row is not None else AddedManyRow(0, False)
        if result.added and result.embeds:
            self._client.vectors.written(connection)
        return int(result.added)

    async def _clashing_ids(self, columns: dict[str, list[Any]], connection: AsyncConnection[Any] | None) -> list[str]:
        """The ids that made add_many fail (the error names none: row-level security hides key values)."""
        hashes: dict[str, set[bytes]] = {}
        for message_id, digest in zip(columns["id"], columns["content_hash"], strict=True):
            hashes.setdefault(message_id, set()).add(digest)
        repeated = sorted(i for i, found in hashes.items() if len(found) > 1)
        if repeated or connection is not None:  # the caller's transaction is aborted: nothing to ask
            return repeated
        params = {"ids": columns["id"], "hashes": columns["content_hash"]}
        return [str(i) for i in await self._column("clashing_ids", params, None)]

    async def delete(
        self, memory: str, message: Message | str, *, connection: AsyncConnection[Any] | None = None
    ) -> bool:
        """Remove a message (or message id) from ``memory``; return False when it was not there.

        The message row itself is deleted when no other memory refers to it."""
        check_key(memory)
        message_id = storage_id(message) if isinstance(message, Message) else check_message_id(message)
        await self._unfork(memory, connection)
        removed = bool(await self._scalar("delete", {"memory": memory, "id": message_id}, connection))
        if removed:
            self._client.vectors.changed(memory, connection)
        return removed

    async def delete_many(
        self, memory: str, messages: Sequence[Message | str], *, connection: AsyncConnection[Any] | None = None
    ) -> int:
        """Remove messages (or message ids) from ``memory`` in one statement; return how many were there.
        Their rows are deleted when nothing else refers to them."""
        check_key(memory)
        ids = [storage_id(m) if isinstance(m, Message) else check_message_id(m) for m in messages]
        if not ids:
            return 0
        await self._unfork(memory, connection)
        removed = int(await self._scalar("delete_many", {"memory": memory, "ids": ids}, connection) or 0)
        if removed:
            self._client.vectors.changed(memory, connection)
        return removed

    async def delete_newest(self, memory: str, *, connection: AsyncConnection[Any] | None = None) -> Message | None:
        """Remove and return the newest message of ``memory`` (None when it is empty)."""
        check_key(memory)
        await self._unfork(memory, connection)
        found = await self._messages("delete_newest", {"memory": memory}, connection)
        if found:
            self._client.vectors.changed(memory, connection)
        return found[0] if found else None

    async def delete_at(
        self, memory: str, position: int, *, connection: AsyncConnection[Any] | None = None
    ) -> Message | None:
        """Remove and return the message at ``position`` (0-based, negative from the end, as a list's
        ``pop(i)``) in one statement; None when out of range. Its row goes when nothing else refers to it."""
        check_key(memory)
        if not isinstance(position, int) or isinstance(position, bool):
            raise InvalidInput(f"position must be an integer, got {position!r}")
        await self._unfork(memory, connection)
        if position >= 0:
            found = await self._messages("delete_at_position", {"memory": memory, "offset": position}, connection)
        else:
            found = await self._messages(
                "delete_at_position_from_end", {"memory": memory, "offset": -position - 1}, connection
            )
        if found:
            self._client.vectors.changed(memory, connection)
        return found[0] if found else None

    async def delete_oldest(
        self, memory: str, n: int, *, connection: AsyncConnection[Any] | None = None
    ) -> list[Message]:
        """Remove and return the oldest ``n`` messages of ``memory``, oldest first, in one statement.
        Concurrent callers take different messages (``SKIP LOCKED``)."""
        check_key(memory)
        _positive(n, "n")
        if n == 0:
            return []
        await self._unfork(memory, connection)
        found = await self._messages("delete_oldest", {"memory": memory, "n": n}, connection)
        if found:
            self._client.vectors.changed(memory, connection)
        return found

    async def move_oldest(
        self, memory: str, to: str, n: int, *, connection: AsyncConnection[Any] | None = None
    ) -> list[Message]:
        """Move the oldest ``n`` messages of ``memory`` to the memory ``to`` in one statement and return
        them, oldest first. No message row is copied; the entries keep their sequence numbers, so reading
        both memories merged (:meth:`payloads` with ``merged_with``) keeps the original order. Concurrent
        movers move different messages. Raises :class:`pgmem.Conflict` when ``to`` already holds one of
        them. ``to``'s embedding models do not embed what moves in (the FAISS cache of both is refreshed)."""
        check_key(memory)
        check_key(to)
        _positive(n, "n")
        if n == 0:
            return []
        if to == memory:
            raise InvalidInput("move_oldest needs two different memories")
        await self._unfork(memory, connection)
        await self._unfork(to, connection)
        found = await self._messages("move_oldest", {"memory": memory, "to": to, "n": n}, connection)
        if found:
            self._client.vectors.changed(memory, connection)
            self._client.vectors.changed(to, connection)
        return found

    async def clear(self, memory: str, *, connection: AsyncConnection[Any] | None = None) -> int:
        """Empty ``memory``; return how many messages it held."""
        check_key(memory)
        await self._unfork(memory, connection)
        removed = int(await self._scalar("clear", {"memory": memory}, connection) or 0)
        if removed:
            self._client.vectors.changed(memory, connection)
        return removed

    async def trim(self, memory: str, keep_last: int, *, connection: AsyncConnection[Any] | None = None) -> int:
        """Keep only the newest ``keep_last`` messages of ``memory``; return how many were removed
        (:meth:`AsyncRetention.trim`, which also trims by age)."""
        _positive(keep_last, "keep_last")
        return await self._client.retention.trim(memory, keep_last, connection=connection)

    # -- reads ----------------------------------------------------------------------------------------

    async def newest(
        self,
        memory: str,
        k: int,
        *,
        within: float | None = None,
        as_of: AsOf | None = None,
        connection: AsyncConnection[Any] | None = None,
    ) -> list[Message]:
        """The newest ``k`` messages of ``memory``, newest first; ``within``: only those added in the last
        that many seconds (ChatDev's blackboard reads its board so)."""
        check_key(memory)
        _positive(k, "k")
        if within is not None and (
            isinstance(within, bool) or not isinstance(within, int | float) or not 0 <= within < float("inf")
        ):
            raise InvalidInput(f"within must be a non-negative number of seconds, got {within!r}")
        params = {"memory": memory, "k": k, "seconds": within, "upto": await self._upto(memory, as_of, connection)}
        return await self._messages("newest", params, connection)

    async def last(
        self, memory: str, k: int = 0, *, as_of: AsOf | None = None, connection: AsyncConnection[Any] | None = None
    ) -> list[Message]:
        """The last ``k`` messages of ``memory``, oldest first; all of them when ``k`` is 0.

        ``as_of``: what the memory held at a point (every read takes it): a sequence number, a
        timezone-aware time or a mark's name (README, "Rewind and branch"). Entries removed since are not
        brought back.

        Example:
            >>> await client.messages.last("chat", 10, as_of="before-tools")
        """
        check_key(memory)
        _positive(k, "k")
        params = {"memory": memory, "k": k or None, "upto": await self._upto(memory, as_of, connection)}
        return await self._messages("last_k", params, connection)

    async def payloads(
        self,
        memory: str,
        field: str,
        *,
        last: int | None = None,
        offset: int = 0,
        limit: int | None = None,
        merged_with: str | None = None,
        as_of: AsOf | None = None,
        connection: AsyncConnection[Any] | None = None,
    ) -> list[Any]:
        """The value of ``metadata[field]`` of each message of ``memory``, oldest first, read as one JSON
        array: no :class:`Message` is built. A framework adapter keeps its own object there and reads it
        back so. A message without the field (added through another API) gives ``{"role": ..., "content":
        ...}`` instead.

        ``last``: only the last that many (0: all). Otherwise a page: from position ``offset``, at most
        ``limit`` (None: all), of ``memory`` merged in order with the memory ``merged_with`` if given. Either
        as of ``as_of`` (a point of ``memory``; its sequence number bounds ``merged_with`` too: README,
        "Rewind and branch"); a fork is read through its lineage.
        """
        check_key(memory)
        if not isinstance(field, str) or not field or "\x00" in field:
            raise InvalidInput(f"field must be a non-empty string without NUL bytes, got {field!r}")
        check_query_text(field, "field")
        if last is not None:
            _positive(last, "last")
            if offset or limit is not None or merged_with is not None:
                raise InvalidInput("payloads takes either last or a page (offset, limit, merged_with)")
            upto = await self._upto(memory, as_of, connection)
            params: dict[str, Any] = {"memory": memory, "field": field, "k": last or None, "upto": upto}
            text = await self._scalar("payloads_last", params, connection)
        else:
            _positive(offset, "offset")
            if limit is not None:
                _positive(limit, "limit")
            if merged_with is not None:
                check_key(merged_with)
            upto = await self._upto(memory, as_of, connection)
            params = {
                "memory": memory,
                "field": field,
                "offset": offset,
                "limit": limit,
                "merged": merged_with,
                "upto": upto,
            }
            text = await self._scalar("payloads_page", params, connection)
        values: list[Any] = _loads(text)
        return values

    async def count(
        self, memory: str, *, as_of: AsOf | None = None, connection: AsyncConnection[Any] | None = None
    ) -> int:
        """How many messages ``memory`` holds: O(1) (``pgmem.memory_counts``); as of a point, counted."""
        check_key(memory)
        params = {"memory": memory, "upto": await self._upto(memory, as_of, connection)}
        return int(await self._scalar("count", params, connection))

    async def at(
        self, memory: str, position: int, *, as_of: AsOf | None = None, connection: AsyncConnection[Any] | None = None
    ) -> Message | None:
        """The message at ``position`` (0-based, negative from the end, as a list index); None when out of range."""
        check_key(memory)
        if not isinstance(position, int) or isinstance(position, bool):
            raise InvalidInput(f"position must be an integer, got {position!r}")
        upto = await self._upto(memory, as_of, connection)
        if position >= 0:
            params = {"memory": memory, "offset": position, "upto": upto}
            found = await self._messages("at_position", params, connection)
        else:
            params = {"memory": memory, "offset": -position - 1, "upto": upto}
            found = await self._messages("at_position_from_end", params, connection)
        return found[0] if found else None

    async def by_action(
        self, memory: str, action: Any, *, as_of: AsOf | None = None, connection: AsyncConnection[Any] | None = None
    ) -> list[Message]:
        """Messages of ``memory`` caused by ``action`` (a class or its ``module.ClassName``), in order."""
        check_key(memory)
        name = check_query_text(any_to_str(action), "action")
        params = {"memory": memory, "action": name, "upto": await self._upto(memory, as_of, connection)}
        return await self._messages("by_action", params, connection)

    async def by_actions(
        self,
        memory: str,
        actions: Iterable[Any],
        *,
        as_of: AsOf | None = None,
        connection: AsyncConnection[Any] | None = None,
    ) -> list[Message]:
        """Messages of ``memory`` caused by any of ``actions``, in memory order."""
        check_key(memory)
        names = sorted(set(check_query_texts([any_to_str(a) for a in actions], "actions")))
        if not names:
            return []
        params = {"memory": memory, "actions": names, "upto": await self._upto(memory, as_of, connection)}
        return await self._messages("by_actions", params, connection)

    async def by_role(
        self, memory: str, role: str, *, as_of: AsOf | None = None, connection: AsyncConnection[Any] | None = None
    ) -> list[Message]:
        """Messages of ``memory`` with this ``role``, in order. A ``role`` no stored text can equal (a NUL
        byte, a lone surrogate) raises :class:`pgmem.InvalidInput`, as a write of it would."""
        check_key(memory)
        check_query_text(role, "role")
        params = {"memory": memory, "role": role, "upto": await self._upto(memory, as_of, connection)}
        return await self._messages("by_role", params, connection)

    async def by_sender(
        self, memory: str, sender: Any, *, as_of: AsOf | None = None, connection: AsyncConnection[Any] | None = None
    ) -> list[Message]:
        check_key(memory)
        name = check_query_text(any_to_str(sender), "sender")
        params = {"memory": memory, "sender": name, "upto": await self._upto(memory, as_of, connection)}
        return await self._messages("by_sender", params, connection)

    async def by_recipient(
        self,
        memory: str,
        recipient: Any,
        *,
        include_broadcast: bool = True,
        as_of: AsOf | None = None,
        connection: AsyncConnection[Any] | None = None,
    ) -> list[Message]:
        """Messages of ``memory`` addressed to ``recipient`` (and broadcasts unless ``include_broadcast=False``)."""
        check_key(memory)
        name = check_query_text(any_to_str(recipient), "recipient")
        names = [name] + ([MESSAGE_ROUTE_TO_ALL] if include_broadcast else [])
        params = {"memory": memory, "names": names, "upto": await self._upto(memory, as_of, connection)}
        return await self._messages("by_recipient", params, connection)

    async def by_content(
        self, memory: str, needle: str, *, as_of: AsOf | None = None, connection: AsyncConnection[Any] | None = None
    ) -> list[Message]:
        """Messages of ``memory`` whose content contains ``needle`` (exact substring), in order."""
        check_key(memory)
        if not isinstance(needle, str) or "\x00" in needle:
            raise InvalidInput("needle must be a string without NUL bytes")
        check_query_text(needle, "needle")
        params = {"memory": memory, "needle": needle, "upto": await self._upto(memory, as_of, connection)}
        return await self._messages("by_content", params, connection)

    async def search_text(
        self,
        memory: str,
        query: str,
        *,
        limit: int = 10,
        as_of: AsOf | None = None,
        connection: AsyncConnection[Any] | None = None,
    ) -> list[Message]:
        """Keyword search, best match first (BM25; README, "Keyword search").

        A query in plain words, as agents ask ("what did Caroline research?"), finds the messages holding
        any of its words (stemmed, stop words out) and ranks those holding more and rarer ones first.
        Chinese, Japanese and Korean runs match by their characters' bigrams the same way. A query in
        search syntax (a double quote, a word starting with ``-``, ``AND`` or ``OR`` in capitals) follows
        ``websearch_to_tsquery``: every other word required, ``"a phrase"``, ``OR``, ``-not``.
        :meth:`pgmem.AsyncVectorRepository.keyword_search` is the same search with scores and filters.

        Example: ``client.messages.search_text("role:PM", "贪吃蛇")`` finds "请编写一个命令行贪吃蛇游戏".
        """
        check_key(memory)
        _positive(limit, "limit", allow_zero=False)
        if not isinstance(query, str) or "\x00" in query:
            raise InvalidInput("query must be a string without NUL bytes")
        check_query_text(query, "query")
        await self._client.vectors.planner.fresh_statistics(connection)
        upto = await self._upto(memory, as_of, connection)
        params = {"memory": memory, "query": query, "limit": limit, "upto": upto}
        return await self._messages("search_text", params, connection)

    async def new_positions(
        self,
        memory: str,
        observed: Sequence[Message | str],
        k: int = 0,
        *,
        as_of: AsOf | None = None,
        connection: AsyncConnection[Any] | None = None,
    ) -> list[int]:
        """0-based positions in ``observed`` (messages or message ids) of those not among the last ``k``
        of ``memory`` (all of them when ``k`` is 0). One statement."""
        check_key(memory)
        _positive(k, "k")
        if not observed:
            return []
        ids = [m if isinstance(m, str) else storage_id(m) for m in observed]
        upto = await self._upto(memory, as_of, connection)
        if k == 0:
            positions = await self._column("find_news_all", {"memory": memory, "ids": ids, "upto": upto}, connection)
        else:
            params = {"memory": memory, "ids": ids, "k": k, "upto": upto}
            positions = await self._column("find_news_recent", params, connection)
        return [int(p) - 1 for p in positions]

    async def find_news(
        self,
        memory: str,
        observed: Sequence[Message],
        k: int = 0,
        *,
        as_of: AsOf | None = None,
        connection: AsyncConnection[Any] | None = None,
    ) -> list[Message]:
        """The messages of ``observed`` not among the last ``k`` of ``memory`` (all when 0), in one query."""
        positions = await self.new_positions(memory, observed, k, as_of=as_of, connection=connection)
        return [observed[i] for i in positions]

    async def get_messages(
        self, message_ids: Sequence[str], *, connection: AsyncConnection[Any] | None = None
    ) -> list[Message]:
        """The messages with these ids that exist in the namespace (in no particular order; one round trip)."""
        ids = [check_message_id(i) for i in message_ids]
        if not ids:
            return []
        return await self._messages("get_messages", {"ids": ids}, connection)

    async def get_message(self, message_id: str, *, connection: AsyncConnection[Any] | None = None) -> Message:
        """The message with ``message_id`` in this namespace; raises :class:`pgmem.NotFound`."""
        found = await self._messages("get_message", {"id": check_message_id(message_id)}, connection)
        if not found:
            raise NotFound(f"no message {message_id!r} in namespace {self.namespace!r}")
        return found[0]

    async def actions(
        self, memory: str, *, as_of: AsOf | None = None, connection: AsyncConnection[Any] | None = None
    ) -> list[str]:
        """The distinct actions (``cause_by``) of ``memory``."""
        check_key(memory)
        params = {"memory": memory, "upto": await self._upto(memory, as_of, connection)}
        return await self._column("list_actions", params, connection)

    async def count_actions(
        self, memory: str, *, as_of: AsOf | None = None, connection: AsyncConnection[Any] | None = None
    ) -> int:
        check_key(memory)
        params = {"memory": memory, "upto": await self._upto(memory, as_of, connection)}
        return int(await self._scalar("count_actions", params, connection))

    async def memories(
        self, *, prefix: str = "", nonempty: bool = False, connection: AsyncConnection[Any] | None = None
    ) -> list[str]:
        """The keys of the memories of the namespace, sorted: those starting with ``prefix``, and only
        those holding at least one message when ``nonempty``."""
        if not prefix and not nonempty:
            return await self._column("list_memories", {}, connection)
        if not isinstance(prefix, str) or "\x00" in prefix:
            raise InvalidInput("prefix must be a string without NUL bytes")
        check_query_text(prefix, "prefix")
        params = {"prefix": prefix, "nonempty": bool(nonempty)}
        return await self._column("list_memories_matching", params, connection)

    async def stats(self, *, connection: AsyncConnection[Any] | None = None) -> list[MessageStatsRow]:
        """Message counts of the namespace by (memory, role, action): ``(namespace, memory, role, cause_by,
        messages)`` tuples. Read from a replica when the client has replicas (after the client's writes, one
        that has them: see :mod:`pgmem._async.replicas`). Every namespace's counts are the owner's to read,
        in the ``pgmem.role_activity`` and ``pgmem.action_activity`` views."""
        params: dict[str, Any] = {}
        replicas = self._client.replicas
        if connection is None and replicas is not None:
            rows = await replicas.run(lambda conn: self._rows("stats", params, conn))
        else:
            rows = await self._rows("stats", params, connection)
        return [MessageStatsRow._make(r) for r in rows]
