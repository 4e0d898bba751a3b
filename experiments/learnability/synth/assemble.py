"""One synthetic APPS+ record from a seed: chain, tests, statement, reference solution, scopes.

`make_record(seed, mode, index, attempt)` draws everything from ``random.Random("<seed>:<mode>:<index>:
<attempt>")`` (string seeds are hashed with SHA-512 by `random`, never with `hash()`), so record i of a
file depends only on the seed, the template set and i. The record has exactly the APPS+ keys (see
`mrgrpo/apps.py`) plus ``id``:

- standard input (half of the records): a zero-argument function with a random 5-letter name reading stdin;
  tests are stdin/stdout strings; the reference is that function, without the call (the reader adds it);
- Codewars (3 in 10): ``def name(arg):``; LeetCode (2 in 10): ``class Solution`` with a typed method. Call
  tests are argument lists and one-element output lists, top-level strings as quoted literals (``"\\"ab\\""``).
"""

from __future__ import annotations

import ast
import builtins
import json
import keyword
import random
import string
from collections import Counter
from collections.abc import Callable
from functools import cache, lru_cache
from typing import Any

from learnability.synth import text
from learnability.synth.families import FAMILY, Family, Step, chains
from learnability.synth.split import TEMPLATE_SETS, make_id

N_TESTS = 12  # the first two are the statement's examples (candidates for public tests)
DEPTH_WEIGHTS = (4, 4, 2)  # depth 1, 2, 3
DIFFICULTY = {1: "introductory", 2: "interview", 3: "competition"}
IO_WEIGHTS = {"stdio": 5, "codewars": 3, "leetcode": 2}
_PARAM = {"stdio": {"L": "a", "I": "n", "S": "s"}, "codewars": {"L": "arr", "I": "n", "S": "s"},
          "leetcode": {"L": "nums", "I": "n", "S": "s"}}
_HINT = {"L": "list[int]", "I": "int", "S": "str"}
_STEP_VARS = ("b", "c", "d")
_DOC_INDENT = {"stdio": "    ", "codewars": "\t    ", "leetcode": "            "}
_WORDS = ("apple", "river", "stone", "cloud", "green", "tiger", "music", "light", "ocean", "paper", "bread",
          "quiet", "sun", "sky", "map", "code", "tree", "bird", "fish", "rain", "moon", "star", "road", "book",
          "a", "i", "to", "of", "zebra", "lemon", "night", "house", "eat", "yes")
_SCOPE_KINDS = {
    ast.FunctionDef: "Function Body", ast.AsyncFunctionDef: "Function Body", ast.ClassDef: "Class Body",
    ast.For: "For Loop Body", ast.While: "While Loop Body", ast.If: "If Statement Body",
    ast.ListComp: "List Comprehension", ast.GeneratorExp: "Generator Expression", ast.Lambda: "Lambda Expression",
    ast.DictComp: "Dict Comprehension", ast.SetComp: "Set Comprehension", ast.Try: "Try Block",
    ast.ExceptHandler: "Except Block",
}


# ---------------------------------------------------------------- inputs


def _word(rng: random.Random) -> str:
    w, r = rng.choice(_WORDS), rng.random()
    if r < 0.6:
        return w
    if r < 0.8:
        return w.capitalize()
    if r < 0.9:
        return w.upper()
    return "".join(c.upper() if rng.random() < 0.5 else c for c in w)


def _sentence(rng: random.Random, lo: int, hi: int) -> str:
    words = [_word(rng) for _ in range(rng.randint(lo, hi))]
    while len(" ".join(words)) > 40:
        words.pop()
    return " ".join(words)


def simple_input(rng: random.Random, src: str, int_range: tuple[int, int] | None) -> Any:
    """A small, illustrative input (the statement's examples)."""
    if int_range is not None:
        return rng.randint(max(int_range[0], 3), min(int_range[1], 12))
    if src == "L":
        return [rng.randint(-5, 9) for _ in range(rng.randint(3, 5))]
    if src == "I":
        return rng.randint(1, 99)
    return " ".join(_word(rng) for _ in range(rng.randint(1, 3)))


