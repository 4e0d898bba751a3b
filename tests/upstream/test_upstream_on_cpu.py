"""`mrgrpo upstream` against the installed verl: the real report is clean, and drift fails loudly, naming the point."""

from __future__ import annotations

import functools
import json
import subprocess
import sys

import pytest

from mrgrpo import upstream
from mrgrpo.upstream import Sym, shape_problem

LOOP_KEY = "actor_rollout_ref.rollout.agent.agent_loop_config_path"


@pytest.fixture(scope="module")
def configs() -> upstream.Configs:
    return upstream.compose(upstream.recipe_dir())


@pytest.fixture(scope="module")
def report(configs) -> dict:
    return upstream.build_report(upstream.recipe_dir())


@pytest.fixture
def composed(monkeypatch, configs):
    """The drift tests change verl objects, not configs: compose once (overrides still compose for real)."""
    real = upstream.compose
    monkeypatch.setattr(upstream, "compose", lambda recipe, o=(): real(recipe, o) if o else configs)
    return configs


def run(capsys, *args: str) -> tuple[int, dict, str]:
    capsys.readouterr()
    code = upstream.main(["--json", *args])
    captured = capsys.readouterr()
    return code, json.loads(captured.out), captured.err


def drift(capsys, key: str, *needles: str, args: tuple[str, ...] = ()) -> dict:
    """Exit 1, and a problem of point `key` that contains every needle."""
    code, report, err = run(capsys, *args)
    assert code == 1 and not report["ok"], report["problems"]
    problems = report["problems"]
    assert any(p.startswith(f"{key}: ") and all(n in p for n in needles) for p in problems), problems
    point = next(p for p in report["points"] if p["key"] == key)
    assert not point["ok"]
    assert "mrgrpo upstream: " in err and "problem(s)" in err
    return report


# ---- the real report -------------------------------------------------------------------------------------------


def test_report_is_clean_against_installed_verl(report):
    v = report["verl"]
    assert v["installed"] == v["pinned"] == v["pin_file"] == v["metadata"] == "0.9.1"
    assert report["ok"], report["problems"]
    assert all(p["ok"] for p in report["points"])


def test_every_point_resolves_with_a_location(report):
    points = {p["key"]: p for p in report["points"]}
    assert set(points) >= {"data.custom_cls", "reward.custom_reward_function", LOOP_KEY, "verl.plugins",
                           "algorithm.adv_estimator", "trainer.v1.sampler.custom_sampler"}
    for p in report["points"]:
        for row in p["verl"] + p["mine"]:
            assert row["location"] and not row["problem"], row
    assert points["data.custom_cls"]["verl"][0]["location"].startswith("verl/utils/dataset/rl_dataset.py:")
    assert points["data.custom_cls"]["verl"][0]["shape"] == f"({upstream.DATASET_CALL})"
    assert upstream.DATASET_CALL == "data_files, tokenizer, config, processor=None, max_samples=-1"
    assert points["data.custom_cls"]["mine"][0]["location"].startswith("mrgrpo/dataset.py:")
    helpers = [row["symbol"].rsplit(".", 1)[1] for row in points[LOOP_KEY]["verl"]]
    assert {"run", "ct_build_initial_tokens", "ct_merge_assistant_token", "ct_merge_context_msg"} <= set(helpers)
    assert points["data.custom_cls"]["recipe"] == {
        "data.custom_cls.path": "pkg://mrgrpo.dataset",
        "data.custom_cls.name": "MrGRPODataset",
    }


def test_config_delta_reports_what_the_yaml_sets(report, configs, repo_root):
    """Every leaf the recipe yaml sets is either verl's default already, or shows as changed / added."""
    from omegaconf import OmegaConf

    delta = report["config_delta"]
    assert delta["status"] == "ok", delta
    assert delta["changed"]["data.custom_cls.path"] == [None, "pkg://mrgrpo.dataset"]
    assert "data.adjust_sys_prompt" in delta["added"]
    assert "actor_rollout_ref.rollout.name" not in delta["changed"]  # set on both sides
    assert "data.apply_chat_template_kwargs" not in delta["removed"]  # verl's {} filled in by the recipe
    raw = OmegaConf.to_container(OmegaConf.load(repo_root / "mrgrpo/config/mrgrpo_trainer.yaml"))
    raw = upstream.flatten({k: v for k, v in raw.items() if k not in ("hydra", "defaults")})
    for key, value in raw.items():
        if configs.default.get(key, object()) == value:
            assert key not in delta["changed"] and key not in delta["added"]
        else:
            assert key in delta["changed"] or key in delta["added"], key
            assert (delta["changed"][key][1] if key in delta["changed"] else delta["added"][key]) == value


