"""What OpenTelemetry's spans cost a call (pgmem.tracing): ``messages.add`` of one message and
``messages.last(memory, 10)``, interleaved in one process, three ways:

- ``unwrapped``: the method as written (``__wrapped__``), what a process without the ``otel`` extra runs;
- ``no provider``: the wrapper, OpenTelemetry imported but no tracer provider set (the API's proxy): it
  calls the method as it is;
- ``spans``: an SDK ``TracerProvider`` recording every span (a ``SimpleSpanProcessor`` handing each span
  to an exporter that drops it: the SDK's whole per-span work, in the calling thread).

The provider is switched between calls by setting OpenTelemetry's global (as its own test utilities do),
so the machine's drift lands on the three alike. Part 2 times the hook alone, around a function that does
nothing (no database), in microseconds per call, the wrapper's three states plus ``opentelemetry.trace``
not imported at all.

    python -m benchmarks.telemetry                     # 3,000 calls of each (~1 minute)
    python -m benchmarks.telemetry --iterations 500
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

import pgmem
from benchmarks._common import bench_database, timed_together, write_json
from pgmem import tracing


class _Dropped(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _provider(provider: TracerProvider | None) -> None:
    trace._TRACER_PROVIDER = provider  # the global, as opentelemetry's test utilities set it


def _hook_alone(provider: TracerProvider, n: int) -> dict[str, float]:
    """Microseconds per call of a traced no-op, in each state of the hook."""

    class _Client:
        namespace = "bench"
        conninfo = "host=localhost port=5432 dbname=bench"

    class _Repository:
        _client = _Client()

    repository = _Repository()
    traced = tracing._traced(lambda self, memory, k=0: None, "messages.last")
    states: dict[str, Callable[[], None]] = {
        "not imported": lambda: sys.modules.pop("opentelemetry.trace"),
        "no provider": lambda: _provider(None),
        "spans": lambda: _provider(provider),
    }
    best: dict[str, float] = {}
    module = sys.modules["opentelemetry.trace"]
    for _ in range(5):  # the best of five rounds of each: the machine's noise only ever adds
        for name, enter in states.items():
            enter()
            start = time.perf_counter_ns()
            for _ in range(n):
                traced(repository, "chat:1", k=10)
            best[name] = min(best.get(name, float("inf")), (time.perf_counter_ns() - start) / n / 1000)
            sys.modules["opentelemetry.trace"] = module
        start = time.perf_counter_ns()
        for _ in range(n):
            traced.__wrapped__(repository, "chat:1", k=10)  # type: ignore[attr-defined]
        best["unwrapped"] = min(best.get("unwrapped", float("inf")), (time.perf_counter_ns() - start) / n / 1000)
    _provider(None)
    return {name: round(us, 3) for name, us in best.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--iterations", type=int, default=3000)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/telemetry.json"))
    args = parser.parse_args()
    assert tracing.enabled(), "pip install 'pgmem[otel]' (and leave OTEL_PYTHON_DISABLED_INSTRUMENTATIONS alone)"

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_Dropped()))
    results: dict[str, Any] = {}
    with bench_database(args.dsn) as dsn, pgmem.connect(dsn, namespace="bench", max_size=2) as client:
        messages = client.messages
        add, last = type(messages).add, type(messages).last
        for i in range(200):
            messages.add("chat:1", pgmem.Message(content=f"message {i}"))
        counter = iter(range(10**9))

        def calls(state: TracerProvider | None, unwrapped: bool) -> dict[str, Callable[[], Any]]:
            def do_add() -> Any:
                _provider(state)
                message = pgmem.Message(content=f"new {next(counter)}")
                return (add.__wrapped__ if unwrapped else add)(messages, "chat:2", message)

            def do_last() -> Any:
                _provider(state)
                return (last.__wrapped__ if unwrapped else last)(messages, "chat:1", 10)

            return {"add": do_add, "last": do_last}

        variants = {"unwrapped": (None, True), "no provider": (None, False), "spans": (provider, False)}
        for call in ("add", "last"):
            fns = {name: calls(state, unwrapped)[call] for name, (state, unwrapped) in variants.items()}
            results[call] = timed_together(fns, iterations=args.iterations, shuffle=True)
        _provider(None)
    results["hook_alone_us"] = _hook_alone(provider, 50_000)
    provider.shutdown()

    for call in ("add", "last"):
        base = results[call]["unwrapped"]
        print(f"messages.{call}:")
        for name, figures in results[call].items():
            ratio = figures["p50_us"] / base["p50_us"]
            mean_ratio = figures["mean_us"] / base["mean_us"]
            print(
                f"  {name:12} p50 {figures['p50_us']:8.1f} us  p99 {figures['p99_us']:8.1f} us  "
                f"mean {figures['mean_us']:8.1f} us  p50 x{ratio:.3f}  mean x{mean_ratio:.3f}"
            )
    print("the hook alone (us per call):", results["hook_alone_us"])
    write_json(args.out, results)


if __name__ == "__main__":
    main()
