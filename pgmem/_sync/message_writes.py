# Generated from pgmem/_async by tools/gen_sync.py: edit the async source, then regenerate.
"""The message repository's writes (:class:`pgmem.AsyncMessageRepository`): add, remember (a near-duplicate
merge), add_many and append."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal, overload

from psycopg import Connection
from psycopg import errors as pg_errors

from pgmem._sync.message_base import MessageBase, Q
from pgmem.checks import MAX_BATCH, check_key
from pgmem.embeddings import Precomputed, given_vectors
from pgmem.errors import Conflict, EmbeddingError, InvalidInput, NotFound, redact
from pgmem.merging import Remembered, RememberedBatch, check_merge
from pgmem.models import Message
from pgmem.planning.clashes import APPEND_KEYS, MAX_RACES, listed_ids, message_clash
from pgmem.planning.distances import max_distance
from pgmem.planning.rows import (
    INSERT_COLUMNS,
    AddedManyRow,
    AddedManyVectorRow,
    AddedRow,
    AddedVectorRow,
    batch_columns,
    encode,
    json_rows,
)

if TYPE_CHECKING:  # the search planning (and numpy) load on a vector path's first use, not with the messages
    from pgmem.planning.search import EmbeddingModel

__all__ = ["MessageWrites"]

log = logging.getLogger("pgmem.messages")


class MessageWrites(MessageBase):
    """Adding messages to memories (a part of :class:`pgmem.AsyncMessageRepository`)."""

    def add(
        self,
        memory: str,
        message: Message,
        *,
        embedding: Any = None,
        model: str | None = None,
        merge: str | None = None,
        threshold: float | None = None,
        connection: Connection[Any] | None = None,
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
        An entry of the message waiting for its near-duplicate merge (a merging add without a vector, in
        any memory) is decided by this vector: right after the commit, or in your transaction when that
        memory's merge lock is free (else by the next embedder run; README, "Near-duplicates").

        Example:
            >>> await client.vectors.enable("docs", Precomputed("e5-small-v2", 384))
            >>> await client.messages.add("docs", Message(content="refund policy"), embedding=vector)
        """
        check_key(memory)
        if check_merge(merge, threshold) and threshold is not None:
            kept = self.remember(
                memory, message, threshold=threshold, embedding=embedding, model=model, connection=connection
            )
            return kept.added
        row = dict(zip(INSERT_COLUMNS, encode(message), strict=True))
        params = {"ns": self.namespace, "memory": memory, **row}
        given = None
        if embedding is not None or model is not None:
            given = self._client.vectors.registry.given(memory, embedding, 1, model, connection, single=True)
            params.update(given)
        for attempt in (1, 2):
            try:
                statement = Q["add_one"] if given is None else Q["add_one_vector"]
                found = self._client.executor.rows(statement, params, connection)
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
            if added is not None and AddedVectorRow._make(added).undecided:  # an entry waited for this vector
                self._client.vectors.outbox.decide_waiting([row["id"]], connection)
            added = None if added is None else added[:2]
        if added is None or (entry := AddedRow._make(added)).seq is None:
            return False
        message._seq = entry.seq
        if entry.embeds:
            self._client.vectors.written(connection, entry.embeds)
        return True

    def remember(
        self,
        memory: str,
        message: Message,
        *,
        threshold: float,
        embedding: Any = None,
        model: str | None = None,
        connection: Connection[Any] | None = None,
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
        from pgmem._sync import merging  # the vector wing: loaded by the first merge add, not by every reader

        check_key(memory)
        check_merge("near", threshold)
        registry = self._client.vectors.registry
        chosen = self._merge_model(memory, embedding, model, connection)
        within = max_distance(chosen.distance, threshold)
        if embedding is None:
            embedder = registry.embedder_for(chosen.name, chosen.dimension)
            if embedder is not None and not isinstance(embedder, Precomputed):
                try:
                    embedding = (registry.embed(chosen, [message.content], embedder))[0]
                    model = chosen.name
                except Exception as exc:  # noqa: BLE001 - the provider's failure defers the merge, loses nothing
                    log.warning("near-duplicate merge left to the embedder: %s", redact(f"{type(exc).__name__}: {exc}"))
        row = dict(zip(INSERT_COLUMNS, encode(message), strict=True))
        params = {"ns": self.namespace, "memory": memory, **row}
        given = None
        if embedding is not None:
            given = registry.given(memory, embedding, 1, model, connection, single=True)
            params.update(given)
        statement = Q["add_one"] if given is None else Q["add_one_vector"]
        for attempt in (1, 2):
            try:
                with self._client.executor.transaction(connection, vectors=given is not None) as block:
                    settled = merging.settle_memory(block, memory) if merging.lock(block, memory) else []
                    found = block.rows(statement, params)
                    entry = AddedRow._make(found[0][:2]) if found else None
                    undecided = given is not None and bool(found) and AddedVectorRow._make(found[0]).undecided
                    survivor, embedded = None, True
                    if entry is not None and entry.seq is not None:
                        survivor, embedded = merging.decide(
                            block, memory, row["id"], chosen, within, pending=False
                        )
                    elif given is not None:  # held, maybe waiting for its merge: this vector decides it
                        survivor, _ = merging.decide(block, memory, row["id"], chosen, within, pending=True)
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
        if undecided:  # entries of the message in other memories waited for this vector (this one's is decided)
            self._client.vectors.outbox.decide_waiting([row["id"]], connection)
        if given is not None or survivor is not None or settled:
            self._client.vectors.changed(memory, connection)
        if survivor is not None:
            return Remembered(survivor, added=False, merged=True)
        if entry is None or entry.seq is None:
            return Remembered(row["id"], added=False)
        message._seq = entry.seq
        if entry.embeds:
            self._client.vectors.written(connection, entry.embeds)
        return Remembered(row["id"], added=True, pending=not embedded)

    def _merge_model(
        self,
        memory: str,
        embedding: Any,
        model: str | None,
        connection: Connection[Any] | None,
        count: int | None = None,
    ) -> EmbeddingModel:
        """The model a merge add of ``memory`` compares vectors of: the one ``embedding`` is given for
        (named ``model``, else the active one), else the active one (or the one named ``model``).
        ``count``: ``embedding`` holds that many vectors (a batch's), else one."""
        registry = self._client.vectors.registry
        if embedding is not None:
            vectors = given_vectors(embedding, 1, single=True) if count is None else given_vectors(embedding, count)
            dimension = int(vectors.shape[1])
            return registry.given_model(memory, model, dimension, connection)
        models = [m for status, m in registry.memory_models(memory, connection) if model in (None, m.name)]
        if not models:
            raise EmbeddingError(
                f"merge='near' compares vectors, and memory {memory!r} has no embedding model"
                + ("" if model is None else f" named {model!r}")
                + ": enable one first (client.vectors.enable); nothing was written"
            )
        return models[0]

    @overload
    def add_many(
        self,
        memory: str,
        messages: Iterable[Message],
        *,
        embeddings: Any = None,
        model: str | None = None,
        merge: Literal["near"],
        threshold: float,
        connection: Connection[Any] | None = None,
    ) -> RememberedBatch: ...
    @overload
    def add_many(
        self,
        memory: str,
        messages: Iterable[Message],
        *,
        embeddings: Any = None,
        model: str | None = None,
        merge: str | None = None,
        threshold: float | None = None,
        connection: Connection[Any] | None = None,
    ) -> int: ...
    def add_many(
        self,
        memory: str,
        messages: Iterable[Message],
        *,
        embeddings: Any = None,
        model: str | None = None,
        merge: str | None = None,
        threshold: float | None = None,
        connection: Connection[Any] | None = None,
    ) -> int:
        """Add messages in order, all or nothing, in one statement; return how many were new to the memory.

        Every message is validated before anything is sent: one bad message rejects the whole batch.
        An id stored with other content, or repeated in the batch with other contents, raises
        :class:`pgmem.Conflict` and writes nothing.

        ``embeddings``: your own vectors, one per message in order (a list of lists or a 2-D numpy array),
        for the memory's model named ``model`` (default: its active one), stored in the same statement as
        :meth:`add` stores its ``embedding`` (of a message the batch repeats, the first one's). Another
        number of vectors than of messages is an :class:`pgmem.EmbeddingError` too; nothing is written.

        ``merge="near"`` with ``threshold``: each message is merged as :meth:`add` with ``merge="near"``
        merges it, in batch order, against the memory and the messages of the batch before it (two
        near-duplicates in one batch: one entry, ``seen_count`` 2). Returns a
        :class:`pgmem.merging.RememberedBatch`: the number of new entries (an ``int``, as without a merge),
        and ``.remembered``: a :class:`pgmem.merging.Remembered` per message, in batch order (the survivor's
        id of a merged one). The vectors: ``embeddings``, else this client's embedder embeds the batch in
        one call before the transaction, else the embedder decides the merges when it stores them. One
        transaction under the memory's merge lock: the add, then one look-up per new entry.

        Example:
            >>> told = await client.messages.add_many("facts", [a, b], merge="near", threshold=0.9)
            >>> int(told), [r.id for r in told.remembered]
            (1, [a.id, a.id])
        """
        check_key(memory)
        near = check_merge(merge, threshold) and threshold is not None
        batch = list(messages)
        if len(batch) > MAX_BATCH:
            raise InvalidInput(f"a batch holds at most {MAX_BATCH} messages, got {len(batch)}")
        if not batch:
            if embeddings is not None:
                given_vectors(embeddings, 0)  # no messages: no vectors either
            return RememberedBatch(0, ()) if near else 0
        if near and threshold is not None:
            return self._remember_many(memory, batch, threshold, embeddings, model, connection)
        columns: dict[str, Any] = {"ns": self.namespace, "memory": memory, **batch_columns(batch)}
        columns["merge_within"] = None
        given = None
        if embeddings is not None or model is not None:
            given = self._client.vectors.registry.given(memory, embeddings, len(batch), model, connection)
            columns.update(given)
        for attempt in range(1, MAX_RACES + 1):
            try:
                statement = Q["add_many"] if given is None else Q["add_many_vector"]
                found = self._client.executor.rows(statement, columns, connection)
                row = found[0] if found else None
                break
            except InvalidInput as exc:
                self._client.vectors.registry.lost_model(exc, memory, given)
                raise
            except Conflict as exc:  # as in add: again on our own connection, while only races are found
                if message_clash(exc) is None:
                    raise
                ids = self._clashing_ids(columns, connection)
                if ids or connection is not None or attempt == MAX_RACES:
                    raise Conflict(
                        f"message ids stored with other content, or repeated in the batch with other contents: "
                        f"{listed_ids(ids)}; nothing was written"
                    ) from exc.__cause__
        if given is not None:
            self._client.vectors.changed(memory, connection)
            if row is not None and AddedManyVectorRow._make(row).undecided:  # entries waited for these vectors
                self._client.vectors.outbox.decide_waiting(list(dict.fromkeys(columns["id"])), connection)
            row = None if row is None else row[:2]
        if row is None:
            return 0
        result = AddedManyRow._make(row)
        if result.added and result.embeds:
            self._client.vectors.written(connection, result.embeds)
        return int(result.added)

    def _remember_many(
        self,
        memory: str,
        batch: list[Message],
        threshold: float,
        embeddings: Any,
        model: str | None,
        connection: Connection[Any] | None,
    ) -> RememberedBatch:
        """add_many with ``merge="near"``: the batch stored in one statement under the memory's merge lock,
        its new entries waiting for their merge (no look-up takes them for neighbours), then decided in batch
        order as :meth:`remember` decides its one, each seeing the decisions before it (one look-up and one
        write for the batch: :func:`pgmem._async.merging.decide_batch`)."""
        from pgmem._sync import merging  # the vector wing, as in remember

        registry = self._client.vectors.registry
        chosen = self._merge_model(memory, embeddings, model, connection, count=len(batch))
        within = max_distance(chosen.distance, threshold)
        columns: dict[str, Any] = {"ns": self.namespace, "memory": memory, **batch_columns(batch)}
        columns["merge_within"] = within
        if embeddings is None:
            embedder = registry.embedder_for(chosen.name, chosen.dimension)
            if embedder is not None and not isinstance(embedder, Precomputed):
                try:  # the whole batch in one call to the provider, before the transaction
                    embeddings = registry.embed(chosen, [m.content for m in batch], embedder)
                    model = chosen.name
                except Exception as exc:  # noqa: BLE001 - as in remember: the embedder decides later
                    log.warning("near-duplicate merge left to the embedder: %s", redact(f"{type(exc).__name__}: {exc}"))
        given = None
        if embeddings is not None:
            given = registry.given(memory, embeddings, len(batch), model, connection)
            columns.update(given)
        statement = Q["add_many_merging"] if given is None else Q["add_many_merging_vector"]
        for attempt in range(1, MAX_RACES + 1):
            try:
                with self._client.executor.transaction(connection, vectors=given is not None) as block:
                    settled = merging.settle_memory(block, memory) if merging.lock(block, memory) else []
                    found = block.one(statement, columns)
                    assert found is not None  # an aggregate: always one row
                    added, embeds = [str(i) for i in found[0]], list(found[1])
                    undecided = given is not None and AddedManyVectorRow._make(found).undecided
                    decided = merging.decide_batch(block, memory, added, chosen, within)
                    if given is not None:  # held entries waiting for their merge: the vectors given decide them
                        for held in dict.fromkeys(i for i in columns["id"] if i not in decided):
                            survivor, _ = merging.decide(block, memory, held, chosen, within, pending=True)
                            if survivor is not None:
                                decided[held] = (survivor, True)
                break
            except InvalidInput as exc:
                registry.lost_model(exc, memory, given)
                raise
            except Conflict as exc:  # as in add_many
                if message_clash(exc) is None:
                    raise
                ids = self._clashing_ids(columns, connection)
                if ids or connection is not None or attempt == MAX_RACES:
                    raise Conflict(
                        f"message ids stored with other content, or repeated in the batch with other contents: "
                        f"{listed_ids(ids)}; nothing was written"
                    ) from exc.__cause__
        new = set(added)
        told: list[Remembered] = []
        seen: dict[str, Remembered] = {}
        for message_id in columns["id"]:
            if message_id in seen:  # repeated in the batch: the first occurrence counts, this one changes nothing
                first = seen[message_id]
                told.append(Remembered(first.id, added=False))
                continue
            survivor, embedded = decided.get(message_id, (None, True))
            if survivor is not None:
                one = Remembered(survivor, added=False, merged=True)
            elif message_id in new:
                one = Remembered(message_id, added=True, pending=not embedded)
            else:
                one = Remembered(message_id, added=False)
            seen[message_id] = one
            told.append(one)
        if undecided:  # held messages' entries in other memories waited for these vectors (this one's are decided)
            self._client.vectors.outbox.decide_waiting(list(dict.fromkeys(columns["id"])), connection)
        stored = sum(1 for r in seen.values() if r.added)
        if given is not None or settled or any(r.merged for r in told):
            self._client.vectors.changed(memory, connection)
        if stored and embeds:
            self._client.vectors.written(connection, embeds)
        return RememberedBatch(stored, tuple(told))

    def append(
        self, memory: str, messages: Iterable[Message], *, connection: Connection[Any] | None = None
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
            found = self._client.executor.rows(Q["append"], params, connection)
            row = found[0] if found else None
        except Conflict as exc:
            cause = exc.__cause__
            if not isinstance(cause, pg_errors.UniqueViolation) or cause.diag.constraint_name not in APPEND_KEYS:
                raise
            raise Conflict(
                f"append stores new messages only: a message id is already stored in namespace "
                f"{self.namespace!r} or repeated in the batch; nothing was written (add_many adds stored ones)"
            ) from exc.__cause__
        result = AddedManyRow._make(row) if row is not None else AddedManyRow(0, [])
        if result.added and result.embeds:
            self._client.vectors.written(connection, result.embeds)
        return int(result.added)

    def _clashing_ids(self, columns: dict[str, list[Any]], connection: Connection[Any] | None) -> list[str]:
        """The ids that made add_many fail (the error names none: row-level security hides key values)."""
        hashes: dict[str, set[bytes]] = {}
        for message_id, digest in zip(columns["id"], columns["content_hash"], strict=True):
            hashes.setdefault(message_id, set()).add(digest)
        repeated = sorted(i for i, found in hashes.items() if len(found) > 1)
        if repeated or connection is not None:  # the caller's transaction is aborted: nothing to ask
            return repeated
        params = {"ids": columns["id"], "hashes": columns["content_hash"]}
        return [str(i) for i in self._column("clashing_ids", params, None)]
