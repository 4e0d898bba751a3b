"""A non-editable install (the wheel) carries everything the product needs: run from another directory, with no
checkout on sys.path, it composes the recipe config (hydra, pkg://), resolves the agent-loop yaml and passes
`mrgrpo upstream`'s checks."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile

import pytest

pytest.importorskip("setuptools")


@pytest.fixture(scope="module")
def installed(tmp_path_factory, repo_root):
    """mrgrpo's wheel built from this checkout's sources (a clean copy: a build/ directory left by an earlier build
    would add its stale files to the wheel) and unpacked into a site directory of its own."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(repo_root / "mrgrpo", src / "mrgrpo", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(repo_root / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp),
                    str(src)], check=True, timeout=600, capture_output=True)
    (wheel,) = tmp.glob("mrgrpo-*.whl")
    site = tmp / "site"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    return wheel, site


def run_installed(site, tmp_path, code: str) -> subprocess.CompletedProcess:
    # -I-like isolation from the checkout: cwd elsewhere, the unpacked wheel first on the path
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=900)


def test_the_wheel_ships_the_config(installed):
    wheel, _ = installed
    names = zipfile.ZipFile(wheel).namelist()
    for name in ("mrgrpo/config/mrgrpo_trainer.yaml", "mrgrpo/config/agent_loop.yaml", "mrgrpo/config/__init__.py",
                 "mrgrpo/assets/apps_plus_sample.jsonl", "mrgrpo/tiny_model.py"):  # PROFILE=tiny's model builder
        assert name in names, name
    assert not any(n.startswith(("recipe/", "tests/")) for n in names)


def test_the_wheel_holds_the_product_only(installed):
    """The learnability study (experiments/learnability), the tests' fakes and anything that moved out of the
    package stay out of the wheel."""
    wheel, _ = installed
    names = zipfile.ZipFile(wheel).namelist()
    for gone in ("mrgrpo/learn/", "mrgrpo/testing/", "mrgrpo/data/synth/", "experiments/", "learnability/"):
        assert not [n for n in names if n.startswith(gone)], gone
    assert not [n for n in names if n.startswith("mrgrpo/") and "loop_fakes" in n]


def test_an_installed_mrgrpo_composes_the_recipe_from_another_directory(installed, tmp_path):
    _, site = installed
    code = f"SITE = {str(site)!r}\n" + """
import mrgrpo, mrgrpo.config as c
from hydra import compose, initialize_config_module
assert str(c.CONFIG_DIR).startswith(SITE), c.CONFIG_DIR
with initialize_config_module("mrgrpo.config", version_base=None):
    cfg = compose("mrgrpo_trainer", overrides=["actor_rollout_ref.rollout.name=vllm"])
path = cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path
assert path == str(c.AGENT_LOOP_YAML), path
assert cfg.trainer.save_freq > 0 and cfg.trainer.test_freq > 0
assert cfg.reward.custom_reward_function.path == "pkg://mrgrpo.reward"
print("ok", path)
"""
    proc = run_installed(site, tmp_path, code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("ok ")


def test_mrgrpo_upstream_passes_from_an_installed_package(installed, tmp_path):
    _, site = installed
    proc = run_installed(site, tmp_path, "import sys; from mrgrpo.cli import main; sys.exit(main(['upstream']))")
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-2000:])
