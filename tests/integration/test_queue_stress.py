"""4 producer and 4 consumer OS processes, 20k messages, consumers SIGKILLed at random and restarted:
every message processed, acknowledged exactly once, none lost. Half the consumers acknowledge with a
separate ack, half with their next claim (``claim(ack=...)``; see tests/integration/queue_workers.py)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

TOTAL = 20_000
PRODUCERS = 4
CONSUMERS = 4
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_sigkilled_consumers_lose_nothing_and_ack_once(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE stress_done (message_id text, item_id bigint, attempt int, worker text)")
    env = {**os.environ, "PGMEM_DSN": dsn}
    run = lambda *args: subprocess.Popen(  # noqa: E731
        [sys.executable, "-m", "tests.integration.queue_workers", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE if args[0] == "produce" else subprocess.DEVNULL,
    )
    rng = random.Random(11)
    producers = [run("produce", str(i), str(TOTAL // PRODUCERS)) for i in range(PRODUCERS)]
    serial = 0
    consumers: list[subprocess.Popen[bytes]] = []
    for _ in range(CONSUMERS):
        serial += 1
        consumers.append(run("consume", f"w{serial}"))
    kills = 0
    started = time.monotonic()
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while time.monotonic() - started < 170:
                time.sleep(rng.uniform(0.4, 0.9))
                producing = any(p.poll() is None for p in producers)
                archived, live = conn.execute(
                    "SELECT (SELECT count(*) FROM pgmem.queue_archive), (SELECT count(*) FROM pgmem.queue_items)"
                ).fetchone()  # type: ignore[misc]
                if not producing and archived == TOTAL and live == 0:
                    break
                if archived < TOTAL * 0.9:  # kill while there is work in flight; then let them finish
                    victim = rng.randrange(CONSUMERS)
                    consumers[victim].send_signal(signal.SIGKILL)
                    consumers[victim].wait()
                    kills += 1
                    serial += 1
                    consumers[victim] = run("consume", f"w{serial}")
            else:
                pytest.fail(f"not drained in time: {archived} archived, {live} live")
        for p in producers:
            _, err = p.communicate(timeout=30)
            assert p.returncode == 0, err
    finally:
        for p in consumers + producers:
            if p.poll() is None:
                p.kill()
            p.communicate()
    elapsed = time.monotonic() - started
    with psycopg.connect(dsn) as conn:
        archived, distinct_archived = conn.execute(
            "SELECT count(*), count(DISTINCT message_id) FROM pgmem.queue_archive"
        ).fetchone()  # type: ignore[misc]
        processed, distinct_processed = conn.execute(
            "SELECT count(*), count(DISTINCT message_id) FROM stress_done"
        ).fetchone()  # type: ignore[misc]
        live = conn.execute("SELECT count(*) FROM pgmem.queue_items").fetchone()
        never = conn.execute(
            "SELECT count(*) FROM pgmem.queue_archive a WHERE NOT EXISTS "
            "(SELECT 1 FROM stress_done d WHERE d.message_id = a.message_id)"
        ).fetchone()
    print(
        f"stress: {TOTAL} messages in {elapsed:.1f} s, {kills} consumers SIGKILLed, "
        f"{processed - distinct_processed} duplicate processings"
    )
    assert archived == TOTAL and distinct_archived == TOTAL  # acknowledged exactly once, none lost
    assert live == (0,)
    assert distinct_processed == TOTAL and never == (0,)  # every message processed
    assert kills >= 5
