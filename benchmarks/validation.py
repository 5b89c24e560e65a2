"""Client-side validation and encoding of a message batch, before anything is sent (issue 34, item 7).

Run: ``python -m benchmarks.validation [N]`` (default 100,000 small messages). Prints seconds for: building
the messages, ``batch_columns`` (checks and columns of ``add_many``), ``json_rows`` (``append``'s), and the
rejection of a batch whose last message holds a NUL. Cost grows linearly with N. No database.
"""

from __future__ import annotations

import sys
import time

import pgmem
from pgmem.planning.rows import batch_columns, json_rows


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    t = time.perf_counter()
    messages = [pgmem.Message(content=f"m{i}") for i in range(n)]
    build = time.perf_counter() - t
    t = time.perf_counter()
    batch_columns(messages)
    columns = time.perf_counter() - t
    t = time.perf_counter()
    json_rows(messages)
    rows = time.perf_counter() - t
    bad = [*messages, pgmem.Message(content="a\x00b")]
    t = time.perf_counter()
    try:
        batch_columns(bad)
    except pgmem.InvalidInput:
        pass
    rejected = time.perf_counter() - t
    print(
        f"{n:,} messages: build {build:.3f}s, batch_columns {columns:.3f}s, json_rows {rows:.3f}s, "
        f"rejecting a bad last one {rejected:.3f}s"
    )


if __name__ == "__main__":
    main()
