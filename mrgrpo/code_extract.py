"""Find the program in a model answer: the last fenced python block outside any ``<think>`` block.

Shared by the agent loop (``final_code`` of every attempt) and available to the reward, so that the program
the loop tests on the public tests and the one the reward scores on the hidden tests are found the same way.

Rules:
- ``<think> ... </think>`` blocks are removed first (Qwen3 thinking). An unclosed ``<think>`` (the answer
  was cut off while thinking) removes everything after it: code drafted while thinking never counts.
- Only closed fences count. A block whose info string is ``python``, ``py``, ``python3`` or ``Python``
  wins over a bare fence; among those of the same kind, the last one wins.
- ``None`` when there is no such block (the caller decides the verdict, e.g. ``NO_CODE``).
"""

from __future__ import annotations

import re

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL)
# A fence line: ``` plus an optional info string, on its own line; the body is everything up to a line that
# is only ``` (possibly indented). Non-greedy so consecutive blocks stay separate.
_FENCE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)^[ \t]*```[ \t]*$", re.DOTALL | re.MULTILINE)
_PYTHON_TAGS = frozenset({"python", "py", "python3"})


def strip_think(text: str) -> str:
    """``text`` without its ``<think>`` blocks; an unclosed ``<think>`` drops the rest of the text."""
    if not isinstance(text, str):
        raise TypeError(f"strip_think expects str, got {type(text).__name__}")
    text = _THINK_BLOCK.sub("", text)
    cut = text.find("<think>")
    if cut != -1:
        text = text[:cut]
    # A stray closing tag (the template opened <think> in the prompt, e.g. enable_thinking=True in a
    # template that pre-fills it) means everything before it was thinking.
    close = text.rfind("</think>")
    if close != -1:
        text = text[close + len("</think>") :]
    return text


def extract_code(text: str) -> str | None:
    """The last fenced python block of ``text`` (thinking removed), or ``None``."""
    visible = strip_think(text)
    tagged: list[str] = []
    bare: list[str] = []
    for match in _FENCE.finditer(visible):
        tag = match.group(1).lower()
        body = match.group(2)
        if tag in _PYTHON_TAGS:
            tagged.append(body)
        elif tag == "":
            bare.append(body)
    chosen = tagged[-1] if tagged else (bare[-1] if bare else None)
    if chosen is None:
        return None
    chosen = chosen.strip("\n")
    return chosen if chosen.strip() else None
