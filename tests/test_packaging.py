"""The wheel carries the SQL files, the migrations, the report's assets and the typing marker, and works
once installed.

The wheel is built from this checkout (``python -m build``; with ``--no-isolation`` when hatchling is
importable here, else in an isolated environment that installs hatchling from the package index), then
installed with ``pip --no-deps`` into a fresh venv that borrows this environment's dependencies through a
``.pth`` file. Everything then runs outside the source tree, so nothing can come from the checkout.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from pgmem.ops import migrate

ROOT = Path(__file__).resolve().parents[1]
#: The report's template, style and script: package data (pgmem.ops.report reads them at run time).
REPORT_ASSETS = ("page.html", "report.css", "report.js")


def _run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    isolation = ["--no-isolation"] if importlib.util.find_spec("hatchling") else []
    _run(sys.executable, "-m", "build", "--wheel", *isolation, "--outdir", out, ROOT, cwd=out)
    (built,) = out.glob("pgmem-*.whl")
    return built


def test_wheel_contains_the_resources(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in (
        "pgmem/_resources/sql/messages.sql",
        "pgmem/_resources/migrations/env.py",
        "pgmem/_resources/migrations/script.py.mako",
        "pgmem/_resources/alembic.ini",
        "pgmem/py.typed",
        "pgmem/_sync/messages.py",
        "pgmem/_sync/retention.py",
        "pgmem/_resources/sql/retention.sql",
        *(f"pgmem/ops/report_assets/{asset}" for asset in REPORT_ASSETS),
    ):
        assert required in names
    assert any(n.startswith("pgmem/_resources/migrations/versions/0001_") and n.endswith(".py") for n in names)
    # Every migration of the checkout ships, and nothing from tests or the tools.
    versions = {p.name for p in (ROOT / "migrations" / "versions").glob("*.py")}
    assert versions <= {n.rpartition("/")[2] for n in names if "/migrations/versions/" in n}
    assert not [n for n in names if n.startswith(("tests/", "tools/", "benchmarks/")) or "__pycache__" in n]
    entry_points = zipfile.ZipFile(wheel).read("pgmem-0.1.0.dist-info/entry_points.txt").decode()
    assert "pgmem = pgmem.ops.cli:main" in entry_points


def test_installed_wheel_finds_its_resources_and_migrates(wheel: Path, tmp_path: Path, empty_dsn: str) -> None:
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    _run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "--no-deps",
        "--no-index",
        wheel,
        cwd=tmp_path,
    )
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # The dependencies come from this environment, appended after the venv's own site-packages (a plain
    # path, so this environment's editable-install hook for the checkout is not processed there).
    (site / "_deps_from_test_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PGMEM_DSN")}

    probe = (
        "import pathlib, pgmem, pgmem.planning.statements, pgmem.planning.resources, pgmem.ops.migrate\n"
        "print(pgmem.__file__)\n"
        "print(pgmem.planning.resources.resource_path('sql'))\n"
        "print(pgmem.planning.resources.resource_path('migrations'))\n"
        "assert 'add_many' in pgmem.planning.statements.load('messages')\n"
        "print(pgmem.ops.migrate.head_revision())\n"
    )
    out = _run(python, "-c", probe, cwd=tmp_path, env=env).stdout.split()
    package, sql_dir, migrations_dir, head = out
    for path in (package, sql_dir, migrations_dir):
        assert Path(path).is_relative_to(site), path
    assert Path(sql_dir) == site / "pgmem" / "_resources" / "sql"
    assert head == migrate.head_revision()

    # The installed console script migrates an empty database with the packaged migrations.
    done = _run(venv / "bin" / "pgmem", "migrate", "--dsn", empty_dsn, cwd=tmp_path, env=env)
    assert f"schema at revision {head}" in done.stdout

    # The installed report reads its template, style and script from the installed package.
    page = tmp_path / "report.html"
    done = _run(venv / "bin" / "pgmem", "report", "--dsn", empty_dsn, "--out", page, cwd=tmp_path, env=env)
    assert "report on 0 messages" in done.stdout
    text = page.read_text()
    for asset in REPORT_ASSETS:
        body = (ROOT / "pgmem" / "ops" / "report_assets" / asset).read_text()
        if asset == "page.html":
            placeholders = re.findall(r"\$(\w+)", body)
            assert placeholders and not [p for p in placeholders if f"${p}" in text]
            assert text.startswith(body.partition("$")[0])
        else:
            assert body.strip() in text
