"""`mrgrpo upstream` against the installed verl: the real report is clean, and drift fails loudly."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import pytest

from mrgrpo import upstream
from mrgrpo.upstream import Sig, signature_problems


def run_json(capsys, *args: str) -> tuple[int, dict]:
    capsys.readouterr()
    code = upstream.main(["--json", *args])
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    report["_stderr"] = captured.err
    return code, report


def messages(report: dict) -> str:
    return "\n".join(f"[{p['side']}] {p['where']}: {p['message']}" for p in report["problems"])


@pytest.fixture(scope="module")
def report() -> dict:
    ctx = upstream.Context(repo_root=upstream.default_repo_root(), recipe_dir=None)
    ctx.recipe_dir = upstream.default_recipe_dir(ctx.repo_root)
    return upstream.build_report(ctx)


def test_report_is_clean_against_installed_verl(report):
    assert report["verl"]["installed"] == report["verl"]["pinned"] == "0.9.1"
    assert report["verl"]["pin_file_version"] == report["verl"]["metadata_version"] == "0.9.1"
    assert not [p for p in report["problems"] if p["side"] != "mrgrpo"], messages(report)
    assert report["ok"], messages(report)
    assert report["exit_code"] == 0
    assert {ep["status"] for ep in report["extension_points"]} == {"ok"}
    assert [fe["status"] for fe in report["fork_edits"]] == ["ok", "ok", "ok"]


def test_report_lists_every_extension_point_with_our_object(report):
    points = {ep["key"]: ep for ep in report["extension_points"]}
    assert points["data.custom_cls"]["ours"] == "mrgrpo.dataset.MrGRPODataset"
    assert points["reward.custom_reward_function"]["ours"] == "mrgrpo.reward.compute_score"
    loop = points["actor_rollout_ref.rollout.agent.agent_loop_config_path"]
    assert loop["ours"] == "mrgrpo.agent_loop.PlanCodeAgentLoop"
    assert loop["verl_location"].startswith("verl/experimental/agent_loop/agent_loop.py:AgentLoopBase")
    assert points["entry point verl.plugins"]["ours"] == "mrgrpo.plugin"
    assert "hydra.searchpath" in points
    # the recipe's values are shown next to each key
    assert points["data.custom_cls"]["recipe"] == {
        "data.custom_cls.path": "pkg://mrgrpo.dataset",
        "data.custom_cls.name": "MrGRPODataset",
    }
    checks = " ".join(row["check"] for row in loop["checks"])
    for helper in ("ct_build_initial_tokens", "ct_merge_assistant_token", "ct_merge_context_msg"):
        assert helper in checks


def test_plugin_table_and_ours_agree():
    """mrgrpo.plugin keeps its own list of the wiring; every config key there is checked here."""
    from mrgrpo import plugin

    ours = {ep.key for ep in upstream.EXTENSION_POINTS}
    for key, _target in plugin.EXTENSION_POINTS.values():
        assert key in ours, f"{key} (mrgrpo.plugin.EXTENSION_POINTS) has no row in mrgrpo.upstream.EXTENSION_POINTS"


def test_fork_edits_point_at_upstream_functions(report):
    edits = {fe["number"]: fe for fe in report["fork_edits"]}
    assert len(edits) == 3
    where = [u["location"] for u in edits[1]["upstream"]]
    assert any(w.startswith("verl/experimental/agent_loop/agent_loop.py:AgentLoopWorker._postprocess") for w in where)
    assert any("RewardManagerBase.assemble_rm_scores" in w for w in where)
    assert edits[2]["upstream"][0]["location"].startswith(
        "verl/experimental/reward_loop/reward_manager/naive.py:NaiveRewardManager.run_single"
    )
    assert "MrGRPODataset" in edits[3]["replacement"] and "data.custom_cls" in edits[3]["replacement"]


def test_config_delta_against_ppo_trainer(report):
    delta = report["config_delta"]
    assert delta["status"] == "ok", delta
    assert delta["overrides"][0] == "actor_rollout_ref.rollout.name=vllm"
    changed = delta["changed"]
    assert changed["data.custom_cls.path"] == [None, "pkg://mrgrpo.dataset"]
    assert changed["reward.custom_reward_function.path"] == [None, "pkg://mrgrpo.reward"]
    assert changed["algorithm.adv_estimator"][1] == "grpo"
    assert "data.adjust_sys_prompt" in delta["added"]
    assert "actor_rollout_ref.rollout.name" not in changed  # set on both sides
    # an empty {} in verl filled in by the recipe is not a removal
    assert not any(k == "data.apply_chat_template_kwargs" for k in delta["removed"])


def test_text_output(capsys):
    code = upstream.main([])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "verl pinned:    0.9.1" in out and "verl installed: 0.9.1" in out
    assert "data.custom_cls -> mrgrpo.dataset.MrGRPODataset" in out
    assert "The original fork's in-place edits" in out
    assert "Recipe config vs verl's ppo_trainer (ok)" in out
    assert "algorithm.adv_estimator: gae -> grpo" in out
    assert out.rstrip().splitlines()[-1].startswith("RESULT: OK")


def test_help(capsys):
    with pytest.raises(SystemExit) as e:
        upstream.main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "--json" in out and "--allow-version-mismatch" in out


def test_console_script_dispatch():
    """`python -m mrgrpo upstream` in a fresh process (the plugin is loaded by `import verl` there)."""
    proc = subprocess.run(
        [sys.executable, "-m", "mrgrpo", "upstream", "--json"], capture_output=True, text=True, timeout=300
    )
    report = json.loads(proc.stdout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert report["ok"] and report["verl"]["installed"] == "0.9.1"


# ---- drift: a missing or changed verl symbol fails loudly, naming it -------------------------------------------


def test_drift_missing_ct_helper(monkeypatch, capsys):
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase

    monkeypatch.delattr(AgentLoopBase, "ct_merge_context_msg")
    code, report = run_json(capsys)
    assert code == 1 and not report["ok"]
    text = messages(report)
    assert "AgentLoopBase.ct_merge_context_msg" in text and "missing" in text
    loop = next(ep for ep in report["extension_points"] if ep["key"].endswith("agent_loop_config_path"))
    assert loop["status"] == "drift" and not loop["verl_ok"]
    assert "mrgrpo upstream: " in report["_stderr"] and "problem(s)" in report["_stderr"]


def test_drift_changed_dataset_signature(monkeypatch, capsys):
    from verl.utils.dataset import rl_dataset

    def changed_init(self, data_files, tokenizer, processor, config, max_samples=-1):  # order swapped
        raise AssertionError("never called")

    monkeypatch.setattr(rl_dataset.RLHFDataset, "__init__", changed_init)
    code, report = run_json(capsys)
    assert code == 1
    problem = next(p for p in report["problems"] if p["where"].endswith("RLHFDataset"))
    assert problem["side"] == "verl" and "expected leading parameters" in problem["message"]


def test_drift_missing_reward_loader(monkeypatch, capsys):
    import verl.trainer.ppo.reward as reward

    monkeypatch.delattr(reward, "get_custom_reward_fn")
    code, report = run_json(capsys)
    assert code == 1
    assert any(
        p["where"] == "verl.trainer.ppo.reward.get_custom_reward_fn" and p["missing"] for p in report["problems"]
    )


def test_drift_naive_manager_behaviour(monkeypatch, capsys):
    """If the naive manager stopped passing the agent loop's extra_fields on, the probe says so."""
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager

    original = NaiveRewardManager.run_single

    async def run_single(self, data):
        data.non_tensor_batch.pop("tool_extra_fields", None)
        return await original(self, data)

    monkeypatch.setattr(NaiveRewardManager, "run_single", run_single)
    code, report = run_json(capsys)
    assert code == 1
    assert "extra_fields no longer reach extra_info" in messages(report)


