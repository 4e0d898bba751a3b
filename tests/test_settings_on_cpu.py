"""One home per setting (issue 35, item 2): the sandbox limits' wall rule, the plan-source table, the rounds default.

Each setting has one place that states it; these tests pin that every entry point reads that place.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mrgrpo.config import TRAINER_YAML, recipe_settings
from mrgrpo.first_turn import PLAN_SOURCES
from mrgrpo.sandbox import WALL_PER_CPU, Limits

PACKAGE = Path(__file__).resolve().parents[1] / "mrgrpo"


def _option(parser, dest: str):
    return next(a for a in parser._actions if a.dest == dest)


# ------------------------------------------------------------------ Limits: the wall from the CPU by one rule
def test_the_default_limits_are_4_cpu_and_8_wall_seconds():
    assert (Limits().time_s, Limits().wall_s) == (4.0, 8.0)


def test_a_cpu_limit_alone_gets_the_rules_wall():
    """Limits(time_s=10) used to keep wall_s=8, so its CPU limit could never be reached."""
    assert Limits(time_s=10).wall_s == WALL_PER_CPU * 10 == 20.0


def test_a_given_wall_is_kept():
    assert Limits(time_s=1, wall_s=3).wall_s == 3


def test_a_wall_equal_to_the_cpu_limit_is_accepted():
    assert Limits(time_s=2, wall_s=2).wall_s == 2


def test_a_wall_below_the_cpu_limit_is_refused_naming_both():
    with pytest.raises(ValueError, match=r"^Limits\.wall_s \(3\) is below Limits\.time_s \(4\.0\): the CPU limit "
                       r"could never be reached"):
        Limits(wall_s=3)


def test_limits_of_takes_none_as_not_given():
    assert Limits.of(time_s=None, wall_s=None, memory_mb=None) == Limits()
    assert Limits.of(time_s=1.5, wall_s=None, memory_mb=256) == Limits(time_s=1.5, wall_s=3.0, memory_mb=256)


def test_the_reward_derives_the_wall_from_its_time_s(monkeypatch):
    from mrgrpo.reward import _Call

    call = _Call("```python\nprint(1)\n```", {"inputs": ["\n"], "outputs": ["1\n"]}, {}, {"time_s": 3.0})
    assert (call.job.limits.time_s, call.job.limits.wall_s) == (3.0, 6.0)


def test_the_reward_refuses_a_wall_below_its_time_s():
    from mrgrpo.reward import _Call

    with pytest.raises(ValueError, match=r"Limits\.wall_s \(1\.0\) is below Limits\.time_s \(2\.0\)"):
        _Call("```python\nprint(1)\n```", {"inputs": ["\n"], "outputs": ["1\n"]}, {}, {"time_s": 2.0, "wall_s": 1.0})


def test_data_prepare_reference_runs_get_the_rules_wall():
    from mrgrpo.data.runner import REFERENCE_TIME_S, RefJob, SandboxRunner

    runner = SandboxRunner()
    assert runner._job(RefJob("print(1)", [""], ["1\n"])).limits == Limits(time_s=REFERENCE_TIME_S)
    assert runner._job(RefJob("print(1)", [""], ["1\n"], time_s=5.0)).limits.wall_s == WALL_PER_CPU * 5.0


def test_score_cli_time_s_alone_gets_the_rules_wall():
    from mrgrpo.score_cli import _limits, _parser

    assert _limits(_parser().parse_args(["--pairs", "x", "--time-s", "10"])) == Limits(time_s=10, wall_s=20)


def test_score_cli_takes_a_wall_s():
    from mrgrpo.score_cli import _limits, _parser

    assert _limits(_parser().parse_args(["--pairs", "x", "--time-s", "1", "--wall-s", "5"])).wall_s == 5


def test_score_cli_refuses_a_wall_below_the_time_as_a_usage_error(tmp_path, capsys):
    from mrgrpo.score_cli import main

    pairs = tmp_path / "p.jsonl"
    pairs.write_text('{"problem": {}, "code": "print(1)"}\n')
    assert main(["--pairs", str(pairs), "--time-s", "4", "--wall-s", "2"]) == 2
    assert capsys.readouterr().err.strip() == (
        "mrgrpo score: error: --wall-s 2 is below --time-s 4: the CPU limit could never be reached (leave --wall-s "
        "out for 2 x --time-s)")


def test_eval_reward_kwargs_limits_also_limit_the_public_tests():
    """The learnability evaluation gave the hidden tests 1/2 s and left the public tests at 4/8 s."""
    from mrgrpo.eval.run import EvalSettings, trainer_config

    loop = trainer_config(EvalSettings(reward_kwargs={"time_s": 1})).mrgrpo.agent_loop
    assert (loop.sandbox_time_s, loop.sandbox_wall_s) == (1, None)  # the loop derives the wall: 2 s


def test_eval_without_limits_keeps_the_recipes_public_test_limits():
    from mrgrpo.eval.run import EvalSettings, trainer_config

    loop = trainer_config(EvalSettings()).mrgrpo.agent_loop
    assert (loop.sandbox_time_s, loop.sandbox_wall_s) == (recipe_settings()["sandbox_time_s"],
                                                          recipe_settings()["sandbox_wall_s"])


# ------------------------------------------------------------------ plan sources: one table
def test_eval_plan_source_choices_are_the_table():
    from mrgrpo.eval.cli import parser

    assert tuple(_option(parser(), "plan_source").choices) == PLAN_SOURCES


def test_preflight_refuses_a_plan_source_outside_the_table(capsys):
    from mrgrpo.preflight import main

    with pytest.raises(SystemExit) as exc:
        main(["--plan-source", "oracle", "--no-import"])
    assert exc.value.code == 2
    assert f"choose from {', '.join(repr(s) for s in PLAN_SOURCES)}" in capsys.readouterr().err


def test_learn_sft_data_plan_sources_are_the_table_but_teacher():
    from mrgrpo.learn.cli import build_parser

    sub = _option(build_parser(), "command").choices["sft-data"]
    assert tuple(_option(sub, "plan_source").choices) == tuple(s for s in PLAN_SOURCES if s != "teacher")


def test_eval_settings_refuse_a_plan_source_outside_the_table():
    from mrgrpo.eval.run import EvalSettings

    with pytest.raises(ValueError, match=r"--plan-source must be one of \('self', 'teacher', 'none'\), got 'x'"):
        EvalSettings(plan_source="x")


def test_the_run_scripts_plan_source_check_lists_the_table(repo_root):
    text = (repo_root / "recipe/mrgrpo/run_qwen3_apps.sh").read_text()
    listed = re.search(r'case "\$PLAN_SOURCE" in ([a-z|]+)\)', text).group(1)
    assert tuple(listed.split("|")) == PLAN_SOURCES


def test_no_module_but_first_turn_writes_the_plan_sources_out():
    """A literal list of the three names (any order, any quotes) anywhere in the package but their table."""
    names = r"""['"](?:self|teacher|none)['"]"""
    literal = re.compile(rf"{names}\s*,\s*{names}\s*,\s*{names}")
    hits = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
            if p.name != "first_turn.py" and literal.search(p.read_text())]
    assert hits == []


