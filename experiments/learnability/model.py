"""A small randomly initialised `Qwen3ForCausalLM` for from-scratch learnability runs, saved with its tokenizer.

Defaults: hidden 512, 8 layers, 8 query / 4 KV heads of head_dim 64 (vLLM rejects head_dim 16), SwiGLU 1536,
tied embeddings, RoPE theta 1e6, 8192 positions: about 29M parameters with a 6k vocabulary. The directory is a
normal HF model dir (config.json, model.safetensors, generation_config.json, tokenizer files) that verl's SFT
trainer (`model.path=`) and vLLM load as they load Qwen/Qwen3-0.6B.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelSize:
    hidden_size: int = 512
    num_hidden_layers: int = 8
    num_attention_heads: int = 8
    num_key_value_heads: int = 4
    head_dim: int = 64
    intermediate_size: int = 1536
    max_position_embeddings: int = 8192
    rope_theta: float = 1_000_000.0
    tie_word_embeddings: bool = True

    def __post_init__(self):
        if self.head_dim < 32:
            raise ValueError(f"head_dim {self.head_dim} < 32: vLLM's attention backends reject it (use 64)")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        if self.max_position_embeddings < 4096:
            raise ValueError("max_position_embeddings must be >= 4096 (prompt + multi-turn response)")


# A tiny variant for CPU tests and smoke runs.
TINY = ModelSize(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=64,
                 intermediate_size=256, max_position_embeddings=4096)


def padded_vocab_size(n_tokens: int, multiple: int = 128) -> int:
    return ((n_tokens + multiple - 1) // multiple) * multiple


def make_config(tokenizer, size: ModelSize = ModelSize()):
    """The `Qwen3Config` for ``tokenizer`` (vocabulary padded to a multiple of 128; eos = <|im_end|>)."""
    from transformers import Qwen3Config

    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if tokenizer.eos_token_id != im_end:
        raise ValueError("the tokenizer's eos must be <|im_end|> (Qwen3 instruct)")
    return Qwen3Config(
        vocab_size=padded_vocab_size(len(tokenizer)),
        rms_norm_eps=1e-6,
        hidden_act="silu",
        attention_bias=False,
        attention_dropout=0.0,
        use_sliding_window=False,
        initializer_range=0.02,
        eos_token_id=im_end,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        **asdict(size),
    )


def count_parameters(model) -> dict[str, int]:
    """Unique parameters (a tied embedding counted once), and the embedding share."""
    seen, total = set(), 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    emb = model.get_input_embeddings().weight.numel()
    return {"total": total, "embedding": emb, "non_embedding": total - emb}


def build_model(tokenizer, out_dir: str | Path, size: ModelSize = ModelSize(), seed: int = 0,
                dtype: str = "float32") -> tuple[Path, dict[str, int]]:
    """Save a random Qwen3 for ``tokenizer`` plus the tokenizer in ``out_dir``; return (dir, parameter counts)."""
    import torch
    from transformers import GenerationConfig, Qwen3ForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = make_config(tokenizer, size)
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(cfg).to(getattr(torch, dtype))
    counts = count_parameters(model)
    model.save_pretrained(str(out))
    end_of_turn = [tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.convert_tokens_to_ids("<|endoftext|>")]
    # only the end tokens: vLLM takes sampling defaults from this file, and the run sets its own
    GenerationConfig(eos_token_id=end_of_turn, pad_token_id=tokenizer.pad_token_id,
                     bos_token_id=None).save_pretrained(str(out))
    from learnability.tokenizer import save_tokenizer

    save_tokenizer(tokenizer, out)
    return out, counts
