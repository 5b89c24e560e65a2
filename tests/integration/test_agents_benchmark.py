"""The loop of ``benchmarks/agents.py`` is correct (no timing here): replies reach the next agent's inbox,
histories and the team memory grow by one message a step, and a forked run of 1 process x 3 steps
reports 3 steps, none misrouted. Small synthetic data (random vectors), a long-term memory of 40 items."""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import pytest
from psycopg.conninfo import conninfo_to_dict

import pgmem
from benchmarks import agents
from tests.conftest import needs_own_database


@pytest.fixture
def small(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], agents.LookupEmbedder]:
    monkeypatch.setattr(agents, "LONG_TERM", 40)
    monkeypatch.setattr(agents, "HISTORY", 5)
    rng = np.random.default_rng(0)
    texts = [f"line {i} of the synthetic set" for i in range(200)]
    return texts, agents.LookupEmbedder(rng.normal(size=(200, 384)).astype(np.float32))


def test_pgmem_ring_routes_each_reply_to_the_next_agent(dsn: str, small: Any) -> None:
    texts, embedder = small
    agents.prepare_template("pgmem", dsn, 2, texts, embedder)
    agents.seed_inboxes("pgmem", dsn, 2, texts)
    first = agents.PgmemAgent(dsn, 0, 2, texts, embedder)
    second = agents.PgmemAgent(dsn, 1, 2, texts, embedder)
    clock = agents.Clock()
    clock.on = True
    try:
        assert [first.step(clock) for _ in range(3)] == [True, True, True]
        first.finish()
        with pgmem.connect(dsn, namespace=agents.NS, migrate=False) as client:
            assert client.queues.depth("inbox:agent0")["ready"] == agents.SEED - 3
            assert client.queues.depth("inbox:agent1")["ready"] == agents.SEED + 3
            assert [m.role for m in client.messages.last("history:agent0", 3)] == ["agent0"] * 3
            assert client.messages.count(agents.TEAM) == agents.LONG_TERM + 3
            assert client.vectors.pending(agents.TEAM) == {}
        # agent1 takes its 4 seeds, then agent0's 3 replies (oldest first), each from an expected sender
        assert [second.step(clock) for _ in range(agents.SEED + 3)] == [True] * (agents.SEED + 3)
        assert second.step(clock) is None  # its inbox is empty now
        assert all(len(clock.samples[op]) == 3 + agents.SEED + 3 for op in ("recent", "search", "write", "publish"))
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize("system", agents.SYSTEMS)
def test_a_forked_run_of_a_few_steps(dsn: str, admin_dsn: str, single_database: bool, small: Any, system: str) -> None:
    needs_own_database(single_database)  # the benchmark makes a database per system
    if system == "stack" and importlib.util.find_spec("langchain_postgres") is None:
        pytest.skip("langchain-postgres is not installed (pip install --no-deps langchain-postgres)")
    pytest.importorskip("pgqueuer")
    pytest.importorskip("langgraph.store.postgres")
    texts, embedder = small
    agents.prepare_template(system, dsn, 1, texts, embedder)
    template = conninfo_to_dict(dsn)["dbname"]
    run = agents.run_once(system, admin_dsn, str(template), 1, 0.0, texts, embedder, steps=agents.CONTROL_EVERY)
    assert (run["steps"], run["misrouted"], run["processes"]) == (agents.CONTROL_EVERY, 0, 1)
    assert len(run["samples"]["take"]) == agents.CONTROL_EVERY
    # the controls ran once, outside every operation, and are reported apart from them
    assert [len(run["samples"][op]) for op in agents.CONTROLS] == [1, 1]
    point = agents.summarize([run])
    assert set(point["controls"]) == set(agents.CONTROLS) and not set(point["controls"]) & set(point["ops"])


def test_the_tail_target_is_judged_at_16_processes_beside_the_controls() -> None:
    def point(n: int, ratio: float, tails: dict[str, float], ping: float) -> dict[str, Any]:
        ops = {op: {"p50_us": 1.0, "p99_us": t, "tail": t, "n": 100} for op, t in tails.items()}
        controls = {"ping": {"p50_us": 1.0, "p99_us": ping, "tail": ping, "n": 25}}
        return {"processes": n, "ratio": ratio, "pgmem": {"ops": ops, "controls": controls}}

    verdicts = agents.targets([point(16, 2.2, {"take": 3.0, "recent": 4.9}, 5.3), point(64, 1.6, {"take": 14.8}, 13.5)])
    assert verdicts[0] == "steps/s at 16 processes: 2.20x the stack (target >= 2x): met"
    assert verdicts[1] == "pgmem p99 <= 5x p50 at 16 processes for every operation: met"
    assert "pgmem ping 5.3x" in verdicts[2]
    assert verdicts[3] == "  at 64 processes (not a target) pgmem's tails over 5x: take 14.8x"
    missed = agents.targets([point(16, 1.9, {"take": 5.5}, 2.0)])
    assert missed[0].endswith("MISSED") and missed[1].endswith("MISSED (take 5.5x)")
