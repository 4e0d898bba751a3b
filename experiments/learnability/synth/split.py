"""The id of a synthetic record and everything a split needs from it.

``synth-<families>-t<template>-d<depth>-<index>``, e.g. ``synth-parity.sum-t2-d2-000017``: the families
applied in order (joined by "."), the statement template, the composition depth and the record's index
in its file. `synth_split` reads these back; the two split rules are pure functions of them:

- held-out templates: template 4 (`HELDOUT_TEMPLATES`) never appears in a ``--templates train`` file;
  ``--templates heldout`` writes only it (evaluation of unseen phrasings);
- no-demonstration ("nodemo") compositions: a chain that applies one of `NODEMO_PAIRS` back to back
  (at any depth) is ``nodemo``. A learnability run gives supervised demonstrations only for items that
  are not nodemo, and lets RL learn the nodemo compositions from their tests alone; every family of a
  nodemo pair also occurs, demonstrated, in other chains.
"""

from __future__ import annotations

import re

from learnability.synth.families import FAMILY, N_TEMPLATES

HELDOUT_TEMPLATES = frozenset({4})
TRAIN_TEMPLATES = tuple(t for t in range(N_TEMPLATES) if t not in HELDOUT_TEMPLATES)
TEMPLATE_SETS = {
    "train": TRAIN_TEMPLATES,
    "heldout": tuple(sorted(HELDOUT_TEMPLATES)),
    "all": tuple(range(N_TEMPLATES)),
}
NODEMO_PAIRS = frozenset({
    ("parity", "sum"),  # list -> list -> int: filter, then aggregate
    ("sort", "lists"),  # list -> list -> list: reorder, then restructure
    ("strmap", "strcount"),  # str -> str -> int
    ("digits", "cond"),  # int -> int -> answer word
    ("words", "minmax"),  # str -> list -> int
})
_ID_RE = re.compile(r"^synth-([a-z]+(?:\.[a-z]+)*)-t(\d+)-d(\d+)-(\d+)$")


def make_id(chain: tuple[str, ...], template: int, index: int) -> str:
    return f"synth-{'.'.join(chain)}-t{template}-d{len(chain)}-{index:06d}"


def is_nodemo(chain: tuple[str, ...]) -> bool:
    return any(pair in NODEMO_PAIRS for pair in zip(chain, chain[1:], strict=False))


def synth_split(source_id: str) -> dict:
    """What a split needs to know about a synthetic record, from its id alone.

    Returns ``{"family", "families", "template", "depth", "index", "heldout_template", "nodemo"}``:
    ``family`` is the chain as written in the id ("parity.sum"), ``families`` the tuple of its families.
    Raises ValueError for an id that is not a synthetic one.
    """
    m = _ID_RE.match(source_id)
    if m is None:
        raise ValueError(f"not a synthetic record id: {source_id!r}")
    chain = tuple(m.group(1).split("."))
    template, depth = int(m.group(2)), int(m.group(3))
    unknown = [f for f in chain if f not in FAMILY]
    if unknown or depth != len(chain) or not 0 <= template < N_TEMPLATES:
        raise ValueError(f"inconsistent synthetic record id: {source_id!r}")
    return {
        "family": m.group(1),
        "families": chain,
        "template": template,
        "depth": depth,
        "index": int(m.group(4)),
        "heldout_template": template in HELDOUT_TEMPLATES,
        "nodemo": is_nodemo(chain),
    }
