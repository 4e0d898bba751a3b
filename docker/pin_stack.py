"""Build helper for docker/Dockerfile (standard library only; also used by tests/docker/test_docker_on_cpu.py).

    python3 docker/pin_stack.py check --expect-extra pyproject.toml:gpu --constraints /tmp/stack.txt --pin verl=0.9.1
        Fail (exit 1) unless each package the ``gpu`` extra pins (``--expect-extra``; or ``--expect NAME=VERSION``)
        is installed at that version (a local label such as +cu130 is ignored); then write a pip constraints file
        that freezes the base image's compiled stack (torch, vllm, flash-attn, ... whichever are installed, at
        their exact installed versions) plus the --pin lines, so installing mrgrpo and verl on top can never
        replace the image's torch or vLLM.

    python3 docker/pin_stack.py deps pyproject.toml --extra gpu
        Print [project].dependencies (and the extra's) one per line, for a cached dependency layer before the
        source is copied: the image installs through the same ``gpu`` extra a user's ``pip install '.[gpu]'`` does.
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import re
import sys
from pathlib import Path

# Packages built against the image's CUDA / torch ABI. Whichever of them are installed get frozen.
FROZEN = (
    "torch",
    "torchvision",
    "torchaudio",
    "vllm",
    "flash-attn",
    "flash_attn",
    "flashinfer-python",
    "flashinfer-cubin",
    "triton",
    "xformers",
    "transformer-engine",
    "transformer_engine",
    "apex",
    "deep-ep",
    "deep_ep",
    "megatron-core",
    "nvidia-cudnn-cu12",
    "nvidia-cudnn-cu13",
    "nvidia-nccl-cu12",
    "nvidia-nccl-cu13",
)


def public_version(version: str) -> str:
    """'2.11.0+cu130' -> '2.11.0'."""
    return version.split("+", 1)[0]


def installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def parse_pairs(pairs: list[str], flag: str) -> list[tuple[str, str]]:
    out = []
    for pair in pairs:
        name, sep, version = pair.partition("=")
        if not sep or not name or not version:
            raise SystemExit(f"pin_stack.py: {flag} wants NAME=VERSION, got {pair!r}")
        out.append((name.strip(), version.strip()))
    return out


def check(expect: list[tuple[str, str]]) -> list[str]:
    problems = []
    for name, want in expect:
        got = installed(name)
        if got is None:
            problems.append(f"{name} is not installed in the base image (expected {want})")
        elif public_version(got) != want:
            problems.append(f"{name} is {got} in the base image, expected {want}")
    return problems


def constraints(pins: list[tuple[str, str]]) -> list[str]:
    lines, seen = [], set()
    for name in FROZEN:
        version = installed(name)
        key = re.sub(r"[-_.]+", "-", name).lower()
        if version is not None and key not in seen:
            seen.add(key)
            lines.append(f"{name}=={version}")
    lines += [f"{name}=={version}" for name, version in pins]
    return lines


def project_dependencies(pyproject: Path, extras: tuple[str, ...] = ()) -> list[str]:
    import tomllib  # Python 3.11+: the image has 3.12

    with pyproject.open("rb") as f:
        project = tomllib.load(f)["project"]
    optional = project.get("optional-dependencies", {})
    missing = [e for e in extras if e not in optional]
    if missing:
        raise SystemExit(f"pin_stack.py: {pyproject} has no extra {missing[0]!r}")
    return list(project["dependencies"]) + [r for e in extras for r in optional[e]]


def extra_pins(spec: str) -> list[tuple[str, str]]:
    """``PYPROJECT:EXTRA`` -> the ``NAME==VERSION`` pins of that extra, as (name, version)."""
    path, sep, extra = spec.rpartition(":")
    if not sep:
        raise SystemExit(f"pin_stack.py: --expect-extra wants PYPROJECT:EXTRA, got {spec!r}")
    pins = []
    for req in project_dependencies(Path(path), (extra,))[len(project_dependencies(Path(path))):]:
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*==\s*([\w.+-]+)", req.split(";")[0].strip())
        if m:
            pins.append((m.group(1), m.group(2)))
    return pins


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pin_stack.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="verify the base image's stack and write pip constraints that keep it")
    c.add_argument("--expect", action="append", default=[], metavar="NAME=VERSION")
    c.add_argument("--expect-extra", action="append", default=[], metavar="PYPROJECT:EXTRA",
                   help="expect every NAME==VERSION pin of that extra of a pyproject.toml")
    c.add_argument("--pin", action="append", default=[], metavar="NAME=VERSION", help="extra constraint lines")
    c.add_argument("--constraints", type=Path, required=True, help="pip constraints file to write")
    d = sub.add_parser("deps", help="print [project].dependencies of a pyproject.toml")
    d.add_argument("pyproject", type=Path)
    d.add_argument("--extra", action="append", default=[], help="also that extra's requirements (repeatable)")
    args = parser.parse_args(argv)

    if args.command == "deps":
        print("\n".join(project_dependencies(args.pyproject, tuple(args.extra))))
        return 0
    expect = parse_pairs(args.expect, "--expect") + [p for spec in args.expect_extra for p in extra_pins(spec)]
    problems = check(expect)
    if problems:
        for p in problems:
            print(f"pin_stack.py: {p}", file=sys.stderr)
        print("pin_stack.py: the base image does not carry the stack mrgrpo pins; see docs/docker.md", file=sys.stderr)
        return 1
    lines = constraints(parse_pairs(args.pin, "--pin"))
    args.constraints.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"pin_stack.py: wrote {len(lines)} constraints to {args.constraints}:", *lines, sep="\n  ")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
