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


def test_data_prepare_reference_runs_get_the_rules_wall():
    from mrgrpo.data.runner import REFERENCE_TIME_S, RefJob, SandboxRunner

    runner = SandboxRunner()
    assert runner._job(RefJob("print(1)", [""], ["1\n"])).limits == Limits(time_s=REFERENCE_TIME_S)
    assert runner._job(RefJob("print(1)", [""], ["1\n"], time_s=5.0)).limits.wall_s == WALL_PER_CPU * 5.0


def test_a_reference_run_scales_with_the_problems_own_time_limit():
    from mrgrpo.data.runner import REFERENCE_TIME_S, reference_time_s

    assert reference_time_s(None, None) is None  # REFERENCE_TIME_S when run
    assert reference_time_s(None, 1.0) == REFERENCE_TIME_S and reference_time_s(None, 10.0) == 30.0
    assert reference_time_s(2.0, 10.0) == 2.0  # --ref-time-s wins


# ------------------------------------------------------------------ per-test limits: in the data, one override
CODE = "```python\nprint(1)\n```"
OWN = {"inputs": ["\n", "\n"], "outputs": ["1\n", "1\n"], "time_s": 1.5}  # a problem with its own time limit


def _row(tests: dict, source_id: str = "p7"):
    """A parquet row from `mrgrpo data build` for a problem with these tests (the first one public); a ``wall_s``
    (which no dataset gives, so `Problem` has none) is added to both halves afterwards."""
    import json

    from mrgrpo.apps import Problem
    from mrgrpo.data.build import make_row

    problem = Problem(source_id, "apps_plus", "Print 1.", "stdio", None, None, "", tests["inputs"], tests["outputs"],
                      "interview", "print(1)", time_s=tests.get("time_s"))
    row = make_row(problem, {"n_public": 1}, "", "", "train", 0)
    if tests.get("wall_s") is not None:
        for holder, key in ((row["extra_info"], "public_tests"), (row["reward_model"], "ground_truth")):
            holder[key] = json.dumps({**json.loads(holder[key]), "wall_s": tests["wall_s"]})
    return row


