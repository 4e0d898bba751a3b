"""learnability transcripts and SFT dataset: the transcripts are the agent loop's exact token stream, the failed
attempts really fail in the real sandbox, and verl 0.9.1's SFT trainer path (dataset factory, collator, sft_loss)
trains exactly the model's own tokens."""

from __future__ import annotations

import json

import pytest

from mrgrpo import prompts
from mrgrpo.apps import Problem
from mrgrpo.code_extract import extract_code

from learnability import transcripts as tr
from learnability.sft_dataset import TranscriptSFTDataset
from learnability.tokenizer import fixed_prompt_texts, save_tokenizer, train_tokenizer

SUM = "n = int(input())\ntotal = 0\nfor i in range(1, n + 1):\n    total += i\nprint(total)\n"
COUNT = "def count_pos(xs):\n    c = 0\n    for x in xs:\n        if x > 0:\n            c += 1\n    return c\n"
GEN = "<|im_start|>assistant\n<think>\n\n</think>\n\n"


def _problems() -> list[Problem]:
    return [
        Problem("t:sum", "apps_plus", "Read n and print 1 + 2 + ... + n.", "stdio", None, None, "",
                ["10\n", "3\n"], ["55\n", "6\n"], "introductory", SUM),
        Problem("t:count", "apps_plus", "Return how many numbers of xs are positive.", "call", "count_pos", None,
                "def count_pos(xs):\n    pass", [[[1, -2, 3, 4]], [[0]]], [3, 0], "introductory", COUNT),
    ]


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    from transformers import AutoTokenizer

    corpus = fixed_prompt_texts() + [SUM, COUNT] * 5 + [p.statement for p in _problems()] * 3
    out = tmp_path_factory.mktemp("learn_tok")
    save_tokenizer(train_tokenizer(corpus, vocab_size=1024, min_frequency=1), out)
    return AutoTokenizer.from_pretrained(str(out))


@pytest.fixture(scope="module")
def rows():
    return [tr.row_from_problem(p, index=i) for i, p in enumerate(_problems())]


@pytest.fixture(scope="module")
def built(tok, rows):
    # the real sandbox: the reference and every tried mutant run on the public tests
    return tr.build_transcripts(rows, tok, workers=1, seed=0)


def _by(built, kind, source_id):
    (t,) = [t for t in built.transcripts if t.kind == kind and t.source_id == source_id]
    return t


def _loop_feedback(tok, row, program):
    """The feedback message for ``program``: the real sandbox's result, worded by the loop's own function."""
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from mrgrpo.agent_loop import PlanCodeAgentLoop, parse_public_tests
    from mrgrpo.sandbox import run

    tests = parse_public_tests(row["extra_info"])
    result = run(tests.job(program, stop_on_first_failure=True))
    cfg = tr.LoopSettings().loop_config()
    loop = PlanCodeAgentLoop(trainer_config=DictConfigWrap(cfg), server_manager=object(), tokenizer=tok, processor=None,
                             dataset_cls=RLHFDataset, data_config=DictConfigWrap(cfg.data), hf_model_type="qwen3")
    return result, loop.feedback_message(result, tests)


def _expected_text(row, plan, answers, feedbacks):
    """The conversation as Qwen3 ChatML with enable_thinking=False, written out by hand: system, the plan request,
    then assistant/user turns; every generation prompt carries the empty think block."""
    from mrgrpo.first_turn import first_turn_messages

    # the first user turn for plan_source=self: the function the dataset and the loop share
    plan_request = first_turn_messages(row["prompt"], row["extra_info"], "self")[-1]["content"]
    assert "write a plan only" in plan_request
    text = (f"<|im_start|>system\n{prompts.SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n{plan_request}<|im_end|>\n"
            f"{GEN}{plan}<|im_end|>\n<|im_start|>user\n{prompts.CODE_AFTER_PLAN_PROMPT}<|im_end|>\n")
    for i, answer in enumerate(answers):
        text += GEN + answer + "<|im_end|>"
        if i < len(feedbacks):
            text += f"\n<|im_start|>user\n{feedbacks[i]}<|im_end|>\n"
    return text


