"""The embedded server killed (SIGKILL of its postmaster, by pid) three times under an 8-process load.

Target (issue 20): 0 pushes lost, 0 duplicated; every client resumes on its own within 5 s of each kill
(pgmem starts the server again: nothing else does); only typed errors (``pgmem.errors``) in between.
And in one process: ``pgmem.connect()`` after a kill works (it raised a raw ``OperationalError`` forever:
the embedded package caches its server object), and an open async client resumes by itself.
The embedded server here is a private one, under a temporary ``PGMEM_HOME``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
import pytest

import pgmem
from pgmem.ops import server
from tests.faults.conftest import kill_tree

pytestmark = pytest.mark.slow

WORKERS = 8
KILLS = 3
WARMUP, BETWEEN, SETTLE = 15.0, 4.0, 6.0
RESUME_TARGET = 5.0


def _postmaster_pid(home: Path) -> int:
    return int((server.pgdata_dir(home) / "postmaster.pid").read_text().split()[0])


def test_same_process_after_a_kill(monkeypatch: pytest.MonkeyPatch) -> None:
    home = Path(tempfile.mkdtemp(prefix="pgmem-kill1-"))
    monkeypatch.setenv("PGMEM_HOME", str(home))
    monkeypatch.delenv("PGMEM_DSN", raising=False)
    try:
        with pgmem.connect(namespace="kill") as client:
            client.messages.add("m", pgmem.Message(content="before"))
        os.kill(_postmaster_pid(home), signal.SIGKILL)
        t0 = time.monotonic()
        with pgmem.connect(namespace="kill") as client:  # starts the server again
            assert client.messages.count("m") == 1
        print(f"\nconnect() after a kill: {time.monotonic() - t0:.2f} s")

        async def resume() -> float:
            async with await pgmem.aconnect(namespace="kill", timeout=2) as aclient:
                await aclient.messages.count("m")
                os.kill(_postmaster_pid(home), signal.SIGKILL)
                killed = time.monotonic()
                await asyncio.sleep(0.5)  # the backends notice the postmaster is gone and exit
                while True:
                    try:
                        assert await aclient.messages.count("m") == 1
                        return time.monotonic() - killed
                    except pgmem.PgmemError:  # typed, while the server comes back
                        await asyncio.sleep(0.05)

        took = asyncio.run(resume())
        print(f"an open async client resumed {took:.2f} s after the kill")
        assert took < RESUME_TARGET
    finally:
        try:
            kill_tree(_postmaster_pid(home))
        except (OSError, ValueError):
            pass
        shutil.rmtree(home, ignore_errors=True)


def test_three_kills_under_load(monkeypatch: pytest.MonkeyPatch) -> None:
    home = Path(tempfile.mkdtemp(prefix="pgmem-kill-"))
    monkeypatch.setenv("PGMEM_HOME", str(home))
    monkeypatch.delenv("PGMEM_DSN", raising=False)
    env = {**os.environ, "PGMEM_HOME": str(home)}
    env.pop("PGMEM_DSN", None)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with pgmem.connect(namespace="kill"):  # starts the server and migrates
            pass
        seconds = WARMUP + KILLS * BETWEEN + SETTLE  # from each worker's start: its first push may be late
        outs = [home / f"w{i}.json" for i in range(WORKERS)]
        root = Path(__file__).resolve().parents[2]
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "tests.faults.workers", "load", str(out), str(seconds), str(i)],
                cwd=root,
                env=env,
            )
            for i, out in enumerate(outs)
        ]
        give_up = time.monotonic() + 60
        while not all(Path(f"{out}.ready").exists() for out in outs):  # every worker has pushed once
            assert time.monotonic() < give_up, "the workers did not start"
            time.sleep(0.1)
        time.sleep(1)
        kills = []
        for _ in range(KILLS):
            pid = _postmaster_pid(home)
            os.kill(pid, signal.SIGKILL)
            kills.append(time.time())
            time.sleep(BETWEEN)
            assert _postmaster_pid(home) != pid, "nobody started the server again"
        for p in procs:
            assert p.wait(seconds + 60) == 0
        results = [json.loads(out.read_text()) for out in outs]
        pushed = sum(r["pushed"] for r in results)
        errors = [e for r in results for e in r["errors"]]
        untyped = sorted({name for _, name, typed in errors if not typed})
        gaps = [min(t for t in r["successes"] if t > k) - k for k in kills for r in results]
        with psycopg.connect(server.ensure_server(home)) as conn:
            row = conn.execute(
                "SELECT count(*), count(DISTINCT m.content) FROM pgmem.queue_items AS q "
                "JOIN pgmem.messages AS m ON m.namespace = q.namespace AND m.id = q.message_id "
                "WHERE q.namespace = 'kill'"
            ).fetchone()
        print(
            f"\n{KILLS} kills, {WORKERS} processes: {pushed} pushes, items {row}; {len(errors)} errors "
            f"({sorted({name for _, name, _ in errors})}); resumed after {min(gaps):.2f}-{max(gaps):.2f} s"
        )
        assert untyped == []
        assert row == (pushed, pushed)  # 0 lost, 0 duplicated
        print("gaps by kill:", [[round(g, 2) for g in gaps[i * WORKERS : (i + 1) * WORKERS]] for i in range(KILLS)])
        assert max(gaps) < RESUME_TARGET
    finally:
        for p in procs:
            if p.poll() is None:
                kill_tree(p.pid)
        try:
            kill_tree(_postmaster_pid(home))
        except (OSError, ValueError):
            pass
        shutil.rmtree(home, ignore_errors=True)
