"""`mrgrpo.code_extract`: which program an answer holds (issue 17: unclosed `<think>`, stray `</think>`, fences of
other languages). Each test names one rule of the module docstring; found by mutation testing (docs/testing.md)."""

from __future__ import annotations

import pytest

from mrgrpo.code_extract import extract_code, strip_think


def fence(body: str, tag: str = "python") -> str:
    return f"```{tag}\n{body}\n```"


def test_the_program_is_the_body_of_a_python_fence():
    assert extract_code(f"Here it is:\n{fence('print(1)')}\nDone.") == "print(1)"


def test_the_last_python_block_wins():
    assert extract_code(f"{fence('a = 1')}\nthen\n{fence('b = 2')}") == "b = 2"


def test_a_python_block_wins_over_a_later_bare_fence():
    assert extract_code(f"{fence('real()')}\n{fence('5 3', tag='')}") == "real()"


def test_a_bare_fence_counts_when_no_block_is_tagged_python():
    assert extract_code(f"{fence('first()', tag='')}\n{fence('second()', tag='')}") == "second()"


@pytest.mark.parametrize("tag", ["bash", "json", "text", "cpp", "pycon"])
def test_fences_of_other_languages_never_count(tag):
    assert extract_code(fence("echo hi", tag=tag)) is None
    assert extract_code(f"{fence('x = 1')}\n{fence('echo hi', tag=tag)}") == "x = 1"
    assert extract_code(f"{fence('y = 2', tag='')}\n{fence('echo hi', tag=tag)}") == "y = 2"


@pytest.mark.parametrize("tag", ["python", "py", "python3", "Python", "PY", "python title.py"])
def test_python_info_strings(tag):
    assert extract_code(f"{fence('bare()', tag='')}\n{fence('tagged()', tag=tag)}\n{fence('bare2()', tag='')}") == (
        "tagged()"
    )


def test_no_fence_or_an_unclosed_fence_is_no_program():
    assert extract_code("print(1)") is None
    assert extract_code("```python\nprint(1)\n") is None
    assert extract_code(f"{fence('done()')}\n```python\nunfinished(") == "done()"


def test_a_block_with_only_whitespace_is_no_program():
    assert extract_code(fence("   \n\t\n")) is None
    assert extract_code(fence("")) is None


def test_indentation_and_inner_blank_lines_are_kept_outer_newlines_dropped():
    body = "\n    x = 1\n\n    print(x)\n"
    assert extract_code(fence(body)) == "    x = 1\n\n    print(x)"


def test_only_newlines_are_trimmed_around_the_program():
    # letters at either end are part of the program (X, x, ... are not fence characters)
    assert extract_code(fence("X = 1\nprint(X)")) == "X = 1\nprint(X)"


def test_an_indented_closing_fence_closes_the_block():
    assert extract_code("  ```python\n  print(2)\n  ```\n") == "  print(2)"


def test_code_inside_a_closed_think_block_never_counts():
    text = f"<think>draft:\n{fence('wrong()')}\n</think>\nAnswer:\n{fence('right()')}"
    assert extract_code(text) == "right()"
    assert extract_code(f"<think>{fence('wrong()')}</think>no code here") is None


def test_text_between_two_think_blocks_is_kept():
    text = f"<think>a</think>\n{fence('kept()')}\n<think>{fence('dropped()')}</think>"
    assert extract_code(text) == "kept()"
    assert strip_think("<think>a</think>MID<think>b</think>END") == "MIDEND"


def test_an_unclosed_think_drops_everything_after_it():
    # the answer was cut off while thinking: code drafted there never counts, code before it does
    assert extract_code(f"<think>\n{fence('draft()')}") is None
    assert extract_code(f"{fence('before()')}\n<think>\n{fence('draft()')}") == "before()"
    assert strip_think("keep<think>gone") == "keep"
    # the FIRST unclosed <think> cuts: a second one inside the cut-off thinking changes nothing
    assert extract_code(f"{fence('before()')}<think>{fence('draft1()')}<think>{fence('draft2()')}") == "before()"


def test_a_stray_closing_think_means_everything_before_it_was_thinking():
    # the template opened <think> in the prompt: the response starts inside the thinking
    assert extract_code(f"{fence('thought()')}\n</think>\n{fence('answer()')}") == "answer()"
    assert extract_code(f"{fence('thought()')}\n</think>\nno code") is None
    assert strip_think("a</think>b</think>c") == "c"


def test_strip_think_leaves_plain_text_alone():
    assert strip_think("no tags <b>here</b>") == "no tags <b>here</b>"


@pytest.mark.parametrize("bad,name", [(None, "NoneType"), (b"```python\nx\n```", "bytes"), (3, "int")])
def test_a_non_string_answer_is_a_type_error_naming_its_type(bad, name):
    with pytest.raises(TypeError, match=f"^strip_think expects str, got {name}$"):
        extract_code(bad)
