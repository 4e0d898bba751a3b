"""`mrgrpo data`: the APPS+/APPS data pipeline (validate -> plans -> build parquet -> report).

Stages live in their own modules (``validate``, ``plans``, ``build``, ``pipeline``); the command line is
``mrgrpo.data.cli``. Documentation: docs/data.md.
"""

from mrgrpo.data.store import DataError

__all__ = ["DataError"]
