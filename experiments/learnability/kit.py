"""``python -m learnability tokenizer|model|sft-data|data|synth``: the learnability study's tools.

    python -m learnability synth --n 2000 --seed 0 --out synth.jsonl   # then: mrgrpo data prepare --input synth.jsonl
    python -m learnability tokenizer --data outputs/apps_plus_sample --out outputs/learn/tok
    python -m learnability model --tokenizer outputs/learn/tok --out outputs/learn/model0
    python -m learnability sft-data --data outputs/apps_plus_sample --tokenizer outputs/learn/model0 \\
        --out outputs/learn/sft
    python -m learnability data --out EXP_DIR     # the study's data stage: all of the above for its splits

``--data`` is a prepared data dir (``train.parquet`` [+ ``val.parquet``] from ``mrgrpo data prepare``), one such
parquet file, or an APPS+ / APPS jsonl (rows are built as ``prepare`` builds them, all into train).
``experiments/`` must be on ``PYTHONPATH`` (``run.py`` sets it for its stages).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _bool(value: str) -> bool:
    v = value.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {value!r}")


def load_rows(data: str, public_tests: int = 1) -> dict[str, list[dict]]:
    """``{"train": rows, "val": rows?}`` from a prepared dir, a parquet file or an APPS(+) jsonl."""
    from learnability.transcripts import read_rows, rows_from_problems

    path = Path(data)
    if path.is_dir():
        train = path / "train.parquet"
        if not train.is_file():
            raise FileNotFoundError(f"{path} has no train.parquet (run `mrgrpo data prepare --out {path}` first)")
        out = {"train": read_rows(train)}
        if (path / "val.parquet").is_file():
            out["val"] = read_rows(path / "val.parquet")
        return out
    if path.suffix == ".parquet":
        return {"train": read_rows(path)}
    from mrgrpo.apps import Problem, read_problems

    items = list(read_problems(path))
    problems = [p for p in items if isinstance(p, Problem)]
    if len(problems) < len(items):
        print(f"{path}: {len(items) - len(problems)} unreadable records skipped", file=sys.stderr)
    return {"train": rows_from_problems(problems, public_tests)}


def _load_tokenizer(path: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


# ------------------------------------------------------------------ commands
def cmd_tokenizer(args) -> int:
    from learnability.tokenizer import check_tokenizer, corpus_from_rows, save_tokenizer, train_tokenizer

    splits = load_rows(args.data, args.public_tests)
    rows = splits["train"]  # the validation split stays unseen, also by the tokenizer
    corpus = list(corpus_from_rows(rows))
    print(f"training a {args.vocab_size}-token byte-level BPE on {len(corpus)} texts from {len(rows)} rows")
    tok = train_tokenizer(corpus, vocab_size=args.vocab_size, min_frequency=args.min_frequency, show_progress=True)
    out = save_tokenizer(tok, args.out)
    check_tokenizer(_load_tokenizer(str(out)))
    print(f"wrote tokenizer ({len(tok)} tokens, eos {tok.eos_token}, pad {tok.pad_token}) to {out}")
    return 0


def cmd_model(args) -> int:
    from learnability.model import TINY, ModelSize, build_model

    tok = _load_tokenizer(args.tokenizer)
    size = TINY if args.tiny else ModelSize(
        hidden_size=args.hidden, num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads, head_dim=args.head_dim, intermediate_size=args.intermediate,
        max_position_embeddings=args.max_positions)
    out, counts = build_model(tok, args.out, size, seed=args.seed, dtype=args.dtype)
    print(f"parameters: {counts['total'] / 1e6:.2f}M (embedding {counts['embedding'] / 1e6:.2f}M, "
          f"non-embedding {counts['non_embedding'] / 1e6:.2f}M)")
    print(f"wrote random Qwen3ForCausalLM + tokenizer to {out}")
    return 0


def cmd_sft_data(args) -> int:
    from learnability.transcripts import LoopSettings, build_transcripts, write_parquet

    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    settings = LoopSettings(plan_source=args.plan_source, rounds=args.rounds, enable_thinking=args.enable_thinking,
                            max_prompt_length=args.max_prompt_length, max_response_length=args.max_response_length,
                            min_turn_tokens=args.min_turn_tokens, feedback_max_chars=args.feedback_max_chars,
                            feedback_stderr_chars=args.feedback_stderr_chars)
    if "fix" in kinds and settings.rounds < 1:
        raise SystemExit("--kinds fix needs --rounds >= 1 (the loop gives no feedback with 0 rounds)")
    sys_prompt = None
    if args.sys_prompt:
        from mrgrpo.dataset import resolve_sys_prompt

        sys_prompt = resolve_sys_prompt(args.sys_prompt)
    tok = _load_tokenizer(args.tokenizer)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report: dict = {"data": str(args.data), "tokenizer": str(args.tokenizer), "kinds": list(kinds),
                    "settings": settings.__dict__, "seed": args.seed, "splits": {}}
    for split, rows in load_rows(args.data, args.public_tests).items():
        print(f"{split}: {len(rows)} rows")
        built = build_transcripts(rows, tok, kinds=kinds, settings=settings, fixes_per_problem=args.fixes_per_problem,
                                  max_mutants=args.max_mutants, seed=args.seed, workers=args.workers, progress=True,
                                  sys_prompt=sys_prompt)
        path = out / f"sft_{split}.parquet"
        write_parquet(built.transcripts, path)
        summary = built.summary()
        report["splits"][split] = {"rows": len(rows), "path": str(path), **summary}
        print(f"wrote {summary['transcripts']} transcripts {summary['by_kind']} ({summary['tokens']} tokens, "
              f"{summary['trained_tokens']} trained, longest {summary['max_tokens']}) to {path}")
        if summary["skipped"]:
            print(f"  skipped: {summary['skipped']}")
    longest = max(s["max_tokens"] for s in report["splits"].values())
    report["sft_command"] = sft_command(out, args.tokenizer, longest, "val" in report["splits"])
    (out / "sft_report.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    print(f"wrote {out / 'sft_report.json'}")
    print("train on it with verl's SFT trainer (model.path: a model dir made with the same tokenizer):")
    print(report["sft_command"])
    return 0


def sft_command(out: Path, model: str, longest: int, has_val: bool) -> str:
    """The torchrun line that runs verl 0.9.1's SFT trainer on these transcripts with `TranscriptSFTDataset`."""
    max_length = max(1024, ((longest + 1023) // 1024) * 1024)
    val = f"data.val_files={out}/sft_val.parquet" if has_val else "data.val_files=null"
    return " \\\n  ".join([
        "torchrun --standalone --nnodes=1 --nproc_per_node=1 -m verl.trainer.sft_trainer",
        f"data.train_files={out}/sft_train.parquet {val}",
        "data.custom_cls.path=pkg://learnability.sft_dataset data.custom_cls.name=TranscriptSFTDataset",
        f"data.train_batch_size=16 data.max_length={max_length} data.max_token_len_per_gpu={max(16384, max_length)}",
        f"model.path={model} optim.lr=1e-3 trainer.total_epochs=3 trainer.logger='[console]'",
        "trainer.default_local_dir=ckpt/sft checkpoint.save_contents='[model,optimizer,extra,hf_model]'",
    ])


# ------------------------------------------------------------------ parser
def build_parser() -> argparse.ArgumentParser:
    from learnability.transcripts import TRANSCRIPT_PLAN_SOURCES

    p = argparse.ArgumentParser(prog="python -m learnability",
                                description="The learnability study's tools: synthetic problems, tokenizer, small "
                                "random Qwen3, SFT transcripts, the data stage.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    t = sub.add_parser("tokenizer", help="train a byte-level BPE tokenizer with Qwen3 special tokens and template")
    t.add_argument("--data", required=True, help="prepared data dir, a parquet file, or an APPS(+) jsonl")
    t.add_argument("--out", required=True, help="directory to write the HF tokenizer into")
    t.add_argument("--vocab-size", type=int, default=6144, help="vocabulary size incl. bytes and added tokens")
    t.add_argument("--min-frequency", type=int, default=2, help="least count of a pair to merge")
    t.add_argument("--public-tests", type=int, default=1, help="jsonl input: public tests per problem")
    t.set_defaults(func=cmd_tokenizer)

    m = sub.add_parser("model", help="save a random Qwen3ForCausalLM (with the tokenizer) as a HF model dir")
    m.add_argument("--tokenizer", required=True, help="tokenizer dir (from `tokenizer`)")
    m.add_argument("--out", required=True, help="model directory to write")
    m.add_argument("--hidden", type=int, default=512)
    m.add_argument("--layers", type=int, default=8)
    m.add_argument("--heads", type=int, default=8)
    m.add_argument("--kv-heads", type=int, default=4)
    m.add_argument("--head-dim", type=int, default=64, help="vLLM rejects 16; keep 64")
    m.add_argument("--intermediate", type=int, default=1536)
    m.add_argument("--max-positions", type=int, default=8192)
    m.add_argument("--tiny", action="store_true", help="a 2-layer, hidden-128 variant for smoke tests")
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    m.set_defaults(func=cmd_model)

    s = sub.add_parser("sft-data", help="SFT transcripts in the agent loop's exact token format (parquet)")
    s.add_argument("--data", required=True, help="prepared data dir, a parquet file, or an APPS(+) jsonl")
    s.add_argument("--tokenizer", required=True, help="tokenizer or model dir: the one the GRPO run uses")
    s.add_argument("--out", required=True, help="directory for sft_train.parquet [, sft_val.parquet], sft_report.json")
    s.add_argument("--kinds", default="plan_code,fix", help="comma list of: plan_code, fix")
    recipe = "(default: the recipe's mrgrpo.agent_loop.%s)"
    s.add_argument("--plan-source", default=None, choices=TRANSCRIPT_PLAN_SOURCES,
                   help="the GRPO run's plan source (self: a plan turn first) " + recipe % "plan_source")
    s.add_argument("--rounds", type=int, default=None,
                   help="the GRPO run's feedback rounds (fix needs >= 1) " + recipe % "rounds")
    s.add_argument("--enable-thinking", type=_bool, default=False,
                   help="the run's data.apply_chat_template_kwargs.enable_thinking (default false)")
    s.add_argument("--max-prompt-length", type=int, default=2048, help="drop rows whose first prompt is longer")
    s.add_argument("--max-response-length", type=int, default=4096, help="the loop's response budget")
    s.add_argument("--min-turn-tokens", type=int, default=None, help=recipe % "min_turn_tokens")
    s.add_argument("--feedback-max-chars", type=int, default=None, help=recipe % "feedback_max_chars")
    s.add_argument("--feedback-stderr-chars", type=int, default=None, help=recipe % "feedback_stderr_chars")
    s.add_argument("--fixes-per-problem", type=int, default=1, help="fix transcripts (distinct mutants) per problem")
    s.add_argument("--max-mutants", type=int, default=12, help="mutants tried per problem")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--workers", type=int, default=None, help="sandbox slots (default: one per CPU)")
    s.add_argument("--sys-prompt", default=None, help="replace the system prompt (as data.adjust_sys_prompt)")
    s.add_argument("--public-tests", type=int, default=1, help="jsonl input: public tests per problem")
    s.set_defaults(func=cmd_sft_data)

    from learnability import data
    from learnability.synth import cli as synth_cli

    data.add_parser(sub)
    synth_cli.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)
