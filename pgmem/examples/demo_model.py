"""The "LLM" of ``pgmem demo``: OpenAI's chat API when ``OPENAI_API_KEY`` is set, else short,
deterministic stand-in texts derived from the idea (a PRD, a design, code, a review)."""

from __future__ import annotations

import os
import re
import sys

from pgmem.models import Message

__all__ = ["code", "design", "files_of", "llm", "prd", "review"]


def llm(prompt: str, fallback: str, recalled: list[Message]) -> str:
    """The real model when OPENAI_API_KEY is set, else (or on any failure) the deterministic text.

    ``recalled``: what the role recalled from its long-term memory, given to the model as context (the
    stand-in does not read it)."""
    if not os.environ.get("OPENAI_API_KEY"):
        return fallback
    if recalled:
        context = "\n---\n".join(m.content for m in recalled)
        prompt = f"{prompt}\n\nWhat you remember that may be related:\n{context}"
    try:
        import openai

        client = openai.OpenAI(timeout=20.0, max_retries=1)
        answer = client.chat.completions.create(
            model=os.environ.get("PGMEM_DEMO_MODEL", "gpt-4o-mini"),
            messages=[{"role": "user", "content": prompt}],
            max_tokens=400,
        )
        return answer.choices[0].message.content or fallback
    except Exception as exc:  # noqa: BLE001 - the demo must finish without a model; it says why
        print(f"warning: the model failed ({type(exc).__name__}: {exc}); using the offline stand-in", file=sys.stderr)
        return fallback


_FILE_RE = re.compile(r"^- (\w+\.py): *(.*)$", re.MULTILINE)


def files_of(design: str) -> list[tuple[str, str]]:
    """The ``(file, purpose)`` lines of a design."""
    return [(m.group(1), m.group(2).strip()) for m in _FILE_RE.finditer(design)]


# The stand-in "LLM": short, deterministic texts derived from the idea. The review rule is part of the
# script (it asks for one fix) so that the flow is the same with a real model and always ends.
def prd(idea: str) -> str:
    return (
        f"PRD: {idea}\n"
        f"Goal: a first version of {idea} that someone can try within a minute.\n"
        "Requirements:\n"
        f"- R1 the core rules of {idea}, testable without any user interface\n"
        "- R2 one command starts it\n"
        "- R3 invalid input gets a clear message, never a crash\n"
    )


def design(idea: str) -> str:
    return (
        f"Design for {idea}\n"
        f"- core.py: state and rules of {idea} as pure functions (R1)\n"
        "- main.py: entry point and the input loop that drives core.py (R2, R3)\n"
    )


def code(name: str, purpose: str, version: int) -> str:
    body = '    raise NotImplementedError("first cut")\n'
    if version > 1:
        body = (
            "    for line in sys.stdin:\n"
            "        if not is_valid(line):\n"
            '            print("invalid input: " + line.strip())  # R3\n'
        )
    return f'"""{name}: {purpose}"""\n\nimport sys\n\n\ndef main() -> None:\n{body}'


def review(name: str, code: str, version: int) -> str:
    if version == 1 and "input" in code and "invalid" not in code:
        return f"CHANGES REQUESTED: {name} must reject invalid input with a message (R3)"
    return f"LGTM: {name} v{version}"
