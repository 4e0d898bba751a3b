"""Training-step throughput of the learnability model (28M Qwen3) per attention implementation, in plain torch.

    python benchmarks/bench_small_model_step.py [--model DIR] [--batch 16] [--lengths 200,1500] [--steps 5]

Why: on the H200 kit (no flash-attn: verl runs with use_remove_padding=False and sdpa), verl's SFT trainer and
its FSDP actor ran this model at ~6-8k tokens/s (MFU 0.002; docs/results/dashboard.md). This prints, for a
right-padded batch of mixed lengths (what verl's padded path builds), forward+backward tokens/s of:
sdpa with the padding mask, sdpa on the same tokens without padding (equal lengths, causal only: the floor
padding costs), eager, and flex_attention if this torch/transformers has it. A row far above verl's number
says the engine settings, not the model, are the bottleneck. Needs a GPU (falls back to CPU, slowly).
"""

from __future__ import annotations

import argparse
import time


def build(model_dir: str | None, attn: str):
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    if model_dir:
        return AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation=attn, dtype=torch.bfloat16)
    cfg = Qwen3Config(vocab_size=6144, hidden_size=512, num_hidden_layers=8, num_attention_heads=8,
                      num_key_value_heads=4, head_dim=64, intermediate_size=1536, max_position_embeddings=8192,
                      tie_word_embeddings=True, attn_implementation=attn)
    return AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)


def batch(batch_size: int, lengths: tuple[int, int], vocab: int, padded: bool, device):
    import torch

    g = torch.Generator().manual_seed(0)
    lo, hi = lengths
    lens = torch.randint(lo, hi + 1, (batch_size,), generator=g) if padded else torch.full((batch_size,), hi)
    width = int(lens.max())
    ids = torch.randint(0, vocab, (batch_size, width), generator=g)
    mask = (torch.arange(width)[None, :] < lens[:, None]).long()
    return ids.to(device), mask.to(device), int(lens.sum())


def time_steps(model, ids, mask, steps: int, use_mask: bool) -> float:
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for i in range(steps + 1):
        if i == 1:
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            t0 = time.perf_counter()
        out = model(input_ids=ids, attention_mask=mask if use_mask else None, labels=ids)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / steps


def main(argv: list[str] | None = None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="HF model dir (default: a random model of the same shape)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lengths", default="200,1500", help="min,max sequence length of the padded batch")
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args(argv)
    lo, hi = (int(x) for x in args.lengths.split(","))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    rows = []
    for attn, padded, use_mask in (("sdpa", True, True), ("sdpa", False, False), ("eager", True, True),
                                   ("flex_attention", True, True)):
        try:
            model = build(args.model, attn).to(device).train()
        except (ValueError, ImportError) as exc:
            rows.append((attn, padded, "n/a", f"{type(exc).__name__}: {str(exc)[:60]}"))
            continue
        ids, mask, real = batch(args.batch, (lo, hi), model.config.vocab_size, padded, device)
        try:
            sec = time_steps(model, ids, mask, args.steps, use_mask)
            rows.append((attn, padded, f"{real / sec:,.0f}", f"{sec * 1000:.1f} ms/step, {real} real tokens"))
        except (RuntimeError, NotImplementedError) as exc:
            rows.append((attn, padded, "failed", f"{type(exc).__name__}: {str(exc)[:60]}"))
        del model
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    print(f"device {device}, batch {args.batch}, lengths {lo}-{hi}, bf16, fwd+bwd+AdamW")
    print("| attention | padded batch | real tokens/s | note |\n|---|---|---|---|")
    for attn, padded, tps, note in rows:
        print(f"| {attn} | {'yes' if padded else 'no (equal lengths)'} | {tps} | {note} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
