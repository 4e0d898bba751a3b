"""`mrgrpo upstream`: how mrgrpo plugs into verl, whether it still fits, and how the recipe differs.

By default the installed verl is checked (imported); ``--verl-source PATH`` checks a verl source tree instead (a
checkout or snapshot of a branch not yet released, e.g. ``main`` or ``neo``), read with :mod:`ast` and regexes
(`mrgrpo.upstream.source`), never imported, with its own ``verl/trainer/config`` composed under the recipe.

The original mrGRPO was a fork of verl; its users diffed the fork against upstream. mrgrpo keeps verl pinned and
unedited, so that diff becomes this report: the pinned and installed verl versions; every extension point (the
verl config key, what mrgrpo plugs in, the verl symbols it relies on with their file:line and the call shape it
needs); and the recipe config's delta against verl's default ``ppo_trainer``. Any drift exits 1 with a message
naming the point. The table is data (``POINTS``): add a row when mrgrpo starts using another verl hook.

What verl *does* with our objects (the naive reward manager's call, the score on the last valid token, the plugin
import) is exercised by the tests against the installed verl (tests/upstream/), not here.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata as metadata
import importlib.util
import inspect
import json
import os
import pkgutil
import re
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from mrgrpo.upstream import source
from mrgrpo.upstream.source import Fact

# Standard library only at module level: mrgrpo.plugin imports `pinned_verl` from here while verl/__init__ runs.

PIN_FILE = "REQUIRED_VERL.txt"
RECIPE_NAME = "mrgrpo_trainer"  # mrgrpo/config/mrgrpo_trainer.yaml, shipped in the package
VERL_CONFIGS = "verl.trainer.config"
VERL_DEFAULT = "ppo_trainer"
# ppo_trainer leaves actor_rollout_ref.rollout.name at ??? and does not compose without it: both sides get it.
BOTH_SIDES = ("actor_rollout_ref.rollout.name=vllm",)


class Sym(NamedTuple):
    """An object resolved with pkgutil.resolve_name, and the shape mrgrpo relies on."""

    path: str  # 'module:qualname'
    params: str = ""  # leading parameters after self, 'name' or 'name=default'; '**' = takes **kwargs
    is_async: bool | None = None  # must (not) be `async def`
    base: str = ""  # must subclass this
    alt: str = ""  # another 'module:qualname' that also satisfies the point (a rename upstream, same shape)


class Configs(NamedTuple):
    default: dict[str, Any] | None  # verl's ppo_trainer, flattened ('a.b.c' -> value)
    default_error: str
    recipe: dict[str, Any] | None  # the recipe, flattened
    recipe_error: str
    recipe_yaml: Path | None
    root: Path | None = None  # --verl-source: the tree read statically (None: the installed verl, imported)


class Point(NamedTuple):
    key: str  # the verl config key (or mechanism)
    ours: str  # what mrgrpo plugs in there
    verl: tuple[Sym, ...]  # what it relies on in the installed verl
    mine: tuple[Sym, ...] = ()  # our objects, in the shape verl calls them
    keys: tuple[str, ...] = ()  # config keys verl's ppo_trainer must have; the recipe's values are shown
    loads: bool = False  # keys are <key>.path / <key>.name, loaded through verl's load_extern_object
    resolver: str = ""  # verl function that must accept the recipe's value of keys[0] (a registry lookup)
    check: Callable[[Configs], list[str]] | None = None  # anything else (reads the configs)
    facts: tuple[Fact, ...] = ()  # code facts in verl's files (regexes), checked in the installed and a source tree


RLHF = "verl.utils.dataset.rl_dataset:RLHFDataset"
AGENT = "verl.experimental.agent_loop.agent_loop:AgentLoopBase"
NAIVE = "verl.experimental.reward_loop.reward_manager.naive:NaiveRewardManager"
LOADER = "verl.utils.import_utils:load_extern_object"
MANAGERS = "verl.experimental.reward_loop.reward_manager:get_reward_manager_cls"
ESTIMATORS = "verl.trainer.ppo.core_algos:get_adv_estimator_fn"
REPLAY = "verl.trainer.ppo.v1.replay_buffer:ReplayBuffer"
ALM = "verl.experimental.agent_loop.agent_loop:AgentLoopManager"
SAMPLER = ("pkg://mrgrpo.sampler", "MrGRPOReplayBuffer")  # the v1 trainer's hook (mrgrpo.exclusion)
MANAGER = "mrgrpo.manager.MrGRPOAgentLoopManager"  # RayPPOTrainer's hook (trainer.use_v1=false)
MANAGER_KEY = "actor_rollout_ref.rollout.agent.agent_loop_manager_class"
SAMPLER_KEY = "trainer.v1.sampler.custom_sampler"
LOOP = "mrgrpo.agent_loop:PlanCodeAgentLoop"
LOOP_KEY = "actor_rollout_ref.rollout.agent.agent_loop_config_path"
DATASET_CALL = "data_files, tokenizer, config, processor=None, max_samples=-1"  # verl's create_rl_dataset
SCORE_CALL = "data_source, solution_str, ground_truth, extra_info, **"  # NaiveRewardManager.run_single, by keyword
CT_HELPERS = (  # the Continuous Token helpers mrgrpo.agent_loop calls on self: (name, later name or "", shape)
    ("ct_build_initial_tokens", "", "messages, tools"),
    ("ct_merge_assistant_token", "", "runtime_token_ids, assistant_token_ids, response_mask, response_logprobs, "
     "assistant_logprobs"),
    # 0.9.1's name; verl's main and neo call it ct_merge_non_assistant_msg (mrgrpo.agent_loop.CT_MERGE_NAMES)
    ("ct_merge_context_msg", "ct_merge_non_assistant_msg", "previous_messages, updated_messages, runtime_token_ids, "
     "response_mask, response_logprobs, tools"),
)


def _plugin_loaded(cfg: Configs) -> list[str]:
    if cfg.root is not None:  # a source tree: verl/__init__.py must still load the verl.plugins entry points
        _, problem = source.fact_line(cfg.root, Fact("verl/__init__.py", r"verl\.plugins", "the verl.plugins entry "
                                                     "point group"))
        return [problem] if problem else []
    eps = [ep for ep in metadata.entry_points(group="verl.plugins") if ep.name == "mrgrpo"]
    if not eps:
        return ["entry point verl.plugins:mrgrpo is not registered (is mrgrpo pip-installed?)"]
    if eps[0].value != "mrgrpo.plugin":
        return [f"entry point verl.plugins:mrgrpo is {eps[0].value!r}, expected 'mrgrpo.plugin'"]
    importlib.import_module("verl")  # loads every verl.plugins entry point (failures are logged at DEBUG only)
    policy = os.getenv("VERL_USE_EXTERNAL_PLUGINS", "auto").strip().lower()
    return [] if policy != "auto" or "mrgrpo.plugin" in sys.modules else ["`import verl` did not load mrgrpo.plugin"]


def _loop_yaml(cfg: Configs) -> list[str]:
    from omegaconf import OmegaConf

    value = (cfg.recipe or {}).get(LOOP_KEY)
    if cfg.recipe is None or not value:
        return [] if cfg.recipe is None else [f"{LOOP_KEY} is not set in the recipe"]
    from mrgrpo.config import RESOLVER, config_file

    resolver = re.fullmatch(r"\$\{" + RESOLVER + r":([^}]+)\}", str(value))
    if resolver:  # ${mrgrpo_config:NAME}: a file shipped beside the recipe yaml
        try:
            value = config_file(resolver.group(1))
        except FileNotFoundError as e:
            return [str(e)]
    roots = [Path.cwd(), cfg.recipe_yaml.parent if cfg.recipe_yaml else None]
    path = next((r / value for r in roots if r is not None and (r / value).is_file()), None)
    if path is None:
        return [f"{value} is not a file (relative to the cwd or the recipe's directory)"]
    targets = [e.get("_target_") for e in OmegaConf.to_container(OmegaConf.load(path)) or [] if isinstance(e, dict)]
    return [] if LOOP.replace(":", ".") in targets else [f"{value}: no entry with _target_: {LOOP.replace(':', '.')}"]


def _composes(cfg: Configs) -> list[str]:
    out = [f"verl's {VERL_DEFAULT} does not compose: {cfg.default_error}"] if cfg.default_error else []
    return out + ([f"the recipe does not compose: {cfg.recipe_error}"] if cfg.recipe_error else [])


def _trainer_hook(cfg: Configs) -> list[str]:
    """The recipe's trainer (``trainer.use_v1``) must run on this verl and have mrgrpo's exclusion/dashboard hook
    configured: the custom sampler on TrainerV1, the agent-loop manager on RayPPOTrainer (docs/metrics.md)."""
    if cfg.recipe is None:
        return []
    v1 = cfg.recipe.get("trainer.use_v1")
    if v1 is None:
        return ["the recipe does not set trainer.use_v1 (state the trainer explicitly)"]
    out = []
    if v1:
        hook = (cfg.recipe.get(f"{SAMPLER_KEY}.path"), cfg.recipe.get(f"{SAMPLER_KEY}.name"))
        if hook != SAMPLER:
            out.append(f"trainer.use_v1=true but {SAMPLER_KEY} is {hook}, not {SAMPLER}: no INFRA exclusion, no "
                       "mrgrpo/* dashboard")
        root = cfg.root or installed_root()
        where = source.find_line(root, "verl/trainer/main_ppo.py", r"TrainerV1 is disabled") if root else None
        if where:
            out.append(f"trainer.use_v1=true but this verl refuses TrainerV1 ({where}: 'TrainerV1 is disabled "
                       "because it depends on TransferQueue'); use trainer.use_v1=false with "
                       f"{MANAGER_KEY}={MANAGER}")
    elif cfg.recipe.get(MANAGER_KEY) != MANAGER:
        out.append(f"trainer.use_v1=false but {MANAGER_KEY} is {cfg.recipe.get(MANAGER_KEY)!r}, not {MANAGER!r}: "
                   "no INFRA exclusion, no mrgrpo/* dashboard on RayPPOTrainer")
    return out


RT = "verl/trainer/ppo/ray_trainer.py"
AL = "verl/experimental/agent_loop/agent_loop.py"

POINTS: tuple[Point, ...] = (
    Point(
        "data.custom_cls",
        "mrgrpo.dataset.MrGRPODataset",
        verl=(Sym(RLHF, DATASET_CALL), Sym("verl.utils.dataset.rl_dataset:get_dataset_class", "data_config"),
              Sym(LOADER, "module_path, object_name")),
        mine=(Sym("mrgrpo.dataset:MrGRPODataset", DATASET_CALL, base=RLHF),),
        keys=("data.custom_cls.path", "data.custom_cls.name"),
        loads=True,
    ),
    Point(
        "reward.custom_reward_function",
        "mrgrpo.reward.compute_score",
        verl=(Sym("verl.trainer.ppo.reward:get_custom_reward_fn", "config"), Sym(LOADER, "module_path, object_name")),
        mine=(Sym("mrgrpo.reward:compute_score", SCORE_CALL), Sym("mrgrpo.reward:compute_score_async", SCORE_CALL)),
        keys=("reward.custom_reward_function.path", "reward.custom_reward_function.name"),
        loads=True,
    ),
    Point(
        "reward.reward_manager.name",
        "(verl's naive manager; it calls our compute_score)",
        verl=(Sym(NAIVE, "config, tokenizer, compute_score"), Sym(f"{NAIVE}.run_single", "data", True),
              Sym(MANAGERS, "name")),
        keys=("reward.reward_manager.name",),
        resolver=MANAGERS,
        facts=(Fact("verl/experimental/reward_loop/reward_manager/naive.py", r'register\("naive"\)',
                    "the naive manager registered as 'naive'"),),
    ),
    Point(
        LOOP_KEY,
        "mrgrpo.agent_loop.PlanCodeAgentLoop",
        verl=(Sym(AGENT, "trainer_config, server_manager, tokenizer, processor, dataset_cls, data_config, **"),
              Sym(f"{AGENT}.run", "sampling_params, **", True),
              *(Sym(f"{AGENT}.{name}", params, True, alt=f"{AGENT}.{later}" if later else "")
                for name, later, params in CT_HELPERS)),
        mine=(Sym(LOOP, base=AGENT), Sym(f"{LOOP}.run", "sampling_params, **", True)),
        keys=(LOOP_KEY, "actor_rollout_ref.rollout.agent.default_agent_loop"),
        check=_loop_yaml,
    ),
    Point("verl.plugins", "mrgrpo.plugin (entry point)", verl=(Sym("verl"),), check=_plugin_loaded),
    Point(
        "hydra.searchpath",
        f"pkg://mrgrpo.config {RECIPE_NAME}.yaml over pkg://{VERL_CONFIGS} {VERL_DEFAULT}",
        verl=(Sym("verl.trainer.main_ppo:main", "config"),),
        check=_composes,
    ),
    Point(
        "algorithm.adv_estimator",
        "(verl's estimator the recipe names)",
        verl=(Sym("verl.trainer.ppo.core_algos:register_adv_est", "name_or_enum"), Sym(ESTIMATORS, "name_or_enum")),
        keys=("algorithm.adv_estimator",),
        resolver=ESTIMATORS,
        facts=(Fact(RT, r"def compute_advantage\(", "compute_advantage (both trainers call it for a registered name)"),
               Fact(RT, r'adv_kwargs\["index"\] = data\.non_tensor_batch\["uid"\]', "the uid passed as `index`"),
               Fact(RT, r'"response_mask": data\.batch\["response_mask"\]', "response_mask passed to the estimator"),
               Fact(RT, r'"config": config', "the algorithm config passed as `config`")),
    ),
    Point(
        "trainer.use_v1",
        "the recipe's trainer and its exclusion/dashboard hook (mrgrpo.exclusion)",
        verl=(Sym("verl.trainer.main_ppo:main", "config"),),
        keys=("trainer.use_v1",),
        check=_trainer_hook,
        facts=(Fact("verl/trainer/main_ppo.py", r"use_v1", "the trainer.use_v1 switch"),),
    ),
    Point(
        MANAGER_KEY,
        f"{MANAGER} (RayPPOTrainer: trainer.use_v1=false)",
        verl=(Sym(ALM), Sym(f"{ALM}.create", "**"), Sym(f"{ALM}.generate_sequences", "prompts"),
              Sym("verl.trainer.ppo.metric_utils:compute_timing_metrics", "batch, timing_raw")),
        mine=(Sym(MANAGER.replace(".MrGRPO", ":MrGRPO"), base=ALM),),
        facts=(Fact(RT, r"agent_loop_manager_class", "RayPPOTrainer loading agent_loop_manager_class"),
               Fact("verl/workers/config/rollout.py", r"agent_loop_manager_class", "the config key"),
               Fact(RT, r'timing_raw\.update\(\w+\.meta_info\["timing"\]\)',
                    "the generate output's meta_info['timing'] merged into the step's timing"),
               Fact("verl/trainer/ppo/metric_utils.py", r'f"timing_s/\{name\}"', "timing_s/<name> metrics"),
               Fact(RT, r'"validate": True', "validation generation batches flagged meta_info['validate']"),
               Fact(AL, r"non_tensor_batch\.update\(extra_fields\)", "extra_fields as non_tensor_batch columns"),
               Fact(AL, r'extra_fields\["reward_extra_info"\] =', "the reward dict attached during rollout"),
               Fact("verl/workers/utils/padding.py", r'data\["loss_mask"\] = data\["response_mask"\]',
                    "loss_mask (token-mean normaliser) copied from response_mask")),
    ),
    Point(
        SAMPLER_KEY,
        "(the class the recipe names, if any; else verl's ReplayBuffer; mrgrpo's: TrainerV1 only)",
        verl=(Sym(REPLAY, "trainer_mode, trainer_config, max_off_policy_threshold, max_off_policy_strategy, "
                  "sampler_kwargs"), Sym(f"{REPLAY}.sample", "global_steps, partition_id, batch_size"),
              Sym(LOADER, "module_path, object_name")),
        keys=(f"{SAMPLER_KEY}.path", f"{SAMPLER_KEY}.name"),
        loads=True,
        facts=(Fact("verl/trainer/ppo/v1/replay_buffer.py", r"^import transfer_queue as tq",
                    "ReplayBuffer on TransferQueue (the sampler reads and writes TQ fields)"),
               Fact("verl/trainer/ppo/v1/trainer_base.py", r"metrics\.update\(off_policy_metrics\)",
                    "sample()'s metrics merged into the step's")),
    ),
)

# ------------------------------------------------------------------------------------------------------------------
# objects: resolve, where they live, and their shape


resolve = pkgutil.resolve_name  # 'pkg.module:Qual.name'


def dotted(path: str) -> str:
    return path.replace(":", ".")


def location(obj: Any) -> str:
    """'verl/utils/dataset/rl_dataset.py:72' (the path from the top package down)."""
    target = inspect.unwrap(obj)
    try:
        src, line = Path(inspect.getsourcefile(target) or "?"), inspect.getsourcelines(target)[1]
    except (OSError, TypeError):
        return "?"
    top = (target.__name__ if inspect.ismodule(target) else target.__module__).split(".")[0]
    parts = src.parts
    rel = Path(*parts[len(parts) - 1 - parts[::-1].index(top):]) if top in parts else src
    return f"{rel}:{line}" if line else str(rel)


def _token(p: inspect.Parameter) -> str:
    if p.kind is p.VAR_KEYWORD:
        return "**"
    if p.kind is p.VAR_POSITIONAL:
        return "*"
    return p.name if p.default is p.empty else f"{p.name}={p.default!r}"


def shape_problem(obj: Any, sym: Sym) -> str | None:
    """Why obj does not have sym's shape, or None."""
    try:
        base = resolve(sym.base) if sym.base else object
    except Exception:
        return f"cannot be checked: {dotted(sym.base)} is missing"
    if not (inspect.isclass(obj) and issubclass(obj, base)) and sym.base:
        return f"is not a subclass of {dotted(sym.base)}"
    if sym.is_async is not None and inspect.iscoroutinefunction(inspect.unwrap(obj)) != sym.is_async:
        return "is not `async def`" if sym.is_async else "is `async def`"
    if not sym.params:
        return None
    try:
        params = list(inspect.signature(obj).parameters.values())
    except (TypeError, ValueError) as e:
        return f"signature not readable: {e}"
    if params and params[0].name in ("self", "cls") and not inspect.isclass(obj):
        params = params[1:]
    return _fits([_token(p) for p in params], sym)


