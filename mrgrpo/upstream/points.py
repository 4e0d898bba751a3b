"""The tables: every extension point mrgrpo uses (EXTENSION_POINTS) and the original fork's edits (FORK_EDITS).

The checks are data: add a row when mrgrpo starts using another verl hook.
"""

from __future__ import annotations

from dataclasses import dataclass

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
)
from mrgrpo.upstream.core import RECIPE_CONFIG_DIR, RECIPE_CONFIG_NAME, VERL_DEFAULT_CONFIG, VERL_SEARCHPATH
from mrgrpo.upstream.probes import (
    _verl_config_file,
    _verl_init_mentions,
    probe_naive_manager_call,
    probe_score_on_last_valid_token,
)
from mrgrpo.upstream.recipe_checks import (
    RecipeAgentLoopYaml,
    RecipeHasKey,
    RecipeKeyExists,
    RecipeLoads,
    RecipeResolves,
    RecipeSearchpath,
    RecipeValue,
)


@dataclass(frozen=True)
class ExtensionPoint:
    key: str  # the verl config key (or mechanism) that names our object
    ours: str | None  # our object, 'module:qualname'; None when mrgrpo uses the upstream object as is
    verl: str  # the verl object it plugs into
    how: str  # one line: how verl reaches it
    verl_checks: tuple[Check, ...] = ()
    ours_checks: tuple[Check, ...] = ()
    recipe_checks: tuple[Check, ...] = ()


@dataclass(frozen=True)
class ForkEdit:
    number: int
    fork_change: str  # what the original fork edited in place
    replacement: str  # how mrgrpo gets the same behaviour from pinned, unedited verl
    upstream: tuple[str, ...]  # the verl objects that now provide it ('module:qualname'), reported as file:function
    checks: tuple[Check, ...] = ()


RLHF = "verl.utils.dataset.rl_dataset:RLHFDataset"
AGENT_BASE = "verl.experimental.agent_loop.agent_loop:AgentLoopBase"
AGENT_WORKER = "verl.experimental.agent_loop.agent_loop:AgentLoopWorker"
NAIVE = "verl.experimental.reward_loop.reward_manager.naive:NaiveRewardManager"
OUR_DATASET = "mrgrpo.dataset:MrGRPODataset"
OUR_SCORE = "mrgrpo.reward:compute_score"
OUR_LOOP = "mrgrpo.agent_loop:PlanCodeAgentLoop"
OUR_PLUGIN = "mrgrpo.plugin"

# The keyword arguments verl passes when it builds an agent loop (AgentLoopWorker._run_agent_loop).
AGENT_LOOP_INIT_KWARGS = (
    "trainer_config",
    "server_manager",
    "tokenizer",
    "processor",
    "hf_model_type",
    "dataset_cls",
    "data_config",
    "tools",
)
DATASET_CALL_KWARGS = ("data_files", "tokenizer", "processor", "config", "max_samples")
SCORE_CALL_KWARGS = ("data_source", "solution_str", "ground_truth", "extra_info")
# A few of the dataset columns verl passes to AgentLoopBase.run as keywords (every column of the row is passed).
ROW_KWARGS = ("raw_prompt", "extra_info", "reward_model", "data_source", "uid")

