"""The sandbox worker's process entry point. pool.py starts one per slot, with a scrubbed environment, as

    python -I -S -B -c pool._BOOT .../mrgrpo/sandbox/worker.py CONFIG_JSON

`_BOOT` loads this file by its path (from its cached bytecode, not compiled as a script) and calls `main`. Without
site-packages and outside the package, this file loads the sandbox's modules as a private package of their own,
`_mrgrpo_sandbox` (never mrgrpo/sandbox/__init__.py, which would import the parent's side: the pool, the runner),
and runs the launcher (launcher.py). Standard library only: an unprivileged judge may run a copy of this directory.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys

if __package__:  # imported as mrgrpo.sandbox.worker, in the parent (tests, fakes)
    from .launcher import main
else:  # the worker process: this file was loaded by path
    _PACKAGE = "_mrgrpo_sandbox"
    _spec = importlib.machinery.ModuleSpec(_PACKAGE, None, is_package=True)
    _spec.submodule_search_locations = [os.path.dirname(os.path.abspath(__file__))]
    sys.modules[_PACKAGE] = importlib.util.module_from_spec(_spec)
    main = importlib.import_module(f"{_PACKAGE}.launcher").main

if __name__ == "__main__":
    main()