def _fits(found: list[str], sym: Sym) -> str | None:
    """Whether parameter tokens (`_token`) start with sym.params (a '**' in sym.params: takes **kwargs)."""
    named = [t for t in found if not t.startswith("*")]
    want = [w.strip() for w in sym.params.split(",")]
    fits = ("**" not in want or "**" in found) and all(
        i < len(named) and (named[i] == w or ("=" not in w and named[i].split("=")[0] == w))
        for i, w in enumerate(w for w in want if w != "**")
    )
    return None if fits else f"expected ({sym.params}), found ({', '.join(found)})"


def source_shape_problem(root: Path, found: source.Found, sym: Sym) -> str | None:
    """`shape_problem` for a symbol read from a source tree's AST."""
    if sym.base:
        want = dotted(sym.base)
        if not (isinstance(found.node, source.ast.ClassDef) and want in source.base_names(root, found)):
            return f"is not a subclass of {want} (as far as the tree's class statements tell)"
    if sym.is_async is not None and source.is_async(found.node) != sym.is_async:
        return "is not `async def`" if sym.is_async else "is `async def`"
    if not sym.params:
        return None
    found_tokens = source.tokens(found.node)
    if found_tokens is None:
        return None if isinstance(found.node, source.ast.ClassDef) else "signature not readable"
    return _fits(found_tokens, sym)


