"""`mrgrpo eval` as a careful user finds it: every usage error is one line on stderr (`mrgrpo eval: error: ...`, no
traceback) and exit 2, found before vLLM, torch or transformers is imported; a hub id resolves through the
Hugging Face cache; --help has an example and every default; report.md says what the prompt-length filter dropped.

The command runs as a user runs it, `python -m mrgrpo eval ...` in a fresh process, from a directory outside the
checkout. "No vLLM" is made by `sys.modules["vllm"] = None` in that process (`importlib.util.find_spec` then finds
nothing and `import vllm` fails), so the test holds where vLLM is installed too. The HF cache is a directory laid
out as huggingface_hub writes it (models--org--name/refs/main, snapshots/<rev>/), read with HF_HUB_OFFLINE=1 by
huggingface_hub's own lookup: no network anywhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mrgrpo import prompts
from mrgrpo.cli import UsageError
from mrgrpo.data.build import AGENT_NAME, parquet_bytes
from mrgrpo.eval import checks
from mrgrpo.eval.cli import parser
from mrgrpo.eval.report import write_outputs
from mrgrpo.eval.run import SampleRecord, dropped_ids

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("vllm", "torch", "transformers")

# Runs `mrgrpo eval ARGV...` with vLLM hidden, then prints (stdout) the heavy modules it imported.
WRAPPER = f"""
import json, sys
sys.modules["vllm"] = None
from mrgrpo.cli import main
try:
    rc = main(["eval", *sys.argv[1:]])
finally:
    print(json.dumps(sorted(m for m in {HEAVY!r} if sys.modules.get(m) is not None)))
sys.exit(rc)
"""


def row(i: int, plan: str = "", statement: str = "Print the sum of two integers.") -> dict:
    tests = json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]})
    return {
        "data_source": "apps_plus",
        "prompt": prompts.build_messages(statement, "", "stdio", None, None),
        "ability": "code",
        "reward_model": {"style": "rule", "ground_truth": tests},
        "extra_info": {
            "index": i, "split": "val", "difficulty": "introductory", "source_id": f"p{i}", "plan": plan,
            "plan_model": "", "io_mode": "stdio", "fn_name": None, "class_name": None, "public_tests": tests,
            "num_tests": 1, "reference_solution": "", "special": [], "statement": statement, "starter_code": "",
            "prompt_version": prompts.PROMPT_VERSION,
        },
        "agent_name": AGENT_NAME,
    }


@pytest.fixture
def data(tmp_path) -> Path:
    path = tmp_path / "val.parquet"
    path.write_bytes(parquet_bytes([row(0), row(1)]))
    return path


@pytest.fixture
def model(tmp_path) -> Path:
    path = tmp_path / "hf_model"
    path.mkdir()
    (path / "config.json").write_text('{"model_type": "qwen3"}')
    (path / "tokenizer_config.json").write_text("{}")
    return path


def run_eval(tmp_path: Path, *argv: str, **env: str) -> tuple[int, list[str], list[str]]:
    """(exit status, stderr lines, heavy modules imported) of `mrgrpo eval ARGV` run from ``tmp_path`` without
    vLLM, with ``env`` added to the environment (and HF_HUB_OFFLINE only when given there)."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO)}
    full_env.pop("HF_HUB_OFFLINE", None)
    full_env.update(env)
    p = subprocess.run([sys.executable, "-c", WRAPPER, *argv], cwd=tmp_path, env=full_env, capture_output=True,
                       text=True, timeout=120)
    return p.returncode, p.stderr.splitlines(), json.loads(p.stdout.strip().splitlines()[-1])


def assert_one_line_usage_error(rc: int, err: list[str], heavy: list[str], *words: str) -> str:
    assert rc == 2, err
    assert len(err) == 1, err  # one line: no traceback, no log
    assert err[0].startswith("mrgrpo eval: error: "), err
    assert heavy == [], f"imported {heavy} before a usage error"
    for w in words:
        assert w in err[0], (w, err[0])
    return err[0]


def fake_hf_cache(root: Path, repo_id: str, rev: str = "0123456789abcdef0123456789abcdef01234567") -> Path:
    """A model in an HF hub cache as huggingface_hub lays it out; returns its snapshot directory."""
    repo = root / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / rev
    snap.mkdir(parents=True)
    (snap / "config.json").write_text('{"model_type": "qwen3"}')
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(rev)
    return snap