def _mask_runs(t):
    runs, current = [], []
    for tid, m in zip(t.input_ids, t.loss_mask, strict=True):
        if m:
            current.append(tid)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    return runs


# ------------------------------------------------------------------ exactness
def test_both_kinds_for_every_problem(built):
    assert built.skipped == {}
    assert sorted((t.source_id, t.kind) for t in built.transcripts) == [
        ("t:count", "fix"), ("t:count", "plan_code"), ("t:sum", "fix"), ("t:sum", "plan_code")]
    assert all(t.stop_reason == "passed" for t in built.transcripts)
    summary = built.summary()
    assert summary["by_kind"] == {"fix": 2, "plan_code": 2} and summary["sandbox_runs"] >= 4


@pytest.mark.parametrize("source_id", ["t:sum", "t:count"])
def test_plan_code_transcript_is_the_independently_rendered_conversation(tok, rows, built, source_id):
    row = next(r for r in rows if r["extra_info"]["source_id"] == source_id)
    t = _by(built, "plan_code", source_id)
    plan = tr.generic_plan(row["extra_info"])
    answer = "```python\n" + row["extra_info"]["reference_solution"].strip("\n") + "\n```"
    text = _expected_text(row, plan, [answer], [])
    assert tok.decode(t.input_ids, skip_special_tokens=False) == text
    assert t.input_ids == tok.encode(text, add_special_tokens=False)
    # the first prompt is the chat template's own rendering
    first = tok.apply_chat_template([{"role": "system", "content": prompts.SYSTEM_PROMPT},
                                     {"role": "user", "content": text.split("<|im_start|>user\n")[1].split(
                                         "<|im_end|>")[0]}],
                                    tokenize=True, add_generation_prompt=True, enable_thinking=False, return_dict=False)
    assert t.prompt_ids == list(first)
    # trained: exactly the two assistant turns, each with its closing <|im_end|>; nothing else
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    assert _mask_runs(t) == [tok.encode(plan, add_special_tokens=False) + [im_end],
                             tok.encode(answer, add_special_tokens=False) + [im_end]]
    assert t.loss_mask[: len(t.prompt_ids)] == [0] * len(t.prompt_ids) and t.public_verdicts == ["AC"]


@pytest.mark.parametrize("source_id", ["t:sum", "t:count"])
def test_fix_transcript_failed_attempt_really_fails_and_feedback_is_the_loops(tok, rows, built, source_id):
    from mrgrpo.sandbox import Verdict

    row = next(r for r in rows if r["extra_info"]["source_id"] == source_id)
    t = _by(built, "fix", source_id)
    runs = _mask_runs(t)
    assert len(runs) == 3  # plan, failed attempt, fix
    bad_answer = tok.decode(runs[1][:-1], skip_special_tokens=False)
    bad = extract_code(bad_answer)
    ref = row["extra_info"]["reference_solution"].strip("\n")
    assert bad and bad != ref and t.mutation.split("@")[0] in {"off_by_one", "operator", "comparison", "boolean",
                                                               "edge_case"}
    result, feedback = _loop_feedback(tok, row, bad)
    assert result.verdict is not Verdict.AC and result.verdict.value == t.public_verdicts[0]  # real sandbox, again
    assert t.public_verdicts[1] == "AC"
    plan = tr.generic_plan(row["extra_info"])
    answers = ["```python\n" + bad + "\n```", "```python\n" + ref + "\n```"]
    text = _expected_text(row, plan, answers, [feedback])
    assert tok.decode(t.input_ids, skip_special_tokens=False) == text
    assert t.input_ids == tok.encode(text, add_special_tokens=False)
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    assert runs == [tok.encode(a, add_special_tokens=False) + [im_end] for a in [plan, *answers]]
    assert feedback.startswith(prompts.FEEDBACK_HEADER.format(n_failed=1, n_shown=1))


