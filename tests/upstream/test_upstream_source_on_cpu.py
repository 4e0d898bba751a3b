"""`mrgrpo upstream --verl-source PATH`: a verl source tree read statically (ast + regexes), never imported.

A synthetic tree is the installed verl 0.9.1 package copied to tmp (only .py and config .yaml files); the drift
cases edit one file of it. The real snapshots (verl's main / neo) are checked by hand: docs/upgrading.md.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from mrgrpo import upstream
from mrgrpo.upstream import source

V1 = ("--override", "trainer.use_v1=true")  # TrainerV1, which the recipe does not ship (neo refuses it)


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("verl_tree")
    pkg = upstream.installed_root() / "verl"
    shutil.copytree(pkg, root / "verl", ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so"))
    return root


@pytest.fixture
def broken(tree, tmp_path) -> Path:
    """A private copy of the tree, to edit."""
    shutil.copytree(tree, tmp_path / "t")
    return tmp_path / "t"


def run(capsys, root: Path, *args: str) -> tuple[int, dict, str]:
    capsys.readouterr()
    code = upstream.main(["--json", "--verl-source", str(root), *args])
    out = capsys.readouterr()
    return code, json.loads(out.out), out.err


def edit(root: Path, rel: str, old: str, new: str) -> None:
    f = root / rel
    text = f.read_text(encoding="utf-8")
    assert old in text, (rel, old)
    f.write_text(text.replace(old, new), encoding="utf-8")


def test_the_installed_release_as_a_tree_passes(tree, capsys):
    code, report, _ = run(capsys, tree)
    assert code == 0, report["problems"]
    v = report["verl"]
    assert v["source"] == str(tree) and v["source_version"] == "0.9.1" and v["installed"] is None
    rows = {r["symbol"]: r for p in report["points"] for r in p["verl"]}
    assert rows["verl.experimental.agent_loop.agent_loop.AgentLoopBase.run"]["location"].startswith(
        "verl/experimental/agent_loop/agent_loop.py:")
    facts = [f for p in report["points"] for f in p["facts"]]
    assert facts and all(f["location"] for f in facts)
    assert report["config_delta"]["status"] == "ok"


def test_the_other_trainer_passes_too(tree, capsys):
    code, report, _ = run(capsys, tree, *V1)
    assert code == 0, report["problems"]
    assert report["config_delta"]["added"][upstream.MANAGER_KEY] == upstream.MANAGER


def test_package_dir_is_accepted(tree):
    assert source.verl_root(tree / "verl") == tree and source.verl_root(tree) == tree


def test_not_a_tree_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        upstream.main(["--verl-source", str(tmp_path)])
    assert e.value.code == 2 and "no verl package there" in capsys.readouterr().err


def test_missing_symbol_exits_1_naming_it_and_its_file(broken, capsys):
    edit(broken, "verl/experimental/agent_loop/agent_loop.py", "async def ct_merge_assistant_token(",
         "async def ct_merge_assistant_token_renamed(")
    code, report, err = run(capsys, broken)
    assert code == 1
    assert any("AgentLoopBase.ct_merge_assistant_token missing (not in verl/experimental/agent_loop/agent_loop.py)"
               in p for p in report["problems"]), report["problems"]
    assert "problem(s)" in err


def test_the_later_name_of_a_renamed_helper_is_accepted(broken, capsys):
    edit(broken, "verl/experimental/agent_loop/agent_loop.py", "async def ct_merge_context_msg(",
         "async def ct_merge_non_assistant_msg(")
    code, report, _ = run(capsys, broken)
    assert code == 0, report["problems"]
    rows = [r for p in report["points"] for r in p["verl"]]
    assert any(r["symbol"].endswith("ct_merge_non_assistant_msg") and r["location"] for r in rows)


def test_changed_signature_is_drift(broken, capsys):
    edit(broken, "verl/utils/dataset/rl_dataset.py", "max_samples: int = -1", "limit: int = -1")
    code, report, _ = run(capsys, broken)
    assert code == 1 and any(p.startswith("data.custom_cls: ") and "max_samples" in p for p in report["problems"])


def test_lost_async_is_drift(broken, capsys):
    edit(broken, "verl/experimental/agent_loop/agent_loop.py", "    async def run(self, sampling_params",
         "    def run(self, sampling_params")
    code, report, _ = run(capsys, broken)
    assert code == 1 and any("AgentLoopBase.run is not `async def`" in p for p in report["problems"])


def test_lost_code_fact_names_its_file(broken, capsys):
    edit(broken, "verl/workers/utils/padding.py", 'data["loss_mask"] = data["response_mask"]',
         'data["loss_mask"] = data["attention_mask"]')
    code, report, _ = run(capsys, broken)
    assert code == 1
    assert any(p.startswith(f"{upstream.MANAGER_KEY}: verl/workers/utils/padding.py: no longer has loss_mask")
               for p in report["problems"]), report["problems"]


def test_trainer_v1_refused_is_named_with_its_line(broken, capsys):
    edit(broken, "verl/trainer/main_ppo.py", "def run_ppo(config, task_runner_class) -> None:",
         "def run_ppo(config, task_runner_class) -> None:\n    raise RuntimeError('TrainerV1 is disabled because x')")
    code, report, _ = run(capsys, broken, *V1)
    assert code == 1
    problem = next(p for p in report["problems"] if p.startswith("trainer.use_v1: "))
    assert "verl/trainer/main_ppo.py:" in problem and upstream.MANAGER in problem
    code, report, _ = run(capsys, broken)
    assert code == 0, report["problems"]


def test_use_v1_false_without_the_manager_is_drift(tree, capsys):
    code, report, _ = run(capsys, tree, "--override", "trainer.use_v1=false", "--override", f"~{upstream.MANAGER_KEY}")
    assert code == 1 and any("no INFRA exclusion" in p and upstream.MANAGER_KEY in p for p in report["problems"])


def test_config_key_gone_from_the_trees_yaml(broken, capsys):
    edit(broken, "verl/trainer/config/ppo_trainer.yaml", "  use_v1:", "  use_v1_gone:")
    code, report, _ = run(capsys, broken)
    assert code == 1 and any("trainer.use_v1" in p for p in report["problems"]), report["problems"]


def test_nothing_of_the_tree_is_imported(broken, capsys):
    (broken / "verl" / "__init__.py").write_text("raise SystemExit('imported!')\n# verl.plugins\n", encoding="utf-8")
    code, report, _ = run(capsys, broken)
    assert code == 0, report["problems"]
    files = [str(getattr(m, "__file__", None) or "") for n, m in list(sys.modules.items()) if n.startswith("verl")]
    assert files and not any(f.startswith(str(broken)) for f in files)