# ------------------------------------------------------------------------------------------------ --data


def test_missing_data_file_is_one_line_exit_2(tmp_path, model):
    rc, err, heavy = run_eval(tmp_path, "--model", str(model), "--data", "nope.parquet", "--out", "o")
    assert_one_line_usage_error(rc, err, heavy, "--data nope.parquet", "no such file")


def test_data_directory_is_one_line_exit_2(tmp_path, model):
    rc, err, heavy = run_eval(tmp_path, "--model", str(model), "--data", str(tmp_path), "--out", "o")
    assert_one_line_usage_error(rc, err, heavy, str(tmp_path), "is a directory")


def test_data_that_is_not_parquet_is_one_line_exit_2(tmp_path, model):
    (tmp_path / "val.jsonl").write_text('{"prompt": "x"}\n')
    rc, err, heavy = run_eval(tmp_path, "--model", str(model), "--data", "val.jsonl", "--out", "o")
    assert_one_line_usage_error(rc, err, heavy, "--data val.jsonl", "is not a parquet file")


def test_parquet_without_the_needed_columns_names_them(tmp_path, model):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"prompt": ["x"], "reward_model": [{"style": "rule"}]}), tmp_path / "other.parquet")
    rc, err, heavy = run_eval(tmp_path, "--model", str(model), "--data", "other.parquet", "--out", "o")
    line = assert_one_line_usage_error(rc, err, heavy, "other.parquet", "mrgrpo data prepare")
    for missing in ("data_source", "extra_info", "reward_model.ground_truth"):
        assert missing in line


def test_teacher_plan_source_on_data_without_plans_speaks_of_evals_options(tmp_path, data, model):
    rc, err, heavy = run_eval(tmp_path, "--model", str(model), "--data", str(data), "--out", "o",
                              "--plan-source", "teacher")
    line = assert_one_line_usage_error(rc, err, heavy, "2 of 2 rows have no plan", "p0, p1",
                                       "mrgrpo data prepare --plans", "--plan-source self")
    assert "PLAN_SOURCE" not in line


def test_teacher_plan_source_with_plans_passes_the_data_check(tmp_path):
    path = tmp_path / "planned.parquet"
    path.write_bytes(parquet_bytes([row(0, plan="Add them."), row(1, plan="")]))
    assert checks.check_data(path, "teacher", limit=1).num_evaluated == 1  # only the first row is evaluated
    with pytest.raises(UsageError, match="1 of 2 rows have no plan"):
        checks.check_data(path, "teacher")


def test_rows_for_another_agent_loop_are_a_usage_error(tmp_path):
    other = {**row(1), "agent_name": "tool_agent"}
    path = tmp_path / "mixed.parquet"
    path.write_bytes(parquet_bytes([row(0), other]))
    with pytest.raises(UsageError, match="tool_agent"):
        checks.check_data(path, "self")


def test_empty_parquet_is_a_usage_error(tmp_path):
    path = tmp_path / "empty.parquet"
    path.write_bytes(parquet_bytes([]))
    with pytest.raises(UsageError, match="has no rows"):
        checks.check_data(path, "self")


# ------------------------------------------------------------------------------------------------ --model


def test_model_path_that_does_not_exist_is_exit_2(tmp_path, data):
    rc, err, heavy = run_eval(tmp_path, "--model", "/nope", "--data", str(data), "--out", "o")
    assert_one_line_usage_error(rc, err, heavy, "--model /nope", "no such directory", "Qwen/Qwen3-0.6B")


def test_model_directory_without_config_is_exit_2(tmp_path, data):
    (tmp_path / "empty").mkdir()
    rc, err, heavy = run_eval(tmp_path, "--model", "empty", "--data", str(data), "--out", "o")
    assert_one_line_usage_error(rc, err, heavy, "--model empty", "without config.json")


def test_model_directory_without_a_tokenizer_is_exit_2(tmp_path, data):
    (tmp_path / "notok").mkdir()
    (tmp_path / "notok" / "config.json").write_text("{}")
    rc, err, heavy = run_eval(tmp_path, "--model", "notok", "--data", str(data), "--out", "o")
    assert_one_line_usage_error(rc, err, heavy, "--model notok", "no tokenizer")


