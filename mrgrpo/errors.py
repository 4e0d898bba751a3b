"""Errors shared by the library and the commands: raised where a mistake is found, turned into an exit status by the
command that called (`mrgrpo.cli` conventions). No imports, so any module may raise them."""

from __future__ import annotations


class UsageError(Exception):
    """A mistake in the command line or its surroundings, found before any work: exit 2, one line."""


__all__ = ["UsageError"]
