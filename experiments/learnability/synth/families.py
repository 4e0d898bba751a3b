"""Task families of the synthetic problems (`learnability.synth`): one typed operation per family, with its
variants and phrasings.

A value flowing through a synthetic problem has one of three types: ``L`` (list of ints), ``I`` (int) or
``S`` (string of letter words separated by single spaces). A family maps one type to another; a problem
of depth d applies d families in a row (`chains`). Each family has `N_TEMPLATES` phrasings (statement
template t uses phrasing t of every step) and a few variants (even/odd, ascending/descending, ...), drawn
with their parameters by `Family.draw(rng)` into a `Step`: slots filling the phrasings, the Python
semantics (`apply`) and the lines of the reference solution.

Everything here is pure and deterministic given the `random.Random` passed in.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

N_TEMPLATES = 5
VOWELS = "aeiouAEIOU"
_VOWEL_NOTE = "(a, e, i, o, u in either case)"


@dataclass(frozen=True)
class Step:
    """One family variant with its parameters bound.

    ``code``: lines of the reference solution; ``{x}`` is the input variable and ``{y}`` the output one.
    ``slots``: fills the family's phrasing; a value is a string or one string per template.
    """

    family: str
    token: str  # part of the entry point's name
    slots: dict[str, Any]
    apply: Callable[[Any], Any]
    code: tuple[str, ...]

    def phrase(self, fam: Family, template: int) -> str:
        values = {k: v[template] if isinstance(v, tuple) else v for k, v in self.slots.items()}
        return fam.phrases[template].format(**values)

    def code_lines(self, x: str, y: str) -> list[str]:
        return [line.replace("{x}", x).replace("{y}", y) for line in self.code]


@dataclass(frozen=True)
class Family:
    name: str
    src: str  # "L" | "I" | "S"
    dst: str
    phrases: tuple[str, ...]  # one per template, with {slot} fields
    variants: tuple[Callable[[random.Random], Step], ...]
    first_only: bool = False  # needs a bounded input (`int_range`): only the first step of a chain
    last_only: bool = False  # produces an answer word: only the last step
    int_range: tuple[int, int] | None = None  # the input range when this family comes first
    word: bool = False  # the result is an answer word (YES/NO, EVEN/ODD, ...)
    tags: frozenset[str] = field(default_factory=frozenset)  # "reorders" / "order_free"

    def draw(self, rng: random.Random) -> Step:
        return rng.choice(self.variants)(rng)


def _step(family: str, token: str, slots: dict, apply: Callable[[Any], Any], *code: str) -> Step:
    return Step(family, token, slots, apply, tuple(code))


# ---------------------------------------------------------------- list -> list


def _parity(rng: random.Random, rem: int) -> Step:
    keep, drop = ("even", "odd") if rem == 0 else ("odd", "even")
    return _step("parity", keep + "s", {"keep": keep, "drop": drop}, lambda a: [x for x in a if x % 2 == rem],
                 f"{{y}} = [x for x in {{x}} if x % 2 == {rem}]")


def _threshold(rng: random.Random, op: str) -> Step:
    k = rng.randint(-5, 10)
    keep, drop, token, test = {
        ">": (f"greater than {k}", f"at most {k}", "above", lambda x: x > k),
        "<": (f"less than {k}", f"at least {k}", "below", lambda x: x < k),
        ">=": (f"at least {k}", f"less than {k}", "from", lambda x: x >= k),
    }[op]
    return _step("threshold", token, {"keep": keep, "drop": drop}, lambda a: [x for x in a if test(x)],
                 f"{{y}} = [x for x in {{x}} if x {op} {k}]")


def _sort(rng: random.Random, desc: bool) -> Step:
    slots = {"order": "descending" if desc else "ascending",
             "span": "largest to smallest" if desc else "smallest to largest"}
    code = "{y} = sorted({x}, reverse=True)" if desc else "{y} = sorted({x})"
    return _step("sort", "sorted_desc" if desc else "sorted", slots, lambda a: sorted(a, reverse=desc), code)


def _map(rng: random.Random, kind: str) -> Step:
    k = rng.randint(2, 9)
    fx, token, fn, expr = {
        "add": (f"x + {k}", "shifted", lambda x: x + k, f"x + {k}"),
        "mul": (f"x * {k}", "scaled", lambda x: x * k, f"x * {k}"),
        "sq": ("x * x", "squared", lambda x: x * x, "x * x"),
        "neg": ("-x", "negated", lambda x: -x, "-x"),
        "abs": ("|x|, its absolute value", "absolute", abs, "abs(x)"),
    }[kind]
    return _step("map", token, {"fx": fx}, lambda a: [fn(x) for x in a], f"{{y}} = [{expr} for x in {{x}}]")


def _prefix_sums(a: list[int]) -> list[int]:
    out, t = [], 0
    for x in a:
        t += x
        out.append(t)
    return out


def _running_max(a: list[int]) -> list[int]:
    out: list[int] = []
    for x in a:
        out.append(x if not out else max(out[-1], x))
    return out


def _prefix(rng: random.Random, kind: str) -> Step:
    if kind == "sums":
        slots = {"name": "prefix sums", "def": "the i-th of them is the sum of the first i numbers"}
        return _step("prefix", "prefix_sums", slots, _prefix_sums,
                     "{y} = []", "t = 0", "for x in {x}:", "    t += x", "    {y}.append(t)")
    if kind == "max":
        slots = {"name": "running maximums", "def": "the i-th of them is the largest of the first i numbers"}
        return _step("prefix", "running_max", slots, _running_max,
                     "{y} = []", "for x in {x}:", "    {y}.append(x if not {y} else max({y}[-1], x))")
    slots = {"name": "neighbour differences", "def": "one per adjacent pair: the later number minus the earlier one"}
    return _step("prefix", "diffs", slots, lambda a: [a[i + 1] - a[i] for i in range(len(a) - 1)],
                 "{y} = [{x}[i + 1] - {x}[i] for i in range(len({x}) - 1)]")


def _lists(rng: random.Random, kind: str) -> Step:
    if kind == "reverse":
        act = ("reverse the order of the numbers", "write the list backwards",
               "flip the list so that the last element comes first", "invert the order of the elements",
               "read the sequence from the end to the start")
        return _step("lists", "reversed", {"act": act}, lambda a: a[::-1], "{y} = {x}[::-1]")
    if kind == "dedup":
        act = ("remove repeated numbers, keeping only the first occurrence of each value",
               "delete duplicates so that every value appears once, at its first position",
               "drop every element that is equal to an earlier one",
               "keep each distinct value only where it first appears",
               "eliminate repeats, leaving the first copy of each number")
        return _step("lists", "unique", {"act": act}, lambda a: list(dict.fromkeys(a)),
                     "{y} = list(dict.fromkeys({x}))")
    if kind == "rotate":
        act = ("move the first number to the end of the list (if there is one)",
               "rotate the list left by one position",
               "take the first element off and append it at the end (an empty list stays empty)",
               "shift every element one place to the left, the first one wrapping around to the end",
               "cycle the sequence one step to the left")
        return _step("lists", "rotated", {"act": act}, lambda a: a[1:] + a[:1], "{y} = {x}[1:] + {x}[:1]")
    k = rng.randint(1, 4)
    act = (f"keep only the first {k} numbers (all of them if there are fewer)",
           f"cut the list after its first {k} elements",
           f"drop everything after position {k}",
           f"shorten the list to at most {k} elements, keeping the first ones",
           f"retain just the leading {k} entries (or all, if there are fewer)")
    return _step("lists", "head", {"act": act}, lambda a: a[:k], f"{{y}} = {{x}}[:{k}]")


# ---------------------------------------------------------------- list -> int


def _sum(rng: random.Random, kind: str) -> Step:
    if kind == "all":
        return _step("sum", "sum", {"what": "all the numbers"}, sum, "{y} = sum({x})")
    if kind == "squares":
        return _step("sum", "square_sum", {"what": "the squares of all the numbers"},
                     lambda a: sum(x * x for x in a), "{y} = sum(x * x for x in {x})")
    return _step("sum", "odd_place_sum", {"what": "the numbers in positions 1, 3, 5, ... (counting from 1)"},
                 lambda a: sum(a[::2]), "{y} = sum({x}[::2])")


def _minmax(rng: random.Random, kind: str) -> Step:
    if kind == "max":
        return _step("minmax", "max", {"what": "the largest number"}, lambda a: max(a, default=0),
                     "{y} = max({x}, default=0)")
    if kind == "min":
        return _step("minmax", "min", {"what": "the smallest number"}, lambda a: min(a, default=0),
                     "{y} = min({x}, default=0)")
    return _step("minmax", "spread", {"what": "the largest number minus the smallest one"},
                 lambda a: max(a) - min(a) if a else 0, "{y} = max({x}) - min({x}) if {x} else 0")


def _count(rng: random.Random, kind: str) -> Step:
    k = rng.randint(2, 5)
    if kind == "equal":
        k = rng.randint(-2, 5)
        return _step("count", "count", {"what": f"how many numbers are equal to {k}"}, lambda a: a.count(k),
                     f"{{y}} = {{x}}.count({k})")
    if kind == "len":
        return _step("count", "length", {"what": "how many numbers there are"}, len, "{y} = len({x})")
    if kind == "distinct":
        return _step("count", "distinct", {"what": "how many different values there are"},
                     lambda a: len(set(a)), "{y} = len(set({x}))")
    return _step("count", "multiples", {"what": f"how many numbers are divisible by {k}"},
                 lambda a: sum(1 for x in a if x % k == 0),
                 "{y} = 0", "for x in {x}:", f"    if x % {k} == 0:", "        {y} += 1")


# ---------------------------------------------------------------- int -> int / list / word


def _digits(rng: random.Random, kind: str) -> Step:
    if kind == "sum":
        return _step("digits", "digit_sum", {"what": "the sum of its digits"},
                     lambda n: sum(int(c) for c in str(abs(n))), "{y} = sum(int(ch) for ch in str(abs({x})))")
    if kind == "len":
        return _step("digits", "digit_count", {"what": "the number of its digits"}, lambda n: len(str(abs(n))),
                     "{y} = len(str(abs({x})))")
    if kind == "max":
        return _step("digits", "top_digit", {"what": "its largest digit"},
                     lambda n: max(int(c) for c in str(abs(n))), "{y} = max(int(ch) for ch in str(abs({x})))")
    return _step("digits", "mirror", {"what": "the number its digits form in reverse order (leading zeros vanish)"},
                 lambda n: int(str(abs(n))[::-1]), "{y} = int(str(abs({x}))[::-1])")


def _arith(rng: random.Random, kind: str) -> Step:
    k = rng.randint(2, 9)
    fx, token, fn, expr = {
        "add": (f"v + {k}", "plus", lambda n: n + k, f"{{x}} + {k}"),
        "sub": (f"v - {k}", "minus", lambda n: n - k, f"{{x}} - {k}"),
        "mul": (f"v * {k}", "times", lambda n: n * k, f"{{x}} * {k}"),
        "sq": ("v * v", "square", lambda n: n * n, "{x} * {x}"),
        "mod": (f"the remainder of v divided by {k} (from 0 to {k - 1})", "mod", lambda n: n % k, f"{{x}} % {k}"),
    }[kind]
    return _step("arith", token, {"fx": fx}, fn, f"{{y}} = {expr}")


def _loops(rng: random.Random, kind: str) -> Step:
    k = rng.randint(2, 5)
    if kind == "upto":
        return _step("loops", "upto", {"what": "the numbers 1, 2, ..., n"}, lambda n: list(range(1, n + 1)),
                     "{y} = []", "for x in range(1, {x} + 1):", "    {y}.append(x)")
    if kind == "down":
        return _step("loops", "countdown", {"what": "the numbers n, n - 1, ..., 1"}, lambda n: list(range(n, 0, -1)),
                     "{y} = list(range({x}, 0, -1))")
    if kind == "multiples":
        return _step("loops", "multiples", {"what": f"the multiples of {k} between 1 and n, in increasing order"},
                     lambda n: [x for x in range(1, n + 1) if x % k == 0],
                     f"{{y}} = [x for x in range(1, {{x}} + 1) if x % {k} == 0]")
    return _step("loops", "squares", {"what": "the squares 1 * 1, 2 * 2, ..., n * n"},
                 lambda n: [x * x for x in range(1, n + 1)],
                 "{y} = []", "for x in range(1, {x} + 1):", "    {y}.append(x * x)")


def _sign(n: int) -> str:
    return "POSITIVE" if n > 0 else "NEGATIVE" if n < 0 else "ZERO"


def _cond(rng: random.Random, kind: str) -> Step:
    k = rng.randint(2, 9)
    if kind == "parity":
        return _step("cond", "parity", {"rule": "EVEN if it is even and ODD otherwise"},
                     lambda n: "EVEN" if n % 2 == 0 else "ODD", '{y} = "EVEN" if {x} % 2 == 0 else "ODD"')
    if kind == "sign":
        return _step("cond", "sign", {"rule": "POSITIVE if it is above 0, NEGATIVE if it is below 0, else ZERO"},
                     _sign, "if {x} > 0:", '    {y} = "POSITIVE"', "elif {x} < 0:", '    {y} = "NEGATIVE"',
                     "else:", '    {y} = "ZERO"')
    if kind == "divisible":
        return _step("cond", "divisible", {"rule": f"YES if it is divisible by {k} and NO otherwise"},
                     lambda n: "YES" if n % k == 0 else "NO", f'{{y}} = "YES" if {{x}} % {k} == 0 else "NO"')
    k = rng.randint(-3, 20)
    return _step("cond", "size", {"rule": f"BIG if it is greater than {k} and SMALL otherwise"},
                 lambda n: "BIG" if n > k else "SMALL", f'{{y}} = "BIG" if {{x}} > {k} else "SMALL"')


# ---------------------------------------------------------------- strings


def _star_vowels(s: str) -> str:
    return "".join("*" if c in VOWELS else c for c in s)


def _strmap(rng: random.Random, kind: str) -> Step:
    what, token, fn, expr = {
        "upper": ("its upper-case version", "upper", str.upper, "{x}.upper()"),
        "lower": ("its lower-case version", "lower", str.lower, "{x}.lower()"),
        "reverse": ("its characters in backward order", "backwards", lambda s: s[::-1], "{x}[::-1]"),
        "swap": ("its copy with the case of every letter swapped", "swapped", str.swapcase, "{x}.swapcase()"),
        "star": (f"its copy with every vowel {_VOWEL_NOTE} replaced by *", "starred", _star_vowels,
                 f'"".join("*" if ch in "{VOWELS}" else ch for ch in {{x}})'),
    }[kind]
    return _step("strmap", token, {"what": what}, fn, f"{{y}} = {expr}")


def _strcount(rng: random.Random, kind: str) -> Step:
    if kind == "len":
        return _step("strcount", "size", {"what": "how many characters it has, spaces included"}, len,
                     "{y} = len({x})")
    if kind == "vowels":
        return _step("strcount", "vowels", {"what": f"how many vowels {_VOWEL_NOTE} it contains"},
                     lambda s: sum(c in VOWELS for c in s), f'{{y}} = sum(ch in "{VOWELS}" for ch in {{x}})')
    if kind == "letter":
        c = rng.choice("aeinorst")
        return _step("strcount", f"count_{c}", {"what": f"how many times the letter {c} appears in it, in either case"},
                     lambda s: s.lower().count(c), f'{{y}} = {{x}}.lower().count("{c}")')
    if kind == "words":
        return _step("strcount", "word_count", {"what": "how many words it has"}, lambda s: len(s.split()),
                     "{y} = len({x}.split())")
    return _step("strcount", "capitals", {"what": "how many upper-case letters it has"},
                 lambda s: sum(c.isupper() for c in s), "{y} = sum(ch.isupper() for ch in {x})")


def _words(rng: random.Random, kind: str) -> Step:
    if kind == "len":
        return _step("words", "word_lengths", {"what": "the length of every word"},
                     lambda s: [len(w) for w in s.split()], "{y} = [len(w) for w in {x}.split()]")
    return _step("words", "word_vowels", {"what": f"the number of vowels {_VOWEL_NOTE} in every word"},
                 lambda s: [sum(c in VOWELS for c in w) for w in s.split()],
                 f'{{y}} = [sum(ch in "{VOWELS}" for ch in w) for w in {{x}}.split()]')


# ---------------------------------------------------------------- the families


def _variants(maker: Callable[[random.Random, Any], Step], *kinds: Any) -> tuple[Callable[[random.Random], Step], ...]:
    return tuple((lambda rng, kind=kind: maker(rng, kind)) for kind in kinds)


_COUNT_PHRASES = ("count {what}", "determine {what}", "find out {what}", "work out {what}", "figure out {what}")

FAMILIES: tuple[Family, ...] = (
    Family("parity", "L", "L",
           ("keep only the {keep} numbers", "remove every {drop} number from the list",
            "throw away the {drop} values", "select the elements that are {keep}", "filter out all {drop} entries"),
           _variants(_parity, 0, 1)),
    Family("threshold", "L", "L",
           ("keep only the numbers that are {keep}", "delete every number that is {drop}",
            "throw away the values that are {drop}", "select the elements that are {keep}",
            "retain just the entries {keep}"),
           _variants(_threshold, ">", "<", ">=")),
    Family("sort", "L", "L",
           ("sort the numbers in {order} order", "arrange the list from {span}",
            "reorder the values so that they go from {span}", "put the elements in {order} order",
            "rearrange the entries into {order} order"),
           _variants(_sort, False, True), tags=frozenset({"reorders"})),
    Family("map", "L", "L",
           ("replace every number x by {fx}", "change each element x into {fx}", "map every value x to {fx}",
            "turn each entry x into {fx}", "transform every item x into {fx}"),
           _variants(_map, "add", "mul", "sq", "neg", "abs")),
    Family("prefix", "L", "L",
           ("replace the list by its {name} ({def})", "compute the {name} of the list (here {def})",
            "build the list of {name}, where {def}", "turn the list into its {name} ({def})",
            "form the {name} of the sequence ({def})"),
           _variants(_prefix, "sums", "max", "diffs")),
    Family("lists", "L", "L", ("{act}",) * N_TEMPLATES, _variants(_lists, "reverse", "dedup", "rotate", "head")),
    Family("sum", "L", "I",
           ("add up {what}", "compute the sum of {what}", "find the total of {what}", "take the sum of {what}",
            "sum {what}"),
           _variants(_sum, "all", "squares", "odd"), tags=frozenset({"order_free"})),
    Family("minmax", "L", "I",
           ("take {what} (0 if the list is empty)", "find {what}, or 0 when there are no numbers",
            "determine {what} (use 0 for an empty list)", "compute {what} (an empty list gives 0)",
            "pick out {what}, taking 0 if nothing is left"),
           _variants(_minmax, "max", "min", "spread"), tags=frozenset({"order_free"})),
    Family("count", "L", "I", _COUNT_PHRASES, _variants(_count, "equal", "len", "distinct", "div"),
           tags=frozenset({"order_free"})),
    Family("digits", "I", "I",
           ("replace the number by {what} (ignore a minus sign)", "compute {what}, ignoring the sign",
            "take {what}, reading a negative number without its minus sign",
            "find {what} (a minus sign is not a digit)", "work out {what}, disregarding any minus sign"),
           _variants(_digits, "sum", "len", "max", "rev")),
    Family("arith", "I", "I",
           ("replace the number v by {fx}", "change the value v into {fx}",
            "compute {fx}, where v is the current number", "turn the number v into {fx}",
            "transform the value v into {fx}"),
           _variants(_arith, "add", "sub", "mul", "sq", "mod")),
    Family("loops", "I", "L",
           ("write down {what}", "generate the list of {what}", "produce {what}, one after another",
            "build a list containing {what}", "enumerate {what}"),
           _variants(_loops, "upto", "down", "multiples", "squares"), first_only=True, int_range=(0, 30)),
    Family("cond", "I", "S",
           ("answer {rule}", "decide the answer word: {rule}", "output the word {rule}", "give {rule}",
            "respond with {rule}"),
           _variants(_cond, "parity", "sign", "divisible", "size"), last_only=True, word=True),
    Family("strmap", "S", "S",
           ("replace the string by {what}", "turn the text into {what}", "compute {what}",
            "change the string to {what}", "rewrite it as {what}"),
           _variants(_strmap, "upper", "lower", "reverse", "swap", "star")),
    Family("strcount", "S", "I", _COUNT_PHRASES, _variants(_strcount, "len", "vowels", "letter", "words", "caps")),
    Family("words", "S", "L",
           ("split the string into words and take {what}", "form the list of {what}",
            "make a list with {what}, in order", "write down {what}, word by word",
            "collect {what}, from the first word to the last"),
           _variants(_words, "len", "vowels")),
)
FAMILY = {f.name: f for f in FAMILIES}


def compatible(chain: tuple[str, ...]) -> bool:
    """Can these families run in this order? Types must match; `first_only` / `last_only` hold; no family
    twice; a step that only reorders is never followed by one that ignores order (sort, then sum)."""
    fams = [FAMILY[name] for name in chain]
    if len(set(chain)) < len(chain):
        return False
    for i, f in enumerate(fams):
        if (f.first_only and i > 0) or (f.last_only and i < len(fams) - 1):
            return False
        if i and (fams[i - 1].dst != f.src or ("reorders" in fams[i - 1].tags and "order_free" in f.tags)):
            return False
    return True


def chains(depth: int) -> list[tuple[str, ...]]:
    """Every compatible chain of ``depth`` families, in a fixed order."""
    out: list[tuple[str, ...]] = [()]
    for _ in range(depth):
        out = [c + (f.name,) for c in out for f in FAMILIES if compatible(c + (f.name,))]
    return out
