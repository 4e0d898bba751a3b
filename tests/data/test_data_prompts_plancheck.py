"""mrgrpo.prompts (pure prompt builders) and mrgrpo.data.plancheck (code / leak rejection)."""

from __future__ import annotations

import pytest

from mrgrpo import prompts
from mrgrpo.apps import Problem
from mrgrpo.data.plancheck import check_plan

REF = """
def XKxTL():
    n, k = map(int, stdin.readline().split(" "))
    a = 1
    for c in map(int, stdin.readline().split(" ")):
        a = a * (gcd(k, c) // gcd(a, c))
    if a % k == 0:
        print("Yes")
"""

GOOD = (
    "Observe that Arya knows x mod c for every ancient number c, hence x mod lcm of all c. She wins exactly when "
    "k divides that lcm. Compute the lcm incrementally but reduce it modulo k via gcd to keep numbers small:\n"
    "1. Read n, k and the list.\n2. Keep a = 1; for each c set a to lcm(a, gcd(c, k)).\n"
    "3. Answer Yes if a equals k, else No.\nComplexity O(n log k)."
)


def test_prompts_stdio_call_and_plan():
    u = prompts.build_user_prompt("Print the sum.", "", "stdio", None)
    assert "standard input" in u and "Starter code" not in u and "### Plan" not in u
    u = prompts.build_user_prompt(
        "Return it.", "class Solution:\n    def f(self, x):\n", "call", "f", plan="Use a heap.", class_name="Solution"
    )
    assert "`Solution.f`" in u and "```python\nclass Solution:" in u and "### Plan" in u and "Use a heap." in u
    msgs = prompts.build_messages("Print the sum.", "", "stdio", None)
    assert [m["role"] for m in msgs] == ["system", "user"] and msgs[0]["content"] == prompts.SYSTEM_PROMPT
    with pytest.raises(ValueError, match="io_mode"):
        prompts.build_user_prompt("x", "", "weird", None)
    with pytest.raises(ValueError, match="fn_name"):
        prompts.build_user_prompt("x", "", "call", None)
    turn = prompts.build_plan_turn_prompt("Print the sum.", "", "stdio", None)
    assert "plan only" in turn and "single ```python" not in turn
    fb = prompts.build_feedback_prompt([{"verdict": "WA", "input": "1\n", "expected": "2\n", "got": "3\n"}], 1)
    assert "failed 1 of the 1" in fb and "Expected output" in fb


def test_plan_request_messages():
    p = Problem(
        "s:1",
        "apps_plus",
        "Sum two numbers.",
        "call",
        "add",
        None,
        "def add(a, b):\n",
        [[1, 2]],
        [3],
        "introductory",
        "def add(a, b):\n    return a + b\n",
    )
    msgs = prompts.plan_request_messages(p)
    assert msgs[0]["role"] == "system" and "Do NOT write any code" in msgs[0]["content"]
    assert "Sum two numbers." in msgs[1]["content"] and "return a + b" not in msgs[1]["content"]
    assert "return a + b" in prompts.plan_request_messages(p, include_solution=True)[1]["content"]
    assert prompts.plan_prompt_version(True) != prompts.plan_prompt_version(False)


def test_check_plan_accepts_prose_and_strips_thinking():
    r = check_plan("<think>let me think, def f(): ...</think>\n" + GOOD, REF)
    assert r.ok, r.reason
    assert r.plan == GOOD


@pytest.mark.parametrize(
    "text, reason",
    [
        (GOOD + "\n```python\nprint(1)\n```", "code: fenced block"),
        (GOOD + "\ndef solve(n):", "code: line"),
        (GOOD + "\nimport sys", "code: line"),
        (GOOD + "\nclass Solution:", "code: line"),
        (GOOD + "\nn = int(input())\nprint(n)\nfor i in range(n):\nelse:", "code:"),
        (
            GOOD
            + "\n"
            + '    for c in map(int, stdin.readline().split(" ")):\n        a = a * (gcd(k, c) // gcd(a, c))',
            "leak:",
        ),
        ("short", "empty:"),
        ("", "empty:"),
        ("word " * 2000, "too_long:"),
    ],
)
def test_check_plan_rejects(text, reason):
    r = check_plan(text, REF)
    assert not r.ok and r.reason.startswith(reason), r.reason


def test_leak_by_long_common_substring():
    ref = "def f(s):\n    return sorted(set(s.lower().replace('-', '').split()), key=lambda w: (len(w), w))\n"
    plan = GOOD + " Finally return sorted(set(s.lower().replace('-', '').split()), key=... by length."
    r = check_plan(plan, ref)
    assert not r.ok and r.reason.startswith("leak:")


def test_the_documented_examples_hold():
    import doctest

    result = doctest.testmod(prompts)
    assert result.attempted >= 3 and result.failed == 0


def test_feedback_turn_shows_the_sandbox_detail_when_no_test_ran():
    text = prompts.feedback_turn("SE", ["1\n"], ["2\n"], detail="SyntaxError: invalid syntax (line 1)")
    assert "Test 1: SE (syntax error)" in text and "SyntaxError: invalid syntax" in text and "Input:" not in text
    cut = prompts.feedback_turn("RE", ["1\n"], ["2\n"], 0, failing_verdict="RE", stderr="x" * 1000, stderr_chars=10)
    assert "[... 990 characters cut]\nxxxxxxxxxx" in cut and "Your output:" not in cut
