"""Statement templates of the synthetic problems (`learnability.synth`): how a chain of steps becomes an APPS+
problem statement.

Template t (0 .. N_TEMPLATES - 1) fixes the whole wording of a problem: the opening sentence, the phrasing
of every step (`Family.phrases[t]`), how the steps are joined and the closing sentence. The statement is
then laid out in the style of its source: Codeforces sections for standard input (as in APPS), a
`python` example block for Codewars-style functions, "Example k: / Constraints:" for LeetCode-style methods.
Pure functions.
"""

from __future__ import annotations

import json
from typing import Any

# input nouns per template
_NOUNS = {
    "L": ("a list of integers", "a sequence of whole numbers", "an array of integers", "some integers",
          "a collection of integers"),
    "I": ("an integer n", "a whole number n", "one integer n", "a number n", "an integer value n"),
    "S": ("a string of words separated by single spaces", "a line of text made of words and single spaces",
          "a string: words of letters with one space between neighbours", "a short sentence of letter words",
          "a string of space-separated words"),
}
_INTROS = ("You are given {noun}.", "The input is {noun}.", "Consider {noun}.", "Take {noun}.",
           "Someone hands you {noun}.")
_FINISH = {
    "stdio": ("Print the result.", "Output the final value.", "Print what you get.",
              "Write the answer to standard output.", "Report the outcome."),
    "call": ("Return the result.", "Return the final value.", "Return what you get.", "Give back the answer.",
             "Hand back the outcome."),
}

_RANGES = {
    "L": "The first line contains an integer n (0 ≤ n ≤ 12). The second line contains n integers "
    "a_1, a_2, ..., a_n (-10^6 ≤ a_i ≤ 10^6), separated by spaces.",
    "I": "The only line contains an integer n (-10^9 ≤ n ≤ 10^9).",
    "S": "The only line contains the string (up to 40 letters and single spaces; it may be empty).",
}
_OUTPUTS = {
    "L": "Print the length of the resulting list, then on a second line its elements separated by spaces.",
    "I": "Print one integer.",
    "S": "Print the resulting string.",
    "word": "Print one word.",
}
_NOTES = {
    "L": "The list has at most 12 elements, each between -10^6 and 10^6.",
    "I": "-10^9 <= n <= 10^9",
    "S": "The string has at most 40 characters: letters, and single spaces between words. It may be empty.",
}


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def join_steps(phrases: list[str], template: int) -> str:
    """The steps of one problem as prose, in the style of ``template``."""
    if len(phrases) == 1:
        p = phrases[0]
        return (f"{_cap(p)}.", f"{_cap(p)}.", f"{_cap(p)}.", f"Apply the following operation: {p}.",
                f"Your job is to {p}.")[template]
    first, *mid, last = phrases
    if template == 0:
        closing = "Finally" if mid else "Then"
        return " ".join([f"First, {first}."] + [f"Then, {p}." for p in mid] + [f"{closing}, {last}."])
    if template == 1:
        lines = [f"{i}. {_cap(p)}." for i, p in enumerate(phrases, 1)]
        return "Perform these steps in order:\n" + "\n".join(lines)
    if template == 2:
        return _cap(first) + "".join(f", then {p}" for p in mid) + f", and then {last}."
    if template == 3:
        return "Apply the following operations one after another: " + "; ".join(phrases) + "."
    return " ".join([f"Begin by doing this: {first}."] + [f"Next, {p}." for p in mid] + [f"Last of all, {last}."])


def prose(src: str, phrases: list[str], template: int, io: str, int_range: tuple[int, int] | None) -> str:
    """Opening sentence, steps, closing sentence."""
    noun = _NOUNS[src][template]
    if int_range is not None:
        noun += f" ({int_range[0]} ≤ n ≤ {int_range[1]})"
    finish = _FINISH["stdio" if io == "stdio" else "call"][template]
    sep = "\n" if template == 1 and len(phrases) > 1 else " "  # after a numbered list: a line of its own
    return f"{_INTROS[template].format(noun=noun)} {join_steps(phrases, template)}{sep}{finish}"


def literal(value: Any) -> str:
    """A value as it appears in a Codewars/LeetCode example: JSON-like, strings in double quotes."""
    return json.dumps(value, ensure_ascii=False)


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def stdio_statement(body: str, src: str, dst: str, int_range: tuple[int, int] | None,
                    examples: list[tuple[str, str]]) -> str:
    """APPS (Codeforces) layout: body, Input, Output and Examples sections."""
    ranges = _RANGES[src]
    if int_range is not None:
        ranges = f"The only line contains an integer n ({int_range[0]} ≤ n ≤ {int_range[1]})."
    shown = "\n".join(f"Input\n{i}\nOutput\n{o}" for i, o in examples)
    return f"{body}\n\n\n-----Input-----\n\n{ranges}\n\n\n-----Output-----\n\n{_OUTPUTS[dst]}\n\n\n" \
           f"-----Examples-----\n{shown}"


def codewars_statement(body: str, src: str, int_range: tuple[int, int] | None, fn_name: str,
                       examples: list[tuple[list, Any]]) -> str:
    """Codewars layout: body, a note on the input, examples in a python block."""
    note = _NOTES[src] if int_range is None else f"{int_range[0]} <= n <= {int_range[1]}"
    calls = "\n".join(f"{fn_name}({', '.join(literal(a) for a in args)}) == {literal(out)}" for args, out in examples)
    return f"{body}\n\n{note}\n\nExamples:\n\n```python\n{calls}\n```"


def leetcode_statement(body: str, src: str, int_range: tuple[int, int] | None, param: str,
                       examples: list[tuple[list, Any]]) -> str:
    """LeetCode layout: body, "Example k:" blocks, Constraints."""
    blocks = [
        f"Example {k}:\nInput: {param} = {_compact(args[0])}\nOutput: {_compact(out)}"
        for k, (args, out) in enumerate(examples, 1)
    ]
    if int_range is not None:
        constraints = f"{int_range[0]} <= n <= {int_range[1]}"
    else:
        constraints = {
            "L": f"0 <= {param}.length <= 12\n-10^6 <= {param}[i] <= 10^6",
            "I": "-10^9 <= n <= 10^9",
            "S": f"0 <= {param}.length <= 40\n{param} consists of English letters and single spaces between words.",
        }[src]
    return "\n".join([body, "", *(b + "\n" for b in blocks), " ", "Constraints:", "", constraints])