def _recipe(**limits):
    """The shipped trainer yaml with ``mrgrpo.limits`` set as on the command line."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(TRAINER_YAML)
    for key, value in limits.items():
        cfg.mrgrpo.limits[key] = value
    return cfg


def _loop_and_reward_limits(cfg, row) -> tuple[Limits, Limits]:
    """(the limits of the agent loop's public-test job, the limits of the reward's hidden-test job) for one row,
    each read by its own code from the same config."""
    from mrgrpo.agent_loop import limits_override, parse_public_tests
    from mrgrpo.reward import _Call

    public = parse_public_tests(row["extra_info"])
    loop = public.job("print(1)", limits=public.limits(limits_override(cfg))).limits
    reward_kwargs = dict(cfg.reward.custom_reward_function.reward_kwargs)  # as verl's get_custom_reward_fn
    reward = _Call(CODE, row["reward_model"]["ground_truth"], row["extra_info"], reward_kwargs).job.limits
    return loop, reward


def test_the_data_build_writes_a_problems_own_time_limit_into_both_halves():
    import json

    row = _row(OWN)
    assert json.loads(row["extra_info"]["public_tests"])["time_s"] == 1.5
    assert json.loads(row["reward_model"]["ground_truth"])["time_s"] == 1.5
    assert "time_s" not in json.loads(_row({**OWN, "time_s": None})["reward_model"]["ground_truth"])


@pytest.mark.parametrize("tests, limits, expected", [
    (OWN, {}, (1.5, 3.0)),  # the problem's own CPU limit, the rule's wall
    ({**OWN, "time_s": None}, {}, (4.0, 8.0)),  # none: the sandbox's defaults
    (OWN, {"time_s": 2}, (2.0, 4.0)),  # the override wins, and its wall is the rule's
    (OWN, {"wall_s": 10}, (1.5, 10.0)),
    ({**OWN, "wall_s": 5.0}, {}, (1.5, 5.0)),  # the problem's own wall
    ({**OWN, "wall_s": 5.0}, {"time_s": 1}, (1.0, 2.0)),  # a CPU override drops the problem's wall with its CPU
])
def test_the_loop_and_the_reward_see_the_same_limits_for_the_same_problem(tests, limits, expected):
    loop, reward = _loop_and_reward_limits(_recipe(**limits), _row(tests))
    assert loop == reward
    assert (loop.time_s, loop.wall_s) == expected


def test_the_override_sets_memory_for_both():
    loop, reward = _loop_and_reward_limits(_recipe(memory_mb=256), _row(OWN))
    assert loop.memory_mb == reward.memory_mb == 256


def test_the_reward_gets_the_recipes_one_override_section():
    from omegaconf import OmegaConf

    cfg = _recipe(time_s=1, wall_s=2)
    kwargs = OmegaConf.to_container(cfg.reward.custom_reward_function.reward_kwargs, resolve=True)
    assert kwargs["limits"] == OmegaConf.to_container(cfg.mrgrpo.limits)
    assert kwargs["limits"] == {"time_s": 1, "wall_s": 2, "memory_mb": None}


@pytest.mark.parametrize("time_s", ["fast", -1, 0, True, [4]])
def test_a_malformed_time_s_in_a_row_is_a_testset_error_naming_the_row(time_s):
    import json

    from mrgrpo.agent_loop import parse_public_tests
    from mrgrpo.reward import compute_score
    from mrgrpo.testset import TestSetError

    bad = json.dumps({**OWN, "time_s": time_s})
    with pytest.raises(TestSetError, match=r"^row p7 extra_info\.public_tests: time_s must be a number of seconds "
                       r"> 0, got "):
        parse_public_tests({"source_id": "p7", "io_mode": "stdio", "public_tests": bad})
    with pytest.raises(TestSetError, match=r"^row p7 ground_truth: time_s must be a number of seconds > 0, got "):
        compute_score("apps_plus", CODE, bad, {"source_id": "p7"})


def test_a_wall_below_the_cpu_limit_in_a_row_is_a_testset_error_naming_the_row():
    from mrgrpo.testset import TestSet, TestSetError

    with pytest.raises(TestSetError, match=r"^row p7 ground_truth: wall_s \(1\.0\) is below time_s \(2\.0\)"):
        TestSet.from_json({**OWN, "time_s": 2.0, "wall_s": 1.0}, where="row p7 ground_truth")


def test_an_override_wall_below_a_problems_own_cpu_limit_is_an_error_naming_the_row():
    from mrgrpo.testset import LimitsOverride, TestSet, TestSetError

    tests = TestSet.from_json({**OWN, "time_s": 6.0}, where="row p7 ground_truth")
    with pytest.raises(TestSetError, match=r"^row p7 ground_truth: Limits\.wall_s \(5\) is below Limits\.time_s"):
        tests.limits(LimitsOverride(wall_s=5))


def test_the_reward_refuses_a_wall_below_its_time_s():
    from mrgrpo.reward import _Call

    with pytest.raises(ValueError, match=r"^reward_kwargs\.limits \(mrgrpo\.limits\): wall_s \(1\.0\) is below "
                       r"time_s \(2\.0\)"):
        _Call(CODE, OWN, {}, {"limits": {"time_s": 2.0, "wall_s": 1.0}})


@pytest.mark.parametrize("section, message", [
    ({"time_s": "4"}, r"^mrgrpo\.limits: time_s must be a number of seconds > 0, got '4'$"),
    ({"memory_mb": 1.5}, r"^mrgrpo\.limits: memory_mb must be a whole number of megabytes > 0, got 1\.5$"),
    ({"cpu_s": 1}, r"^mrgrpo\.limits has unknown keys \['cpu_s'\]; known: time_s, wall_s, memory_mb$"),
    (3, r"^mrgrpo\.limits must be a mapping of time_s, wall_s, memory_mb, got 3$"),
])
def test_a_malformed_override_is_refused_naming_the_section(section, message):
    from mrgrpo.testset import LimitsOverride

    with pytest.raises(ValueError, match=message):
        LimitsOverride.from_config(section)


@pytest.mark.parametrize("key", ["time_s", "wall_s", "memory_mb"])
def test_the_former_reward_kwargs_limits_are_refused_naming_the_new_key(key):
    from mrgrpo.reward import compute_score

    with pytest.raises(TypeError, match=rf"^compute_score: reward_kwargs\.{key} is retired: set mrgrpo\.limits\.{key} "
                       r"\(one override for the agent loop's public tests and the reward's hidden tests\)$"):
        compute_score("apps_plus", CODE, OWN, None, **{key: 1})


@pytest.mark.parametrize("key, new", [("sandbox_time_s", "time_s"), ("sandbox_wall_s", "wall_s")])
def test_the_former_agent_loop_limits_are_refused_naming_the_new_key(key, new):
    from mrgrpo.agent_loop import limits_override

    cfg = _recipe()
    cfg.mrgrpo.agent_loop[key] = 2
    with pytest.raises(ValueError, match=rf"^PlanCodeAgentLoop: mrgrpo\.agent_loop\.{key} is retired: set "
                       rf"mrgrpo\.limits\.{new} "):
        limits_override(cfg)


def test_a_config_without_the_override_section_has_no_override_on_either_side():
    """The section is optional: absent (a config built by hand) is the same as null, for the loop and the reward."""
    from mrgrpo.agent_loop import limits_override
    from mrgrpo.reward import _Call
    from mrgrpo.testset import LimitsOverride

    assert limits_override({"mrgrpo": {"agent_loop": {}}}) == LimitsOverride() == limits_override({})
    assert _Call(CODE, OWN, {}, {}).job.limits == Limits(time_s=1.5)


def test_score_cli_time_s_alone_gets_the_rules_wall():
    from mrgrpo.score_cli import _override, _parser
    from mrgrpo.testset import TestSet

    override = _override(_parser().parse_args(["--pairs", "x", "--time-s", "10"]))
    assert TestSet.from_json(OWN).limits(override) == Limits(time_s=10, wall_s=20)


def test_score_cli_takes_a_wall_s():
    from mrgrpo.score_cli import _override, _parser

    assert _override(_parser().parse_args(["--pairs", "x", "--time-s", "1", "--wall-s", "5"])).wall_s == 5


def test_score_cli_without_limits_judges_by_the_problems_own():
    from mrgrpo.score_cli import _override, _parser
    from mrgrpo.testset import TestSet

    override = _override(_parser().parse_args(["--pairs", "x"]))
    assert TestSet.from_json(OWN).limits(override) == Limits(time_s=1.5)


def test_score_cli_refuses_a_wall_below_the_time_as_a_usage_error(tmp_path, capsys):
    from mrgrpo.score_cli import main

    pairs = tmp_path / "p.jsonl"
    pairs.write_text('{"problem": {}, "code": "print(1)"}\n')
    assert main(["--pairs", str(pairs), "--time-s", "4", "--wall-s", "2"]) == 2
    assert capsys.readouterr().err.strip() == (
        "mrgrpo score: error: --wall-s 2 is below --time-s 4: the CPU limit could never be reached (leave --wall-s "
        "out for 2 x --time-s)")


def test_eval_limits_are_the_loops_and_the_rewards_override():
    """The learnability evaluation once gave the hidden tests 1/2 s and left the public tests at 4/8 s."""
    from mrgrpo.agent_loop import limits_override, parse_public_tests
    from mrgrpo.eval.run import EvalSettings, trainer_config
    from mrgrpo.reward import _Call
    from mrgrpo.testset import LimitsOverride

    settings = EvalSettings(limits=LimitsOverride(time_s=1))
    assert dict(trainer_config(settings).mrgrpo.limits) == {"time_s": 1, "wall_s": None, "memory_mb": None}
    row = _row(OWN)
    public = parse_public_tests(row["extra_info"])
    loop = public.limits(limits_override(trainer_config(settings)))
    reward = _Call(CODE, row["reward_model"]["ground_truth"], row["extra_info"], settings.score_kwargs()).job.limits
    assert loop == reward == Limits(time_s=1, wall_s=2)


def test_eval_without_limits_has_no_override():
    from mrgrpo.eval.run import EvalSettings, trainer_config

    assert dict(trainer_config(EvalSettings()).mrgrpo.limits) == {"time_s": None, "wall_s": None, "memory_mb": None}


@pytest.mark.parametrize("key", ["time_s", "wall_s", "memory_mb", "limits"])
def test_eval_refuses_limits_in_its_reward_kwargs(key):
    import argparse

    from mrgrpo.errors import UsageError
    from mrgrpo.eval.cli import check_options, parser
    from mrgrpo.eval.run import EvalSettings

    with pytest.raises(ValueError, match=rf"^reward_kwargs \['{key}'\]: the per-test limits are EvalSettings\.limits"):
        EvalSettings(reward_kwargs={key: 1})
    args = parser().parse_args(["--model", "m", "--data", "d", "--out", "o", "--reward-kwargs", f'{{"{key}": 1}}'])
    assert isinstance(args, argparse.Namespace)
    with pytest.raises(UsageError, match=rf"^--reward-kwargs {key}: the per-test limits are --time-s, --wall-s, "
                       r"--memory-mb \(one override for the public and the hidden tests\), not reward kwargs$"):
        check_options(args)


def test_eval_limit_options_become_the_override():
    from mrgrpo.eval.cli import check_options, parser
    from mrgrpo.testset import LimitsOverride

    args = parser().parse_args(["--model", "m", "--data", "d", "--out", "o", "--time-s", "1", "--wall-s", "2"])
    assert check_options(args)[2] == LimitsOverride(time_s=1, wall_s=2)


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


def test_the_run_scripts_rounds_knob_defaults_to_the_recipes(repo_root):
    text = (repo_root / "recipe/mrgrpo/run_qwen3_apps.sh").read_text()
    assert int(re.search(r"^knob ROUNDS (\d+) ", text, re.M).group(1)) == recipe_settings()["rounds"]


def test_no_module_writes_a_rounds_default():
    """``rounds`` with a number as its default (a dataclass field, a keyword default or default=) nowhere in the
    package: only the trainer yaml states it."""
    default = re.compile(r"\brounds\s*(?::\s*int\s*)?=\s*\d|--rounds.*default\s*=\s*\d")
    hits = [f"{p.relative_to(PACKAGE)}: {line.strip()}" for p in PACKAGE.rglob("*.py")
            for line in p.read_text().splitlines() if default.search(line)]
    assert hits == []
