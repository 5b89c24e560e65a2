"""The tracing hook (pgmem.tracing): what it wraps, and that it wraps nothing (and imports nothing) when
OpenTelemetry is absent, disabled or unused.

The processes that must not see OpenTelemetry run in a fresh interpreter with a ``sys.meta_path`` finder
that refuses it, as a machine without the ``otel`` extra would.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import subprocess
import sys

import pytest

from pgmem import tracing

MODULES = {
    "MessageRepository": "messages",
    "QueueRepository": "queues",
    "VectorRepository": "vectors",
    "SummaryRepository": "summaries",
    "BrainRepository": "brains",
    "Retention": "retention",
    "StoreRepository": "stores",
    "ItemRepository": "items",
    "ContextBuilder": "context",
    "ForkRepository": "forks",
}

_BLOCKER = """
import importlib.abc, sys
class _NoOpenTelemetry(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _NoOpenTelemetry())
"""

_PROBE = """
import importlib, inspect, json, os, sys
import pgmem
from pgmem import tracing
found = {"enabled": tracing.enabled(), "wrapped": [], "methods": 0}
for name, module in MODULES.items():
    for flavour, prefix in (("_sync", ""), ("_async", "Async")):
        cls = getattr(importlib.import_module(f"pgmem.{flavour}.{module}"), prefix + name)
        for method in tracing.traced_methods(cls):
            function = inspect.getattr_static(cls, method)
            found["methods"] += 1
            # The function written: no wrapper, its code in the core's modules (the repository's, or those of
            # the parts it is composed of), not in pgmem/tracing.py.
            home = os.path.basename(os.path.dirname(function.__code__.co_filename))
            if hasattr(function, "__wrapped__") or home != flavour:
                found["wrapped"].append(f"{cls.__name__}.{method}")
found["otel_loaded"] = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
if BLOCKED:
    try:
        from pgmem import telemetry
        telemetry.observe(None)
    except pgmem.ConfigError as exc:
        found["observe"] = str(exc)
print(json.dumps(found))
"""


def _probe(blocked: bool, env: dict[str, str] | None = None) -> dict[str, object]:
    code = (_BLOCKER if blocked else "") + f"MODULES = {MODULES!r}\nBLOCKED = {blocked!r}\n" + _PROBE
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_without_opentelemetry_pgmem_imports_and_wraps_nothing() -> None:
    found = _probe(blocked=True)
    assert found["enabled"] is False
    assert found["methods"] and found["wrapped"] == []
    assert "pip install 'pgmem[otel]'" in str(found["observe"])
    assert found["otel_loaded"] == []


def test_disabled_by_the_environment_wraps_nothing() -> None:
    found = _probe(blocked=False, env={"OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "requests, pgmem"})
    assert found["enabled"] is False and found["wrapped"] == []


def test_installed_it_wraps_every_call_but_imports_nothing_of_it() -> None:
    pytest.importorskip("opentelemetry.trace")
    found = _probe(blocked=False, env={"OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": ""})
    assert found["enabled"] is True
    assert len(found["wrapped"]) == found["methods"]  # type: ignore[arg-type]
    # Found, not imported (~20 ms): a call looks for it among the modules loaded, without loading it. (Finding
    # opentelemetry.trace imports its parent, a namespace package without code.)
    assert found["otel_loaded"] in ([], ["opentelemetry"])


@pytest.mark.parametrize("name", sorted(MODULES))
def test_the_twins_have_the_same_calls_and_the_async_ones_are_coroutines(name: str) -> None:
    module = MODULES[name]
    synchronous = getattr(importlib.import_module(f"pgmem._sync.{module}"), name)
    asynchronous = getattr(importlib.import_module(f"pgmem._async.{module}"), "Async" + name)
    calls = tracing.traced_methods(asynchronous)
    assert calls and sorted(calls) == sorted(tracing.traced_methods(synchronous))
    for method in calls:
        function = inspect.unwrap(inspect.getattr_static(asynchronous, method))
        # A public plain function in a repository runs no statement: name it in tracing.NOT_CALLS.
        assert inspect.iscoroutinefunction(function), f"{asynchronous.__name__}.{method} is not a coroutine"


def test_every_name_not_traced_is_a_plain_method_of_a_repository() -> None:
    plain = {"close"}  # a coroutine, the client's shutdown
    for name, module in MODULES.items():
        cls = getattr(importlib.import_module(f"pgmem._async.{module}"), "Async" + name)
        plain |= {m for m, f in vars(cls).items() if inspect.isfunction(f) and not inspect.iscoroutinefunction(f)}
    assert tracing.NOT_CALLS <= plain, tracing.NOT_CALLS - plain
    assert set(MODULES) == set(tracing.REPOSITORIES)