# ------------------------------------------------------------------ rounds: one default
def test_the_recipe_yaml_holds_the_rounds_default():
    assert isinstance(recipe_settings()["rounds"], int) and TRAINER_YAML.is_file()


def test_eval_rounds_default_is_the_recipes():
    from mrgrpo.eval.cli import parser
    from mrgrpo.eval.run import EvalSettings, trainer_config

    assert _option(parser(), "rounds").default is None
    assert trainer_config(EvalSettings()).mrgrpo.agent_loop.rounds == recipe_settings()["rounds"]


def test_eval_rounds_help_states_the_recipes_value():
    from mrgrpo.eval.cli import parser

    assert _option(parser(), "rounds").help.endswith(f"trainer yaml, {recipe_settings()['rounds']})")


def test_eval_plan_source_default_is_the_recipes():
    from mrgrpo.eval.cli import parser
    from mrgrpo.eval.run import EvalSettings

    assert _option(parser(), "plan_source").default == EvalSettings().plan_source == recipe_settings()["plan_source"]


def test_learn_transcripts_rounds_default_is_the_recipes():
    from mrgrpo.learn.cli import build_parser
    from mrgrpo.learn.transcripts import LoopSettings

    sub = _option(build_parser(), "command").choices["sft-data"]
    assert _option(sub, "rounds").default is None and LoopSettings().rounds == recipe_settings()["rounds"]


def test_learn_experiment_rounds_default_is_the_recipes():
    from mrgrpo.learn.experiment import ExperimentOptions

    assert ExperimentOptions().rounds == recipe_settings()["rounds"]


@pytest.mark.parametrize("script, pattern", [("run_qwen3_apps.sh", r"^knob ROUNDS (\d+) "),
                                             ("learnability.sh", r"^ROUNDS=\$\{ROUNDS:-(\d+)\}$")])
def test_the_scripts_rounds_knob_defaults_to_the_recipes(repo_root, script, pattern):
    text = (repo_root / "recipe/mrgrpo" / script).read_text()
    assert int(re.search(pattern, text, re.M).group(1)) == recipe_settings()["rounds"]


def test_no_module_writes_a_rounds_default():
    """``rounds`` with a number as its default (a dataclass field, a keyword default or default=) nowhere in the
    package: only the trainer yaml states it."""
    default = re.compile(r"\brounds\s*(?::\s*int\s*)?=\s*\d|--rounds.*default\s*=\s*\d")
    hits = [f"{p.relative_to(PACKAGE)}: {line.strip()}" for p in PACKAGE.rglob("*.py")
            for line in p.read_text().splitlines() if default.search(line)]
    assert hits == []
