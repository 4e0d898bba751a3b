"""Accept or reject a generated plan: it must be natural language, not code, and must not copy the
reference solution. Pure functions; the thresholds are documented in docs/data.md."""

from __future__ import annotations

import re
from dataclasses import dataclass
from difflib import SequenceMatcher

MAX_PLAN_CHARS = 6000
MIN_PLAN_CHARS = 40
LEAK_MIN_COMMON_CHARS = 60  # longest common substring (whitespace-normalised) with the reference program
LEAK_MIN_LINE_CHARS = 16  # reference lines at least this long (stripped) count for line overlap
LEAK_MAX_SHARED_LINES = 2  # this many such reference lines found verbatim in the plan -> leak
CODE_MAX_WEAK_LINES = 2  # more weakly code-like lines than this -> code

_THINK = re.compile(r"<think>.*?</think>", re.S | re.I)
_FENCE = re.compile(r"^\s*(```|~~~)", re.M)
_STRONG = [
    re.compile(r"^\s*(async\s+)?def\s+\w+\s*\(.*\)\s*(->\s*[^:]+)?:\s*(#.*)?$"),
    re.compile(r"^\s*class\s+\w+\s*(\([^)]*\))?\s*:\s*$"),
    re.compile(r"^\s*(from\s+[\w.]+\s+)?import\s+[\w.]+(\s+as\s+\w+)?(\s*,\s*[\w.]+)*\s*$"),
    re.compile(r"^\s*if\s+__name__\s*==\s*['\"]__main__['\"]\s*:"),
    re.compile(r"^\s*(#include\s*<|int\s+main\s*\(|public\s+static\s+void)"),
]
_WEAK = [
    re.compile(r"\bprint\s*\("),
    re.compile(r"\binput\s*\(\s*\)"),
    re.compile(r"\bsys\.stdin\b"),
    re.compile(r"^\s*(for|while)\s+.*\bin\s+range\s*\(.*\)\s*:\s*$"),
    re.compile(r"^\s*(elif|else|try|except|finally)\b.*:\s*$"),
    re.compile(r"^\s*return\s+[\w\[\(].*[\)\]]\s*$"),
    re.compile(r"^\s*\w+(\[[^\]]*\])*\s*(\+|-|\*|//)?=\s*\w+\s*\(.*\)\s*$"),
    re.compile(r"\blambda\s+\w*\s*:"),
]


@dataclass(frozen=True)
class PlanCheck:
    ok: bool
    plan: str  # the cleaned plan (thinking removed, stripped); "" when rejected
    reason: str  # "" when ok; else a short code and detail, e.g. "code: def line 'def solve():'"


def clean_plan(raw: str) -> str:
    text = _THINK.sub("", raw or "")
    if "</think>" in text:  # an unclosed/partial thinking prefix
        text = text.rsplit("</think>", 1)[1]
    return text.strip()


def _norm_ws(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def code_reason(plan: str) -> str:
    """Why ``plan`` looks like code, or "" if it does not."""
    if _FENCE.search(plan):
        return "code: fenced block"
    weak = []
    for line in plan.splitlines():
        for pat in _STRONG:
            if pat.search(line):
                return f"code: line {line.strip()[:80]!r}"
        if any(p.search(line) for p in _WEAK):
            weak.append(line.strip())
    if len(weak) > CODE_MAX_WEAK_LINES:
        return f"code: {len(weak)} code-like lines, e.g. {weak[0][:80]!r}"
    return ""


def leak_reason(plan: str, reference: str | None) -> str:
    """Why ``plan`` copies ``reference``, or "" if it does not."""
    if not reference:
        return ""
    shared = []
    plan_lines = {_norm_ws(x) for x in plan.splitlines()}
    plan_flat = _norm_ws(plan)
    for line in reference.splitlines():
        s = _norm_ws(line)
        if len(s) >= LEAK_MIN_LINE_CHARS and (s in plan_lines or s in plan_flat):
            shared.append(s)
    if len(set(shared)) >= LEAK_MAX_SHARED_LINES:
        return f"leak: {len(set(shared))} reference lines copied, e.g. {shared[0][:80]!r}"
    ref_flat = _norm_ws(reference)
    sm = SequenceMatcher(None, plan_flat, ref_flat, autojunk=False)
    m = sm.find_longest_match(0, len(plan_flat), 0, len(ref_flat))
    if m.size >= LEAK_MIN_COMMON_CHARS:
        return f"leak: {m.size} characters in common with the reference, e.g. {plan_flat[m.a : m.a + 60]!r}"
    return ""


def check_plan(raw: str | None, reference: str | None = None) -> PlanCheck:
    if raw is None:
        return PlanCheck(False, "", "empty: no content")
    plan = clean_plan(raw)
    if len(plan) < MIN_PLAN_CHARS:
        return PlanCheck(False, "", f"empty: {len(plan)} characters after removing thinking")
    if len(plan) > MAX_PLAN_CHARS:
        return PlanCheck(False, "", f"too_long: {len(plan)} characters > {MAX_PLAN_CHARS}")
    for reason in (code_reason(plan), leak_reason(plan, reference)):
        if reason:
            return PlanCheck(False, "", reason)
    return PlanCheck(True, plan, "")
