"""Read APPS+ (StepCoder) and original APPS records into one typed `Problem`.

Pure parsing: no code runs here. `read_problems(path)` yields a `Problem` for every good record and a
`RecordError` (file, line, reason, raw text) for every bad one; it never raises on bad records, only on
a missing or unreadable file (a directory, a JSON array document that does not parse: `InputFileError`).

Files: JSON Lines (one record per line, lines end at "\\n" only, each line decoded as UTF-8 on its own, so
a bad byte costs one record), a JSON array document (told from JSON Lines by parsing), or parquet; a UTF-8
byte order mark is skipped.

APPS+ (JSONL or a JSON array), one record per problem:
  - `prompt`: starter code with the statement as the docstring of the entry point;
  - `starter_code`: `def NAME():` (standard input/output; the zero-argument function reads stdin),
    `def NAME(args):` (call-based, Codewars) or `class Solution:` + `def NAME(self, ...)` (LeetCode);
  - `inputs` / `outputs`: stdio: lists of strings; call: argument lists, outputs wrapped as `[value]`,
    and top-level string values stored as quoted Python literals (`"\\"abc\\""` is the string `abc`).
Call-mode outputs in either of APPS's conventions (`call_outputs`): wrapped throughout (`[[3], [12]]`, each the
one-element list of its value) or not (`[3, 12]`, mixed with wrapped ones in data prepared elsewhere); in a set
that is not wrapped throughout, an output `[x]` is ambiguous (`x` or the list `[x]`): its index goes to
`Problem.ambiguous` and `mrgrpo.data.validate` lets the reference solution decide.
Original APPS (JSONL or parquet): `question`, `solutions` (JSON list of strings), `starter_code`,
`input_output` (JSON string `{"inputs", "outputs", "fn_name"?}`), `difficulty`, `problem_id`.
Either format may give the problem's own per-test CPU limit in `time_limit` (seconds: a number, or text such as
`"2 seconds"`); `Problem.time_s` keeps it and the data build writes it into the problem's test JSON (`time_s`,
`mrgrpo.testset`). Neither the bundled APPS+ sample nor APPS has one: their problems take the sandbox's default.
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mrgrpo.testset import TestSet

DIFFICULTIES = ("introductory", "interview", "competition")
_DEF_RE = re.compile(r"^\s*def\s+([A-Za-z_]\w*)\s*\(([^)]*)\)", re.MULTILINE)
_CLASS_SOLUTION_RE = re.compile(r"^\s*class\s+Solution\b", re.MULTILINE)
_SECONDS_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(?:s|sec|secs|second|seconds)?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Problem:
    source_id: str
    data_source: str  # "apps_plus" | "apps"
    statement: str
    io_mode: str  # "stdio" | "call"
    fn_name: str | None
    class_name: str | None  # "Solution" for LeetCode-style methods
    starter_code: str
    inputs: list  # stdio: list[str]; call: list[list] (decoded argument lists)
    outputs: list  # stdio: list[str]; call: decoded return values (unwrapped)
    difficulty: str
    reference_solution: str | None  # runnable as is by the sandbox
    notes: tuple[str, ...] = field(default=())  # parse-time observations, e.g. "undecoded_literal"
    # Call mode: indices of outputs stored as `[x]` in a test set not wrapped throughout (`call_outputs`): read as
    # x here, but the list [x] is as likely. Empty once decided (validate) and for every other problem.
    ambiguous: tuple[int, ...] = field(default=())
    time_s: float | None = None  # the record's own CPU seconds per test (`time_limit`); None: the sandbox's default

    def tests(self, float_tol: float | None = None) -> TestSet:
        """Every test of the problem (`mrgrpo.testset.TestSet`, the one codec for APPS test JSON), with the
        problem's own time limit."""
        fn_name = self.fn_name if self.io_mode == "call" else None
        return TestSet(list(self.inputs), list(self.outputs), fn_name, float_tol, time_s=self.time_s,
                       where=self.source_id)

    def ground_truth(self) -> dict[str, Any]:
        """APPS-style test JSON of every test (call outputs wrapped as `[value]`, with `fn_name` for call mode)."""
        return self.tests().to_dict()


