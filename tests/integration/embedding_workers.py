"""A second process for the index-build test (run as ``python -m``): it writes and embeds messages of its
own namespace in a loop while the test builds another model's HNSW index, and records when each write
started and when its embedding was stored.

    python -m tests.integration.embedding_workers DSN OUT STOP

``OUT`` gets one ``start end`` line (wall-clock seconds) per embedded write, the first line ``ready`` once
the model is registered; the loop ends when the file ``STOP`` exists.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pgmem
from pgmem.embeddings import HashingEmbedder


def write(dsn: str, out: Path, stop: Path) -> None:
    embedder = HashingEmbedder(64)
    with pgmem.connect(dsn, namespace="other", embedder=embedder, max_size=2) as client, out.open("w") as log:
        client.vectors.enable("w")
        log.write("ready\n")
        log.flush()
        i = 0
        while not stop.exists():
            start = time.time()
            client.messages.add("w", pgmem.Message(content=f"another tenant's note {i}"))
            client.vectors.flush()
            log.write(f"{start} {time.time()}\n")
            log.flush()
            i += 1


if __name__ == "__main__":
    write(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))