def sym_report(sym: Sym, root: Path | None = None) -> dict[str, Any]:
    """Where a symbol is and whether it has the shape mrgrpo needs: imported from the installed verl, or (``root``,
    for ``verl.*`` symbols) read from a source tree without importing it. A missing symbol with an ``alt`` is
    looked up under that name (reported as such)."""
    row = _sym_report(sym, root)
    if sym.alt and row["location"] is None:
        other = _sym_report(sym._replace(path=sym.alt, alt=""), root)
        if other["location"] is not None:
            return other
        row["problem"] += f"; nor {dotted(sym.alt)}"
    return row


def _sym_report(sym: Sym, root: Path | None) -> dict[str, Any]:
    row = {
        "symbol": dotted(sym.path),
        "name": ("async " if sym.is_async else "") + sym.path.rpartition(":")[2],
        "shape": f"({sym.params})" if sym.params else "",
    }
    if root is not None and sym.path.split(".")[0].split(":")[0] == "verl":
        try:
            found = source.find(root, sym.path)
        except SyntaxError as e:
            return {**row, "location": None, "problem": f"unreadable ({e})"}
        if found is None:
            file = source.module_file(root, sym.path.partition(":")[0])
            hint = f"not in {file.relative_to(root)}" if file else "its module is not in the tree"
            return {**row, "location": None, "problem": f"missing ({hint})"}
        return {**row, "location": source.where(root, found.file, found.line),
                "problem": source_shape_problem(root, found, sym)}
    try:
        with warnings.catch_warnings():  # verl's import-time notes about optional engines (torchtitan, megatron...)
            warnings.simplefilter("ignore")
            obj = resolve(sym.path)
    except Exception as e:  # ImportError, AttributeError, or an import-time error inside the module
        return {**row, "location": None, "problem": f"missing ({type(e).__name__}: {e})"}
    return {**row, "location": location(obj), "problem": shape_problem(obj, sym)}


