"""``pgmem eval`` and :mod:`pgmem.eval` (issue 33, item 5): the metrics against hand-computed values, every
retriever on a real memory, bad sets refused with the file and line, and the command's table and JSON."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import pgmem
from pgmem import Message
from pgmem.errors import InvalidInput
from pgmem.eval import EvalCase, _metrics, evaluate, read_cases
from tests.integration.test_cli import run_cli

TURNS = {
    "t1": "We adopted a puppy from the shelter, his name is Biscuit",
    "t2": "The weather in Porto was lovely all week",
    "t3": "I started a new job as a nurse at the city hospital",
    "t4": "Biscuit chewed my running shoes again",
    "t5": "My sister got married in June, the wedding was by the sea",
    "t6": "I ran my first half marathon in Lisbon last Saturday",
}


def test_metrics_of_one_ranked_list() -> None:
    # Two relevant messages; one found at rank 2 of k=3.
    recall, ndcg, hit, rr = _metrics(["x", "a", "y"], ("a", "b"), 3)
    assert recall == 0.5 and hit == 1.0 and rr == 0.5
    assert ndcg == pytest.approx((1 / math.log2(3)) / (1 + 1 / math.log2(3)))
    # Found beyond k, or not at all: zero everywhere; an id returned twice counts once.
    assert _metrics(["x", "y", "a"], ("a",), 2) == (0.0, 0.0, 0.0, 0.0)
    assert _metrics(["a", "a", "b"], ("a", "b"), 2) == (1.0, 1.0, 1.0, 1.0)


@pytest.fixture
def memory(client: pgmem.Client) -> str:
    client.messages.add_many("conv", [Message(id=i, content=c, role="user") for i, c in TURNS.items()])
    client.vectors.enable("conv")
    client.vectors.flush()
    return "conv"


def test_every_retriever_scores_a_real_memory(client: pgmem.Client, memory: str) -> None:
    cases = [
        EvalCase(memory, "What is the name of the dog they adopted?", ("t1",)),
        EvalCase(memory, "Where did she run the half marathon?", ("t6",)),
        EvalCase(memory, "Who got married?", ("t5",)),
        EvalCase(memory, "What job did she start?", ("t3",), {"role": "user"}),
    ]
    report = evaluate(client, cases, k=3)
    assert report.k == 3 and report.cases == 4
    scores = {s.retriever: s for s in report.scores}
    assert list(scores) == ["vector", "keyword", "hybrid", "cache"]
    # Each query shares a content word with its turn: keyword search finds all four at rank 1.
    assert scores["keyword"].recall == scores["keyword"].mrr == scores["keyword"].hit == 1.0
    for name in ("vector", "keyword", "hybrid"):
        assert scores[name].queries == 4 and scores[name].skipped == 0
        assert 0 <= scores[name].recall <= 1 and scores[name].p50_ms <= scores[name].p99_ms
    # The cache has no filters: the filtered case is skipped, not scored as a miss.
    assert scores["cache"].queries == 3 and scores["cache"].skipped == 1
    # The cache and the exact vector search rank alike (same model, same vectors).
    exact = evaluate(client, cases[:3], k=3, retrievers=["vector", "cache"])
    assert exact.scores[0].recall == exact.scores[1].recall
    table = report.table()
    assert "recall@3" in table and "1 skipped" in table
    assert json.loads(json.dumps(report.as_dict()))["retrievers"][1]["retriever"] == "keyword"


def test_bad_sets_and_arguments_are_refused_before_any_search(client: pgmem.Client, tmp_path: Path) -> None:
    path = tmp_path / "set.jsonl"
    bad_lines = {
        '{"memory": "m", "query": "q"}': "set.jsonl:2: missing relevant",
        '{"memory": "m", "query": "q", "relevant": "t1"}': "relevant must be a list",
        '{"memory": "m", "query": "q", "relevant": []}': "at least one message id",
        '{"memory": "m", "query": "q", "relevant": ["t1"], "colour": 1}': "unknown key 'colour'",
        '{"memory": "m", "query": "q", "relevant": ["t1"], "since": "2026-01-01"}': "needs a time zone",
        '{"memory": "m", "query": "  ", "relevant": ["t1"]}': "non-empty string",
        '{"memory": "", "query": "q", "relevant": ["t1"]}': "set.jsonl:2",
        "[1, 2]": "a JSON object",
        "{not json": "not JSON",
    }
    good = '{"memory": "m", "query": "q", "relevant": ["t1"]}'
    for line, message in bad_lines.items():
        path.write_text(good + "\n" + line + "\n", encoding="utf-8")
        with pytest.raises(InvalidInput, match=message):
            read_cases(path)
    path.write_text("\n\n", encoding="utf-8")
    with pytest.raises(InvalidInput, match="no case"):
        read_cases(path)
    with pytest.raises(InvalidInput, match="cannot read"):
        read_cases(tmp_path / "missing.jsonl")
    case = [EvalCase("m", "q", ("t1",))]
    for kwargs, message in (
        ({"k": 0}, "k must be"),
        ({"k": True}, "k must be"),
        ({"retrievers": ["bm25"]}, "unknown retriever 'bm25'"),
        ({"retrievers": "vector"}, "non-empty list"),
    ):
        with pytest.raises(InvalidInput, match=message):
            evaluate(client, case, **kwargs)
    with pytest.raises(InvalidInput, match="unknown filter"):
        EvalCase("m", "q", ("t1",), {"colour": "red"})


def test_the_command_prints_a_table_and_writes_json(dsn: str, memory: str, tmp_path: Path) -> None:
    cases = tmp_path / "set.jsonl"
    cases.write_text(
        "\n".join(
            json.dumps({"memory": memory, "query": q, "relevant": [r]})
            for q, r in (("Biscuit the puppy", "t1"), ("half marathon in Lisbon", "t6"))
        ),
        encoding="utf-8",
    )
    out = tmp_path / "report.json"
    result = run_cli(
        "eval", str(cases), "--dsn", dsn, "-n", "test", "-k", "2", "--retrievers", "keyword,hybrid", "--json", str(out)
    )
    assert "recall@2" in result.stdout and "keyword" in result.stdout and "vector " not in result.stdout
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["k"] == 2 and report["cases"] == 2
    assert [r["retriever"] for r in report["retrievers"]] == ["keyword", "hybrid"]
    assert report["retrievers"][0]["recall"] == 1.0
    # A bad line: the file and line, exit status 1, no traceback.
    cases.write_text('{"memory": "conv"}\n', encoding="utf-8")
    failed = run_cli("eval", str(cases), "--dsn", dsn, env={"COLUMNS": "1000"}, check=False)
    assert failed.returncode == 1 and "set.jsonl:1: missing query, relevant" in " ".join(failed.stderr.split())
    assert "Traceback" not in failed.stderr
