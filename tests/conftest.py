"""Shared fixtures. `tests/` is deliberately not a package (verl's wheel installs a top-level `tests`)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

# The Ctrl-C tests send SIGINT to CLI subprocesses. A shell starts background jobs with SIGINT ignored, and an ignored
# signal stays ignored across exec (Python then installs no KeyboardInterrupt handler): restore it for the children.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

REPO_ROOT = Path(__file__).resolve().parents[1]

# Test helpers that are not tests (tests/fakes/, e.g. `loop_fakes`: the agent loop's fakes of the rollout server and
# the sandbox) are imported by their own module names; their asserts show the values when they fail.
sys.path.insert(0, str(REPO_ROOT / "tests" / "fakes"))
pytest.register_assert_rewrite("loop_fakes")


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def sample_path() -> Path:
    """The bundled APPS+ sample (a copy of ../shared/data/apps_plus_sample.jsonl)."""
    from mrgrpo.apps import bundled_sample_path

    return bundled_sample_path()


@pytest.fixture(scope="session")
def tiny_tokenizer_dir(tmp_path_factory) -> Path:
    """An offline byte-level BPE tokenizer with Qwen special tokens and a ChatML template."""
    from mrgrpo.tiny_model import build_tokenizer

    out = tmp_path_factory.mktemp("tiny_tokenizer")
    build_tokenizer(out)
    return out


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_tokenizer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir))


@pytest.fixture(scope="session")
def qwen3_tokenizer_dir(tmp_path_factory) -> Path:
    """The real Qwen3 tokenizer (its BPE ranks, added tokens and chat template), built offline once per session by
    tests/qwen3_tokenizer/build.py."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("qwen3_tokenizer_build", REPO_ROOT / "tests/qwen3_tokenizer/build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    out = tmp_path_factory.mktemp("qwen3_tokenizer")
    build.build(out)
    return out


@pytest.fixture(scope="session")
def qwen3_tokenizer(qwen3_tokenizer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(qwen3_tokenizer_dir))
