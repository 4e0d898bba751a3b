"""The `mrgrpo` command. Each subcommand lives in its own module with a `main(argv) -> int`."""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module with `main(argv: list[str]) -> int`, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "score": ("mrgrpo.score_cli", "run programs against APPS/APPS+ tests in the sandbox and print verdicts"),
    "data": ("mrgrpo.data.cli", "APPS+ pipeline: validate, plan, build verl parquet"),
    "upstream": ("mrgrpo.upstream", "how mrgrpo plugs into the installed verl, and how the recipe differs"),
    "eval": ("mrgrpo.eval.cli", "pass@k of a checkpoint with the training agent loop and reward (vLLM)"),
}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mrgrpo",
        description="mrGRPO tools. Run `mrgrpo COMMAND --help` for the options of each command.",
    )
    p.add_argument("--version", action="store_true", help="print the mrgrpo version and exit")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    if not argv or argv[0] not in SUBCOMMANDS:
        args = parser.parse_args(argv)
        if args.version:
            from mrgrpo import __version__

            print(__version__)
            return 0
        parser.print_help()
        return 0 if not argv else 2
    module_name, _ = SUBCOMMANDS[argv[0]]
    module = importlib.import_module(module_name)
    return int(module.main(argv[1:]) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
