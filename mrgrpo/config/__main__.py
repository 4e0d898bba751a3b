"""``python -m mrgrpo.config``: print the directory of the shipped config (for verl's ``--config-path``)."""

from mrgrpo.config import CONFIG_DIR

print(CONFIG_DIR)
