"""The OpenAI Agents SDK's ``Session`` on pgmem: ``pip install 'pgmem[openai-agents]'``.

Example:
    >>> from agents import Agent, Runner
    >>> from pgmem.integrations.openai_agents import PgmemSession
    >>> session = PgmemSession("user-42", client=pgmem.connect())
    >>> Runner.run_sync(Agent(name="helper"), "hello", session=session)
"""

from pgmem.integrations._adapters import require

require("agents", "openai-agents", "openai_agents")

from pgmem.integrations.openai_agents.session import PgmemSession  # noqa: E402

__all__ = ["PgmemSession"]
