"""LangGraph's operations as calls of ``client.items``, for both stores (:mod:`.store`): namespaces checked
as LangGraph checks them, an ``IndexConfig`` made an embedder and the fields to embed, a batch's
operations checked and grouped, a search as the steps that run it, rows made LangGraph's items."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import langgraph.store.base as _langgraph_base
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    get_text_at_path,
    tokenize_path,
)

import pgmem
from pgmem.errors import InvalidInput

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from langchain_core.embeddings import Embeddings

    from pgmem._sync.items import ItemWrite

__all__ = ["Batch", "Embedder", "Index", "InvalidNamespace", "Steps", "by_path", "model_name", "search_steps"]

#: LangGraph's own check of an op's namespace labels (langgraph-checkpoint >= 4.3; None before).
_langgraph_validate: Callable[[Op], None] | None = getattr(_langgraph_base, "validate_op_namespace", None)


class InvalidNamespace(InvalidInput, InvalidNamespaceError):
    """A namespace LangGraph rejects (empty label, ``.``, NUL, not a string): both LangGraph's
    ``InvalidNamespaceError`` and :class:`pgmem.InvalidInput`."""


def _check_labels(namespace: Any) -> None:
    for label in namespace:
        if not isinstance(label, str):
            raise InvalidNamespace(
                f"Invalid namespace label {label!r} found in {namespace}: labels must be strings, "
                f"not {type(label).__name__}"
            )
        if not label:
            raise InvalidNamespace(f"Namespace labels cannot be empty strings. Got {label!r} in {namespace}")
        if "." in label:
            raise InvalidNamespace(f"Invalid namespace label {label!r} found in {namespace}: labels cannot contain '.'")
        if "\x00" in label:
            raise InvalidNamespace(f"Invalid namespace label {label!r} found in {namespace}: labels cannot contain NUL")


def validate_op_namespace(op: Op) -> None:
    """The labels of ``op``'s namespace as LangGraph's ``validate_op_namespace`` checks them (added in
    langgraph-checkpoint 4.3; earlier versions, which the extra allows, lack it), and NUL (which 4.3.0
    let through) checked here whatever the version."""
    if _langgraph_validate is not None:
        try:
            _langgraph_validate(op)
        except InvalidNamespaceError as exc:
            raise InvalidNamespace(str(exc)) from None
    if isinstance(op, GetOp | PutOp):
        _check_labels(op.namespace)
    elif isinstance(op, SearchOp):
        _check_labels(op.namespace_prefix)
    elif isinstance(op, ListNamespacesOp):
        for condition in op.match_conditions or ():
            _check_labels(condition.path)


class Embedder:
    """A LangChain ``Embeddings`` as a pgmem embedder (``model``, ``dimension``, ``embed``, ``aembed``)."""

    def __init__(self, embeddings: Embeddings, model: str, dimension: int) -> None:
        self.embeddings = embeddings
        self.model = model
        self.dimension = dimension

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        import numpy as np

        return np.asarray(self.embeddings.embed_documents(list(texts)), dtype=np.float32)

    async def aembed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        import numpy as np

        return np.asarray(await self.embeddings.aembed_documents(list(texts)), dtype=np.float32)


def model_name(embed: Any, dims: int) -> str:
    """The name the vectors of ``embed`` get in ``pgmem.embedding_models`` when ``index["model"]`` is not
    given: its provider string, or its class (or function) with its model attribute and a digest of its
    representation when that shows its settings, and the dimension. Embedders of other settings get other
    names, so they never share vectors."""
    if isinstance(embed, str):
        return f"langgraph:{embed}:{dims}"
    kind = embed if callable(embed) and not hasattr(embed, "embed_documents") else type(embed)
    name = f"langgraph:{getattr(kind, '__module__', '?')}.{getattr(kind, '__qualname__', kind.__class__.__name__)}"
    for attr in ("model", "model_name"):
        value = getattr(embed, attr, None)
        if isinstance(value, str):
            name += f":{value}"
            break
    text = repr(embed)
    if " at 0x" not in text:  # a representation of settings, not of an address
        name += ":" + hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:12]
    return f"{name}:{dims}"


class Index:
    """What the store makes of an ``IndexConfig``: the embedder, the fields' paths, the estimate of
    vectors per item."""

    def __init__(self, index: Mapping[str, Any]) -> None:
        if not isinstance(index, Mapping):
            raise InvalidInput(f"index must be a dict (LangGraph's IndexConfig), got {type(index).__name__}")
        self.distance = index.get("distance_type", "cosine")
        if self.distance not in pgmem.DISTANCES:  # the scores: pgmem.planning.distances
            raise InvalidInput(f"distance_type must be one of {pgmem.DISTANCES}, got {self.distance!r}")
        dims = index.get("dims")
        if isinstance(dims, bool) or not isinstance(dims, int) or not 1 <= dims <= 16000:
            raise InvalidInput(f"index['dims'] must be an integer in [1, 16000], got {dims!r}")
        if index.get("embed") is None:
            raise InvalidInput("index['embed'] is required: an Embeddings, a (async) function, or 'provider:model'")
        fields = index.get("fields") or ["$"]
        if isinstance(fields, str):
            fields = [fields]
        if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
            raise InvalidInput(f"index['fields'] must be a list of paths, got {fields!r}")
        model = index.get("model") or model_name(index["embed"], dims)
        if not isinstance(model, str):
            raise InvalidInput(f"index['model'] must be a string, got {model!r}")
        self.embedder = Embedder(ensure_embeddings(index["embed"]), model, dims)
        self.fields = [(f, _tokens(f)) for f in fields]
        self.vectors_per_item = max(1, len(fields))

    def texts(self, value: Mapping[str, Any], index: Sequence[str] | None) -> list[tuple[str, str]]:
        """``(field, text)`` to embed of a value: the configured fields, or those of the put's ``index``."""
        paths = self.fields if index is None else [(f, _tokens(f)) for f in index]
        out: list[tuple[str, str]] = []
        for field, tokens in paths:
            texts = get_text_at_path(value, tokens)
            out += [(f"{field}.{i}" if len(texts) > 1 else field, text) for i, text in enumerate(texts)]
        return out