EXTENSION_POINTS: tuple[ExtensionPoint, ...] = (
    ExtensionPoint(
        key="data.custom_cls",
        ours=OUR_DATASET,
        verl=RLHF,
        how="verl.utils.dataset.rl_dataset.get_dataset_class loads data.custom_cls.{path,name}; "
        "verl.trainer.ppo.utils.create_rl_dataset instantiates it",
        verl_checks=(
            HasSignature(
                RLHF,
                Sig(
                    positional=("data_files", "tokenizer", "config", "processor", "max_samples"),
                    defaults=(("processor", None), ("max_samples", -1)),
                ),
            ),
            HasSignature("verl.utils.dataset.rl_dataset:get_dataset_class", Sig(positional=("data_config",))),
            SourceMentions(
                "verl.utils.dataset.rl_dataset:get_dataset_class",
                ("custom_cls", "load_extern_object"),
                "reads data.custom_cls and loads it",
            ),
            SourceMentions(
                "verl.trainer.ppo.utils:create_rl_dataset",
                tuple(f"{k}=" for k in DATASET_CALL_KWARGS),
                "instantiates the dataset class with these keywords",
            ),
            Exists(f"{RLHF}.maybe_filter_out_long_prompts"),
            Exists(f"{RLHF}._read_files_and_tokenize"),
            RecipeKeyExists("data.custom_cls.path"),
            RecipeKeyExists("data.custom_cls.name"),
        ),
        ours_checks=(
            SubclassOf(OUR_DATASET, RLHF),
            AcceptsCall(OUR_DATASET, DATASET_CALL_KWARGS, caller="create_rl_dataset"),
        ),
        recipe_checks=(
            RecipeValue("data.custom_cls.path", "pkg://mrgrpo.dataset"),
            RecipeValue("data.custom_cls.name", "MrGRPODataset"),
            RecipeLoads("data.custom_cls.path", "data.custom_cls.name", DATASET_CALL_KWARGS),
        ),
    ),
    ExtensionPoint(
        key="reward.custom_reward_function",
        ours=OUR_SCORE,
        verl="verl.trainer.ppo.reward:get_custom_reward_fn",
        how="get_custom_reward_fn reads reward.custom_reward_function.{path,name,reward_kwargs} and loads the "
        "function with verl.utils.import_utils.load_extern_object (pkg:// = plain import)",
        verl_checks=(
            HasSignature("verl.trainer.ppo.reward:get_custom_reward_fn", Sig(positional=("config",))),
            SourceMentions(
                "verl.trainer.ppo.reward:get_custom_reward_fn",
                ('"custom_reward_function"', '"path"', '"name"', '"reward_kwargs"', "load_extern_object"),
                "reads reward.custom_reward_function.{path,name,reward_kwargs}",
            ),
            HasSignature("verl.utils.import_utils:load_extern_object", Sig(positional=("module_path", "object_name"))),
            SourceMentions("verl.utils.import_utils:load_module", ("PKG_PATH_PREFIX",), "supports pkg:// paths"),
            RecipeKeyExists("reward.custom_reward_function.path"),
            RecipeKeyExists("reward.custom_reward_function.name"),
        ),
        ours_checks=(AcceptsCall(OUR_SCORE, SCORE_CALL_KWARGS, caller="NaiveRewardManager.run_single"),),
        recipe_checks=(
            # pkg:// (a plain, cached import); the name may be compute_score or its async twin.
            RecipeValue("reward.custom_reward_function.path", "pkg://mrgrpo.reward"),
            RecipeLoads("reward.custom_reward_function.path", "reward.custom_reward_function.name", SCORE_CALL_KWARGS),
        ),
    ),
    ExtensionPoint(
        key="reward.reward_manager.name",
        ours=None,
        verl=NAIVE,
        how="the reward loop builds the registered manager (upstream 'naive'), which calls our compute_score",
        verl_checks=(
            HasSignature(NAIVE, Sig(positional=("config", "tokenizer", "compute_score"))),
            HasSignature(f"{NAIVE}.run_single", Sig(positional=("data",), coroutine=True)),
            SourceMentions(
                f"{NAIVE}.run_single",
                tuple(f"{k}=" for k in SCORE_CALL_KWARGS) + ('"reward_score"', '"reward_extra_info"'),
                "calls compute_score by keyword and returns reward_score/reward_extra_info",
            ),
            RecipeResolves(
                "reward.reward_manager.name",
                "verl.experimental.reward_loop.reward_manager:get_reward_manager_cls",
                fallback="naive",
            ),
        ),
    ),
    ExtensionPoint(
        key="actor_rollout_ref.rollout.agent.agent_loop_config_path",
        ours=OUR_LOOP,
        verl=AGENT_BASE,
        how="AgentLoopWorker loads the yaml (entries name/_target_) and hydra-instantiates the loop per trajectory, "
        "then awaits loop.run(sampling_params, **row)",
        verl_checks=(
            HasSignature(f"{AGENT_BASE}.run", Sig(positional=("sampling_params",), var_kw=True, coroutine=True)),
            HasSignature(
                AGENT_BASE,
                Sig(
                    positional=(
                        "trainer_config",
                        "server_manager",
                        "tokenizer",
                        "processor",
                        "dataset_cls",
                        "data_config",
                        "hf_model_type",
                    ),
                    var_kw=True,
                ),
            ),
            HasSignature(
                f"{AGENT_BASE}.ct_build_initial_tokens", Sig(positional=("messages", "tools"), coroutine=True)
            ),
            HasSignature(
                f"{AGENT_BASE}.ct_merge_assistant_token",
                Sig(
                    positional=(
                        "runtime_token_ids",
                        "assistant_token_ids",
                        "response_mask",
                        "response_logprobs",
                        "assistant_logprobs",
                    ),
                    coroutine=True,
                ),
            ),
            HasSignature(
                f"{AGENT_BASE}.ct_merge_context_msg",
                Sig(
                    positional=(
                        "previous_messages",
                        "updated_messages",
                        "runtime_token_ids",
                        "response_mask",
                        "response_logprobs",
                        "tools",
                    ),
                    coroutine=True,
                ),
            ),
            HasSignature(
                "verl.workers.rollout.llm_server:LLMServerClient.generate",
                Sig(positional=("request_id",), keywords=("prompt_ids", "sampling_params"), coroutine=True),
            ),
            SourceMentions(f"{AGENT_WORKER}.__init__", ("agent_loop_config_path",), "loads the agent loop yaml"),
            SourceMentions(
                f"{AGENT_WORKER}._run_agent_loop",
                tuple(f"{k}=" for k in AGENT_LOOP_INIT_KWARGS) + (".run(sampling_params",),
                "instantiates the loop with these keywords and awaits run()",
            ),
            Exists("verl.experimental.agent_loop.agent_loop:AgentLoopOutput"),
            RecipeKeyExists("actor_rollout_ref.rollout.agent.agent_loop_config_path"),
            RecipeKeyExists("actor_rollout_ref.rollout.agent.default_agent_loop"),
        ),
        ours_checks=(
            SubclassOf(OUR_LOOP, AGENT_BASE),
            AcceptsCall(OUR_LOOP, AGENT_LOOP_INIT_KWARGS, caller="AgentLoopWorker._run_agent_loop"),
            # run is looked up on the class: the first positional is self, the second sampling_params.
            AcceptsCall(f"{OUR_LOOP}.run", ROW_KWARGS, args=2, coroutine=True, caller="AgentLoopWorker"),
            HelpersExist(OUR_LOOP, AGENT_BASE, "ct_"),
        ),
        recipe_checks=(RecipeAgentLoopYaml("actor_rollout_ref.rollout.agent.agent_loop_config_path", OUR_LOOP),),
    ),
    ExtensionPoint(
        key="entry point verl.plugins",
        ours=OUR_PLUGIN,
        verl="verl",
        how="every `import verl` (driver, TaskRunner, every Ray worker) imports the entry points of group "
        "verl.plugins unless VERL_USE_EXTERNAL_PLUGINS=none; failures are logged at DEBUG only",
        verl_checks=(
            Behaviour("verl/__init__.py loads group verl.plugins", lambda: _verl_init_mentions("verl.plugins")),
        ),
        ours_checks=(EntryPoint("verl.plugins", "mrgrpo", OUR_PLUGIN),),
    ),
    ExtensionPoint(
        key="hydra.searchpath",
        ours=f"{RECIPE_CONFIG_DIR / RECIPE_CONFIG_NAME}.yaml",
        verl=f"{VERL_SEARCHPATH}/{VERL_DEFAULT_CONFIG}.yaml",
        how=f"the recipe yaml adds {VERL_SEARCHPATH} to hydra.searchpath and lists {VERL_DEFAULT_CONFIG} "
        "in defaults; `python -m verl.trainer.main_ppo --config-path ... --config-name mrgrpo_trainer`",
        verl_checks=(
            Behaviour("verl.trainer.config ships ppo_trainer.yaml", lambda: _verl_config_file(VERL_DEFAULT_CONFIG)),
            Exists("verl.trainer.main_ppo:main"),
        ),
        recipe_checks=(RecipeSearchpath(),),
    ),
    ExtensionPoint(
        key="algorithm.adv_estimator",
        ours=None,
        verl="verl.trainer.ppo.core_algos:get_adv_estimator_fn",
        how="upstream GRPO (group-normalised outcome reward over the uid group); no custom estimator",
        verl_checks=(
            RecipeResolves(
                "algorithm.adv_estimator", "verl.trainer.ppo.core_algos:get_adv_estimator_fn", fallback="grpo"
            ),
        ),
    ),
)


