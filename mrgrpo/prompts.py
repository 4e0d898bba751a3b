"""Prompt text for the code task, shared by the data pipeline and the agent loop.

Pure functions and constants only: no I/O, no imports from the rest of mrgrpo at module level.
Changing any text that ends up in a plan request must bump ``PLAN_PROMPT_VERSION`` (the plan cache
is keyed by it); changing the policy's prompts must bump ``PROMPT_VERSION`` (recorded in the data
report so a parquet file says which prompts it was built with).

Turns of the plan -> code -> feedback loop:

- ``SYSTEM_PROMPT`` + ``build_user_prompt(...)``: the first user turn, with the plan when there is one.
- ``build_plan_turn_prompt(...)``: asks the policy itself for a plan (no code), when the row has none.
- ``CODE_AFTER_PLAN_PROMPT``: the user turn that follows a policy-written plan.
- ``feedback_turn(...)``: the user turn after a failed attempt on the public tests (what the agent loop sends),
  worded by ``build_feedback_prompt(...)``.
- ``plan_request_messages(problem)``: what the plan-writing (teacher) model is sent.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

PROMPT_VERSION = "code-v1"
PLAN_PROMPT_VERSION = "plan-v1"

SYSTEM_PROMPT = (
    "You are an expert competitive programmer. You solve programming problems in Python 3. "
    "Think about the algorithm and its complexity before writing code. "
    "Answer with exactly one complete solution in a single ```python fenced code block; "
    "the last python block of your answer is the one that is run."
)

STDIO_INSTRUCTIONS = (
    "Your program reads the input from standard input and writes the answer to standard output, "
    "exactly in the format the problem asks for. Do not print anything else (no prompts, no debug text). "
    "Write a complete program: it is run as a script."
)

CALL_INSTRUCTIONS = (
    "Implement `{entry}`. It is called with the test arguments and its return value is compared with "
    "the expected one. Do not read standard input and do not print the answer; return it. "
    "You may define helper functions and import standard-library modules."
)

PLAN_INTRO = "Here is a plan for solving it, written by an expert. Follow it unless you find a mistake in it."

# What a plan is, for both the teacher model and the policy's own plan turn.
PLAN_RULES = (
    "Describe the approach in plain English: the key observations, the algorithm step by step, the data "
    "structures, the edge cases to handle and the time complexity. Do NOT write any code or pseudo-code: "
    "no code blocks, no function definitions, no Python statements. Keep it under 250 words."
)

PLAN_SYSTEM_PROMPT = (
    "You are an expert competitive programmer and a patient teacher. Given a programming problem, you write "
    "a concise solution plan that a student will implement in Python. " + PLAN_RULES
)

CODE_AFTER_PLAN_PROMPT = "Now write the complete solution that implements your plan, in a single ```python block."

FEEDBACK_HEADER = "Your solution failed {n_failed} of the {n_shown} public test(s) shown below."
FEEDBACK_FOOTER = "Find the bug, then answer with the complete corrected solution in a single ```python block."


def _entry_name(fn_name: str | None, class_name: str | None = None) -> str:
    if not fn_name:
        raise ValueError("call-mode prompt needs fn_name, got None")
    return f"{class_name}.{fn_name}" if class_name else fn_name


def _strip_starter(starter_code: str | None) -> str:
    return (starter_code or "").strip("\n")


def build_user_prompt(
    problem_statement: str,
    starter_code: str | None,
    io_mode: str,
    fn_name: str | None,
    plan: str | None = None,
    class_name: str | None = None,
) -> str:
    """The first user turn: statement, I/O contract, starter code (call mode) and, optionally, a plan.

    For ``io_mode == "stdio"`` the starter code is not shown: APPS+ stores a zero-argument function with a
    random name there, which is an artifact of the data set, not part of the task.
    """
    if io_mode not in ("stdio", "call"):
        raise ValueError(f"build_user_prompt: io_mode must be 'stdio' or 'call', got {io_mode!r}")
    statement = (problem_statement or "").strip()
    if not statement:
        raise ValueError("build_user_prompt: empty problem statement")
    parts = ["Solve the following programming problem.", "", "### Problem", statement, ""]
    if io_mode == "stdio":
        parts += ["### Input and output", STDIO_INSTRUCTIONS, ""]
    else:
        parts += ["### Interface", CALL_INSTRUCTIONS.format(entry=_entry_name(fn_name, class_name)), ""]
        starter = _strip_starter(starter_code)
        if starter:
            parts += ["Starter code:", "```python", starter, "```", ""]
    if plan is not None and plan.strip():
        parts += ["### Plan", PLAN_INTRO, "", plan.strip(), ""]
    parts.append("Write your solution in a single ```python code block.")
    return "\n".join(parts)


def build_messages(
    problem_statement: str,
    starter_code: str | None,
    io_mode: str,
    fn_name: str | None,
    plan: str | None = None,
    class_name: str | None = None,
) -> list[dict[str, str]]:
    """``[system, user]`` chat messages of the first turn (the parquet row's ``prompt``)."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {
            "role": "user",
            "content": build_user_prompt(problem_statement, starter_code, io_mode, fn_name, plan, class_name),
        },
    ]


