"""benchmarks/verl_step_table.py: both of verl's log formats and the derived columns (sandbox share, cost per token)."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("verl_step_table", ROOT / "benchmarks" / "verl_step_table.py")
vst = importlib.util.module_from_spec(spec)
spec.loader.exec_module(vst)


def test_console_and_file_logger_give_the_same_steps():
    console = "(TaskRunner pid=1) step:3 - timing_s/step:20.0 - timing_s/gen:np.float64(10.0) - note:abc\n"
    jsonl = json.dumps({"step": 3, "data": {"timing_s/step": 20.0, "timing_s/gen": 10.0, "note": "abc", "ok": True}})
    assert vst.parse_steps(console) == vst.parse_jsonl(jsonl) == {3: {"timing_s/step": 20.0, "timing_s/gen": 10.0}}


def test_a_broken_jsonl_line_is_named():
    with pytest.raises(ValueError, match="line 2"):
        vst.parse_jsonl(json.dumps({"step": 1, "data": {}}) + "\n{not json\n")


@pytest.mark.parametrize("prefix", ["mrgrpo/", "timing_s/mrgrpo/"])  # use_v1=true / use_v1=false names
def test_sandbox_share_is_the_longest_wait_over_the_step(prefix):
    steps = vst.with_derived({1: {"timing_s/step": 40.0, f"{prefix}sandbox/trajectory_s/max": 2.0}})
    assert steps[1]["sandbox_share"] == pytest.approx(0.05)


def test_cost_per_generated_token_needs_the_trajectory_count():
    row = {"timing_s/gen": 8.0, "mrgrpo/tokens/model/mean": 100.0}
    assert "gen_s_per_1k_model_tokens" not in vst.with_derived({1: dict(row)})[1]
    # 8 s for 100 tokens x 400 trajectories = 40,000 tokens: 0.2 s per 1,000
    assert vst.with_derived({1: dict(row)}, trajectories=400)[1]["gen_s_per_1k_model_tokens"] == pytest.approx(0.2)


def test_missing_inputs_leave_the_column_empty(tmp_path, capsys):
    log = tmp_path / "run.jsonl"
    log.write_text(json.dumps({"step": 1, "data": {"timing_s/step": 10.0}}) + "\n")
    assert vst.main([str(log), "--trajectories", "8"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| 1 |"))
    assert row.rstrip().endswith("|  |  |")  # sandbox_share and gen_s/1k_tok left empty, not 0