# ------------------------------------------------------------------------------------------------------------------
# versions, configs, the delta


def repo_root() -> Path | None:
    """The checkout mrgrpo runs from (editable install, the image's /opt/mrgrpo), else the cwd if it is one."""
    for root in (Path(__file__).resolve().parents[2], Path.cwd()):
        if (root / PIN_FILE).is_file():
            return root
    return None


def verl_pin(requirement: str) -> str | None:
    """The version in a ``verl==X`` / ``verl[extra]==X`` requirement line (of several lines, the first), else None.

    >>> verl_pin("verl[verl-core]==0.9.1"), verl_pin("torch==2.1"), verl_pin("verl>=0.9")
    ('0.9.1', None, None)
    """
    m = re.search(r"^\s*verl(?:\[[^\]]*\])?\s*==\s*([\w.+-]+)", requirement, re.M)
    return m.group(1) if m else None


def pinned_verl() -> str | None:
    """The verl version mrgrpo's installed package metadata pins (pyproject's dependency); None when mrgrpo is not
    installed."""
    try:
        requires = metadata.requires("mrgrpo") or []
    except metadata.PackageNotFoundError:
        return None
    return next((v for v in (verl_pin(r.split(";")[0]) for r in requires) if v), None)


def versions() -> dict[str, Any]:
    root = repo_root()
    pin_file = root / PIN_FILE if root else None
    out: dict[str, Any] = {
        "pin_file": verl_pin(pin_file.read_text(encoding="utf-8")) if pin_file and pin_file.is_file() else None,
        "metadata": pinned_verl(),
    }
    out["pinned"] = out["pin_file"] or out["metadata"]
    try:
        out["installed"] = metadata.version("verl")
        out["location"] = str(Path(importlib.util.find_spec("verl").origin).parent)
    except (metadata.PackageNotFoundError, AttributeError, TypeError):
        out["installed"] = out["location"] = None
    return out