def test_row_plan_is_the_plan_turn(tok, rows):
    from mrgrpo.agent_loop import parse_public_tests
    from mrgrpo.sandbox import run

    row = json.loads(json.dumps(rows[0]))
    row["extra_info"]["plan"] = "Sum the integers from 1 to n with a loop."

    job = parse_public_tests(row["extra_info"]).job(SUM.strip("\n"))
    box = tr.ReplaySandbox({job.code: (job, run(job))})
    t = tr.transcript_from_loop(tok, row, "plan_code", box, SUM.strip("\n"))
    assert tok.decode(_mask_runs(t)[0][:-1]) == "Sum the integers from 1 to n with a loop."
    assert len(box.jobs) == 1


def test_plan_source_none_has_no_plan_turn(tok, rows):
    from mrgrpo.agent_loop import parse_public_tests
    from mrgrpo.sandbox import run

    job = parse_public_tests(rows[0]["extra_info"]).job(SUM.strip("\n"))
    box = tr.ReplaySandbox({job.code: (job, run(job))})
    t = tr.transcript_from_loop(tok, rows[0], "plan_code", box, SUM.strip("\n"),
                                settings=tr.LoopSettings(plan_source="none"))
    assert len(_mask_runs(t)) == 1
    assert tok.decode(t.prompt_ids).endswith("Write your solution in a single ```python code block.<|im_end|>\n" + GEN)


def test_replay_sandbox_refuses_unrecorded_programs_and_the_seam_is_restored(tok, rows):
    import mrgrpo.agent_loop as al
    import mrgrpo.sandbox

    with pytest.raises(tr.TranscriptRejected) as info:
        tr.transcript_from_loop(tok, rows[0], "plan_code", tr.ReplaySandbox({}), SUM.strip("\n"))
    assert info.value.reason == "loop_error" and "no recorded result" in info.value.detail
    assert al.PlanCodeAgentLoop.judge is mrgrpo.sandbox  # only that one loop had the replay as its judge


def test_a_mutant_that_passes_is_never_used(tok, rows):
    """A fake runner that says every program passes: no failing mutant, so no fix transcript."""
    from mrgrpo.sandbox import ExecResult, TestResult, Verdict

    def all_pass(jobs):
        return [ExecResult(Verdict.AC, len(j.inputs), len(j.inputs),
                           tuple(TestResult(i, Verdict.AC, 0.0, "", "") for i in range(len(j.inputs))), 0.0, "")
                for j in jobs]

    built = tr.build_transcripts(rows, tok, runner=all_pass, max_mutants=3)
    assert {t.kind for t in built.transcripts} == {"plan_code"}
    assert built.skipped == {"fix_no_failing_mutant": 2}
    assert built.sandbox_runs == 2 + 2 * 3


def test_the_loop_in_worker_processes_gives_the_same_transcripts(tok, monkeypatch):
    """The loop step on forked worker processes (rows shared out in chunks) gives the transcripts, in the order and
    with the counts, of one process."""
    import dataclasses

    from mrgrpo.sandbox import ExecResult, TestResult, Verdict

    rows = [tr.row_from_problem(dataclasses.replace(p, source_id=f"{p.source_id}{k}"), index=len(_problems()) * k + i)
            for k in range(3) for i, p in enumerate(_problems())]
    references = {extract_code(tr.answer_text(r["extra_info"]["reference_solution"].strip("\n"))) for r in rows}

    def judge(jobs):  # the references pass, every other program gives a wrong answer on its first test
        out = []
        for j in jobs:
            ok = j.code in references
            tests = tuple(TestResult(i, Verdict.AC, 0.0, "", "") for i in range(len(j.inputs))) if ok else (
                TestResult(0, Verdict.WA, 0.0, "0\n", ""),)
            out.append(ExecResult(Verdict.AC if ok else Verdict.WA, len(tests) if ok else 0, len(j.inputs), tests,
                                  0.0, ""))
        return out

    one = tr.build_transcripts(rows, tok, runner=judge, loop_workers=1)
    monkeypatch.setattr(tr, "_LOOP_CHUNK", 2)
    two = tr.build_transcripts(rows, tok, runner=judge, loop_workers=2)
    assert {t.kind for t in one.transcripts} == {"plan_code", "fix"} and len(one.transcripts) == 2 * len(rows)
    assert [t.to_row() for t in two.transcripts] == [t.to_row() for t in one.transcripts]
    assert two.summary() == one.summary()