def _tokens(field: str) -> Any:
    return "$" if field == "$" else tokenize_path(field)


class Batch:
    """A batch of LangGraph ops, checked and grouped for ``client.items`` (what both stores share)."""

    def __init__(self, ops: Iterable[Op], index: Index | None, ttl_config: TTLConfig | None) -> None:
        self.ops = list(ops)
        self.results: list[Result] = [None] * len(self.ops)
        self.gets: dict[tuple[str, ...], list[tuple[int, GetOp]]] = defaultdict(list)
        self.searches: list[tuple[int, SearchOp]] = []
        self.lists: list[tuple[int, ListNamespacesOp]] = []
        self.writes: list[ItemWrite] = []
        self.omit_expired = bool(ttl_config and ttl_config.get("omit_expired"))
        for i, op in enumerate(self.ops):
            validate_op_namespace(op)
            if isinstance(op, GetOp):
                self.gets[tuple(op.namespace)].append((i, op))
            elif isinstance(op, SearchOp):
                self.searches.append((i, op))
            elif isinstance(op, ListNamespacesOp):
                self.lists.append((i, op))
            elif isinstance(op, PutOp):
                if op.value is None:
                    self.writes.append({"path": op.namespace, "key": op.key, "value": None})
                    continue
                if not isinstance(op.value, Mapping):
                    raise InvalidInput(f"a value must be a dict, got {type(op.value).__name__}")
                texts = None
                if index is not None and op.index is not False:
                    if op.index is not None and not isinstance(op.index, list):
                        raise InvalidInput(f"index must be False, None or a list of paths, got {op.index!r}")
                    try:
                        texts = index.texts(op.value, op.index)
                    except (TypeError, ValueError) as exc:  # json.dumps of a field: not JSON
                        raise InvalidInput(f"value of {op.key!r} is not JSON: {exc}") from None
                self.writes.append(
                    {"path": op.namespace, "key": op.key, "value": op.value, "ttl": op.ttl, "texts": texts}
                )
            else:
                raise InvalidInput(f"unknown operation {type(op).__name__}")
        #: (position, op) of the searches that embed their query, in order: one embedding call for all.
        self.queries = [(i, op) for i, op in self.searches if op.query and index is not None]

    def get_args(self) -> Iterator[tuple[tuple[str, ...], list[str], bool, list[tuple[int, GetOp]]]]:
        for path, ops in self.gets.items():
            yield path, [op.key for _, op in ops], any(op.refresh_ttl for _, op in ops), ops

    def got(self, ops: list[tuple[int, GetOp]], rows: Sequence[Any]) -> None:
        by_key = {row.key: row for row in rows}
        for i, op in ops:
            row = by_key.get(op.key)
            self.results[i] = None if row is None else _item(row)

    def search_args(self, vectors: Sequence[Any]) -> Iterator[tuple[int, Steps]]:
        """Each search as the steps that run it (:func:`search_steps`)."""
        embedded = {i: v for (i, _), v in zip(self.queries, vectors, strict=True)}
        for i, op in self.searches:
            kwargs: dict[str, Any] = {
                "prefix": tuple(op.namespace_prefix),
                "filter": op.filter,
                "limit": op.limit,
                "offset": op.offset,
                "refresh_ttl": op.refresh_ttl,
                "omit_expired": self.omit_expired,
            }
            if i in embedded:
                kwargs["vector"] = embedded[i]
            yield i, search_steps(kwargs)

    def list_args(self) -> Iterator[tuple[int, dict[str, Any]]]:
        for i, op in self.lists:
            kwargs: dict[str, Any] = {
                "max_depth": op.max_depth,
                "limit": op.limit,
                "offset": op.offset,
                "omit_expired": self.omit_expired,
            }
            for condition in op.match_conditions or ():
                if condition.match_type not in ("prefix", "suffix"):
                    raise InvalidInput(f"unknown match type {condition.match_type!r}")
                kwargs[condition.match_type] = tuple(condition.path)
            yield i, kwargs