def build_plan_turn_prompt(
    problem_statement: str,
    starter_code: str | None,
    io_mode: str,
    fn_name: str | None,
    class_name: str | None = None,
) -> str:
    """A first user turn asking the policy for a plan only (the code comes in the next turn)."""
    base = build_user_prompt(problem_statement, starter_code, io_mode, fn_name, None, class_name)
    head, _, _ = base.rpartition("\n")  # drop the "write your solution" line
    return head + "\nFirst, write a plan only. " + PLAN_RULES


def _clip(text: Any, limit: int) -> str:
    s = text if isinstance(text, str) else repr(text)
    if len(s) <= limit:
        return s
    return s[:limit] + f"\n... [{len(s) - limit} more characters]"


def build_feedback_prompt(failures: Sequence[dict[str, Any]], n_shown: int, max_chars: int = 600) -> str:
    """A feedback user turn. ``failures``: dicts with ``verdict`` and optionally ``input``, ``expected``,
    ``got`` (stdout or the JSON of the return value) and ``stderr``; only public tests may appear here."""
    lines = [FEEDBACK_HEADER.format(n_failed=len(failures), n_shown=n_shown), ""]
    for i, f in enumerate(failures, 1):
        lines.append(f"Test {i}: {f.get('verdict', 'failed')}")
        for key, label in (("input", "Input"), ("expected", "Expected output"), ("got", "Your output")):
            if key in f and f[key] is not None:
                lines += [f"{label}:", "```", _clip(f[key], max_chars), "```"]
        if f.get("stderr"):
            lines += ["Error output (tail):", "```", _clip(f["stderr"], max_chars), "```"]
        lines.append("")
    lines.append(FEEDBACK_FOOTER)
    return "\n".join(lines)


# How each failing verdict is named to the policy (AC and INFRA never reach feedback).
VERDICT_TEXT = {
    "WA": "WA (wrong answer)",
    "RE": "RE (runtime error)",
    "TLE": "TLE (time limit exceeded)",
    "MLE": "MLE (memory limit exceeded)",
    "OLE": "OLE (output limit exceeded)",
    "SE": "SE (syntax error)",
    "NO_CODE": "NO_CODE (no ```python code block found in your answer)",
}


def _tail(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"[... {len(text) - limit} characters cut]\n" + text[-limit:]


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=repr)