def test_hub_id_resolves_to_its_snapshot_in_the_hf_cache(tmp_path):
    snap = fake_hf_cache(tmp_path / "hub", "acme/tiny-model")
    source = checks.model_source("acme/tiny-model", offline=True, cache_dir=tmp_path / "hub")
    assert (source.kind, source.repo_id, source.path) == ("hub", "acme/tiny-model", snap)


def test_hub_id_is_resolved_through_hf_hub_cache_env_offline(tmp_path):
    """As the command resolves it: HF_HUB_CACHE and HF_HUB_OFFLINE from the environment, from another directory."""
    snap = fake_hf_cache(tmp_path / "hub", "acme/tiny-model")
    code = ("from pathlib import Path; from mrgrpo.eval.cli import resolve_model; "
            "print(resolve_model('acme/tiny-model', Path('merged')))")
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == repr((snap, "hub acme/tiny-model, from the HF cache"))


def test_cached_hub_id_passes_the_model_check(tmp_path, data):
    """The model check lets a cached hub id through: the next check (vLLM, hidden here) is the one that speaks."""
    fake_hf_cache(tmp_path / "hub", "acme/tiny-model")
    rc, err, heavy = run_eval(tmp_path, "--model", "acme/tiny-model", "--data", str(data), "--out", "o",
                              HF_HUB_CACHE=str(tmp_path / "hub"), HF_HUB_OFFLINE="1")
    assert_one_line_usage_error(rc, err, heavy, "vLLM is not installed")


def test_hub_id_not_cached_while_offline_is_one_line_exit_2(tmp_path, data):
    (tmp_path / "hub").mkdir()
    rc, err, heavy = run_eval(tmp_path, "--model", "acme/absent", "--data", str(data), "--out", "o",
                              HF_HUB_CACHE=str(tmp_path / "hub"), HF_HUB_OFFLINE="1")
    assert_one_line_usage_error(rc, err, heavy, "--model acme/absent", "not in the Hugging Face cache",
                                str(tmp_path / "hub"), "HF_HUB_OFFLINE")


def test_hub_that_cannot_be_reached_is_a_usage_error(tmp_path):
    """Online, not cached, the hub unreachable (a closed local port as its endpoint): one line, no traceback."""
    code = ("from mrgrpo.cli import UsageError\nfrom mrgrpo.eval.checks import fetch_hub_model\n"
            "try:\n    fetch_hub_model('acme/absent')\nexcept UsageError as e:\n    print(e)\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_CACHE": str(tmp_path / "hub"),
           "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_ETAG_TIMEOUT": "2", "HF_HUB_DOWNLOAD_TIMEOUT": "2"}
    env.pop("HF_HUB_OFFLINE", None)
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert "--model acme/absent" in p.stdout and "cannot be reached" in p.stdout


@pytest.mark.parametrize("text", ["Qwen/Qwen3-0.6B", "org/name.v2", "a_b/c-d"])
def test_hub_id_forms(text):
    assert checks.is_hub_id(text)


@pytest.mark.parametrize("text", ["qwen3-8b", "/abs/path", "./rel/x", "a/b/c", "~/m", "a/..", "org/x--y"])
def test_not_hub_ids(text):
    assert not checks.is_hub_id(text)


# ------------------------------------------------------------------------------------------------ vLLM, options


def test_missing_vllm_names_the_gpu_install_line(tmp_path, data, model):
    rc, err, heavy = run_eval(tmp_path, "--model", str(model), "--data", str(data), "--out", "o")
    assert_one_line_usage_error(rc, err, heavy, "vLLM is not installed", "pip install -e '.[gpu]'")


def test_missing_vllm_is_found_before_the_output_directory_is_made(tmp_path, data, model):
    run_eval(tmp_path, "--model", str(model), "--data", str(data), "--out", "o")
    assert not (tmp_path / "o").exists()


def test_bad_option_value_is_one_line_exit_2(tmp_path, data, model):
    rc, err, heavy = run_eval(tmp_path, "--model", str(model), "--data", str(data), "--out", "o", "--n", "0")
    assert rc == 2 and len(err) == 1 and err[0].startswith("mrgrpo eval: error: ") and "--n" in err[0]


def test_k_above_n_is_one_line_exit_2(tmp_path, data, model):
    rc, err, heavy = run_eval(tmp_path, "--model", str(model), "--data", str(data), "--out", "o", "--n", "4")
    assert_one_line_usage_error(rc, err, heavy, "--k [5, 10]", "n=4")


