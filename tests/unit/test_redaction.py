"""No password in anything pgmem raises, chains, logs or reprs (issue 34, item 6), without a database:
tracebacks are formatted in full (every chained exception, suppressed context included) and searched
for a random secret."""

from __future__ import annotations

import asyncio
import logging
import traceback
import uuid
from urllib.parse import quote

import psycopg
import pytest

import pgmem
from pgmem.errors import check_conninfo, redact, scrub, secrets_in, translate


def _everything(exc: BaseException) -> str:
    """Every text a user may see of ``exc``: its traceback with every chained exception (``__cause__`` and
    ``__context__``, suppressed or not), their ``repr`` and ``args``."""
    parts: list[str] = ["".join(traceback.format_exception(exc))]
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        parts += [repr(current), str(current), repr(current.args), "".join(traceback.format_exception(current))]
        todo += [e for e in (current.__cause__, current.__context__) if e is not None]
    return "\n".join(parts)


def _dsns(secret: str) -> list[str]:
    """DSNs holding ``secret`` in every form: to a closed port, or that libpq cannot parse."""
    return [
        f"postgresql://u:{secret}@127.0.0.1:1/db",
        f"postgresql://u:pw-{secret}%zz@127.0.0.1/db",  # a bad percent-escape: unparsable
        f"postgresql://u@127.0.0.1:1/db?password={secret}%zz",
        f"host=127.0.0.1 port=1 user=u password='pa ss {secret}'",
        f"host=127.0.0.1 port=1 user=u password='pa ss {secret}",  # unterminated quote
        f"host=127.0.0.1 port=1 user=u password=pa ss {secret} dbname=db",  # spaces, unquoted: unparsable
        f"postgresql://u:pa ss {secret}@127.0.0.1:1/db",  # spaces, not percent-encoded: unparsable
        f"postgresql://u:{quote(f'pa ss {secret}', safe='')}@127.0.0.1:1/db",  # percent-encoded
        f"postgresql://u:{secret}#x?y@127.0.0.1:1/db",
        f"host=127.0.0.1 port=1 password={secret} bogus_option=1",
    ]


@pytest.fixture
def secret() -> str:
    return uuid.uuid4().hex


def test_connect_never_shows_the_password(secret: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    for dsn in _dsns(secret):
        with pytest.raises(pgmem.PgmemError) as info:
            pgmem.connect(dsn, timeout=5)
        assert isinstance(info.value, pgmem.InvalidInput | pgmem.ConnectionFailed), dsn
        assert secret not in _everything(info.value), dsn
        assert secret[:12] not in _everything(info.value), dsn
    assert secret not in caplog.text


def test_aconnect_never_shows_the_password(secret: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)

    async def attempt(dsn: str) -> BaseException:
        try:
            await pgmem.aconnect(dsn, timeout=5)
        except pgmem.PgmemError as exc:
            return exc
        raise AssertionError(dsn)

    for dsn in _dsns(secret):
        assert secret not in _everything(asyncio.run(attempt(dsn))), dsn
    assert secret not in caplog.text


def test_the_driver_called_inside_translate_never_shows_the_password(secret: str) -> None:
    """psycopg's own complaint quotes the part of the DSN it could not parse: the password, bare."""
    for dsn in _dsns(secret):
        with pytest.raises(pgmem.PgmemError) as info, translate():
            psycopg.connect(dsn, connect_timeout=2)
        assert secret not in _everything(info.value), dsn
        assert info.value.__cause__ is not None  # still chained: the type and the reason stay visible


def test_an_unparsable_dsn_is_invalid_input_with_its_reason(secret: str) -> None:
    with pytest.raises(pgmem.InvalidInput) as info:
        check_conninfo(f"postgresql://u:pw-{secret}%zz@127.0.0.1/db")
    message = str(info.value)
    assert "percent-encoded" in message and "127.0.0.1" in message and secret not in message
    assert info.value.__cause__ is None and info.value.__context__ is None


def test_secrets_in_reads_the_password_as_libpq_does(secret: str) -> None:
    assert secrets_in(f"host=h password='a b {secret}' dbname=d") == [f"a b {secret}"]
    assert f"pa ss {secret}" in secrets_in(f"postgresql://u:pa ss {secret}@h/db")
    assert f"pa ss {secret}" in secrets_in(f"postgresql://u:{quote(f'pa ss {secret}', safe='')}@h/db")
    assert secrets_in(f"host=h password=a b {secret} dbname=d") == [f"a b {secret}"]
    assert secrets_in("postgresql://u@h/db") == []


def test_redact_keeps_the_rest(secret: str) -> None:
    dsn = f"postgresql://alice:pa ss {secret}@db.example:5433/agents?sslmode=require"
    assert redact(dsn) == "postgresql://alice:***@db.example:5433/agents?sslmode=require"
    keyed = f"host=h user=u password=a b {secret} dbname=d"
    assert redact(keyed, secrets_in(keyed)) == "host=h user=u password=*** dbname=d"
    assert redact("postgresql://postgres:@/db?host=/tmp") == "postgresql://postgres:@/db?host=/tmp"


def test_scrub_redacts_the_whole_chain(secret: str) -> None:
    try:
        try:
            try:
                raise OSError(f"password={secret}")
            except OSError:
                raise psycopg.OperationalError(f'invalid percent-encoded token: "{secret}%zz"') from None
        except psycopg.Error as exc:
            raise RuntimeError("outer") from exc
    except RuntimeError as outer:
        error = outer
    error.add_note(f"dsn postgresql://u:{secret}@h/db")
    assert secret in _everything(error)
    assert scrub(error) is error
    assert secret not in _everything(error)
    assert isinstance(error.__cause__, psycopg.OperationalError) and "percent-encoded" in str(error.__cause__)


def test_scrub_with_known_secrets(secret: str) -> None:
    error = ValueError(f"the server said {secret}")
    assert secret not in str(scrub(error, [secret]))
