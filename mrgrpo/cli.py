"""The `mrgrpo` command. Each subcommand lives in its own module with a `main(argv) -> int`.

Conventions shared by every command (docs: README "Commands"):

  exit 0    done
  exit 1    the work failed (an unreadable input file, every record bad, an API step that kept failing, a sandbox
            failure); the message names what and where
  exit 2    the command line or its surroundings are wrong, found before any work: a bad option value, a missing
            input, an output directory that cannot be written or is in use by another run, a missing API key
  exit 3    `mrgrpo data`: a batch is still running after --max-wait (its id is saved: run the command again)
  exit 130  interrupted (Ctrl-C): finished work is saved, "interrupted: N saved, re-run to resume"

Errors are one line on stderr (`mrgrpo COMMAND: error: ...`), never a traceback for a user mistake; logs and
progress go to stderr, the command's output (tables, summaries, JSON) to stdout.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mrgrpo.errors import UsageError  # raised by the commands and the library alike; here for the commands

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_PENDING, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

# name -> (module with `main(argv: list[str]) -> int`, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "score": ("mrgrpo.score_cli", "run programs against APPS/APPS+ tests in the sandbox and print verdicts"),
    "data": ("mrgrpo.data.cli", "APPS+ pipeline: validate, plan, build verl parquet"),
    "upstream": ("mrgrpo.upstream", "how mrgrpo plugs into the installed verl, and how the recipe differs"),
    "eval": ("mrgrpo.eval.cli", "pass@k of a checkpoint with the training agent loop and reward (vLLM)"),
}


# ---------------------------------------------------------------- conventions shared by the commands


class Interrupted(Exception):
    """Ctrl-C after finished work was saved: exit 130 with ``interrupted: N saved, re-run to resume``."""

    def __init__(self, saved: int, note: str = ""):
        super().__init__(f"interrupted: {saved} saved, re-run to resume{note}")
        self.saved = saved


class OneLineParser(argparse.ArgumentParser):
    """argparse with a one-line error (no usage block): ``PROG: error: MESSAGE (see PROG --help)``, exit 2."""

    def error(self, message: str):  # noqa: D401 - argparse's signature
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Keeps the description's layout (examples) and shows every default: ``(default: X)`` is appended unless the
    help text already names its default or there is none to show (None, a flag's False)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        hidden = action.default is None or action.default is False or action.default == argparse.SUPPRESS
        if "default" in text or hidden or not action.option_strings:  # `is`: a default of 0 is still shown
            return text
        return super()._get_help_string(action)


def number(kind: Callable[[str], Any], low: float | None = None, high: float | None = None,
           low_open: bool = False, high_open: bool = False) -> Callable[[str], Any]:
    """An argparse ``type`` that parses ``kind`` and checks a range: ``number(float, 0, 1, high_open=True)``."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            expected = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if value != value:  # NaN
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}")
        bad_low = low is not None and (value <= low if low_open else value < low)
        bad_high = high is not None and (value >= high if high_open else value > high)
        if bad_low or bad_high:
            lo = "" if low is None else f"{'>' if low_open else '>='} {low:g}"
            hi = "" if high is None else f"{'<' if high_open else '<='} {high:g}"
            raise argparse.ArgumentTypeError(f"must be {' and '.join(x for x in (lo, hi) if x)}, got {text}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in "invalid <type> value" messages
    return parse


def check_input_file(path: Path, what: str = "input") -> Path:
    """A readable regular file, else UsageError naming it."""
    if path.is_dir():
        raise UsageError(f"{what} {path} is a directory: pass one file")
    if not path.exists():
        raise UsageError(f"{what} file not found: {path}")
    if not os.access(path, os.R_OK):
        raise UsageError(f"{what} file {path} is not readable (permissions)")
    return path


def check_writable_dir(path: Path, what: str = "--out") -> Path:
    """Create ``path`` (and parents) and make sure a file can be created in it; else UsageError naming it."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"{what} {path} exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"{what} {path}: cannot create the directory ({e.strerror or e})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"{what} {path} is not writable (permissions): choose another directory")
    return path


class OutLock:
    """An exclusive ``fcntl.flock`` on ``DIR/.lock`` for the life of a command: a second run on the same directory
    is refused at once (UsageError) instead of interleaving writes. The lock file is created once and never
    written (its mtime stays, so a no-op re-run changes no file)."""

    NAME = ".lock"

    def __init__(self, directory: Path, command: str, name: str = NAME):
        self.path = Path(directory) / name
        self.command = command
        self.fd: int | None = None

    def __enter__(self) -> OutLock:
        import fcntl

        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise UsageError(
                f"{self.path.parent if self.path.name == self.NAME else self.path.with_suffix('')} is in use by "
                f"another {self.command} run (lock {self.path} held): wait for it to finish, or use another --out"
            ) from None
        self.fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing releases the flock
            self.fd = None


def report_interrupt(message: str) -> int:
    """Print the interrupt line (stderr) and return the exit status 130."""
    print(message, file=sys.stderr, flush=True)
    sys.stdout.flush()
    return EXIT_INTERRUPTED


# ---------------------------------------------------------------- the `mrgrpo` command


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mrgrpo",
        description="mrGRPO tools. Run `mrgrpo COMMAND --help` for the options of each command.",
        epilog="exit status: 0 done, 1 the work failed, 2 bad command line or output directory (found before any "
        "work), 3 a plan batch is still running (re-run to resume), 130 interrupted (finished work saved)",
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
    try:
        module = importlib.import_module(module_name)
        return int(module.main(argv[1:]) or 0)
    except KeyboardInterrupt:  # a command without its own handling: nothing it did is half-written
        return report_interrupt(f"mrgrpo {argv[0]}: interrupted")


if __name__ == "__main__":
    raise SystemExit(main())
