"""Check every node of a running Ray cluster before `ray job submit`: verl, mrgrpo and its plugin on each.

    python3 docker/check_nodes.py            # on the head node (or anywhere RAY_ADDRESS points at the cluster)
    python3 docker/check_nodes.py --json

For each alive node it runs one zero-resource task pinned to that node and reports: hostname, Python, verl
version, mrgrpo version, whether `import verl` loaded the mrgrpo.plugin entry point there, and whether the
agent loop yaml the recipe names exists at the same path (verl reads it on every node). Exit 1 if any node
lacks one of them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def driver_agent_loop_yaml() -> str:
    """The agent-loop yaml the run script passes to verl: the one shipped in the driver's installed mrgrpo."""
    try:
        from mrgrpo.config import AGENT_LOOP_YAML
    except ImportError:
        return str(Path(__file__).resolve().parents[1] / "mrgrpo" / "config" / "agent_loop.yaml")
    return str(AGENT_LOOP_YAML)


def node_facts(agent_loop_yaml: str) -> dict:
    """Runs on each node (also callable locally)."""
    import importlib.metadata as metadata
    import platform
    import socket

    facts: dict = {"host": socket.gethostname(), "python": platform.python_version()}
    for dist in ("verl", "mrgrpo"):
        try:
            facts[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            facts[dist] = None
    try:
        import verl  # noqa: F401  (loads the verl.plugins entry points)

        facts["plugin_loaded"] = "mrgrpo.plugin" in sys.modules
    except Exception as e:  # report, do not crash the probe
        facts["plugin_loaded"] = False
        facts["error"] = f"import verl: {type(e).__name__}: {e}"
    facts["agent_loop_yaml"] = os.path.isfile(agent_loop_yaml)
    return facts


def problems_of(facts: dict, pinned_verl: str | None) -> list[str]:
    out = []
    if facts.get("verl") is None:
        out.append("verl is not installed")
    elif pinned_verl and facts["verl"] != pinned_verl:
        out.append(f"verl {facts['verl']} != pinned {pinned_verl}")
    if facts.get("mrgrpo") is None:
        out.append("mrgrpo is not pip-installed (no verl.plugins entry point)")
    if not facts.get("plugin_loaded"):
        out.append("`import verl` did not load mrgrpo.plugin" + (f" ({facts['error']})" if "error" in facts else ""))
    if not facts.get("agent_loop_yaml"):
        out.append("the agent loop yaml is missing at the recipe's path")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="check_nodes.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", default=os.getenv("RAY_ADDRESS", "auto"), help="Ray address (default auto)")
    parser.add_argument(
        "--agent-loop-yaml",
        default=driver_agent_loop_yaml(),
        help="path every node must have (default: the driver's installed mrgrpo/config/agent_loop.yaml)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray.init(address=args.address, logging_level="ERROR", log_to_driver=False)
    try:
        probe = ray.remote(num_cpus=0)(node_facts)
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        refs = [
            probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(
                args.agent_loop_yaml
            )
            for n in nodes
        ]
        results = ray.get(refs, timeout=300)
    finally:
        ray.shutdown()

    pinned = node_facts(args.agent_loop_yaml).get("verl")  # the driver's verl is the reference
    rows = []
    for node, facts in zip(nodes, results, strict=True):
        gpus = int(node.get("Resources", {}).get("GPU", 0))
        problems = problems_of(facts, pinned)
        rows.append({"node": node.get("NodeManagerAddress"), "gpus": gpus, **facts, "problems": problems})
    bad = [r for r in rows if r["problems"]]
    if args.json:
        print(json.dumps({"ok": not bad, "nodes": rows}, indent=2))
    else:
        for r in rows:
            status = "ok " if not r["problems"] else "BAD"
            print(
                f"{status} {r['node']} ({r['host']}) gpus={r['gpus']} python={r['python']} verl={r['verl']} "
                f"mrgrpo={r['mrgrpo']} plugin={r['plugin_loaded']} agent_loop_yaml={r['agent_loop_yaml']}"
            )
            for p in r["problems"]:
                print(f"    - {p}")
        print(f"{len(rows)} node(s), {len(bad)} with problems")
    return 1 if bad or not rows else 0


if __name__ == "__main__":
    raise SystemExit(main())
