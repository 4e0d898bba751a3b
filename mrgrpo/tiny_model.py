"""A tiny tokenizer and a tiny random Qwen3, built offline: the run script's smoke test (``PROFILE=tiny``) and tests.

The tokenizer is a byte-level BPE trained here with the `tokenizers` library on a small code-flavoured
corpus, with Qwen's special tokens and a ChatML chat template that, like Qwen3's, honours
`enable_thinking=False` by opening an empty `<think></think>` block after the generation prompt.
The model is a random `Qwen3ForCausalLM` (2 layers, hidden 256, 4 heads / 2 KV heads, head_dim 64: vLLM
rejects head_dim 16).

    python -m mrgrpo.tiny_model OUT_DIR      # writes OUT_DIR/ with tokenizer + model files
"""

from __future__ import annotations

import argparse
from pathlib import Path

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>"]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% if enable_thinking is defined and enable_thinking is false %}{{ '<think>\n\n</think>\n\n' }}{% endif %}"
    "{% endif %}"
)

_CORPUS = [
    "You are a helpful assistant. Write a plan, then write Python code in a ```python block.",
    "def solve():\n    n = int(input())\n    print(n * 2)\n\nsolve()\n",
    "class Solution:\n    def maxPower(self, s: str) -> int:\n        return max(len(x) for x in s.split())\n",
    "import sys\nfor line in sys.stdin:\n    a, b = map(int, line.split())\n    print(a + b)\n",
    "Plan: read the input, count, print the maximum. Verdict WA on test 1: expected 3, got 2.",
    "The quick brown fox jumps over the lazy dog. 0 1 2 3 4 5 6 7 8 9 10 100 1000",
] * 40


def build_tokenizer(out_dir: str | Path, vocab_size: int = 600):
    """Train and save a byte-level BPE tokenizer with Qwen special tokens; return the HF tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS, trainer)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        chat_template=CHAT_TEMPLATE,
        model_max_length=32768,
    )
    hf.save_pretrained(str(out_dir))
    return hf


def build_tiny_qwen3(out_dir: str | Path, seed: int = 0) -> Path:
    """Save a tokenizer and a random tiny Qwen3 (bf16) in `out_dir`; return the directory."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(out)
    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=((len(tok) + 63) // 64) * 64,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=8192,
        tie_word_embeddings=False,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=None,
    )
    model = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(str(out))
    GenerationConfig(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id).save_pretrained(str(out))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build a tiny random Qwen3 + tokenizer offline.")
    parser.add_argument("out_dir", help="directory to write the tokenizer and model into")
    parser.add_argument("--tokenizer-only", action="store_true", help="write only the tokenizer")
    args = parser.parse_args(argv)
    if args.tokenizer_only:
        build_tokenizer(args.out_dir)
    else:
        build_tiny_qwen3(args.out_dir)
    print(f"wrote {args.out_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
