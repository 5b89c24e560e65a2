"""Worker processes for the adapters' concurrency tests (run as ``python -m``): each pops or takes until
the session is empty and prints what it got, one JSON value a line."""

from __future__ import annotations

import asyncio
import json
import sys

import pgmem


def pop_agents_items(dsn: str, session_id: str) -> None:
    from pgmem.integrations.openai_agents import PgmemSession

    with pgmem.connect(dsn, namespace="test", max_size=1) as client:
        session = PgmemSession(session_id, client=client)
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        sys.stdin.readline()  # start together
        while (item := asyncio.run(session.pop_item())) is not None:
            sys.stdout.write(json.dumps(item) + "\n")


def delete_llama_last(dsn: str, key: str) -> None:
    from pgmem.integrations.llama_index import PgmemChatStore

    with pgmem.connect(dsn, namespace="test", max_size=1) as client:
        store = PgmemChatStore(client=client)
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        sys.stdin.readline()
        while (message := store.delete_last_message(key)) is not None:
            sys.stdout.write(json.dumps(message.content) + "\n")


if __name__ == "__main__":
    {"agents": pop_agents_items, "llama": delete_llama_last}[sys.argv[1]](*sys.argv[2:])
