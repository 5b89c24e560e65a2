"""MetaGPT 0.8.2's real classes, imported the way a MetaGPT process imports them.

Importing this module needs MetaGPT; test modules import it after ``pytest.importorskip``. The folder's
``conftest.py`` gives MetaGPT the configuration it reads at import.
"""

from __future__ import annotations

import warnings

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from metagpt.actions import Action, UserRequirement, WriteCode, WriteDesign, WritePRD
    from metagpt.memory import Memory
    from metagpt.roles.role import Role
    from metagpt.schema import Message, MessageQueue

__all__ = [
    "Action",
    "Memory",
    "Message",
    "MessageQueue",
    "Role",
    "UserRequirement",
    "WriteCode",
    "WriteDesign",
    "WritePRD",
]