def edge_inputs(rng: random.Random, src: str, int_range: tuple[int, int] | None) -> list[Any]:
    """Empty, single, zeros, negatives, large values, duplicates, the size limits."""
    if int_range is not None:
        lo, hi = int_range
        return [lo, lo + 1, hi, rng.randint(lo, hi)]
    if src == "L":
        v, w = rng.randint(-9, 9), rng.randint(-9, 9)
        dup = [v, v, w, v]
        rng.shuffle(dup)
        return [
            [], [rng.randint(-9, 9)], [0, 0, 0], [-rng.randint(1, 50) for _ in range(rng.randint(2, 5))],
            [10**6, -(10**6)] + [rng.randint(-(10**6), 10**6) for _ in range(3)], dup,
            sorted((rng.randint(-30, 30) for _ in range(6)), reverse=True),
            [rng.randint(-50, 50) for _ in range(12)],
        ]
    if src == "I":
        return [0, 1, -1, 10**9, -(10**9), rng.randint(-99, -2), rng.choice((10, 100, 1000, 90)),
                rng.randint(-(10**9), 10**9)]
    return ["", rng.choice("aeiouxyz"), _word(rng).upper(), "A b C", _sentence(rng, 7, 9),
            " ".join(_word(rng) for _ in range(2))]


def random_input(rng: random.Random, src: str, int_range: tuple[int, int] | None) -> Any:
    if int_range is not None:
        return rng.randint(*int_range)
    if src == "L":
        bound = 20 if rng.random() < 0.7 else 1000
        return [rng.randint(-bound, bound) for _ in range(rng.randint(0, 12))]
    if src == "I":
        bound = 1000 if rng.random() < 0.5 else 10**9
        return rng.randint(-bound, bound)
    return _sentence(rng, 1, 6)


# ---------------------------------------------------------------- tests


def stdin_text(src: str, value: Any) -> str:
    if src == "L":
        return f"{len(value)}\n{' '.join(map(str, value))}\n"
    return f"{value}\n"


def stdout_text(dst: str, value: Any) -> str:
    if dst == "L":
        return f"{len(value)}\n{' '.join(map(str, value))}\n"
    return f"{value}\n"


def _key(value: Any) -> str:
    return json.dumps(value)


_UNSET = object()


def make_tests(rng: random.Random, src: str, int_range: tuple[int, int] | None, run: Callable[[Any], Any],
               usable: Callable[[Any], bool]) -> list[tuple[Any, Any]]:
    """`N_TESTS` (input, output) pairs with distinct inputs: two simple examples (with different answers when
    possible), then edge cases and random inputs in shuffled order. ``usable(output)`` rejects outputs the
    io mode cannot show (an empty stdout)."""
    seen: set[str] = set()
    tests: list[tuple[Any, Any]] = []

    def add(x: Any, y: Any = _UNSET) -> bool:
        y = run(x) if y is _UNSET else y  # (`run` is pure: an answer computed already is reused)
        key = _key(x)
        if key in seen or not usable(y):
            return False
        seen.add(key)
        tests.append((x, y))
        return True

    first_answer = None
    for want_new_answer in (False, True):
        for attempt in range(60):
            x = simple_input(rng, src, int_range)
            y = _UNSET
            if want_new_answer and attempt < 30:
                y = run(x)
                if first_answer is None:
                    first_answer = _key(tests[0][1])
                if _key(y) == first_answer:
                    continue
            if add(x, y):
                break
    if len(tests) < 2:
        raise RuntimeError("could not draw two example inputs")
    hidden_start = len(tests)
    for x in edge_inputs(rng, src, int_range):
        add(x)
    for _ in range(200):
        if len(tests) >= N_TESTS:
            break
        add(random_input(rng, src, int_range))
    if len(tests) < N_TESTS:
        raise RuntimeError(f"only {len(tests)} distinct tests")
    hidden = tests[hidden_start:N_TESTS]
    rng.shuffle(hidden)
    return tests[:hidden_start] + hidden


