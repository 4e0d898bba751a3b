"""``python -m learnability synth``: seeded synthetic APPS+ records into a jsonl (the input of `mrgrpo data prepare`).

Exit 0 written; 1 the generator failed (ValueError); 2 a bad command line or an unwritable ``--out``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from mrgrpo.cli import check_writable_dir, number
from mrgrpo.errors import UsageError

EXAMPLE = ("example:\n  python -m learnability synth --n 2000 --seed 0 --out synth.jsonl && "
           "mrgrpo data prepare --input synth.jsonl --out data/synth")


def add_parser(sub) -> None:
    import argparse

    p = sub.add_parser("synth", help="write seeded synthetic APPS+ records (the learnability study's problems)",
                       description="Write seeded synthetic APPS+ records (the learnability study's problems).",
                       epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=number(int, 1), default=1000, help="number of records (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="random seed; the same seed gives the same bytes (default 0)")
    p.add_argument("--out", required=True, type=Path, metavar="FILE",
                   help="output .jsonl file (input of `mrgrpo data prepare`)")
    p.add_argument("--templates", choices=["train", "heldout", "all"], default="train",
                   help="statement templates: the training ones (default), only the held-out ones (an evaluation "
                   "file), or all")
    p.set_defaults(func=cmd_synth)


def cmd_synth(a) -> int:
    from learnability import synth

    t0 = time.perf_counter()
    try:
        check_writable_dir(a.out.parent if str(a.out.parent) else Path("."), "directory of --out")
        if a.out.is_dir():
            raise UsageError(f"--out {a.out} is a directory: pass a .jsonl file name")
        records = synth.generate(a.n, seed=a.seed, templates=a.templates)
    except UsageError as e:
        print(f"python -m learnability synth: error: {e}", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"python -m learnability synth: error: {e}", file=sys.stderr)
        return 1
    synth.write_jsonl(records, a.out)
    print(json.dumps(synth.summarize(records)))
    print(f"wrote {len(records)} synthetic records (seed {a.seed}, templates {a.templates}) to {a.out} "
          f"in {time.perf_counter() - t0:.1f}s")
    return 0
