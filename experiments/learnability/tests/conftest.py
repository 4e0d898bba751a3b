"""Fixtures of the learnability study's tests. The study is imported as `learnability` (``experiments/`` on
sys.path), never installed; these tests run with the product's (``python -m pytest`` runs both folders)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

EXPERIMENTS_DIR = Path(__file__).resolve().parents[2]
REPO_ROOT = EXPERIMENTS_DIR.parent
sys.path.insert(0, str(EXPERIMENTS_DIR))


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def sample_path() -> Path:
    """The bundled APPS+ sample."""
    from mrgrpo.apps import bundled_sample_path

    return bundled_sample_path()
