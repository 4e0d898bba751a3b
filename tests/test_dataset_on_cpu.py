"""MrGRPODataset on parquet rows in the data pipeline's format, with the offline tiny tokenizer.

The rows come from `mrgrpo.data.build` (the stage `mrgrpo data prepare --plans none` runs) on problems
from the bundled sample, so the test follows the pipeline's row format instead of a hand-written copy.
"""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf

from mrgrpo.dataset import MrGRPODataset, replace_system_message, resolve_sys_prompt

NEW_SYSTEM = "You are mrGRPO's test system prompt."


@pytest.fixture(scope="module")
def parquet_path(tmp_path_factory, sample_path):
    from mrgrpo.apps import Problem, read_problems
    from mrgrpo.data.build import make_row, parquet_bytes
    from mrgrpo.data.validate import public_tests_json

    problems = [p for p in read_problems(sample_path) if isinstance(p, Problem)][:6]
    assert len(problems) == 6
    rows = []
    for i, p in enumerate(problems):
        k = 1 if len(p.inputs) > 1 else 0
        rows.append(make_row(p, {"public_tests": public_tests_json(p, k), "n_public": k, "special": []}, "", "",
                             "train", i))
    # one row without a system message: adjust_sys_prompt must add one
    rows[5]["prompt"] = [m for m in rows[5]["prompt"] if m["role"] != "system"]
    out = tmp_path_factory.mktemp("ds") / "train.parquet"
    out.write_bytes(parquet_bytes(rows))
    return out


def make_config(**data):
    base = {
        "prompt_key": "prompt",
        "max_prompt_length": 100000,
        "filter_overlong_prompts": True,
        "filter_overlong_prompts_workers": 1,
        "return_raw_chat": True,
        "truncation": "error",
        "apply_chat_template_kwargs": {"enable_thinking": False},
        "adjust_sys_prompt": None,
        "plan_source": "none",
        "cache_dir": None,
    }
    base.update(data)
    return OmegaConf.create(base)


def test_no_adjust_keeps_prompts(parquet_path, tiny_tokenizer, tmp_path):
    ds = MrGRPODataset(str(parquet_path), tiny_tokenizer, make_config(cache_dir=str(tmp_path)))
    assert len(ds) == 6
    row = ds[0]
    assert row["raw_prompt"][0]["role"] == "system" and row["raw_prompt"][0]["content"] != NEW_SYSTEM
    assert row["agent_name"] == "plan_code"
    written = pq.read_table(parquet_path).to_pylist()
    for i in range(len(ds)):
        # plan_source none on rows without a plan: every prompt is the one the build wrote, message for message
        # (row 5 was written without a system message and stays without one)
        assert ds[i]["raw_prompt"] == written[i]["prompt"]
        # the public tests travel unchanged: the first n_public tests of the problem
        assert ds[i]["extra_info"]["public_tests"] == written[i]["extra_info"]["public_tests"]
    assert [m["role"] for m in ds[5]["raw_prompt"]] == ["user"]
    first = written[0]["extra_info"]
    pub, hidden = json.loads(first["public_tests"]), json.loads(written[0]["reward_model"]["ground_truth"])
    assert len(pub["inputs"]) == 1 and len(hidden["inputs"]) == first["num_tests"] >= 1


@pytest.mark.parametrize("as_file", [False, True])
def test_adjust_sys_prompt_replaces_or_adds(parquet_path, tiny_tokenizer, tmp_path, as_file):
    value = NEW_SYSTEM
    if as_file:
        f = tmp_path / "system.txt"
        f.write_text(NEW_SYSTEM + "\n", encoding="utf-8")
        value = str(f)
    ds = MrGRPODataset(str(parquet_path), tiny_tokenizer, make_config(adjust_sys_prompt=value, cache_dir=str(tmp_path)))
    assert len(ds) == 6
    for i in range(len(ds)):
        msgs = ds[i]["raw_prompt"]
        assert msgs[0] == {"role": "system", "content": NEW_SYSTEM}
        assert [m["role"] for m in msgs] == ["system", "user"]


def test_filter_measures_the_adjusted_prompt(parquet_path, tiny_tokenizer, tmp_path):
    """With a long system prompt, rows that fit before the rewrite no longer fit: the filter ran after it."""
    cfg = make_config(cache_dir=str(tmp_path))
    lengths = []
    base = MrGRPODataset(str(parquet_path), tiny_tokenizer, cfg)
    for i in range(len(base)):
        ids = tiny_tokenizer.apply_chat_template(base[i]["raw_prompt"], add_generation_prompt=True, tokenize=True,
                                                 return_dict=False, enable_thinking=False)
        lengths.append(len(ids))
    limit = max(lengths) + 10
    long_system = "word " * 400
    kept = MrGRPODataset(
        str(parquet_path), tiny_tokenizer, make_config(max_prompt_length=limit, cache_dir=str(tmp_path))
    )
    assert len(kept) == 6
    dropped = MrGRPODataset(
        str(parquet_path),
        tiny_tokenizer,
        make_config(max_prompt_length=limit, adjust_sys_prompt=long_system, cache_dir=str(tmp_path)),
    )
    assert len(dropped) == 0


def test_marker_printed_once_per_process(parquet_path, tiny_tokenizer, tmp_path, capsys):
    import mrgrpo.marker

    mrgrpo.marker._seen.clear()
    MrGRPODataset(str(parquet_path), tiny_tokenizer, make_config(cache_dir=str(tmp_path)))
    MrGRPODataset(str(parquet_path), tiny_tokenizer, make_config(cache_dir=str(tmp_path)))
    assert capsys.readouterr().err.count("MRGRPO_MARKER component=dataset pid=") == 1


def test_resolve_sys_prompt(tmp_path):
    assert resolve_sys_prompt(None) is None and resolve_sys_prompt("  ") is None
    assert resolve_sys_prompt("Be brief.") == "Be brief."
    with pytest.raises(FileNotFoundError):
        resolve_sys_prompt(str(tmp_path / "missing.txt"))
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="empty"):
        resolve_sys_prompt(str(empty))
    with pytest.raises(TypeError):
        resolve_sys_prompt(3)


def test_replace_system_message_rules():
    msgs = [{"role": "user", "content": "u"}]
    assert replace_system_message(msgs, "s") == [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    assert msgs == [{"role": "user", "content": "u"}]  # not mutated
    with pytest.raises(ValueError, match="position 1"):
        replace_system_message([{"role": "user", "content": "u"}, {"role": "system", "content": "x"}], "s")
    with pytest.raises(ValueError):
        replace_system_message([], "s")