# ---------------------------------------------------------------- code


def stdio_name(rng: random.Random) -> str:
    """A random 5-letter name like APPS+'s (``IgUhb``): not a keyword, not a builtin."""
    while True:
        name = "".join(rng.choice(string.ascii_letters) for _ in range(5))
        if not keyword.iskeyword(name) and not hasattr(builtins, name):
            return name


def entry_name(steps: list[Step], style: str) -> str:
    """Codewars: snake_case from the steps' tokens; LeetCode: the same in camelCase."""
    name = "_".join(s.token for s in steps)
    if keyword.iskeyword(name) or hasattr(builtins, name):
        name = "compute_" + name
    if style == "leetcode":
        head, *rest = name.split("_")
        name = head + "".join(p.capitalize() for p in rest)
    return name


def body_lines(steps: list[Step], x: str) -> tuple[list[str], str]:
    lines: list[str] = []
    for step, y in zip(steps, _STEP_VARS, strict=False):
        lines += step.code_lines(x, y)
        x = y
    return lines, x


def reference_code(style: str, name: str, src: str, dst: str, steps: list[Step]) -> str:
    param = _PARAM[style][src]
    body, result = body_lines(steps, param)
    if style == "stdio":
        read = {"L": ["n = int(input())", "a = list(map(int, input().split()))"], "I": ["n = int(input())"],
                "S": ["s = input()"]}[src]
        write = [f"print(len({result}))", f"print(*{result})"] if dst == "L" else [f"print({result})"]
        return "\n" + "\n".join([f"def {name}():"] + ["    " + line for line in read + body + write]) + "\n"
    if style == "codewars":
        return "\n".join([f"def {name}({param}):"] + ["    " + line for line in [*body, f"return {result}"]]) + "\n"
    head = ["class Solution:", f"    def {name}(self, {param}: {_HINT[src]}) -> {_HINT[dst]}:"]
    return "\n".join(head + ["        " + line for line in [*body, f"return {result}"]]) + "\n"


def starter(style: str, name: str, src: str, dst: str) -> str:
    if style == "stdio":
        return f"\ndef {name}():\n"
    if style == "codewars":
        return f"\ndef {name}({_PARAM[style][src]}):\n"
    return f"\nclass Solution:\n    def {name}(self, {_PARAM[style][src]}: {_HINT[src]}) -> {_HINT[dst]}:\n"


def scopes(code: str) -> list[list]:
    """APPS+'s `scope`: [kind, first line, last line] of every block, in source order (pre-order)."""
    out: list[list] = []

    def visit(node: ast.AST) -> None:
        kind = _SCOPE_KINDS.get(type(node))
        if kind:
            out.append([kind, node.lineno, node.end_lineno])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(code))
    return out


@lru_cache(maxsize=1 << 16)
def _scopes_cached(code: str) -> tuple[tuple, ...]:
    return tuple(tuple(s) for s in scopes(code))


def reference_scopes(style: str, src: str, dst: str, steps: list[Step], code: str) -> list[list]:
    """``scopes(code)`` of the reference ``code`` (`reference_code`), remembered by its shape: the code with the
    entry point named ``f``, which has the same blocks on the same lines whatever its name (stdio names are random)."""
    shape = reference_code(style, "f", src, dst, steps) if style == "stdio" else code
    return [list(s) for s in _scopes_cached(shape)]


def quoted(value: Any) -> Any:
    """APPS+ call-test encoding: a top-level string becomes its quoted literal."""
    return json.dumps(value, ensure_ascii=False) if isinstance(value, str) else value


# ---------------------------------------------------------------- the record


class Degenerate(ValueError):
    """The drawn problem's tests barely tell programs apart (generate() draws the record again)."""