# ------------------------------------------------------------------ the SFT dataset and verl's trainer path
@pytest.fixture(scope="module")
def parquet(built, tmp_path_factory):
    path = tmp_path_factory.mktemp("sft") / "sft_train.parquet"
    tr.write_parquet(built.transcripts, path)
    return path


def test_dataset_items_are_the_loop_output(tok, built, parquet):
    import torch

    ds = TranscriptSFTDataset(str(parquet), tok, {"pad_mode": "no_padding", "max_length": 8192})
    assert len(ds) == len(built.transcripts)
    for i, t in enumerate(built.transcripts):
        item = ds[i]
        assert set(item) == {"input_ids", "position_ids", "loss_mask"}
        assert all(v.dtype == torch.int64 and v.dim() == 1 for v in item.values())
        assert item["input_ids"].tolist() == t.input_ids and item["loss_mask"].tolist() == t.loss_mask
        assert item["position_ids"].tolist() == list(range(len(t.input_ids)))


def test_dataset_right_padding_and_truncation(tok, built, parquet):
    n = max(len(t.input_ids) for t in built.transcripts)
    ds = TranscriptSFTDataset([str(parquet)], tok, {"pad_mode": "right", "max_length": n + 5})
    item = ds[0]
    assert set(item) == {"input_ids", "attention_mask", "position_ids", "loss_mask"}
    k = len(built.transcripts[0].input_ids)
    assert item["input_ids"].shape == (n + 5,) and int(item["attention_mask"].sum()) == k
    assert item["input_ids"][k:].eq(tok.pad_token_id).all() and item["loss_mask"][k:].eq(0).all()
    with pytest.raises(ValueError, match="longer than data.max_length"):
        TranscriptSFTDataset(str(parquet), tok, {"max_length": 16})
    cut = TranscriptSFTDataset(str(parquet), tok, {"max_length": 16, "truncation": "right"}, max_samples=1)
    assert len(cut) == 1 and cut[0]["input_ids"].tolist() == built.transcripts[0].input_ids[:16]


def test_dataset_rejects_bad_masks(tok, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist([{"input_ids": [1, 2, 3], "loss_mask": [1, 1, 1]}]), str(path))
    with pytest.raises(ValueError, match="loss_mask"):
        TranscriptSFTDataset(str(path), tok, {})


def _sft_config(parquet, tmp_path):
    from pathlib import Path

    import verl
    from hydra import compose, initialize_config_dir

    config_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose("sft_trainer_engine", overrides=[
            f"data.train_files={parquet}", "data.custom_cls.path=pkg://learnability.sft_dataset",
            "data.custom_cls.name=TranscriptSFTDataset", "data.max_length=8192", "data.max_token_len_per_gpu=8192",
            f"model.path={tmp_path}", "trainer.logger=[console]"])