def feedback_turn(
    verdict: str,
    inputs: Sequence[Any],
    outputs: Sequence[Any],
    failing_index: int | None = None,
    *,
    failing_verdict: str = "",
    stdout: str = "",
    stderr: str = "",
    detail: str = "",
    max_chars: int = 400,
    stderr_chars: int = 400,
) -> str:
    """The user turn after a failed attempt on the public tests ``inputs`` / ``outputs`` (decoded, as in
    `mrgrpo.testset.TestSet`).

    ``verdict`` is the attempt's (``NO_CODE`` when the answer had no program and nothing ran);
    ``failing_index`` / ``failing_verdict`` / ``stdout`` / ``stderr`` describe the first test that failed. The turn
    shows the verdict, that test's input and expected output, the program's output when the test's verdict is
    WA, and the tail of its stderr (``stderr_chars``); with no failing test (e.g. a syntax error), the sandbox's
    ``detail`` stands in for stderr. Each field is cut to ``max_chars``.

        >>> text = feedback_turn("WA", ["1\\n"], ["2\\n"], 0, failing_verdict="WA", stdout="3\\n")
        >>> text.splitlines()[:4]
        ['Your solution failed 1 of the 1 public test(s) shown below.', '', 'Test 1: WA (wrong answer)', 'Input:']
        >>> "Your output:" in feedback_turn("RE", ["1\\n"], ["2\\n"], 0, failing_verdict="RE", stderr="boom")
        False
    """
    failure = {"verdict": VERDICT_TEXT.get(verdict, verdict)}
    if failing_index is not None and 0 <= failing_index < len(inputs):
        failure["input"] = _show(inputs[failing_index])
        failure["expected"] = _show(outputs[failing_index])
        if failing_verdict == "WA":
            failure["got"] = stdout
        failure["stderr"] = _tail(stderr or "", stderr_chars)
    elif detail:  # no test ran (e.g. a syntax error): the sandbox's detail is the only message
        failure["stderr"] = _tail(detail, stderr_chars)
    message = build_feedback_prompt([failure], n_shown=1, max_chars=max_chars)
    hard_cap = 6 * max_chars + 1000
    if len(message) > hard_cap:
        raise RuntimeError(f"feedback message of {len(message)} characters exceeds its bound {hard_cap}")
    return message


def _field(problem: Any, name: str, default: Any = None) -> Any:
    if isinstance(problem, dict):
        return problem.get(name, default)
    return getattr(problem, name, default)


def plan_request_messages(problem: Any, include_solution: bool = False) -> list[dict[str, str]]:
    """Chat messages asking a (stronger) model for a plan of ``problem`` (a ``mrgrpo.apps.Problem`` or a
    dict with the same field names). With ``include_solution`` the reference program is shown so that
    the plan is correct; the pipeline then rejects plans that copy from it."""
    statement = (_field(problem, "statement") or "").strip()
    if not statement:
        raise ValueError(f"plan_request_messages: problem {_field(problem, 'source_id')!r} has no statement")
    io_mode = _field(problem, "io_mode")
    fn_name = _field(problem, "fn_name")
    parts = ["Write a solution plan for this programming problem.", "", "### Problem", statement, ""]
    if io_mode == "call":
        entry = _entry_name(fn_name, _field(problem, "class_name"))
        parts += [f"The solution implements `{entry}`, which returns the answer.", ""]
        starter = _strip_starter(_field(problem, "starter_code"))
        if starter:
            parts += ["Starter code:", "```python", starter, "```", ""]
    else:
        parts += ["The solution reads standard input and prints to standard output.", ""]
    ref = _field(problem, "reference_solution")
    if include_solution and ref:
        parts += [
            "A correct reference solution, for you only (do not copy or quote it; explain its idea in words):",
            "```python",
            ref.strip("\n"),
            "```",
            "",
        ]
    parts.append(PLAN_RULES)
    return [{"role": "system", "content": PLAN_SYSTEM_PROMPT}, {"role": "user", "content": "\n".join(parts)}]


def plan_prompt_version(include_solution: bool = False) -> str:
    """The version string the plan cache is keyed by (the reference solution changes the request)."""
    return PLAN_PROMPT_VERSION + ("+ref" if include_solution else "")
