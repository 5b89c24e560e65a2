"""A connection lost at the COMMIT of ``client.transaction()`` (found while building the chaos soak).

The commit reaches the server and commits; its reply is lost. docs/reliability.md promises a typed error
for every driver error (``CommitUnknown`` for a write that may have committed); the block's COMMIT (run
by psycopg's ``Transaction`` as ``pgmem._async.scope.transaction`` exits, outside every statement of
pgmem's) raised the driver's ``psycopg.OperationalError`` until ``client.transaction()`` translated it.
"""

from __future__ import annotations

import threading

import pytest
from psycopg.conninfo import make_conninfo

import pgmem
from pgmem.errors import CommitUnknown
from tests.faults.conftest import PrivateServer
from tests.faults.proxy import Proxy


def test_lost_commit_of_a_client_transaction_is_commit_unknown(
    proxy: Proxy, private_server: PrivateServer, namespace: str
) -> None:
    dsn = make_conninfo(**{k: str(v) for k, v in proxy.dsn(private_server.params).items()})
    with pgmem.connect(dsn, namespace=namespace, migrate=False, timeout=2, max_size=2) as client:
        client.messages.count("m")

        def reply_lost() -> None:
            proxy.reset()
            proxy.mode = "pass"

        with pytest.raises(CommitUnknown):
            with client.transaction() as conn:
                client.messages.add("m", pgmem.Message(content="x"), connection=conn)
                proxy.mode = "hold_replies"  # the COMMIT goes through, its reply does not
                threading.Timer(0.5, reply_lost).start()
        assert client.messages.count("m") == 1  # it did commit


def test_lost_reply_of_a_statement_sent_with_its_commit_is_commit_unknown(
    proxy: Proxy, private_server: PrivateServer, namespace: str
) -> None:
    """``send_with_commit`` in a ``commit_pipelined`` block (the background embedder's store): the statement
    and its COMMIT reach the server and commit, their replies are lost: ``CommitUnknown``, and the block
    ends without raising anything else (the server's session is gone)."""
    dsn = make_conninfo(**{k: str(v) for k, v in proxy.dsn(private_server.params).items()})
    with pgmem.connect(dsn, namespace=namespace, migrate=False, timeout=2, max_size=2) as client:
        client.messages.add("m", pgmem.Message(content="seed"))
        bump = (
            "UPDATE pgmem.memories SET vec_rev = vec_rev + 1 WHERE namespace = %(ns)s AND key = 'm' RETURNING vec_rev"
        )

        def reply_lost() -> None:
            proxy.reset()
            proxy.mode = "pass"

        with pytest.raises(CommitUnknown):
            with client.executor.transaction(commit_pipelined=True) as block:
                block.rows("SELECT 1")
                proxy.mode = "hold_replies"  # the statement and the COMMIT go through, their replies do not
                threading.Timer(0.5, reply_lost).start()
                block.send_with_commit(bump, {"ns": namespace})
        assert client.vectors.head_rev("m") == 1  # it did commit
