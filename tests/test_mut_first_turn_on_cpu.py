"""`mrgrpo.first_turn`: the first user turn for each plan source (issue 17). Found by mutation testing
(docs/testing.md); one rule of the module docstring per test."""

from __future__ import annotations

import pytest

from mrgrpo import prompts
from mrgrpo.first_turn import (
    PLAN_SOURCES,
    MissingPlanError,
    first_turn_messages,
    first_user_content,
    plan_source_of,
)

PLAN = "1. read n\n2. print n + 1"
STDIO = {"source_id": "p1", "statement": "Print n + 1.", "io_mode": "stdio", "plan": PLAN, "starter_code": ""}
CALL = {"source_id": "p2", "statement": "Add two numbers.", "io_mode": "call", "fn_name": "add",
        "starter_code": "class Solution:\n    def add(self, a, b):\n        ", "plan": ""}


def with_plan(info):
    return prompts.build_user_prompt(info["statement"], info.get("starter_code"), info["io_mode"], info.get("fn_name"),
                                     plan=info["plan"], class_name=info.get("class_name"))


def without_plan(info):
    return prompts.build_user_prompt(info["statement"], info.get("starter_code"), info["io_mode"], info.get("fn_name"),
                                     plan=None, class_name=info.get("class_name"))


def test_the_run_plan_source_applies_when_the_row_has_none():
    assert plan_source_of({}, "teacher") == "teacher"
    assert plan_source_of({"plan_source": ""}, "self") == "self"
    assert plan_source_of({"plan_source": None}, "none") == "none"


def test_the_row_plan_source_overrides_the_run():
    assert plan_source_of({"plan_source": "self"}, "teacher") == "self"


@pytest.mark.parametrize("info,default", [({"plan_source": "gold"}, "self"), ({}, "teachers"), ({}, "")])
def test_an_unknown_plan_source_is_an_error(info, default):
    with pytest.raises(ValueError, match="plan_source must be one of"):
        plan_source_of(info, default)
    with pytest.raises(ValueError, match="plan_source must be one of"):
        first_turn_messages([{"role": "user", "content": "x"}], info, default)


def test_first_user_content_rejects_an_unknown_plan_source():
    with pytest.raises(ValueError, match="plan_source must be one of"):
        first_user_content("x", STDIO, "gold")


def test_teacher_puts_the_row_plan_in_the_user_turn():
    assert first_user_content(without_plan(STDIO), STDIO, "teacher") == with_plan(STDIO)


def test_teacher_keeps_a_turn_that_already_holds_the_plan():
    content = "custom prompt\n" + PLAN + "\nend"
    assert first_user_content(content, STDIO, "teacher") == content


@pytest.mark.parametrize("plan", ["", "   \n", None])
def test_teacher_without_a_plan_is_a_missing_plan_error_naming_the_row(plan):
    with pytest.raises(MissingPlanError, match="row p1 has no extra_info.plan"):
        first_user_content("anything", {**STDIO, "plan": plan}, "teacher")


def test_none_takes_the_plan_out_of_the_turn():
    assert first_user_content(with_plan(STDIO), STDIO, "none") == without_plan(STDIO)


def test_none_keeps_a_turn_without_the_plan_unchanged():
    assert first_user_content("custom prompt", STDIO, "none") == "custom prompt"
    assert first_user_content("custom prompt", {**STDIO, "plan": ""}, "none") == "custom prompt"


def test_self_asks_for_a_plan_only_whatever_the_turn_held():
    expected = prompts.build_plan_turn_prompt(STDIO["statement"], "", "stdio", None, class_name=None)
    assert first_user_content(with_plan(STDIO), STDIO, "self") == expected
    assert first_user_content("custom", STDIO, "self") == expected
    assert PLAN not in expected


def test_call_mode_turns_name_the_entry_point_of_class_solution():
    expected = prompts.build_plan_turn_prompt(CALL["statement"], CALL["starter_code"], "call", "add",
                                              class_name="Solution")
    assert first_user_content("x", CALL, "self") == expected
    assert "Solution.add" in expected


def test_the_row_class_name_wins():
    info = {**CALL, "class_name": "Codec", "starter_code": ""}
    assert "Codec.add" in first_user_content("x", info, "self")


