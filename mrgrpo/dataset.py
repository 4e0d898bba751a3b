"""``MrGRPODataset``: verl's ``RLHFDataset`` whose prompts are exactly the agent loop's first prompts.

Wired with ``data.custom_cls.path=pkg://mrgrpo.dataset`` and ``data.custom_cls.name=MrGRPODataset``.

``data.adjust_sys_prompt`` (declared in the recipe yaml, default ``null``): a string, or the path of a UTF-8
text file holding it. When set, every prompt's system message is replaced by it (or one is inserted
first when the prompt has none). The rewrite is applied to the dataframe in ``maybe_filter_out_long_prompts``,
the hook verl calls right after reading the files and before its overlong-prompt filter, so the filter
measures the prompt the policy really sees (the filter tokenizes the prompt column directly), and
``__getitem__`` / the agent loop read the rewritten column as well.

``data.plan_source`` (the recipe yaml sets it to ``${mrgrpo.agent_loop.plan_source}``): in the same hook every
prompt is rewritten to the first prompt `PlanCodeAgentLoop` sends for that plan source
(`mrgrpo.first_turn.first_turn_messages`, the function the loop itself calls), so the filter measures what the
loop really sends and verl never cuts a kept prompt from the left. With ``teacher``, rows without a plan fail
the launch with a message naming them (instead of failing one trajectory at a time in the rollout).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from verl.utils.dataset.rl_dataset import RLHFDataset

from mrgrpo.first_turn import PLAN_SOURCES, MissingPlanError, first_turn_messages, plan_source_of
from mrgrpo.marker import mark_once


def resolve_sys_prompt(value: Any) -> str | None:
    """``data.adjust_sys_prompt`` -> the system prompt text, or ``None`` when unset.

    A value naming an existing file (absolute, ``~`` or relative to the working directory) is read from
    that file; any other non-empty string is the prompt itself. A value that looks like a file path
    (ends in ``.txt``/``.md``) but does not exist is an error, not a literal prompt.
    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"data.adjust_sys_prompt must be a string or a file path, got {type(value).__name__}")
    if not value.strip():
        return None
    candidate = Path(value).expanduser()
    looks_like_path = "\n" not in value and len(value) < 4096
    try:
        is_file = looks_like_path and candidate.is_file()
    except OSError:  # e.g. ENAMETOOLONG: a long one-line prompt is not a path
        is_file = False
    if is_file:
        text = candidate.read_text(encoding="utf-8").strip("\n")
        if not text.strip():
            raise ValueError(f"data.adjust_sys_prompt file {candidate} is empty")
        return text
    if looks_like_path and candidate.suffix in {".txt", ".md"}:
        raise FileNotFoundError(f"data.adjust_sys_prompt names a file that does not exist: {candidate}")
    return value


def replace_system_message(messages: list[dict[str, Any]], system_prompt: str) -> list[dict[str, Any]]:
    """A copy of ``messages`` whose first message is ``{"role": "system", "content": system_prompt}``.

    An existing system message at position 0 is replaced; otherwise one is inserted. A system message
    anywhere else is an error (the chat template would render it mid-conversation).
    """
    if not isinstance(messages, list | tuple) or not messages:
        raise ValueError(f"prompt must be a non-empty list of chat messages, got {messages!r:.200}")
    out = [dict(m) for m in messages]
    for i, m in enumerate(out):
        if not isinstance(m, dict) or "role" not in m:
            raise ValueError(f"prompt message {i} is not a chat message: {m!r:.200}")
        if m["role"] == "system" and i != 0:
            raise ValueError(f"prompt has a system message at position {i}; only position 0 can be replaced")
    if out[0]["role"] == "system":
        out[0] = {**out[0], "content": system_prompt}
    else:
        out.insert(0, {"role": "system", "content": system_prompt})
    return out


class MrGRPODataset(RLHFDataset):
    """``RLHFDataset`` whose prompts get ``data.adjust_sys_prompt`` as their system message."""

    def __init__(self, data_files, tokenizer, config, processor=None, max_samples: int = -1):
        # Read before super().__init__, which loads and filters the files (and calls our hook below).
        self.adjust_sys_prompt = resolve_sys_prompt(config.get("adjust_sys_prompt", None))
        self.plan_source = config.get("plan_source", None)
        if self.plan_source is None:
            raise ValueError(f"MrGRPODataset needs data.plan_source ({' | '.join(PLAN_SOURCES)}); the recipe yaml "
                             "sets it to ${mrgrpo.agent_loop.plan_source}")
        plan_source_of({}, self.plan_source)  # validates the value
        mark_once(
            "dataset",
            cls=type(self).__name__,
            adjust_sys_prompt="set" if self.adjust_sys_prompt is not None else "unset",
            plan_source=self.plan_source,
        )
        super().__init__(data_files, tokenizer, config, processor=processor, max_samples=max_samples)

    def maybe_filter_out_long_prompts(self, dataframe=None):
        if dataframe is not None:
            if self.adjust_sys_prompt is not None:
                dataframe = self._apply_sys_prompt(dataframe)
            dataframe = self._apply_first_turn(dataframe)
        return super().maybe_filter_out_long_prompts(dataframe)

    def _apply_first_turn(self, dataframe):
        key, source = self.prompt_key, self.plan_source
        if "extra_info" not in dataframe.column_names:
            raise KeyError("MrGRPODataset: the data has no extra_info column (build it with `mrgrpo data prepare`)")
        missing = []
        for i, info in enumerate(dataframe["extra_info"]):
            info = info or {}
            if plan_source_of(info, source) == "teacher" and not (info.get("plan") or "").strip():
                missing.append(f"{info.get('source_id', '?')} (row {i})")
        if missing:
            shown = ", ".join(missing[:20]) + (f", ... ({len(missing)} in all)" if len(missing) > 20 else "")
            raise MissingPlanError(
                f"plan_source=teacher but {len(missing)} of {len(dataframe)} rows in {self.data_files} have no plan: "
                f"{shown}. Rebuild with plans (`mrgrpo data prepare --plans ... --require-plans`) or set "
                "PLAN_SOURCE=self|none"
            )

        def rewrite(example: dict) -> dict:
            return {key: first_turn_messages(example[key], example["extra_info"] or {}, source)}

        return dataframe.map(rewrite, desc=f"mrgrpo: first prompt for plan_source={source}")

    def _apply_sys_prompt(self, dataframe):
        key = self.prompt_key
        if key not in dataframe.column_names:
            raise KeyError(f"data.adjust_sys_prompt: the data has no prompt column {key!r} (data.prompt_key)")
        system_prompt = self.adjust_sys_prompt

        def rewrite(example: dict) -> dict:
            return {key: replace_system_message(example[key], system_prompt)}

        return dataframe.map(rewrite, desc="data.adjust_sys_prompt: replacing system messages")
