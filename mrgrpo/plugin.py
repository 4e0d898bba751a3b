"""The ``verl.plugins`` entry point of mrgrpo (``pyproject.toml``: ``mrgrpo = "mrgrpo.plugin"``).

verl 0.9.1 imports every entry point of the ``verl.plugins`` group at the end of ``import verl``
(``verl/__init__.py``, policy ``VERL_USE_EXTERNAL_PLUGINS``, default ``auto``), in every process that imports
verl, and only logs a failure at DEBUG level. It expects nothing from the module: importing it is the whole
contract, so a plugin acts through import-time side effects. This one does two things:

1. It warns (logging, not print) when the installed verl is not the one mrgrpo's package metadata pins
   (`mrgrpo.upstream.pinned_verl`; ``REQUIRED_VERL.txt`` holds the same pin, `mrgrpo upstream` checks both).
2. It is the home of mrgrpo's entries in verl's own registries, because it is the one mrgrpo module that runs
   in every verl process. Today there is one: the ``mrgrpo_grpo`` advantage estimator, defined and registered on
   import in `mrgrpo.advantage`, imported by `_register` (`mrgrpo.exclusion`, behind both trainer hooks, imports it
   again in the TaskRunner,
   where the estimator runs). A new registry entry goes the same way: a module that registers on import, imported
   in `_register`.

Everything else mrgrpo plugs in is named in the config and resolved by verl in the process that uses it
(``data.custom_cls``, ``agent_loop_config_path``, ``reward.custom_reward_function``, the custom sampler; the
table with source locations is `mrgrpo.upstream.POINTS`), so it needs nothing here.

This module is imported while ``verl/__init__`` is still running: it stays cheap and silent, and touches verl
only in `_register` (and only when verl is the importer). When mrgrpo runs from a checkout on ``PYTHONPATH``
without being pip-installed (the GPU kit), the entry point does not exist and nothing breaks: nothing here is
required for a run (the sampler registers the estimator itself).
"""

from __future__ import annotations

import logging
import sys
from importlib import metadata

logger = logging.getLogger(__name__)


def _check_verl_version() -> None:
    from mrgrpo.upstream import pinned_verl  # the home of the pin (standard library only at module level)

    pinned = pinned_verl()
    try:
        installed = metadata.version("verl")
    except metadata.PackageNotFoundError:
        return
    if pinned and installed != pinned:
        logger.warning("mrgrpo is pinned to verl==%s but verl==%s is installed", pinned, installed)


def _register() -> None:
    """Add mrgrpo's entries to verl's registries (the module docstring, point 2).

    Only when verl is importing us (``verl`` already in ``sys.modules``): importing ``mrgrpo.plugin`` on its own
    stays verl-free. Importing ``verl.trainer.ppo.core_algos`` while ``verl/__init__`` runs works in 0.9.1
    (tests/test_advantage_on_cpu.py checks it in a fresh process) and costs ~0.7 s per process. A failure is
    logged as a warning (verl would log it at DEBUG only).
    """
    if "verl" not in sys.modules:
        return
    try:
        import mrgrpo.config  # noqa: F401  (registers the ${mrgrpo_config:...} resolver the trainer yaml uses)
    except Exception:  # a plugin must not break `import verl`
        logger.warning("mrgrpo.plugin: could not register the mrgrpo_config resolver", exc_info=True)
    try:
        import mrgrpo.advantage  # noqa: F401  (registers mrgrpo_grpo)
    except Exception:  # a plugin must not break `import verl`
        logger.warning("mrgrpo.plugin: could not register the mrgrpo_grpo advantage estimator", exc_info=True)


_check_verl_version()
_register()
