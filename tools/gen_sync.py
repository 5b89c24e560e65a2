"""Generate the sync flavour (pgmem/_sync) from the async source (pgmem/_async) with `unasync`.

python tools/gen_sync.py          # rewrite pgmem/_sync
python tools/gen_sync.py --check  # exit 1 when pgmem/_sync is out of date (run by the test suite)
"""

from __future__ import annotations

import argparse
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
    "AsyncQueueRepository": "QueueRepository",
    "AsyncRepository": "Repository",
    "AsyncVectorRepository": "VectorRepository",
    "AsyncSummaryRepository": "SummaryRepository",
    "AsyncBrainRepository": "BrainRepository",
    "register_vector_async": "register_vector",
    "AsyncConnection": "Connection",
    "AsyncConnectionPool": "ConnectionPool",
    "_LifoAsyncConnectionPool": "_LifoConnectionPool",
    "AsyncCursor": "Cursor",
    "aconnect": "connect",
    "aembed": "embed",
    "_async": "_sync",
    "_compat_async": "_compat_sync",
    "asynccontextmanager": "contextmanager",
    "AsyncIterator": "Iterator",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
}

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