def test_verl_sft_trainer_path_trains_exactly_the_model_tokens(tok, built, parquet, tmp_path):
    """verl's own pieces: create_sft_dataset (data.custom_cls), SFTTensorCollator(pad_mode), get_tensordict as
    the trainer builds it, and sft_loss: the weight on log_prob[i] (which predicts token i + 1) is loss_mask[i + 1],
    so the tokens trained are exactly those with loss_mask 1: the model's own, each turn's <|im_end|> included."""
    import torch
    from verl.trainer.sft_trainer import create_sft_dataset
    from verl.utils import tensordict_utils as tu
    from verl.utils.dataset.dataset_utils import SFTTensorCollator
    from verl.workers.utils.losses import sft_loss

    cfg = _sft_config(parquet, tmp_path)
    assert cfg.data.pad_mode == "no_padding" and cfg.data.use_dynamic_bsz
    ds = create_sft_dataset(cfg.data.train_files, cfg.data, tok, None)
    assert isinstance(ds, TranscriptSFTDataset)
    batch = SFTTensorCollator(cfg.data.pad_mode)([ds[i] for i in range(len(ds))])
    meta = {"use_remove_padding": True, "use_dynamic_bsz": True, "max_token_len_per_gpu": 8192,
            "micro_batch_size_per_gpu": 1, "temperature": 1.0, "global_batch_size": len(ds),
            "pad_mode": cfg.data.pad_mode, "pad_token_id": tok.pad_token_id}
    data = tu.get_tensordict(tensor_dict=batch, non_tensor_dict=meta)
    assert data["input_ids"].is_nested
    assert data["input_ids"].offsets().diff().tolist() == [len(t.input_ids) for t in built.transcripts]

    # a fake model output: log_prob[i] of each sequence = -(i + 1), i.e. "predicting token i + 1 costs i + 1"
    lengths = data["input_ids"].offsets().diff().tolist()
    flat = torch.cat([-(torch.arange(n, dtype=torch.float32) + 1) for n in lengths])
    log_probs = torch.nested.nested_tensor_from_jagged(flat, data["input_ids"].offsets())
    n_trained = int(data["loss_mask"].values().sum())  # what verl's engine puts in batch_num_tokens
    tu.assign_non_tensor(data, batch_num_tokens=n_trained, dp_size=1)
    loss, _ = sft_loss(None, {"log_probs": log_probs}, data)
    # token j with loss_mask[j] == 1 is predicted at position j - 1, whose fake cost is j
    expected = sum(j for t in built.transcripts for j, m in enumerate(t.loss_mask) if m) / n_trained
    assert float(loss) == pytest.approx(expected)
    trained = [t.input_ids[j] for t in built.transcripts for j, m in enumerate(t.loss_mask) if m]
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    n_turns = sum(len(_mask_runs(t)) for t in built.transcripts)
    assert trained.count(im_end) == n_turns  # every model turn's closing token is trained, no injected one


def test_cli_help_and_sft_data_from_jsonl(tok, tmp_path, capsys):
    from learnability import kit as cli

    for command in ("tokenizer", "model", "sft-data"):
        with pytest.raises(SystemExit) as exit_info:
            cli.main([command, "--help"])
        assert exit_info.value.code == 0
    records = [{"id": "j:sum", "prompt": 'def f():\n    """Read n and print 1 + 2 + ... + n."""\n',
                "starter_code": "def f():", "inputs": ["10\n", "3\n"], "outputs": ["55\n", "6\n"],
                "canonical_solution": "def f():\n" + "".join("    " + line + "\n" for line in SUM.splitlines()),
                "difficulty": "introductory"}]
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert cli.main(["tokenizer", "--data", str(jsonl), "--out", str(tmp_path / "tok"), "--vocab-size", "512"]) == 0
    assert cli.main(["model", "--tokenizer", str(tmp_path / "tok"), "--out", str(tmp_path / "m"), "--tiny"]) == 0
    assert "parameters:" in capsys.readouterr().out and (tmp_path / "m" / "model.safetensors").is_file()
    (row,) = cli.load_rows(str(jsonl))["train"]
    assert row["extra_info"]["reference_solution"].endswith("f()\n")
    assert json.loads(row["extra_info"]["public_tests"])["inputs"] == ["10\n"]  # one public, one hidden test
    assert cli.main(["sft-data", "--data", str(jsonl), "--tokenizer", str(tmp_path / "m"), "--out",
                     str(tmp_path / "out"), "--workers", "1", "--kinds", "plan_code"]) == 0
    out = capsys.readouterr().out
    assert "wrote 1 transcripts" in out and "sft_train.parquet" in out and "-m verl.trainer.sft_trainer" in out
    report = json.loads((tmp_path / "out" / "sft_report.json").read_text())
    assert report["splits"]["train"]["by_kind"] == {"plan_code": 1}
    from transformers import AutoTokenizer

    model_tok = AutoTokenizer.from_pretrained(str(tmp_path / "m"))
    ds = TranscriptSFTDataset(str(tmp_path / "out" / "sft_train.parquet"), model_tok, {"max_length": 8192})
    assert len(ds) == 1 and model_tok.decode(ds[0]["input_ids"]).endswith("```<|im_end|>")
    assert "data.custom_cls.name=TranscriptSFTDataset" in report["sft_command"]
