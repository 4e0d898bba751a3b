"""The first prompt of a trajectory, for a row and a plan source: one function for the dataset and the agent loop.

`MrGRPODataset` rewrites every row's prompt with `first_turn_messages` before verl's overlong-prompt filter
measures it, and `PlanCodeAgentLoop` calls the same function when it starts (a no-op on an already rewritten
row: the function is idempotent). So the filter measures exactly the tokens the loop sends, and a row that
passes the filter is never cut from the left by verl.

Plan sources:

- ``teacher``: the row's plan (``extra_info.plan``) is in the user turn. A row without a plan is an error
  (`MissingPlanError`): the dataset raises it at launch, naming the rows.
- ``none``: no plan; a plan present in the parquet's user turn is taken out.
- ``self``: the user turn asks the policy for a plan only (`mrgrpo.prompts.build_plan_turn_prompt`).

A row's ``extra_info.plan_source`` overrides the run's plan source.

    >>> info = {"statement": "Print the sum of two integers.", "io_mode": "stdio", "plan": ""}
    >>> msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "old"}]
    >>> out = first_turn_messages(msgs, info, "self")
    >>> out[0] == msgs[0], out[1]["content"].endswith("Keep it under 250 words.")
    (True, True)
    >>> first_turn_messages(out, info, "self") == out
    True
"""

from __future__ import annotations

from typing import Any

from mrgrpo import prompts

PLAN_SOURCES = ("self", "teacher", "none")


class MissingPlanError(ValueError):
    """plan_source=teacher on a row that has no plan."""


def plan_source_of(extra_info: dict, default: str) -> str:
    """The row's own ``extra_info.plan_source`` if set, else the run's; validated."""
    source = str(extra_info.get("plan_source") or default)
    if source not in PLAN_SOURCES:
        raise ValueError(f"plan_source must be one of {PLAN_SOURCES}, got {source!r}")
    return source


def _class_name(extra_info: dict) -> str | None:
    if extra_info.get("class_name"):
        return extra_info["class_name"]
    starter = extra_info.get("starter_code") or ""
    return "Solution" if extra_info.get("io_mode") == "call" and "class Solution" in starter else None


def _problem_fields(extra_info: dict) -> dict:
    missing = [k for k in ("statement", "io_mode") if not extra_info.get(k)]
    if missing:
        raise ValueError(
            f"row {extra_info.get('source_id', '?')}: extra_info lacks {missing}; the plan source needs the first "
            "user turn rebuilt (build the data with `mrgrpo data prepare`)"
        )
    return dict(
        problem_statement=extra_info["statement"],
        starter_code=extra_info.get("starter_code") or "",
        io_mode=extra_info["io_mode"],
        fn_name=extra_info.get("fn_name") or None,
        class_name=_class_name(extra_info),
    )


def first_user_content(content: str, extra_info: dict, plan_source: str) -> str:
    """The first user turn's text for ``plan_source`` (see the module docstring)."""
    row_plan = (extra_info.get("plan") or "").strip()
    if plan_source == "teacher":
        if not row_plan:
            raise MissingPlanError(
                f"plan_source=teacher but row {extra_info.get('source_id', '?')} has no extra_info.plan; build the "
                "data with plans (`mrgrpo data prepare --plans ...`, `--require-plans`) or use plan_source none/self"
            )
        if row_plan in content:
            return content
        return prompts.build_user_prompt(**_problem_fields(extra_info), plan=row_plan)
    if plan_source == "none":
        if row_plan and row_plan in content:
            return prompts.build_user_prompt(**_problem_fields(extra_info), plan=None)
        return content
    if plan_source == "self":
        f = _problem_fields(extra_info)
        return prompts.build_plan_turn_prompt(f["problem_statement"], f["starter_code"], f["io_mode"], f["fn_name"],
                                              class_name=f["class_name"])
    raise ValueError(f"plan_source must be one of {PLAN_SOURCES}, got {plan_source!r}")


def first_turn_messages(messages: list[dict[str, Any]], extra_info: dict, plan_source: str) -> list[dict[str, Any]]:
    """A copy of ``messages`` whose last user message is the first user turn for ``plan_source`` (the row's
    ``extra_info.plan_source`` wins). Other messages (e.g. the system prompt) are kept as they are."""
    source = plan_source_of(extra_info, plan_source)
    out = [dict(m) for m in messages]
    user_idx = max((i for i, m in enumerate(out) if m.get("role") == "user"), default=None)
    if user_idx is None:
        raise ValueError(f"row {extra_info.get('source_id', '?')}: the prompt has no user message")
    content = out[user_idx].get("content")
    if not isinstance(content, str):
        raise TypeError(f"row {extra_info.get('source_id', '?')}: mrGRPO supports text prompts only")
    out[user_idx]["content"] = first_user_content(content, extra_info, source)
    return out
