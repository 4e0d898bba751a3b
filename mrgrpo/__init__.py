"""mrGRPO: multi-round plan -> code -> feedback GRPO for code models, as a plugin for verl 0.9.1."""

__version__ = "0.1.0"