#: A search as steps: it yields ``("search", kwargs of client.items.search)`` and is sent the hits, or
#: ``("refresh", rows)`` (extend those items' TTLs) and is sent None; it returns the search's result.
Steps = Generator[tuple[str, Any], Any, list[SearchItem]]


def search_steps(kwargs: dict[str, Any]) -> Steps:
    """A search; one with a query returns, as LangGraph's ``InMemoryStore`` does, the items without a
    vector of the store's model (put with ``index=False``, before the store had an index, or by a store of
    another model) after the scored ones, with ``score=None``, newest first. The scored items and then the
    unscored ones are one sequence that ``offset`` and ``limit`` page: as ``InMemoryStore`` whenever a
    page starts among the scored items; past them ``InMemoryStore`` returns the first unscored items again
    at every offset, this goes on through them (pages never repeat an item). Costs nothing more while the
    scored items fill the page; the page that runs past them reads up to ``offset + limit`` more rows
    (two statements)."""
    hits = yield "search", kwargs
    limit, offset = kwargs["limit"], kwargs["offset"]
    if "vector" not in kwargs or len(hits) >= limit:
        return [_hit(r) for r in hits]
    quiet = {k: v for k, v in kwargs.items() if k != "vector"} | {"refresh_ttl": False, "offset": 0}
    # Every scored item: fewer than offset + limit of them, as this page came back short.
    scored = hits if offset == 0 else (yield "search", {**quiet, "vector": kwargs["vector"], "limit": offset + limit})
    seen = {(tuple(r.path), r.key) for r in scored}
    skip, need = max(0, offset - len(scored)), limit - len(hits)
    # The newest skip + need unscored items are among the newest skip + need + len(scored) items.
    listed = yield "search", {**quiet, "limit": skip + need + len(scored)}
    unscored = [r for r in listed if (tuple(r.path), r.key) not in seen][skip : skip + need]
    if unscored and kwargs["refresh_ttl"]:
        yield "refresh", unscored
    return [_hit(r) for r in hits] + [_hit(r) for r in unscored]


def by_path(rows: Sequence[Any]) -> dict[tuple[str, ...], list[str]]:
    keys: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for row in rows:
        keys[tuple(row.path)].append(row.key)
    return keys


def _item(row: Any) -> Item:
    return Item(
        value=row.value, key=row.key, namespace=tuple(row.path), created_at=row.created_at, updated_at=row.updated_at
    )


def _hit(row: Any) -> SearchItem:
    return SearchItem(tuple(row.path), row.key, row.value, row.created_at, row.updated_at, row.score)