def test_version_mismatch(monkeypatch, capsys):
    real = upstream.delta.metadata.version
    monkeypatch.setattr(upstream.delta.metadata, "version", lambda name: "0.9.2" if name == "verl" else real(name))
    code, report = run_json(capsys)
    assert code == 1
    assert "installed 0.9.2 but mrgrpo pins 0.9.1" in messages(report)
    code, report = run_json(capsys, "--allow-version-mismatch")
    assert not any("0.9.2" in p["message"] for p in report["problems"])
    assert code == 0, messages(report)


def test_recipe_pointing_elsewhere_is_reported(capsys):
    """The recipe side: what the config names must load through verl's loader and be ours."""
    code, report = run_json(capsys, "--override", "reward.custom_reward_function.name=no_such_function")
    assert code == 1
    assert any(p["side"] == "recipe" and "no_such_function" in p["message"] for p in report["problems"])
    code, report = run_json(
        capsys,
        "--override",
        "data.custom_cls.path=pkg://verl.utils.dataset.rl_dataset",
        "--override",
        "data.custom_cls.name=RLHFDataset",
    )
    assert code == 1
    text = messages(report)
    assert "not an mrgrpo object" in text and "data.custom_cls.path" in text


def test_recipe_dir_without_recipe_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        upstream.main(["--recipe-dir", str(tmp_path)])
    assert e.value.code == 2
    assert "no mrgrpo_trainer.yaml" in capsys.readouterr().err


def test_no_recipe_found_skips_the_delta():
    """mrgrpo pip-installed without the checkout: the extension points are still checked, the delta is skipped."""
    report = upstream.build_report(upstream.Context(repo_root=None, recipe_dir=None))
    assert report["config_delta"]["status"] == "skipped"
    assert "recipe config not found" in report["config_delta"]["reason"]
    assert not [p for p in report["problems"] if p["side"] in ("verl", "recipe")], messages(report)


# ---- the signature checker itself ------------------------------------------------------------------------------


def test_signature_checker():
    async def fine(self, messages, tools=None, images=None):
        pass

    def not_async(self, messages, tools=None):
        pass

    def swallowed(self, messages, **kwargs):
        pass

    sig = Sig(positional=("messages", "tools"), coroutine=True)
    assert signature_problems(fine, sig) == []
    assert any("async" in m for m in signature_problems(not_async, sig))
    assert any("leading parameters" in m for m in signature_problems(swallowed, sig))
    kw = Sig(positional=("request_id",), keywords=("prompt_ids",))
    assert signature_problems(lambda request_id, *, prompt_ids: None, kw) == []
    # a keyword only reachable through **kwargs does not count: a rename upstream would be swallowed silently
    assert signature_problems(lambda request_id, **kwargs: None, kw)
    defaults = Sig(positional=("a", "b"), defaults=(("b", None),))
    assert signature_problems(lambda a, b=1: None, defaults)
    assert inspect.iscoroutinefunction(fine)