def installed_root() -> Path | None:
    """The directory holding the installed ``verl`` package (for code facts), found without importing verl."""
    try:
        spec = importlib.util.find_spec("verl")
    except (ImportError, ValueError):
        return None
    return Path(spec.origin).parent.parent if spec and spec.origin else None


def source_versions(root: Path) -> dict[str, Any]:
    """`versions` for --verl-source: the pins, and the tree's own version instead of the installed one."""
    out = versions()
    out.update({"installed": None, "location": None, "source": str(root), "source_version": source.version(root)})
    return out


def version_problems(v: dict[str, Any], allow_mismatch: bool) -> list[str]:
    out = []
    if v["pin_file"] and v["metadata"] and v["pin_file"] != v["metadata"]:
        out.append(f"{PIN_FILE} pins verl=={v['pin_file']} but mrgrpo's metadata pins verl=={v['metadata']}")
    if not v["pinned"]:
        out.append(f"no verl pin found ({PIN_FILE} or mrgrpo's package metadata)")
    if v.get("source"):
        return out  # a source tree is checked for drift, not for being the pinned release
    if v["installed"] is None:
        out.append("verl is not installed")
    elif v["pinned"] and v["installed"] != v["pinned"] and not allow_mismatch:
        out.append(f"verl: installed {v['installed']} but mrgrpo pins {v['pinned']} (--allow-version-mismatch)")
    return out


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1}; lists are leaves; an empty dict is a leaf {}."""
    if not isinstance(node, dict) or (not node and prefix):
        return {prefix: node}
    return {k: v for key, val in node.items() for k, v in flatten(val, f"{prefix}.{key}" if prefix else key).items()}


def recipe_dir() -> Path | None:
    """``$MRGRPO_RECIPE_DIR`` when set, else the config shipped in the installed package (``mrgrpo.config``)."""
    env = os.getenv("MRGRPO_RECIPE_DIR")
    if env:
        return Path(env).resolve() if (Path(env) / f"{RECIPE_NAME}.yaml").is_file() else None
    from mrgrpo.config import CONFIG_DIR

    return CONFIG_DIR if (CONFIG_DIR / f"{RECIPE_NAME}.yaml").is_file() else None


def compose(recipe: Path | None, overrides: tuple[str, ...] = (), root: Path | None = None) -> Configs:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir, initialize_config_module
    from omegaconf import OmegaConf

    def flat(init: Callable[[], Any], name: str, extra: tuple[str, ...]) -> tuple[dict[str, Any] | None, str]:
        try:
            with init():
                cfg = hydra_compose(name, overrides=[*BOTH_SIDES, *extra])
            return flatten(OmegaConf.to_container(cfg, resolve=False)), ""
        except Exception as e:
            return None, f"{type(e).__name__}: {e}"

    if root is None:
        default, default_error = flat(lambda: initialize_config_module(VERL_CONFIGS, version_base=None), VERL_DEFAULT,
                                      ())
        searchpath: tuple[str, ...] = ()
    else:  # the tree's own config directory, on both sides
        conf = root / VERL_CONFIGS.replace(".", "/")
        default, default_error = flat(lambda: initialize_config_dir(str(conf), version_base=None), VERL_DEFAULT, ())
        searchpath = (f"hydra.searchpath=[file://{conf}]",)
    if recipe is None:
        return Configs(default, default_error, None, "", None, root)
    mine, error = flat(lambda: initialize_config_dir(str(recipe), version_base=None), RECIPE_NAME,
                       (*searchpath, *overrides))
    return Configs(default, default_error, mine, error, recipe / f"{RECIPE_NAME}.yaml", root)


def config_delta(cfg: Configs) -> dict[str, Any]:
    if cfg.default is None or cfg.recipe is None:
        reason = cfg.default_error or cfg.recipe_error or "recipe config not found (pass --recipe-dir)"
        return {"status": "error" if cfg.default_error or cfg.recipe_error else "skipped", "reason": reason}
    old, new = cfg.default, cfg.recipe

    def filled(key: str, value: Any, other: dict[str, Any]) -> bool:  # {} on one side, its keys on the other
        return value == {} and any(k.startswith(key + ".") for k in other)

    return {
        "status": "ok",
        "recipe": str(cfg.recipe_yaml),
        "changed": {k: [old[k], new[k]] for k in sorted(old.keys() & new.keys()) if old[k] != new[k]},
        "added": {k: new[k] for k in sorted(new.keys() - old.keys()) if not filled(k, new[k], old)},
        "removed": {k: old[k] for k in sorted(old.keys() - new.keys()) if not filled(k, old[k], new)},
    }


# ------------------------------------------------------------------------------------------------------------------
# the report


def point_report(point: Point, cfg: Configs) -> dict[str, Any]:
    verl_rows = [sym_report(s, cfg.root) for s in point.verl]
    mine_rows = [sym_report(s) for s in point.mine]  # ours: always the importable objects
    problems = [f"{r['symbol']} {r['problem']}" for r in verl_rows + mine_rows if r["problem"]]
    root = cfg.root or installed_root()
    fact_rows = []
    for fact in point.facts:
        loc, problem = source.fact_line(root, fact) if root else (None, "verl not found")
        fact_rows.append({"what": fact.what, "location": loc, "problem": problem})
        if problem:
            problems.append(problem)
    if cfg.default is not None:
        problems += [f"{k} is not a key of verl's {VERL_DEFAULT} any more" for k in point.keys if k not in cfg.default]
    values = {k: cfg.recipe.get(k) for k in point.keys} if cfg.recipe is not None else {}
    if point.resolver and cfg.root is None:  # a registry lookup needs the imported verl
        value = values.get(point.keys[0]) if values else (cfg.default or {}).get(point.keys[0])
        try:
            resolve(point.resolver)(value)
        except Exception as e:
            problems.append(f"{dotted(point.resolver)}({value!r}) fails: {type(e).__name__}: {e}")
    if point.loads and cfg.root is None and values and (any(values.values()) or point.mine):
        problems += _load_problems(point, *values.values())
    if point.check is not None:
        problems += point.check(cfg)
    return {"key": point.key, "ours": point.ours, "ok": not problems, "verl": verl_rows, "mine": mine_rows,
            "facts": fact_rows, "recipe": values, "problems": problems}


def _load_problems(point: Point, path: Any, name: Any) -> list[str]:
    """What the recipe names loads through verl's own loader, and is ours (or, with no object of ours, a subclass)."""
    try:
        obj = resolve(LOADER)(path, name)
    except Exception as e:
        return [f"the recipe's {path}:{name} does not load: {type(e).__name__}: {e}"]
    if point.mine:
        ours = f"{getattr(obj, '__module__', '')}:{getattr(obj, '__qualname__', '')}" in {s.path for s in point.mine}
        return [] if ours else [f"the recipe's {path}:{name} is not mrgrpo's ({obj!r})"]
    problem = shape_problem(obj, point.verl[0]._replace(base=point.verl[0].path, params=""))
    return [f"the recipe's {path}:{name} {problem}"] if problem else []


