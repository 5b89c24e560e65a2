"""The ``file`` store: a read-only, chunked vector index of files and folders, re-indexed incrementally."""

from __future__ import annotations

import codecs
import hashlib
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field, field_validator, model_validator

from pgmem import Client
from pgmem.integrations.chatdev.base import (
    ITEM_KEY,
    MemoryContentSnapshot,
    MemoryItem,
    MemoryStore,
    StoreConfig,
    check_threshold,
    check_top_k,
    digest,
    query_text,
)
from pgmem.integrations.chatdev.simple import EmbeddingConfig
from pgmem.models import Message

if TYPE_CHECKING:
    from pgmem.planning.rows import LockedFileRow, StoreFileRow

__all__ = ["FileMemoryConfig", "FileMemoryStore", "FileSource", "IndexReport", "chunk_text"]

log = logging.getLogger("pgmem.integrations.chatdev")


class FileSource(StoreConfig):
    """Files to index: one file, or a folder (``recursive``), optionally only some suffixes.

    ``file_types`` are compared with a file's suffix as written, case included, as DevAll does (``.md``
    does not take ``NOTES.MD``); a type given without its dot (``md``) gets one (DevAll's would match no
    file at all). One type may be given as a plain string.
    """

    path: str = Field(min_length=1)
    file_types: list[str] | None = None
    recursive: bool = True
    encoding: str = "utf-8"

    @field_validator("file_types", mode="before")
    @classmethod
    def _one_type(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("file_types")
    @classmethod
    def _suffixes(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        return [s if s.startswith(".") else "." + s for s in value]

    @field_validator("encoding")
    @classmethod
    def _encoding(cls, value: str) -> str:
        try:
            codecs.lookup(value)
        except LookupError:
            raise ValueError(f"unknown encoding {value!r}") from None
        return value


class FileMemoryConfig(StoreConfig):
    """Config of the ``file`` store.

    Attributes:
        file_sources: at least one :class:`FileSource` (relative paths are relative to the working
            directory of the process that loads the store). Files are recorded by their resolved
            absolute path: processes sharing a file store should see the files at the same path, or
            each one's refresh drops the others' files as removed.
        chunk_size / chunk_overlap: characters per chunk and shared by consecutive chunks (500 / 50).
        embedding: the embedding provider (default: the client's).
        max_file_bytes: larger files are skipped (and reported).
        progress: show a progress bar when at least ``progress_threshold`` files are (re)indexed.
        index_path: accepted for ChatDev configs and ignored (the index is in Postgres); ``memory_path``
            is DevAll's other name for it.
    """

    file_sources: list[FileSource] = Field(min_length=1)
    chunk_size: int = Field(default=500, ge=20, le=100_000)
    chunk_overlap: int = Field(default=50, ge=0)
    embedding: EmbeddingConfig | None = None
    max_file_bytes: int = Field(default=10 * 1024 * 1024, ge=1)
    progress: bool = True
    progress_threshold: int = Field(default=20, ge=1)
    index_path: str | None = None
    memory_path: str | None = None

    @model_validator(mode="after")
    def _overlap(self) -> FileMemoryConfig:
        if self.chunk_overlap >= self.chunk_size:
            raise ValueError(
                f"chunk_overlap ({self.chunk_overlap}) must be smaller than chunk_size ({self.chunk_size})"
            )
        return self


def chunk_text(text: str, size: int = 500, overlap: int = 50) -> list[str]:
    """DevAll's chunks of a file's text (``FileMemory._chunk_text``): windows of ``size`` characters,
    each ended early at the window's last sentence end ("。！？.!?" or a newline) when that lies past its
    middle, stripped; the next window starts ``overlap`` characters before the previous one ended. A text
    of at most ``size`` characters is one chunk; blank chunks are dropped."""
    if not text.strip():
        return []
    if len(text) <= size:
        return [text]  # DevAll strips only the chunks of a longer text
    chunks = []
    start = 0
    while start < len(text):
        end = start + size
        chunk = text[start:end]
        if end < len(text):
            cut = max(chunk.rfind(mark) for mark in _SENTENCE_ENDS)
            if cut > size // 2:
                chunk = chunk[: cut + 1]
                end = start + cut + 1
        chunks.append(chunk.strip())
        start = end - overlap
        if start >= len(text):
            break
    return [chunk for chunk in chunks if chunk]


_SENTENCE_ENDS = ("\u3002", "\uff01", "\uff1f", ".", "!", "?", "\n")


@dataclass(slots=True)
class IndexReport:
    """What one :meth:`FileMemoryStore.refresh` did."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: int = 0
    chunks: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)


class FileMemoryStore(MemoryStore):
    """Files and folders, chunked and embedded; read-only. :meth:`refresh` (run by ``load``) re-indexes a
    file whose SHA-256 changed and drops files that are gone; unchanged files cost one hash each.

    Example:
        >>> docs = FileMemoryStore("docs", FileMemoryConfig(file_sources=[FileSource(path="docs", file_types=[".md"])]),
        ...                        client=client)
        >>> docs.load()  # indexes docs/**/*.md
        >>> docs.retrieve("writer", "how do I configure the store?", top_k=3)
    """

    type_name = "file"
    writable = False
    config: FileMemoryConfig

    def __init__(self, name: str, config: FileMemoryConfig, *, client: Client | None = None) -> None:
        super().__init__(name, config, client=client)
        self._embedder = None if config.embedding is None else config.embedding.build()
        self.last_report: IndexReport | None = None

    def load(self) -> None:
        super().load()
        self.client.vectors.enable(self.memory_key, self._embedder)
        self.refresh()

    def _scan(self, report: IndexReport) -> dict[str, tuple[Path, str]]:
        found: dict[str, tuple[Path, str]] = {}
        for source in self.config.file_sources:
            root = Path(source.path).expanduser().resolve()
            if root.is_file():
                candidates = [root]
            elif root.is_dir():
                candidates = sorted(root.rglob("*") if source.recursive else root.glob("*"))
            else:
                report.skipped.append((str(root), "no such file or directory"))
                continue
            for path in candidates:
                if not path.is_file():
                    continue
                if source.file_types is not None and path.suffix not in source.file_types:
                    continue
                found.setdefault(str(path), (path, source.encoding))
        return found

    def refresh(self) -> IndexReport:
        """Bring the index in line with the files: index new and changed files, drop removed ones."""
        report = IndexReport()
        found = self._scan(report)
        known = {f.path: (bytes(f.sha256), list(f.chunk_ids)) for f in self._files()}
        work: list[tuple[str, Path, str, bytes, bytes]] = []
        for path_str, (path, encoding) in found.items():
            try:
                size = path.stat().st_size
                if size > self.config.max_file_bytes:
                    report.skipped.append((path_str, f"{size} bytes is more than max_file_bytes"))
                    continue
                data = path.read_bytes()
            except OSError as exc:
                report.skipped.append((path_str, str(exc)))
                continue
            sha = hashlib.sha256(data).digest()
            if path_str in known and known[path_str][0] == sha:
                report.unchanged += 1
                continue
            work.append((path_str, path, encoding, data, sha))
        for path_str in sorted(set(known) - set(found)):
            self._remove(path_str)
            report.removed.append(path_str)
        for path_str, sha, facts, chunks in self._progress(work, report):
            if self._index(path_str, sha, facts, chunks):
                is_new = path_str not in known
                (report.added if is_new else report.updated).append(path_str)
                report.chunks += len(chunks)
        if report.removed or report.added or report.updated:
            self.client.vectors.changed(self.memory_key, None)
            self.client.vectors.written(None)
        self.last_report = report
        return report

    def _progress(self, work: list[tuple[str, Path, str, bytes, bytes]], report: IndexReport) -> Any:
        """Decode and chunk each file to index, with a progress bar for large trees."""
        progress = None
        if self.config.progress and len(work) >= self.config.progress_threshold:
            from rich.console import Console
            from rich.progress import Progress

            progress = Progress(console=Console(file=sys.stderr), transient=True)
            progress.start()
            task = progress.add_task(f"indexing {self.name}", total=len(work))
        try:
            for path_str, _path, encoding, data, sha in work:
                try:
                    text = data.decode(encoding)
                except UnicodeDecodeError as exc:
                    report.skipped.append((path_str, f"not {encoding}: {exc.reason} at byte {exc.start}"))
                    continue
                # DevAll reads in text mode: universal newlines
                text = text.replace("\x00", "").replace("\r\n", "\n").replace("\r", "\n")
                chunks = chunk_text(text, self.config.chunk_size, self.config.chunk_overlap)
                facts = {
                    "file_hash": hashlib.md5(data, usedforsecurity=False).hexdigest()[:16],  # DevAll's
                    "file_size": len(data),
                    "encoding": encoding,
                }
                yield path_str, sha, facts, chunks
                if progress is not None:
                    progress.advance(task)
        finally:
            if progress is not None:
                progress.stop()

    def _index(self, path: str, sha: bytes, facts: dict[str, Any], chunks: list[str]) -> bool:
        """Replace a file's chunks in one transaction; False when another process already indexed it."""
        ids = ["fchunk-" + digest(self.name, path, str(i), chunk)[:40] for i, chunk in enumerate(chunks)]
        messages = [
            Message(
                id=chunk_id,
                content=chunk,
                role="file",
                cause_by=self.cause_by,
                metadata={ITEM_KEY: {"metadata": self._chunk_metadata(path, facts, i, len(chunks))}},
            )
            for i, (chunk_id, chunk) in enumerate(zip(ids, chunks, strict=True))
        ]
        client = self.client
        with client.transaction() as conn:
            locked = self._locked(path, conn)
            if locked is not None and bytes(locked.sha256) == sha:
                return False
            if locked is not None:
                stale = [i for i in locked.chunk_ids if i not in set(ids)]
                if stale:
                    client.messages.delete_many(self.memory_key, stale, connection=conn)
            if messages:
                client.messages.add_many(self.memory_key, messages, connection=conn)
            client.stores.save_file(
                self.name, path, sha256=sha, size=facts["file_size"], chunk_ids=ids, connection=conn
            )
        return True

    @staticmethod
    def _chunk_metadata(path: str, facts: dict[str, Any], index: int, total: int) -> dict[str, Any]:
        """A chunk's metadata, DevAll's keys and values (``file_hash``: the first 16 hex digits of the
        file's MD5; pgmem itself tracks files by SHA-256 in ``pgmem.store_files``)."""
        return {
            "source_type": "file",
            "file_path": path,
            "file_name": os.path.basename(path),
            "file_hash": facts["file_hash"],
            "file_size": facts["file_size"],
            "chunk_index": index,
            "total_chunks": total,
            "encoding": facts["encoding"],
        }

    def _remove(self, path: str) -> None:
        client = self.client
        with client.transaction() as conn:
            locked = self._locked(path, conn)
            if locked is not None:
                client.messages.delete_many(self.memory_key, list(locked.chunk_ids), connection=conn)
                client.stores.delete_file(self.name, path, connection=conn)

    def files(self) -> dict[str, int]:
        """``{path: number of chunks}`` of the indexed files."""
        return {f.path: len(f.chunk_ids) for f in self._files()}

    def _files(self) -> list[StoreFileRow]:
        return self.client.stores.files(self.name)

    def _locked(self, path: str, conn: Any) -> LockedFileRow | None:
        """The indexed state of ``path``, locked until ``conn`` commits (None: not indexed)."""
        return self.client.stores.lock_file(self.name, path, connection=conn)

    def retrieve(
        self,
        agent_role: str,
        query: MemoryContentSnapshot | str,
        top_k: int = 3,
        similarity_threshold: float = -1.0,
    ) -> list[MemoryItem]:
        """The ``top_k`` chunks closest to ``query``; ``metadata`` names the file (``file_path``) and the
        chunk (``chunk_index`` of ``total_chunks``). Chunks of equal score come in file and chunk order
        (``file_path``, then ``chunk_index``), and at the ``top_k``-th place the first of them in that
        order are kept (DevAll's order among them is FAISS's heap order over its directory listing)."""
        top_k = check_top_k(top_k)
        threshold = check_threshold(similarity_threshold)
        text = query_text(query).strip()
        if not text:
            return []
        self.client.vectors.wait()
        k = min(top_k + 8, 1000)
        while True:
            hits = self.client.search(
                text,
                memory=self.memory_key,
                k=k,
                threshold=None if threshold <= -1.0 else threshold,
                embedder=self._embedder,
            )
            # Enough when the last hit scores below the top_k-th: every chunk tied with it is in hand.
            if len(hits) < k or k >= 1000 or len(hits) <= top_k or hits[-1].score < hits[top_k - 1].score:
                break
            k = min(k * 4, 1000)
        items = [MemoryItem.from_message(hit.message, hit.score) for hit in hits]
        items.sort(key=lambda i: (-(i.score or 0.0), i.metadata.get("file_path", ""), i.metadata.get("chunk_index", 0)))
        return items[:top_k]