@dataclass(frozen=True)
class RecordError:
    where: str  # "path:line"
    reason: str
    raw: str  # the offending record's text (truncated)

    def __str__(self) -> str:
        return f"{self.where}: {self.reason}"


class ProblemFormatError(ValueError):
    """A record that cannot become a Problem. Its message names the field and the fault."""


def _decode_literal(value: Any, notes: list[str]) -> Any:
    """Top-level strings in call-based APPS+ tests are quoted Python literals; decode them."""
    if not isinstance(value, str):
        return value
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        notes.append("undecoded_literal")
        return value


def _entry_point(starter_code: str) -> tuple[str, str | None, str | None]:
    """(io_mode, fn_name, class_name) from the starter code."""
    match = _DEF_RE.search(starter_code)
    if match is None:
        raise ProblemFormatError(f"starter_code has no `def NAME(` entry point: {starter_code[:80]!r}")
    name, params = match.group(1), match.group(2).strip()
    if _CLASS_SOLUTION_RE.search(starter_code):
        return "call", name, "Solution"
    if params:
        return "call", name, None
    return "stdio", name, None


def _statement_from_prompt(prompt: str) -> str:
    try:
        with warnings.catch_warnings():  # statements hold LaTeX such as "\\le": invalid-escape warnings
            warnings.simplefilter("ignore", SyntaxWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            tree = ast.parse(prompt)
    except SyntaxError:
        tree = None
    if tree is not None:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                doc = ast.get_docstring(node, clean=True)
                if doc:
                    return doc.strip()
    match = re.search(r'"""(.*?)(?:"""|\Z)', prompt, re.DOTALL)
    if match and match.group(1).strip():
        return match.group(1).strip()
    raise ProblemFormatError("prompt has no docstring with the problem statement")


def _as_list(value: Any, name: str) -> list:
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
            raise ProblemFormatError(f"`{name}` is a string that is not a Python/JSON list literal: {exc}") from None
    if not isinstance(value, list):
        raise ProblemFormatError(f"`{name}` must be a list, got {type(value).__name__}")
    return value


def time_limit(record: dict) -> float | None:
    """The record's own per-test CPU limit in seconds (`time_limit`: a number, or text such as ``"2 seconds"``);
    None when it has none. Anything else raises, naming the field.

        >>> time_limit({"time_limit": 2}), time_limit({"time_limit": "1.5 seconds"}), time_limit({})
        (2.0, 1.5, None)
    """
    value = record.get("time_limit")
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and _SECONDS_RE.match(value):
        seconds = float(_SECONDS_RE.match(value).group(1))
    else:
        raise ProblemFormatError(f"`time_limit` must be a number of seconds (or text such as \"2 seconds\"), got "
                                 f"{str(value)[:80]!r}")
    if not seconds > 0 or seconds != seconds or seconds == float("inf"):
        raise ProblemFormatError(f"`time_limit` must be > 0 seconds, got {value!r}")
    return seconds


def _normalise_difficulty(value: Any) -> str:
    text = str(value or "").strip().lower()
    return text if text in DIFFICULTIES else "unknown"


def call_outputs(raw_outputs: list, decode=lambda v: v) -> tuple[list, tuple[int, ...], bool]:
    """Call-mode outputs in either APPS convention -> (values, ambiguous indices, wrapped throughout).

    The rule (the same as `mrgrpo.testset`'s): a test set whose every output is a one-element list is WRAPPED, each
    output `[v]` meaning `v` (so `[[1, 2]]` is the list `[1, 2]`); this is the APPS+ form and the one `mrgrpo data`
    writes. Otherwise the set is UNWRAPPED (or mixed): an output that is not a one-element list is the value itself
    (`3`, `[]`, `[1, 2]`), and an output `[x]` is ambiguous, `x` or the list `[x]` (APPS's checker accepts either):
    read as `x` here, its index listed for the reference run to decide. `decode` applies to each value read.
    """
    wrapped = all(isinstance(o, list) and len(o) == 1 for o in raw_outputs)
    values, ambiguous = [], []
    for i, out in enumerate(raw_outputs):
        if isinstance(out, list) and len(out) == 1:
            out = out[0]
            if not wrapped:
                ambiguous.append(i)
        values.append(decode(out))
    return values, tuple(ambiguous), wrapped


def _tests(io_mode: str, raw_inputs: list, raw_outputs: list, notes: list[str]) -> tuple[list, list, tuple]:
    if len(raw_inputs) != len(raw_outputs):
        raise ProblemFormatError(f"{len(raw_inputs)} inputs but {len(raw_outputs)} outputs")
    if not raw_inputs:
        raise ProblemFormatError("no tests")
    if io_mode == "stdio":
        for i, (x, y) in enumerate(zip(raw_inputs, raw_outputs, strict=True)):
            if not isinstance(x, str) or not isinstance(y, str):
                raise ProblemFormatError(f"stdio test {i}: input and output must be strings")
        return list(raw_inputs), list(raw_outputs), ()
    inputs = []
    for i, args in enumerate(raw_inputs):
        if not isinstance(args, list):
            raise ProblemFormatError(f"call test {i}: the input must be an argument list")
        inputs.append([_decode_literal(a, notes) for a in args])
    outputs, ambiguous, wrapped = call_outputs(raw_outputs, lambda v: _decode_literal(v, notes))
    if not wrapped:
        notes.append("unwrapped_output")
    return inputs, outputs, ambiguous


def problem_from_apps_plus(record: dict, source_id: str) -> Problem:
    """One APPS+ record -> Problem. Raises ProblemFormatError naming the faulty field."""
    for key in ("prompt", "starter_code", "inputs", "outputs"):
        if key not in record:
            raise ProblemFormatError(f"missing field `{key}`")
    for key in ("prompt", "starter_code"):
        if not isinstance(record[key], str):
            raise ProblemFormatError(f"`{key}` must be a string, got {type(record[key]).__name__}")
    io_mode, fn_name, class_name = _entry_point(record["starter_code"])
    notes: list[str] = []
    inputs, outputs, ambiguous = _tests(io_mode, _as_list(record["inputs"], "inputs"),
                                        _as_list(record["outputs"], "outputs"), notes)
    solution = record.get("canonical_solution")
    reference = None
    if isinstance(solution, str) and solution.strip():
        reference = solution.rstrip() + f"\n\n{fn_name}()\n" if io_mode == "stdio" else solution.rstrip() + "\n"
    return Problem(
        source_id=str(record.get("id", source_id)),
        data_source="apps_plus",
        statement=_statement_from_prompt(record["prompt"]),
        io_mode=io_mode,
        fn_name=fn_name if io_mode == "call" else None,
        class_name=class_name,
        starter_code=record["starter_code"] if io_mode == "call" else "",
        inputs=inputs,
        outputs=outputs,
        difficulty=_normalise_difficulty(record.get("difficulty")),
        reference_solution=reference,
        notes=tuple(dict.fromkeys(notes)),
        ambiguous=ambiguous,
        time_s=time_limit(record),
    )


def problem_from_apps(record: dict, source_id: str) -> Problem:
    """One original APPS record (`input_output` JSON) -> Problem."""
    for key in ("question", "input_output"):
        if key not in record or record[key] in (None, ""):
            raise ProblemFormatError(f"missing field `{key}`")
    io = record["input_output"]
    if isinstance(io, str):
        try:
            io = json.loads(io)
        except json.JSONDecodeError as exc:
            raise ProblemFormatError(f"`input_output` is not valid JSON: {exc}") from None
    if not isinstance(io, dict):
        raise ProblemFormatError("`input_output` must be a JSON object")
    fn_name = io.get("fn_name")
    starter = record.get("starter_code") or ""
    io_mode = "call" if fn_name else "stdio"
    class_name = "Solution" if io_mode == "call" and _CLASS_SOLUTION_RE.search(starter) else None
    notes: list[str] = []
    raw_in, raw_out = io.get("inputs", []), io.get("outputs", [])
    ambiguous: tuple[int, ...] = ()
    if io_mode == "call":  # APPS stores call arguments as real JSON values, never quoted literals
        if len(raw_in) != len(raw_out) or not raw_in:
            raise ProblemFormatError(f"{len(raw_in)} inputs but {len(raw_out)} outputs")
        inputs = [list(a) if isinstance(a, list) else [a] for a in raw_in]
        outputs, ambiguous, wrapped = call_outputs(raw_out)
        if not wrapped:
            notes.append("unwrapped_output")
    else:
        raw_in = ["\n".join(x) + "\n" if isinstance(x, list) else x for x in raw_in]
        raw_out = ["\n".join(x) + "\n" if isinstance(x, list) else x for x in raw_out]
        inputs, outputs, _ = _tests(io_mode, raw_in, raw_out, notes)
    solutions = record.get("solutions") or "[]"
    if isinstance(solutions, str):
        try:
            solutions = json.loads(solutions)
        except json.JSONDecodeError:
            solutions, notes = [], [*notes, "bad_solutions_json"]
    reference = solutions[0] if isinstance(solutions, list) and solutions and isinstance(solutions[0], str) else None
    return Problem(
        source_id=str(record.get("problem_id", record.get("id", source_id))),
        data_source="apps",
        statement=str(record["question"]).strip(),
        io_mode=io_mode,
        fn_name=fn_name,
        class_name=class_name,
        starter_code=starter,
        inputs=inputs,
        outputs=outputs,
        difficulty=_normalise_difficulty(record.get("difficulty")),
        reference_solution=reference,
        notes=tuple(dict.fromkeys(notes)),
        ambiguous=ambiguous,
        time_s=time_limit(record),
    )


def problem_from_record(record: Any, source_id: str) -> Problem:
    """Detect the format of one record (APPS+ or APPS) and parse it."""
    if not isinstance(record, dict):
        raise ProblemFormatError(f"record must be a JSON object, got {type(record).__name__}")
    if "input_output" in record:
        return problem_from_apps(record, source_id)
    return problem_from_apps_plus(record, source_id)


_BOM = b"\xef\xbb\xbf"
_JSON_WS = " \t\r\n"  # the only whitespace JSON allows between tokens
_JSON_TYPE = {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "boolean"}
_DECODER = json.JSONDecoder(strict=False)  # raw control characters inside strings are kept, not rejected


class InputFileError(ProblemFormatError):
    """The input file as a whole cannot be read (a directory, a broken JSON array, ...). Names the file and where."""


@dataclass(frozen=True)
class _Undecodable:
    reason: str


def _jsonl_records(lines) -> Iterator[tuple[int, Any, str]]:
    """JSON Lines: one record per ``\\n``-terminated line (a trailing ``\\r`` is dropped). Nothing else ends a
    line: U+2028, U+2029, U+0085, \\x0b, \\x0c, \\x1c-\\x1e stay inside their record. Each line is decoded on
    its own, so a byte that is not UTF-8 costs that line only."""
    for number, data in enumerate(lines, start=1):
        data = data.removesuffix(b"\n").removesuffix(b"\r")
        try:
            line = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            reason = f"line is not valid UTF-8: byte 0x{data[exc.start]:02x} at byte {exc.start + 1} of the line"
            yield number, _Undecodable(reason), data.decode("utf-8", errors="backslashreplace")
            continue
        if not line.strip(_JSON_WS):
            continue
        try:
            yield number, _DECODER.decode(line), line
        except json.JSONDecodeError as exc:
            yield number, _Undecodable(f"line is not valid JSON: {exc}"), line


def _json_array(path: Path, data: bytes) -> list | None:
    """The items of ``data`` if it is one JSON array document, None if it is JSON Lines.

    Decided by parsing the first JSON value of the file: it is the whole document when it is followed by
    nothing, or when it runs past the first line (a pretty-printed or cut array); a first line that is a
    complete value followed by more lines is JSON Lines (that line is then quarantined as not an object).
    A document that does not parse is an error naming the file, line and column.
    """
    text = data.decode("utf-8", errors="surrogateescape")  # bad bytes are located below, not here
    start = len(text) - len(text.lstrip(_JSON_WS))
    first_line_end = text.find("\n", start)
    first_line_end = len(text) if first_line_end < 0 else first_line_end
    only_line = not text[first_line_end:].strip(_JSON_WS)
    try:
        value, end = _DECODER.raw_decode(text, start)
    except json.JSONDecodeError as exc:
        if exc.pos <= first_line_end and not only_line:
            return None  # a broken first line of a JSON Lines file
        cut = " (the file ends inside the array: truncated?)" if exc.pos >= len(text.rstrip(_JSON_WS)) else ""
        raise InputFileError(
            f"{path}: not a valid JSON array: {exc.msg} at line {exc.lineno} column {exc.colno} (char {exc.pos}){cut}"
        ) from None
    rest = text[end:]
    if rest.strip(_JSON_WS):
        if end <= first_line_end:
            return None
        line = text.count("\n", 0, end) + 1
        raise InputFileError(f"{path}: extra data after the JSON array that ends at line {line}")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise InputFileError(
            f"{path}: byte 0x{data[exc.start]:02x} at line {line} column {column} is not UTF-8 "
            "(a JSON array file must be UTF-8 throughout)"
        ) from None
    return value if isinstance(value, list) else None


def _raw_records(path: Path) -> Iterator[tuple[int, Any, str]]:
    """(1-based line or item number, decoded record or an ``_Undecodable``, raw text).

    ``.parquet``: one record per row. Anything else: a JSON array document or JSON Lines, told apart by
    parsing (``_json_array``); a UTF-8 byte order mark is skipped.
    """
    if path.suffix == ".parquet":
        import pandas as pd

        for i, row in enumerate(pd.read_parquet(path).to_dict(orient="records"), start=1):
            yield i, row, ""
        return
    with open(path, "rb") as f:
        if f.read(len(_BOM)) != _BOM:
            f.seek(0)
        body = f.tell()
        first = b""
        while not first:
            chunk = f.read(1 << 16)
            if not chunk:
                break
            first = chunk.lstrip(_JSON_WS.encode())[:1]
        f.seek(body)
        if first != b"[":  # only an array can be a JSON array document: stream the lines
            yield from _jsonl_records(f)  # binary-mode lines end at b"\n" only
            return
        data = f.read()
    items = _json_array(path, data)
    if items is None:
        yield from _jsonl_records(data.split(b"\n"))
        return
    for i, item in enumerate(items, start=1):
        yield i, item, json.dumps(item, ensure_ascii=False)[:2000]


def read_problems(path: str | Path) -> Iterator[Problem | RecordError]:
    """Yield a Problem or a RecordError for every record of an APPS+/APPS file (.jsonl, .json, .parquet).

    Raises FileNotFoundError for a missing file and InputFileError for a directory or a JSON array file
    that does not parse (the message names the file and the position); never raises on a bad record.
    """
    path = Path(path)
    if path.is_dir():
        raise InputFileError(f"APPS/APPS+ input {path} is a directory: pass one .jsonl, .json or .parquet file")
    if not path.is_file():
        raise FileNotFoundError(f"APPS/APPS+ file not found: {path}")
    for number, record, raw in _raw_records(path):
        where = f"{path}:{number}"
        if isinstance(record, _Undecodable):
            yield RecordError(where, record.reason, raw[:2000])
            continue
        if not isinstance(record, dict):
            kind = "null" if record is None else _JSON_TYPE.get(type(record), type(record).__name__)
            yield RecordError(where, f"record is not an object: a JSON {kind}", (raw or json.dumps(record))[:2000])
            continue
        try:
            yield problem_from_record(record, f"{path.stem}:{number}")
        except ProblemFormatError as exc:
            yield RecordError(where, str(exc), (raw or json.dumps(record, default=str))[:2000])


def bundled_sample_path() -> Path:
    """The APPS+ sample shipped with the package (150 problems)."""
    from importlib.resources import files

    return Path(str(files("mrgrpo") / "assets" / "apps_plus_sample.jsonl"))