def build_report(recipe: Path | None, overrides: tuple[str, ...] = (), allow_mismatch: bool = False,
                 verl_source: Path | None = None) -> dict:
    """The whole report; ``verl_source``: the directory holding a verl source tree's ``verl`` package (read, not
    imported) instead of the installed verl."""
    v = source_versions(verl_source) if verl_source is not None else versions()
    cfg = compose(recipe, overrides, verl_source) if verl_source is not None else compose(recipe, overrides)
    points = [point_report(p, cfg) for p in POINTS]
    problems = version_problems(v, allow_mismatch) + [f"{p['key']}: {m}" for p in points for m in p["problems"]]
    # a config that does not compose is a problem of the hydra.searchpath point
    return {"ok": not problems, "verl": v, "points": points, "config_delta": config_delta(cfg), "problems": problems}


def _short(value: Any, width: int = 90) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= width else text[: width - 3] + "..."


def render(report: dict[str, Any]) -> str:
    v = report["verl"]
    pins = "; ".join(f"{src}: {v[k]}" for src, k in ((PIN_FILE, "pin_file"), ("mrgrpo metadata", "metadata")) if v[k])
    src = v.get("source")
    lines = [
        f"mrgrpo upstream: how mrgrpo plugs into {'the verl source tree ' + src if src else 'the installed verl'}",
        "",
        f"verl pinned:    {v['pinned'] or '?'}  ({pins or 'no pin found'})",
        (f"verl source:    {v.get('source_version') or '?'}  ({src}; read, not imported; mrgrpo's own objects are "
         "the installed ones)") if src else f"verl installed: {v['installed'] or 'not installed'}  "
        f"({v['location'] or '-'})",
        "",
        "Extension points: verl config key -> what mrgrpo plugs in; the verl symbols it relies on",
    ]
    for p in report["points"]:
        lines.append(f"  [{'OK' if p['ok'] else 'DRIFT':5}] {p['key']} -> {p['ours']}")
        for side, rows in (("verl", p["verl"]), ("ours", p["mine"])):
            lines += [f"          {side}: {r['location'] or 'MISSING'}  {r['name']}{r['shape']}" for r in rows]
        lines += [f"          code: {f['location'] or 'MISSING'}  {f['what']}" for f in p.get("facts", [])]
        lines += [f"          recipe: {k} = {_short(x)}" for k, x in p["recipe"].items()]
        lines += [f"          !! {m}" for m in p["problems"]]
    d = report["config_delta"]
    lines += ["", f"Recipe config vs verl's {VERL_DEFAULT} ({d['status']})"]
    if d["status"] != "ok":
        lines.append(f"  {d['reason']}")
    else:
        lines.append(f"  recipe: {d['recipe']}")
        lines.append(f"  both composed with: {' '.join(BOTH_SIDES)}; values raw (interpolations shown as written)")
        lines.append(f"  changed ({len(d['changed'])}):")
        lines += [f"    {k}: {_short(a, 45)} -> {_short(b, 45)}" for k, (a, b) in d["changed"].items()]
        lines.append(f"  added ({len(d['added'])}):")
        lines += [f"    {k} = {_short(x)}" for k, x in d["added"].items()]
        lines.append(f"  removed ({len(d['removed'])}):")
        lines += [f"    {k} (was {_short(x)})" for k, x in d["removed"].items()]
    lines.append("")
    if report["ok"]:
        lines.append(f"RESULT: OK - {'this verl tree' if src else 'the installed verl'} has every extension point "
                     "mrgrpo uses")
    else:
        lines.append(f"RESULT: DRIFT - {len(report['problems'])} problem(s):")
        lines += [f"  - {m}" for m in report["problems"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="mrgrpo upstream",
        description="How mrgrpo plugs into the installed verl: the pinned and installed verl versions; every "
        "extension point (verl config key -> what mrgrpo plugs in, the verl symbols it relies on with file:line "
        "and the call shape it needs); the recipe config's delta against verl's default ppo_trainer. "
        "Exit 0 when everything fits, 1 on any drift.",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--recipe-dir", type=Path, help=f"directory with {RECIPE_NAME}.yaml (default: "
                        "$MRGRPO_RECIPE_DIR, else the one shipped in the package)")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="a hydra override for the recipe side (repeatable), e.g. the run script's")
    parser.add_argument("--allow-version-mismatch", action="store_true",
                        help="do not fail when the installed verl is not the pinned one")
    parser.add_argument("--verl-source", type=Path, metavar="PATH",
                        help="check a verl source tree instead of the installed verl (a checkout or snapshot: the "
                        "directory holding the verl package, or the package itself); read with ast, not imported")
    parser.add_argument("--quiet", action="store_true", help="print nothing on success (problems still go to stderr)")
    args = parser.parse_args(argv)
    recipe = args.recipe_dir.resolve() if args.recipe_dir else recipe_dir()
    if args.recipe_dir and not (recipe / f"{RECIPE_NAME}.yaml").is_file():
        parser.error(f"--recipe-dir {args.recipe_dir}: no {RECIPE_NAME}.yaml there")
    root = None
    if args.verl_source is not None:
        root = source.verl_root(args.verl_source)
        if root is None:
            parser.error(f"--verl-source {args.verl_source}: no verl package there (verl/__init__.py)")
    report = build_report(recipe, tuple(args.override), args.allow_version_mismatch, verl_source=root)
    if not args.quiet:
        print(json.dumps(report, indent=2, default=str) if args.json else render(report))
    if not report["ok"]:
        print(f"mrgrpo upstream: {len(report['problems'])} problem(s); first: {report['problems'][0]}", file=sys.stderr)
    return 0 if report["ok"] else 1
