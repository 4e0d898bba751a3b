"""The ``verl.plugins`` entry point of mrgrpo (``pyproject.toml``: ``mrgrpo = "mrgrpo.plugin"``).

verl 0.9.1 imports every entry point of the ``verl.plugins`` group at the end of ``import verl``
(``verl/__init__.py``, policy ``VERL_USE_EXTERNAL_PLUGINS``, default ``auto``), in every process that imports
verl, and only logs a failure at DEBUG level. It expects nothing from the module: importing it is the whole
contract, so a plugin registers through import-time side effects.

mrgrpo needs no registry entry: each of its pieces is named in the config, which verl resolves in the
process that uses it:

- dataset: ``data.custom_cls`` -> ``pkg://mrgrpo.dataset`` ``MrGRPODataset``;
- agent loop: ``actor_rollout_ref.rollout.agent.agent_loop_config_path`` -> ``recipe/mrgrpo/config/agent_loop.yaml``
  (``_target_: mrgrpo.agent_loop.PlanCodeAgentLoop``, imported by hydra in each AgentLoopWorker);
- reward: ``reward.custom_reward_function.path`` -> ``pkg://mrgrpo.reward`` ``compute_score``.

So this module stays cheap and silent: it is imported while ``verl/__init__`` is still running (importing
verl submodules from here would be circular and would slow down every ``import verl``). It records that it
ran and warns (logging, not print) when the installed verl is not the pinned one. ``EXTENSION_POINTS``
lists the wiring above for ``mrgrpo upstream`` and the tests. When mrgrpo runs from a checkout on
``PYTHONPATH`` without being pip-installed (the GPU kit), the entry point does not exist and nothing breaks:
nothing here is required for a run.
"""

from __future__ import annotations

import logging
import os
import sys

logger = logging.getLogger(__name__)

PINNED_VERL = "0.9.1"

EXTENSION_POINTS: dict[str, tuple[str, str]] = {
    "dataset": ("data.custom_cls", "pkg://mrgrpo.dataset:MrGRPODataset"),
    "agent_loop": ("actor_rollout_ref.rollout.agent.agent_loop_config_path", "mrgrpo.agent_loop.PlanCodeAgentLoop"),
    "reward": ("reward.custom_reward_function", "pkg://mrgrpo.reward:compute_score"),
}

LOADED_IN_PIDS: set[int] = set()


def _check_verl_version() -> None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("verl")
    except PackageNotFoundError:
        return
    if installed != PINNED_VERL:
        logger.warning("mrgrpo is pinned to verl==%s but verl==%s is installed", PINNED_VERL, installed)


LOADED_IN_PIDS.add(os.getpid())
_check_verl_version()


def _register_estimator() -> None:
    """Register mrgrpo's ``mrgrpo_grpo`` advantage estimator (``mrgrpo.advantage``) when verl loads this plugin.

    Only when verl is importing us (``verl`` already in ``sys.modules``): importing ``mrgrpo.plugin`` on its own
    stays verl-free. Importing ``verl.trainer.ppo.core_algos`` while ``verl/__init__`` runs works in 0.9.1
    (tests/test_advantage_on_cpu.py checks it in a fresh process) and costs ~0.7 s per process. A failure is
    logged as a warning (verl would log it at DEBUG only); ``mrgrpo.sampler`` registers it again in the
    TaskRunner, where the estimator runs.
    """
    if "verl" not in sys.modules:
        return
    try:
        import mrgrpo.advantage  # noqa: F401
    except Exception:  # a plugin must not break `import verl`
        logger.warning("mrgrpo.plugin: could not register the mrgrpo_grpo advantage estimator", exc_info=True)


_register_estimator()
