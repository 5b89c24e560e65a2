"""A process that adds talks to one BrainMemory key and dumps after each (run as ``python -m``).

``python -m tests.integration.brain_workers <dsn> <key> <worker> <talks> <start-flag>``: connects,
reports ready (``<start-flag>.ready<worker>``), waits for the start flag file (so the workers overlap),
then for each talk: adds one talk and one answer to its copy and ``dumps`` it, reloading only every
third time (so most dumps start from a stale copy). With Redis' blind ``SET`` of a stale copy, the other
worker's talks would be overwritten; pgmem must keep every one.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pgmem
from pgmem.integrations.metagpt import BrainMemory


async def run(dsn: str, key: str, worker: int, talks: int, flag: Path) -> None:
    with pgmem.connect(dsn, namespace="test", max_size=2) as client:
        await BrainMemory(client=client).loads(key)  # connect before the start line
        flag.with_name(f"{flag.name}.ready{worker}").touch()
        deadline = time.monotonic() + 60
        while not flag.exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        brain = await BrainMemory(client=client).loads(key)
        for i in range(talks):
            brain.add_talk(pgmem.Message(content=f"talk w{worker} #{i}"))
            brain.add_answer(pgmem.Message(content=f"answer w{worker} #{i}"))
            brain.last_talk = f"w{worker} #{i}"
            await brain.dumps(key, timeout_sec=600)
            if i % 3 == 2:
                brain = await brain.loads(key)  # sometimes continue from a fresh copy, sometimes a stale one


if __name__ == "__main__":
    dsn, key, worker, talks, flag = sys.argv[1:6]
    asyncio.run(run(dsn, key, int(worker), int(talks), Path(flag)))
