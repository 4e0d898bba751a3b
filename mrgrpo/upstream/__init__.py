"""`mrgrpo upstream`: how mrgrpo plugs into the installed verl, whether it still fits, and how the recipe differs.

The original mrGRPO was a fork of verl; its users diffed the fork against upstream to see what they changed.
mrgrpo keeps verl pinned and unedited, so that diff becomes this report:

1. the pinned verl version (REQUIRED_VERL.txt and mrgrpo's package metadata) and the installed one;
2. every extension point mrgrpo uses (verl config key -> our object), each checked against the installed verl:
   the verl object exists, has the signature mrgrpo relies on, and still makes the call mrgrpo expects;
3. the three in-place edits of the original fork and the upstream mechanism that replaces each;
4. the recipe config's delta against verl's default ``ppo_trainer`` (keys changed, added, removed).

Any drift (a missing verl symbol, a changed signature, our object missing or not fitting, a pin that disagrees)
makes the command exit 1 with a message naming the symbol. The checks are data (``EXTENSION_POINTS``,
``FORK_EDITS``): add a row when mrgrpo starts using another verl hook.

The package, one job per module: ``core`` (constants, Problem, resolve, Context), ``checks`` (checks of verl and
mrgrpo objects, the signature checker), ``recipe_checks`` (checks of the recipe and verl's default config),
``probes`` (CPU probes of verl behaviour), ``points`` (the EXTENSION_POINTS and FORK_EDITS tables), ``delta``
(versions and the config delta), ``report`` (build_report, render_text) and ``cli`` (main).
"""

from mrgrpo.upstream.checks import (
    AcceptsCall,
    Behaviour,
    Check,
    EntryPoint,
    Exists,
    HasSignature,
    HelpersExist,
    Sig,
    SourceMentions,
    SubclassOf,
    signature_problems,
)
from mrgrpo.upstream.cli import default_recipe_dir, default_repo_root, main
from mrgrpo.upstream.core import (
    DEFAULT_ROLLOUT_NAME,
    EXIT_DRIFT,
    EXIT_OK,
    PIN_FILE,
    RECIPE_CONFIG_DIR,
    RECIPE_CONFIG_NAME,
    VERL_CONFIG_MODULE,
    VERL_DEFAULT_CONFIG,
    VERL_SEARCHPATH,
    Context,
    Problem,
    Unresolved,
    dotted,
    location,
    resolve,
)
from mrgrpo.upstream.delta import config_delta, flatten, version_problems, versions
from mrgrpo.upstream.points import (
    AGENT_BASE,
    AGENT_LOOP_INIT_KWARGS,
    AGENT_WORKER,
    DATASET_CALL_KWARGS,
    EXTENSION_POINTS,
    FORK_EDITS,
    NAIVE,
    OUR_DATASET,
    OUR_LOOP,
    OUR_PLUGIN,
    OUR_SCORE,
    RLHF,
    ROW_KWARGS,
    SCORE_CALL_KWARGS,
    ExtensionPoint,
    ForkEdit,
)
from mrgrpo.upstream.probes import probe_naive_manager_call, probe_score_on_last_valid_token
from mrgrpo.upstream.recipe_checks import (
    RecipeAgentLoopYaml,
    RecipeHasKey,
    RecipeKeyExists,
    RecipeLoads,
    RecipeResolves,
    RecipeSearchpath,
    RecipeValue,
)
from mrgrpo.upstream.report import build_report, render_text

__all__ = [
    "AGENT_BASE",
    "AGENT_LOOP_INIT_KWARGS",
    "AGENT_WORKER",
    "DATASET_CALL_KWARGS",
    "DEFAULT_ROLLOUT_NAME",
    "EXIT_DRIFT",
    "EXIT_OK",
    "EXTENSION_POINTS",
    "FORK_EDITS",
    "NAIVE",
    "OUR_DATASET",
    "OUR_LOOP",
    "OUR_PLUGIN",
    "OUR_SCORE",
    "PIN_FILE",
    "RECIPE_CONFIG_DIR",
    "RECIPE_CONFIG_NAME",
    "RLHF",
    "ROW_KWARGS",
    "SCORE_CALL_KWARGS",
    "VERL_CONFIG_MODULE",
    "VERL_DEFAULT_CONFIG",
    "VERL_SEARCHPATH",
    "AcceptsCall",
    "Behaviour",
    "Check",
    "Context",
    "EntryPoint",
    "Exists",
    "ExtensionPoint",
    "ForkEdit",
    "HasSignature",
    "HelpersExist",
    "Problem",
    "RecipeAgentLoopYaml",
    "RecipeHasKey",
    "RecipeKeyExists",
    "RecipeLoads",
    "RecipeResolves",
    "RecipeSearchpath",
    "RecipeValue",
    "Sig",
    "SourceMentions",
    "SubclassOf",
    "Unresolved",
    "build_report",
    "config_delta",
    "default_recipe_dir",
    "default_repo_root",
    "dotted",
    "flatten",
    "location",
    "main",
    "probe_naive_manager_call",
    "probe_score_on_last_valid_token",
    "render_text",
    "resolve",
    "signature_problems",
    "version_problems",
    "versions",
]