def degenerate(tests: list[tuple[Any, Any]], word: bool) -> str | None:
    """Why a test set is too weak, or None. A constant answer may pass at most 8 of the 12 tests, a problem
    needs at least 4 distinct answers (2 for answer words), and the output may equal the input (a step that
    changed nothing) in at most half of the tests."""
    keys = [_key(y) for _, y in tests]
    answers = Counter(keys)
    if answers.most_common(1)[0][1] > 8:
        return "one answer dominates"
    if len(answers) < (2 if word else 4):
        return "too few distinct answers"
    if sum(_key(x) == ky for (x, _), ky in zip(tests, keys, strict=True)) > len(tests) // 2:
        return "mostly unchanged inputs"
    return None


@cache
def _chains(depth: int) -> tuple[tuple[str, ...], ...]:
    return tuple(chains(depth))


def _compose(steps: list[Step]) -> Callable[[Any], Any]:
    def run(x: Any) -> Any:
        for s in steps:
            x = s.apply(x)
        return x

    return run


def _statement(style: str, name: str, fams: list[Family], steps: list[Step], template: int,
               tests: list[tuple[Any, Any]]) -> str:
    src, dst = fams[0].src, fams[-1].dst
    phrases = [s.phrase(f, template) for s, f in zip(steps, fams, strict=True)]
    body = text.prose(src, phrases, template, "stdio" if style == "stdio" else "call", fams[0].int_range)
    examples = tests[:2]
    if style == "stdio":
        shown = [(stdin_text(src, x), stdout_text(dst, y)) for x, y in examples]
        return text.stdio_statement(body, src, "word" if fams[-1].word else dst, fams[0].int_range, shown)
    if style == "codewars":
        return text.codewars_statement(body, src, fams[0].int_range, name, [([x], y) for x, y in examples])
    return text.leetcode_statement(body, src, fams[0].int_range, _PARAM[style][src], [([x], y) for x, y in examples])


def make_record(seed: int, mode: str, index: int, attempt: int = 0) -> dict:
    """Record ``index`` of a file generated with ``seed`` and template set ``mode`` (train/heldout/all).
    Raises `Degenerate` when the drawn tests are too weak (the caller tries the next ``attempt``)."""
    rng = random.Random(f"mrgrpo-synth:{seed}:{mode}:{index}:{attempt}")
    depth = rng.choices((1, 2, 3), weights=DEPTH_WEIGHTS)[0]
    chain = rng.choice(_chains(depth))
    template = rng.choice(TEMPLATE_SETS[mode])
    style = rng.choices(tuple(IO_WEIGHTS), weights=tuple(IO_WEIGHTS.values()))[0]
    fams = [FAMILY[f] for f in chain]
    steps = [f.draw(rng) for f in fams]
    src, dst = fams[0].src, fams[-1].dst
    usable = (lambda y: stdout_text(dst, y).strip() != "") if style == "stdio" else (lambda y: True)
    tests = make_tests(rng, src, fams[0].int_range, _compose(steps), usable)
    weak = degenerate(tests, fams[-1].word)
    if weak:
        raise Degenerate(weak)
    name = stdio_name(rng) if style == "stdio" else entry_name(steps, style)
    statement = _statement(style, name, fams, steps, template, tests)
    code = reference_code(style, name, src, dst, steps)
    start = starter(style, name, src, dst)
    if style == "stdio":
        inputs = [stdin_text(src, x) for x, _ in tests]
        outputs = [stdout_text(dst, y) for _, y in tests]
    else:
        inputs = [[quoted(x)] for x, _ in tests]
        outputs = [[quoted(y)] for _, y in tests]
    return {
        "prompt": f'{start}{_DOC_INDENT[style]}"""{statement}\n    """\n',
        "canonical_solution": code,
        "inputs": inputs,
        "outputs": outputs,
        "starter_code": start,
        "scope": reference_scopes(style, src, dst, steps, code),
        "difficulty": DIFFICULTY[depth],
        "id": make_id(chain, template, index),
    }
