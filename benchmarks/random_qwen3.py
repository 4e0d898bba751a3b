"""Write a random-weight Qwen3 of a real size, with a tokenizer, as a Hugging Face model directory.

    python benchmarks/random_qwen3.py --arch 0.6B --tokenizer TOK_DIR --out MODEL_DIR [--seed 0]

``--arch``: 0.6B, 1.7B, 4B, 8B (the published config.json values, ../shared/notes/qwen3-architectures.md), or
``tiny-test`` (the 0.6B config shrunk to 2 layers and hidden 64, for tests). ``--layers N`` overrides the layer
count of any arch. ``TOK_DIR``: a tokenizer directory (e.g. from ``tests/qwen3_tokenizer/build.py``); its files
are copied in. The directory holds config.json, generation_config.json (Qwen3's published one), the tokenizer
and bf16 safetensors (sharded at 5 GB, with an index).

Fast on a small CPU: the model is built on the ``meta`` device (no memory, no init), and each tensor is then
filled by a seeded ``torch.Generator`` directly in bf16, one tensor at a time, and written shard by shard; so peak
memory is about one shard, and 8B writes in minutes, not hours of ``nn.init`` in fp32. Weights follow Qwen3's
init (normal, std ``initializer_range``; RMSNorm weights 1). Same seed and arch: same bytes. Works with
transformers 4.51+ and 5.x.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from pathlib import Path

# Published config.json values of the Qwen3 dense models (Qwen/Qwen3-*/config.json).
ARCHS: dict[str, dict] = {
    "0.6B": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                 num_key_value_heads=8, head_dim=128, tie_word_embeddings=True),
    "1.7B": dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
                 num_key_value_heads=8, head_dim=128, tie_word_embeddings=True),
    "4B": dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
               num_key_value_heads=8, head_dim=128, tie_word_embeddings=True),
    "8B": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
               num_key_value_heads=8, head_dim=128, tie_word_embeddings=False),
    # For tests: 0.6B's shape family, tiny (real vocabulary, so the real tokenizer's ids are all valid).
    "tiny-test": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=16, tie_word_embeddings=True),
}
SHARED = dict(
    architectures=["Qwen3ForCausalLM"],
    model_type="qwen3",
    vocab_size=151936,
    max_position_embeddings=40960,
    rope_theta=1000000,
    rope_scaling=None,
    rms_norm_eps=1e-6,
    hidden_act="silu",
    attention_bias=False,
    attention_dropout=0.0,
    initializer_range=0.02,
    use_cache=True,
    use_sliding_window=False,
    sliding_window=None,
    bos_token_id=151643,
    eos_token_id=151645,
    torch_dtype="bfloat16",
)
# Qwen3's published generation_config.json (Qwen/Qwen3-0.6B ... 8B).
GENERATION_CONFIG = {
    "bos_token_id": 151643,
    "do_sample": True,
    "eos_token_id": [151645, 151643],
    "pad_token_id": 151643,
    "temperature": 0.6,
    "top_k": 20,
    "top_p": 0.95,
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json",
                   "vocab.json", "merges.txt", "added_tokens.json")
SHARD_BYTES = 5 * 1024**3


def model_config(arch: str, layers: int | None = None) -> dict:
    if arch not in ARCHS:
        raise SystemExit(f"random_qwen3: unknown --arch {arch!r}; one of {', '.join(ARCHS)}")
    config = {**SHARED, **ARCHS[arch]}
    if layers is not None:
        if layers < 1:
            raise SystemExit("random_qwen3: --layers must be >= 1")
        config["num_hidden_layers"] = layers
    config["max_window_layers"] = config["num_hidden_layers"]
    return config


def _fill(name: str, shape: tuple[int, ...], std: float, generator):
    """A bf16 tensor for parameter ``name``: RMSNorm weights 1, every other weight normal(0, std)."""
    import torch

    if name.endswith("norm.weight"):
        return torch.ones(shape, dtype=torch.bfloat16)
    out = torch.empty(shape, dtype=torch.bfloat16)
    out.normal_(0.0, std, generator=generator)
    return out


def build(arch: str, tokenizer_dir: str | Path, out_dir: str | Path, seed: int = 0, layers: int | None = None) -> Path:
    """Write the model directory; return its path."""
    import torch
    from safetensors.torch import save_file
    from transformers import Qwen3Config, Qwen3ForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = model_config(arch, layers)
    hf_config = Qwen3Config(**{k: v for k, v in config.items() if k not in ("architectures", "model_type")})
    with torch.device("meta"):
        model = Qwen3ForCausalLM(hf_config)
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}  # tied lm_head listed once
    if not config["tie_word_embeddings"] and "lm_head.weight" not in shapes:
        raise RuntimeError("untied model without lm_head.weight")
    del model

    # Plan the shards from the shapes, then fill and write one shard at a time (peak memory: one shard).
    generator = torch.Generator().manual_seed(seed)
    std = float(config["initializer_range"])
    plan: list[list[str]] = [[]]
    size = 0
    for name in sorted(shapes):
        nbytes = 2 * math.prod(shapes[name])  # bf16
        if plan[-1] and size + nbytes > SHARD_BYTES:
            plan.append([])
            size = 0
        plan[-1].append(name)
        size += nbytes
    weight_map = {}
    for i, names in enumerate(plan, 1):
        fname = "model.safetensors" if len(plan) == 1 else f"model-{i:05d}-of-{len(plan):05d}.safetensors"
        save_file({name: _fill(name, shapes[name], std, generator) for name in names}, str(out / fname),
                  metadata={"format": "pt"})
        weight_map.update({name: fname for name in names})
    if len(plan) > 1:
        total = sum(2 * math.prod(shape) for shape in shapes.values())
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")

    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    (out / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=2, sort_keys=True) + "\n")
    tok_dir = Path(tokenizer_dir)
    copied = [name for name in TOKENIZER_FILES if (tok_dir / name).is_file()]
    if "tokenizer.json" not in copied and "vocab.json" not in copied:
        raise SystemExit(f"random_qwen3: {tok_dir} holds no tokenizer (tokenizer.json or vocab.json)")
    for name in copied:
        shutil.copyfile(tok_dir / name, out / name)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", required=True, choices=list(ARCHS), help="published Qwen3 size, or tiny-test")
    parser.add_argument("--tokenizer", required=True, help="tokenizer directory to copy in")
    parser.add_argument("--out", required=True, help="model directory to write")
    parser.add_argument("--seed", type=int, default=0, help="weights seed (default 0)")
    parser.add_argument("--layers", type=int, default=None, help="override num_hidden_layers (default: the arch's)")
    args = parser.parse_args(argv)
    out = build(args.arch, args.tokenizer, args.out, seed=args.seed, layers=args.layers)
    print(f"wrote {out} (Qwen3-{args.arch}, random bf16 weights, seed {args.seed})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