def test_text_output(capsys):
    code = upstream.main([])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "verl pinned:    0.9.1" in out and "verl installed: 0.9.1" in out
    assert "data.custom_cls -> mrgrpo.dataset.MrGRPODataset" in out
    assert "verl/experimental/agent_loop/agent_loop.py:" in out and "ct_merge_context_msg(" in out
    assert "Recipe config vs verl's ppo_trainer (ok)" in out
    assert "data.custom_cls.path: null -> pkg://mrgrpo.dataset" in out
    assert out.rstrip().splitlines()[-1].startswith("RESULT: OK")


def test_help(capsys):
    with pytest.raises(SystemExit) as e:
        upstream.main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "--json" in out and "--allow-version-mismatch" in out and "Exit 0" in out


def test_console_script_dispatch():
    """`python -m mrgrpo upstream` in a fresh process (the plugin is loaded by `import verl` there)."""
    proc = subprocess.run([sys.executable, "-m", "mrgrpo", "upstream", "--json"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert json.loads(proc.stdout)["ok"]
    proc = subprocess.run([sys.executable, "-m", "mrgrpo.upstream", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "mrgrpo upstream" in proc.stdout


# ---- drift: a missing or changed symbol fails, naming the point ------------------------------------------------


def test_drift_missing_ct_helper(monkeypatch, capsys, composed):
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase

    monkeypatch.delattr(AgentLoopBase, "ct_merge_context_msg")
    drift(capsys, LOOP_KEY, "AgentLoopBase.ct_merge_context_msg", "missing")


def test_drift_run_no_longer_async(monkeypatch, capsys, composed):
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase

    monkeypatch.setattr(AgentLoopBase, "run", lambda self, sampling_params, **kwargs: None)
    drift(capsys, LOOP_KEY, "AgentLoopBase.run", "async")


def test_drift_changed_dataset_signature(monkeypatch, capsys, composed):
    from verl.utils.dataset import rl_dataset

    def changed_init(self, data_files, tokenizer, processor, config, max_samples=-1):  # order swapped
        raise AssertionError("never called")

    monkeypatch.setattr(rl_dataset.RLHFDataset, "__init__", changed_init)
    drift(capsys, "data.custom_cls", "RLHFDataset", "expected (data_files, tokenizer, config,")


def test_drift_missing_reward_loader(monkeypatch, capsys, composed):
    import verl.trainer.ppo.reward as reward

    monkeypatch.delattr(reward, "get_custom_reward_fn")
    drift(capsys, "reward.custom_reward_function", "get_custom_reward_fn", "missing")


def test_drift_our_compute_score_shape(monkeypatch, capsys, composed):
    import mrgrpo.reward

    monkeypatch.setattr(mrgrpo.reward, "compute_score", lambda data_source, solution_str, ground_truth: {})
    drift(capsys, "reward.custom_reward_function", "mrgrpo.reward.compute_score", "extra_info")


def test_drift_estimator_gone(monkeypatch, capsys, composed):
    from verl.trainer.ppo import core_algos

    value = composed.recipe["algorithm.adv_estimator"]
    monkeypatch.delitem(core_algos.ADV_ESTIMATOR_REGISTRY, value)
    drift(capsys, "algorithm.adv_estimator", f"get_adv_estimator_fn({value!r}) fails")
    monkeypatch.delattr(core_algos, "register_adv_est")
    drift(capsys, "algorithm.adv_estimator", "register_adv_est", "missing")


def test_drift_config_key_gone_from_verl(monkeypatch, capsys, composed):
    default = {k: v for k, v in composed.default.items() if not k.startswith("trainer.v1.sampler.custom_sampler")}
    monkeypatch.setattr(upstream, "compose", lambda recipe, o=(): composed._replace(default=default))
    drift(capsys, "trainer.v1.sampler.custom_sampler", "custom_sampler.path is not a key of verl's ppo_trainer")


def test_version_mismatch(monkeypatch, capsys, composed):
    real = upstream.metadata.version
    monkeypatch.setattr(upstream.metadata, "version", lambda name: "0.9.2" if name == "verl" else real(name))
    code, report, _ = run(capsys)
    assert code == 1 and any("installed 0.9.2 but mrgrpo pins 0.9.1" in p for p in report["problems"])
    code, report, _ = run(capsys, "--allow-version-mismatch")
    assert code == 0, report["problems"]


# ---- the recipe side: what the config names must load through verl's loader ------------------------------------


def test_recipe_pointing_elsewhere(capsys):
    drift(capsys, "reward.custom_reward_function", "no_such_function",
          args=("--override", "reward.custom_reward_function.name=no_such_function"))
    drift(capsys, "data.custom_cls", "is not mrgrpo's", args=(
        "--override", "data.custom_cls.path=pkg://verl.utils.dataset.rl_dataset",
        "--override", "data.custom_cls.name=RLHFDataset"))


def test_custom_sampler_must_be_a_replay_buffer(tmp_path, capsys):
    drift(capsys, "trainer.v1.sampler.custom_sampler", "not a subclass of verl.trainer.ppo.v1.replay_buffer", args=(
        "--override", "trainer.v1.sampler.custom_sampler.path=pkg://mrgrpo.reward",
        "--override", "trainer.v1.sampler.custom_sampler.name=compute_score"))
    sampler = tmp_path / "my_sampler.py"
    sampler.write_text("from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer\n\n"
                       "class Mine(ReplayBuffer):\n    pass\n")
    code, report, _ = run(capsys, "--override", f"trainer.v1.sampler.custom_sampler.path={sampler}",
                          "--override", "trainer.v1.sampler.custom_sampler.name=Mine",
                          "--override", "trainer.use_v1=true")
    point = next(p for p in report["points"] if p["key"] == "trainer.v1.sampler.custom_sampler")
    assert point["ok"] and point["recipe"]["trainer.v1.sampler.custom_sampler.name"] == "Mine"
    # a foreign sampler is a valid verl sampler, but the v1 trainer (not the recipe's) then has no INFRA exclusion nor
    # dashboard
    assert code == 1 and report["problems"] == [p for p in report["problems"] if p.startswith("trainer.use_v1: ")]
    assert "no INFRA exclusion" in report["problems"][0]


def test_recipe_dir_without_recipe_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        upstream.main(["--recipe-dir", str(tmp_path)])
    assert e.value.code == 2
    assert "no mrgrpo_trainer.yaml" in capsys.readouterr().err


def test_no_recipe_found_skips_the_delta():
    """mrgrpo pip-installed without the checkout: the extension points are still checked, the delta is skipped."""
    report = upstream.build_report(None)
    assert report["config_delta"]["status"] == "skipped"
    assert report["ok"], report["problems"]


# ---- the shape checker itself ----------------------------------------------------------------------------------


def test_shape_checker():
    async def fine(self, messages, tools=None, images=None):
        pass

    def not_async(self, messages, tools=None):
        pass

    async def swallowed(self, messages, **kwargs):
        pass

    sym = Sym("x:y", "messages, tools", True)
    assert shape_problem(fine, sym) is None
    assert "async" in shape_problem(not_async, sym)
    assert "expected (messages, tools)" in shape_problem(swallowed, sym)  # a **kwargs does not stand in for a name
    assert shape_problem(lambda a, b=1: None, Sym("x:y", "a, b=None")) == "expected (a, b=None), found (a, b=1)"
    assert shape_problem(lambda a, **kw: None, Sym("x:y", "a, **")) is None
    assert "found (a)" in shape_problem(lambda a: None, Sym("x:y", "a, **"))
    assert "subclass" in shape_problem(int, Sym("x:y", base="builtins:str"))
    assert shape_problem(fine, Sym("x:y", "messages, tools", False)) == "is `async def`"  # async where sync is due
    # a decorated method is judged by the function it wraps (verl decorates some of the hooks)
    assert shape_problem(functools.wraps(fine)(lambda *a, **kw: None), sym) is None
    assert "async" in shape_problem(functools.wraps(not_async)(fine), sym)


def test_quiet_prints_nothing_on_success_and_keeps_the_exit_code(capsys):
    assert upstream.main(["--quiet"]) == 0
    assert capsys.readouterr().out == ""
