"""MetaGPT's ``MessageQueue`` as a durable queue shared between processes."""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

from pgmem import Client
from pgmem.checks import check_key
from pgmem.connecting import get_default_client
from pgmem.errors import InvalidInput
from pgmem.integrations.codec import MessageCodec
from pgmem.integrations.metagpt.memory import to_stored
from pgmem.models import storage_id


class MessageQueue:
    """MetaGPT's message queue on Postgres: ``push``, ``pop``, ``pop_all``, ``empty``, ``dump``, ``load``.

    Messages come out in priority order (lower first, 0 by default), then oldest first. ``pop`` takes
    and acknowledges in one statement, so two processes popping from one queue never get the same
    message. Pushing a message already waiting in the queue (equal in every field, as the MetaGPT
    ``Memory`` facade compares them) does nothing, as in the seed; once popped it can be pushed again.
    Use :attr:`pgmem.Client.queues` for leases and retries.

    Args:
        name: the queue; the same name in another process is the same queue. ``None``: a new queue.
        client: a :class:`pgmem.Client`; ``None`` uses the process-wide default client.
        message_class: the class ``pop`` returns (default: the class of what you push, else the class
            stored with the message when importable, else :class:`pgmem.Message`).

    Example:
        >>> mq = MessageQueue("role:Engineer:inbox")
        >>> mq.push(Message(content="fix the bug"))
        >>> mq.pop().content
        'fix the bug'
    """

    def __init__(
        self, name: str | None = None, *, client: Client | None = None, message_class: type[Any] | None = None
    ) -> None:
        self.name = check_key(name if name is not None else f"mq:{uuid.uuid4().hex}", "queue name")
        self._client = client
        self._codec: MessageCodec[Any] = MessageCodec(message_class)

    @property
    def client(self) -> Client:
        return self._client if self._client is not None else get_default_client()

    def push(self, msg: Any, priority: int = 0) -> bool:
        """Append a message (``priority``: lower comes out first); False when it is already waiting in
        the queue (nothing is pushed)."""
        core = to_stored(self._codec, msg)
        # The dedup key names the message (its stored id) in the key alphabet, whatever the id's characters.
        dedup = "msg:" + hashlib.sha256(storage_id(core).encode("utf-8", "surrogatepass")).hexdigest()[:40]
        return self.client.queues.push(self.name, core, priority=priority, dedup_key=dedup).created

    def pop(self) -> Any:
        """Remove and return the next message; None when the queue is empty."""
        items = self.client.queues.take(self.name, 1)
        return self._codec.from_core(items[0].message) if items else None

    def pop_all(self) -> list[Any]:
        """Remove and return every message, in order (batches of 1,000 per statement)."""
        out: list[Any] = []
        while True:
            items = self.client.queues.take(self.name, 1000)
            out.extend(self._codec.from_core(i.message) for i in items)
            if len(items) < 1000:
                return out

    def empty(self) -> bool:
        return self.count() == 0

    def count(self) -> int:
        """Messages waiting (delayed and leased ones included)."""
        return self.client.queues.depth(self.name)["ready"]

    async def dump(self) -> str:
        """The waiting messages as a JSON list (in order), leaving the queue as it is."""
        items = self.client.queues.peek(self.name, 1_000_000)
        return json.dumps([i.message.model_dump(mode="json") for i in items], ensure_ascii=False)

    @staticmethod
    def load(data: str, *, name: str | None = None, client: Client | None = None) -> MessageQueue:
        """A queue holding the messages of ``data`` (from :meth:`dump`), pushed in order.

        Unlike MetaGPT's, malformed data raises :class:`pgmem.InvalidInput` instead of being skipped."""
        from pgmem.models import Message

        try:
            documents = json.loads(data)
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"MessageQueue.load needs the JSON of MessageQueue.dump: {exc}") from exc
        if not isinstance(documents, list):
            raise InvalidInput("MessageQueue.load needs a JSON list of messages")
        try:
            messages = [Message.model_validate(d) for d in documents]
        except ValueError as exc:
            raise InvalidInput(f"MessageQueue.load: not a message: {exc}") from exc
        queue = MessageQueue(name, client=client)
        if messages:
            queue.client.queues.push_many(queue.name, messages)
        return queue

    def __repr__(self) -> str:
        return f"MessageQueue(name={self.name!r})"