@pytest.mark.parametrize("info", [
    {**CALL, "starter_code": "def add(a, b):\n    "},  # Codewars style: a plain function
    {**CALL, "starter_code": None},
    {**STDIO, "starter_code": "class Solution:\n    pass", "fn_name": "add"},  # stdio: no entry point at all
])
def test_no_class_solution_means_a_plain_entry_point(info):
    text = first_user_content("x", info, "self")
    assert "Solution." not in text


@pytest.mark.parametrize("missing", ["statement", "io_mode"])
def test_a_row_without_statement_or_io_mode_cannot_be_rebuilt(missing):
    info = {**STDIO, missing: ""}
    with pytest.raises(ValueError, match=rf"row p1: extra_info lacks \['{missing}'\]"):
        first_user_content("x", info, "self")


def test_first_turn_messages_rewrites_the_last_user_message_only():
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "first"},
            {"role": "assistant", "content": "A"}, {"role": "user", "content": "last"}]
    out = first_turn_messages(msgs, STDIO, "self")
    assert out[:3] == msgs[:3]
    assert out[3] == {"role": "user", "content": first_user_content("last", STDIO, "self")}
    assert msgs[3]["content"] == "last"  # the input is not changed


def test_first_turn_messages_uses_the_row_plan_source():
    msgs = [{"role": "user", "content": with_plan(STDIO)}]
    assert first_turn_messages(msgs, {**STDIO, "plan_source": "none"}, "teacher")[0]["content"] == without_plan(STDIO)


@pytest.mark.parametrize("source", PLAN_SOURCES)
def test_first_turn_messages_is_idempotent(source):
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": without_plan(STDIO)}]
    once = first_turn_messages(msgs, STDIO, source)
    assert first_turn_messages(once, STDIO, source) == once


def test_a_prompt_without_a_user_message_is_an_error_naming_the_row():
    with pytest.raises(ValueError, match="row p1: the prompt has no user message"):
        first_turn_messages([{"role": "system", "content": "S"}], STDIO, "none")


def test_a_non_text_user_message_is_a_type_error():
    with pytest.raises(TypeError, match="row p1: mrGRPO supports text prompts only"):
        first_turn_messages([{"role": "user", "content": [{"type": "text", "text": "x"}]}], STDIO, "none")


def test_errors_tell_how_to_fix_the_data():
    with pytest.raises(MissingPlanError) as exc:
        first_user_content("x", {**STDIO, "plan": ""}, "teacher")
    assert str(exc.value) == (
        "plan_source=teacher but row p1 has no extra_info.plan; build the data with plans (`mrgrpo data prepare "
        "--plans ...`, `--require-plans`) or use plan_source none/self")
    with pytest.raises(ValueError) as exc:
        first_user_content("x", {**STDIO, "statement": "", "io_mode": ""}, "self")
    assert str(exc.value) == ("row p1: extra_info lacks ['statement', 'io_mode']; the plan source needs the first user "
                              "turn rebuilt (build the data with `mrgrpo data prepare`)")


def test_a_row_without_source_id_is_named_row_question_mark():
    info = {k: v for k, v in STDIO.items() if k != "source_id"}
    with pytest.raises(MissingPlanError, match=r"^plan_source=teacher but row \? has no"):
        first_user_content("x", {**info, "plan": ""}, "teacher")
    with pytest.raises(ValueError, match=r"^row \?: extra_info lacks \['statement'\]"):
        first_user_content("x", {**info, "statement": ""}, "self")
    with pytest.raises(ValueError, match=r"^row \?: the prompt has no user message"):
        first_turn_messages([], info, "none")
    with pytest.raises(TypeError, match=r"^row \?: mrGRPO supports text prompts only"):
        first_turn_messages([{"role": "user", "content": None}], info, "none")


@pytest.mark.parametrize("starter", [None, ""])
def test_a_call_row_without_starter_code_shows_none(starter):
    info = {**CALL, "starter_code": starter}
    text = first_user_content("x", info, "self")
    assert text == prompts.build_plan_turn_prompt(CALL["statement"], "", "call", "add", class_name=None)
    assert "Starter code" not in text