def test_reward_kwargs_that_is_not_json_is_one_line_exit_2(tmp_path, data, model):
    rc, err, heavy = run_eval(tmp_path, "--model", str(model), "--data", str(data), "--out", "o",
                              "--reward-kwargs", "{timeout: 3}")
    assert_one_line_usage_error(rc, err, heavy, "--reward-kwargs is not JSON")


def test_missing_agent_loop_config_is_one_line_exit_2(tmp_path, data, model):
    rc, err, heavy = run_eval(tmp_path, "--model", str(model), "--data", str(data), "--out", "o",
                              "--agent-loop-config", "nope.yaml")
    assert_one_line_usage_error(rc, err, heavy, "--agent-loop-config nope.yaml")


# ------------------------------------------------------------------------------------------------ --help


def help_text() -> str:
    return parser().format_help()


def test_help_has_an_example():
    text = help_text()
    assert "example" in text and "mrgrpo eval --model Qwen/Qwen3-0.6B --data" in text


def test_help_shows_every_default():
    import argparse

    p = parser()
    for action in p._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        shown = p.formatter_class(prog=p.prog)._get_help_string(action) if action.help else ""
        assert "default" in shown, f"{action.option_strings}: no default in {shown!r}"


def test_help_states_the_exit_statuses():
    text = " ".join(help_text().split())
    assert "2 a usage error" in text and "3 vLLM's engine failed to start" in text


# ------------------------------------------------------------------------------------------------ report


def record(pid: str) -> SampleRecord:
    return SampleRecord(problem_id=pid, index=0, data_source="apps_plus", difficulty="introductory",
                        plan_source="self", sample=0, verdict="AC", acc=1.0, attempt1_verdict="AC", attempt1_acc=1.0,
                        attempts=1, stop_reason="passed", model_tokens=10, injected_tokens=0)


SETTINGS = {"n": 1, "plan_source": "self", "temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_response_length": 64}


def test_report_says_how_many_problems_the_prompt_filter_dropped_and_which(tmp_path):
    pf = {"max_prompt_length": 512, "problems_read": 5, "dropped": 2, "dropped_ids": ["p3", "p4"]}
    summary = write_outputs([record("p0"), record("p1"), record("p2")], [1], SETTINGS, tmp_path, prompt_filter=pf)
    report = (tmp_path / "report.md").read_text()
    assert "2 of 5 problems dropped" in report and "`p3`, `p4`" in report and "max_prompt_length=512" in report
    assert summary["prompt_filter"] == pf
    assert json.loads((tmp_path / "summary.json").read_text())["prompt_filter"] == pf


def test_report_says_when_the_prompt_filter_dropped_none(tmp_path):
    pf = {"max_prompt_length": 2048, "problems_read": 1, "dropped": 0, "dropped_ids": []}
    write_outputs([record("p0")], [1], SETTINGS, tmp_path, prompt_filter=pf)
    assert "0 of 1 problems dropped" in (tmp_path / "report.md").read_text()


def test_dropped_ids_are_the_read_problems_not_kept_in_file_order():
    read = [{"source_id": "a"}, {"source_id": "b"}, {"index": 7}, {"source_id": "b"}]
    assert dropped_ids(read, [{"source_id": "b"}]) == ["a", "7", "b"]
    assert dropped_ids(read, read) == []


@pytest.mark.slow
def test_load_rows_reports_the_problems_verls_filter_dropped(tmp_path):
    """The real dataset (MrGRPODataset, verl's filter) with a real tokenizer: the long problem is the dropped one."""
    pytest.importorskip("transformers")
    from mrgrpo.eval.run import EvalSettings, load_rows
    from mrgrpo.tiny_model import build_tokenizer

    tok = build_tokenizer(tmp_path / "tok")
    long = "Print the sum of two integers. " + "Read the input carefully. " * 200
    path = tmp_path / "val.parquet"
    path.write_bytes(parquet_bytes([row(0), row(1, statement=long), row(2)]))
    loaded = load_rows(path, tok, EvalSettings(n=1, max_prompt_length=600, plan_source="none"))
    assert [r["extra_info"]["source_id"] for r in loaded.rows] == ["p0", "p2"]
    assert (loaded.num_read, loaded.dropped) == (3, ["p1"])
