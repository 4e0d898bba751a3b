"""The recipe's configuration, shipped inside the package so an installed mrgrpo composes it from anywhere.

``mrgrpo_trainer.yaml`` is a delta over verl's ``ppo_trainer`` (``hydra.searchpath: [pkg://verl.trainer.config]``);
``agent_loop.yaml`` names the agent loop class for verl's registry. Compose the trainer config with
``--config-path "$(python -m mrgrpo.config)"`` on verl's command line, or with hydra's
``initialize_config_module("mrgrpo.config")`` in Python. verl reads the agent-loop yaml by file path (it has no
``pkg://`` form there): the trainer yaml names it as ``${mrgrpo_config:agent_loop.yaml}``, an OmegaConf resolver
registered on import of this module (and so in every verl process, through ``mrgrpo.plugin``) that gives the
file's absolute path in the installed package. The run script passes ``AGENT_LOOP_YAML`` explicitly as well.
"""

from __future__ import annotations

from pathlib import Path

CONFIG_DIR = Path(__file__).resolve().parent
CONFIG_MODULE = __name__
TRAINER_NAME = "mrgrpo_trainer"
TRAINER_YAML = CONFIG_DIR / f"{TRAINER_NAME}.yaml"
AGENT_LOOP_YAML = CONFIG_DIR / "agent_loop.yaml"

RESOLVER = "mrgrpo_config"


def config_file(name: str) -> str:
    """The absolute path of a file shipped in this directory; a name that is not one raises, naming it.

    >>> config_file("agent_loop.yaml") == str(AGENT_LOOP_YAML)
    True
    """
    path = CONFIG_DIR / name
    if path.parent != CONFIG_DIR or not path.is_file():
        raise FileNotFoundError(f"${{{RESOLVER}:{name}}}: no file {name} in {CONFIG_DIR}")
    return str(path)


def recipe_settings() -> dict:
    """The ``mrgrpo.agent_loop`` section of ``TRAINER_YAML``: the one home of the loop's defaults (``rounds``,
    ``plan_source``, ...), read by the loop and by every CLI that states one of them (``mrgrpo eval``, the learn
    CLI), so none writes a default again. Light: no verl import."""
    from omegaconf import OmegaConf

    if not TRAINER_YAML.is_file():
        raise FileNotFoundError(f"{TRAINER_YAML} not found: the agent loop's settings live in its mrgrpo.agent_loop "
                                "section (run from a checkout of mrgrpo)")
    return dict(OmegaConf.to_container(OmegaConf.load(TRAINER_YAML).mrgrpo.agent_loop))


def _register_resolver() -> None:
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, config_file)


_register_resolver()

__all__ = ["AGENT_LOOP_YAML", "CONFIG_DIR", "CONFIG_MODULE", "RESOLVER", "TRAINER_NAME", "TRAINER_YAML", "config_file",
           "recipe_settings"]