FORK_EDITS: tuple[ForkEdit, ...] = (
    ForkEdit(
        number=1,
        fork_change="verl/experimental/agent_loop/agent_loop.py was edited so the reward loop's scalar score lands "
        "on the last valid response token of the trajectory",
        replacement="upstream behaviour in verl 0.9.1: the agent loop worker awaits the reward loop per trajectory "
        "and writes the score at attention_mask[:, prompt_len:].sum(1) - 1 (the last valid response token); "
        "nothing to patch",
        upstream=(
            f"{AGENT_WORKER}._compute_score",
            f"{AGENT_WORKER}._postprocess",
            "verl.experimental.reward_loop.reward_manager.base:RewardManagerBase.assemble_rm_scores",
        ),
        checks=(
            SourceMentions(
                f"{AGENT_WORKER}._compute_score",
                ('"reward_score"', '"reward_extra_info"'),
                "stores the reward loop's result on the trajectory",
            ),
            SourceMentions(
                f"{AGENT_WORKER}._postprocess", ("rm_scores", "reward_score"), "writes rm_scores from reward_score"
            ),
            Behaviour("assemble_rm_scores puts the score on the last valid token", probe_score_on_last_valid_token),
        ),
    ),
    ForkEdit(
        number=2,
        fork_change="the reward loop's naive manager was edited to call a custom compute_score(data_source, "
        'solution_str, ground_truth, extra_info) and return {"reward_score", "reward_extra_info"}',
        replacement="upstream NaiveRewardManager (reward.reward_manager.name=naive, the default) with "
        "reward.custom_reward_function.path=pkg://mrgrpo.reward, name=compute_score; a returned dict's "
        "'score' is the reward and every key goes to reward_extra_info",
        upstream=(f"{NAIVE}.run_single", "verl.trainer.ppo.reward:get_custom_reward_fn"),
        checks=(Behaviour("NaiveRewardManager.run_single calls compute_score as expected", probe_naive_manager_call),),
    ),
    ForkEdit(
        number=3,
        fork_change="verl/utils/dataset/rl_dataset.py was edited to add data.adjust_sys_prompt (rewrite the "
        "system prompt of every row)",
        replacement="mrgrpo.dataset.MrGRPODataset (a subclass of RLHFDataset) selected with data.custom_cls; "
        "data.adjust_sys_prompt is declared in the recipe yaml",
        upstream=("verl.utils.dataset.rl_dataset:get_dataset_class", RLHF),
        checks=(
            SourceMentions("verl.utils.dataset.rl_dataset:get_dataset_class", ("custom_cls",), "reads data.custom_cls"),
            SubclassOf(OUR_DATASET, RLHF),
            RecipeHasKey("data.adjust_sys_prompt"),
        ),
    ),
)
