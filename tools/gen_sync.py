"""Generate the sync flavour (pgmem/_sync) from the async source (pgmem/_async) with `unasync`.

python tools/gen_sync.py          # rewrite pgmem/_sync
python tools/gen_sync.py --check  # exit 1 when pgmem/_sync is out of date (run by the test suite)
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from pathlib import Path

import unasync

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "pgmem" / "_async"
DST = ROOT / "pgmem" / "_sync"

REPLACEMENTS = {
    "AsyncClient": "Client",
    "AsyncMessageRepository": "MessageRepository",
    "AsyncMessageBase": "MessageBase",
    "AsyncMessageWrites": "MessageWrites",
    "AsyncMessageRemovals": "MessageRemovals",
    "AsyncMessageReads": "MessageReads",
    "AsyncQueueRepository": "QueueRepository",
    "AsyncRepository": "Repository",
    "AsyncExecutor": "Executor",
    "AsyncBlock": "Block",
    "AsyncVectorRepository": "VectorRepository",
    "AsyncSummaryRepository": "SummaryRepository",
    "AsyncBrainRepository": "BrainRepository",
    "AsyncBackground": "Background",
    "AsyncSessions": "Sessions",
    "AsyncModelRegistry": "ModelRegistry",
    "AsyncEmbeddingOutbox": "EmbeddingOutbox",
    "AsyncSearchPlanner": "SearchPlanner",
    "AsyncContextBuilder": "ContextBuilder",
    "AsyncSearcher": "Searcher",
    "AsyncRetrievalLog": "RetrievalLog",
    "AsyncSearchRecall": "SearchRecall",
    "AsyncRetention": "Retention",
    "AsyncStoreRepository": "StoreRepository",
    "AsyncItemRepository": "ItemRepository",
    "AsyncForkRepository": "ForkRepository",
    "AsyncReplicas": "Replicas",
    "register_vector_async": "register_vector",
    "AsyncConnection": "Connection",
    "GuardedAsyncConnection": "GuardedConnection",
    "AsyncConnectionPool": "ConnectionPool",
    "_LifoAsyncConnectionPool": "_LifoConnectionPool",
    "AsyncCursor": "Cursor",
    "aconnect": "connect",
    "aembed": "embed",
    "_async": "_sync",
    "asynccontextmanager": "contextmanager",
    "AsyncIterator": "Iterator",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "AsyncExitStack": "ExitStack",
    "AsyncTransaction": "Transaction",
    "enter_async_context": "enter_context",
}


def _sync_names() -> dict[str, str]:
    """The async -> sync pairs of pgmem/_acompat.py, read from the file alone (importing the package would
    need the generated code this script writes)."""
    spec = importlib.util.spec_from_file_location("_pgmem_acompat", ROOT / "pgmem" / "_acompat.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and typing look their module up while it loads
    spec.loader.exec_module(module)
    names: dict[str, str] = module.SYNC_NAMES
    return names


REPLACEMENTS.update(_sync_names())

HEADER = "# Generated from pgmem/_async by tools/gen_sync.py: edit the async source, then regenerate.\n"


def generate(out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    rule = unasync.Rule(fromdir=str(SRC) + "/", todir=str(out_dir) + "/", additional_replacements=REPLACEMENTS)
    sources = sorted(str(p) for p in SRC.glob("*.py"))
    unasync.unasync_files(sources, rules=[rule])
    written = []
    for path in sorted(out_dir.glob("*.py")):
        text = path.read_text()
        if not text.startswith(HEADER):
            path.write_text(HEADER + text)
        written.append(path)
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if pgmem/_sync is out of date")
    args = parser.parse_args()
    if not args.check:
        generate(DST)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        generated = {p.name: p.read_text() for p in generate(Path(tmp))}
    current = {p.name: p.read_text() for p in DST.glob("*.py")}
    if generated != current:
        stale = sorted(n for n in generated.keys() | current.keys() if generated.get(n) != current.get(n))
        print(f"pgmem/_sync is out of date ({', '.join(stale)}); run python tools/gen_sync.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
