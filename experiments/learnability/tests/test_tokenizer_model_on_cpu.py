"""learnability: the byte-level BPE tokenizer with a Qwen3-style template, the small Qwen3, and the mutants."""

from __future__ import annotations

import json

import pytest

from learnability import tokenizer as lt
from learnability.model import TINY, ModelSize, build_model, count_parameters, make_config
from learnability.mutate import mutants, shuffled_mutants

CODE = "def solve():\n    n = int(input())\n    total = 0\n    for i in range(1, n + 1):\n        total += i\n" \
       "    print(total)\n\nsolve()\n"


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    corpus = lt.fixed_prompt_texts() + [CODE] * 5 + ["Read n and print the sum 1 + 2 + ... + n."] * 5
    out = tmp_path_factory.mktemp("learn_tok")
    lt.save_tokenizer(lt.train_tokenizer(corpus, vocab_size=1024, min_frequency=1), out)
    return out


@pytest.fixture(scope="module")
def tok(tok_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tok_dir))


# ------------------------------------------------------------------ tokenizer
@pytest.mark.parametrize("text", [
    CODE,
    "if x:\n\tif y:\n\t\treturn  -1   \r\n# trailing spaces   \n\n\n",
    "print('ünïcödé 中文 😀', 1234567890, 3.14159e-10)\n",
    "a=[0x1F,0o17,1_000_000]; s = f\"{a!r:>10}\"\\\n",
    "   leading spaces and a final newline-less line",
])
def test_round_trip_is_exact(tok, text):
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids, skip_special_tokens=False) == text
    assert tok.decode(ids, skip_special_tokens=True) == text


def test_digits_are_single_tokens(tok):
    assert tok.convert_ids_to_tokens(tok.encode("x = 40213", add_special_tokens=False))[-5:] == list("40213")


def test_special_tokens_and_saved_files(tok, tok_dir):
    lt.check_tokenizer(tok)
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>" and tok.bos_token is None
    for t in lt.CONTROL_TOKENS + lt.MARKUP_TOKENS:
        assert tok.encode(t, add_special_tokens=False) == [tok.convert_tokens_to_ids(t)]
    # control tokens are special (skipped), <think> is not (Qwen3 keeps it in decoded text)
    ids = tok.encode("<|im_start|>assistant\n<think>\nr\n</think>\n\nA<|im_end|>", add_special_tokens=False)
    assert tok.decode(ids, skip_special_tokens=True) == "assistant\n<think>\nr\n</think>\n\nA"
    assert tok.encode("hi", add_special_tokens=True) == tok.encode("hi", add_special_tokens=False)  # no bos
    config = json.loads((tok_dir / "tokenizer_config.json").read_text())
    assert config["chat_template"] == lt.CHAT_TEMPLATE
    assert (tok_dir / "tokenizer.json").is_file()


def test_template_renders_like_qwen3(tok):
    msgs = [
        {"role": "system", "content": "SYS"},
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "<think>\nold reasoning\n</think>\n\nA1"},
        {"role": "user", "content": "Q2"},
        {"role": "assistant", "content": "A2"},
    ]
    expected = ("<|im_start|>system\nSYS<|im_end|>\n"
                "<|im_start|>user\nQ1<|im_end|>\n"
                "<|im_start|>assistant\nA1<|im_end|>\n"  # reasoning of turns before the last query is dropped
                "<|im_start|>user\nQ2<|im_end|>\n"
                "<|im_start|>assistant\n<think>\n\n</think>\n\nA2<|im_end|>\n")  # the last one gets a think block
    assert tok.apply_chat_template(msgs, tokenize=False) == expected
    with_reasoning = msgs[:4] + [{"role": "assistant", "content": "A2", "reasoning_content": "\nr2\n"}]
    assert tok.apply_chat_template(with_reasoning, tokenize=False).endswith(
        "<|im_start|>assistant\n<think>\nr2\n</think>\n\nA2<|im_end|>\n")
    # after the last query but not last: kept only with reasoning
    tail = msgs[:4] + [{"role": "assistant", "content": "<think>\nr\n</think>\n\nB1"},
                       {"role": "assistant", "content": "B2"}]
    assert tok.apply_chat_template(tail, tokenize=False).endswith(
        "<|im_start|>assistant\n<think>\nr\n</think>\n\nB1<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\nB2<|im_end|>\n")
    head = msgs[:2]
    assert tok.apply_chat_template(head, tokenize=False, add_generation_prompt=True, enable_thinking=False) == (
        "<|im_start|>system\nSYS<|im_end|>\n<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\n"
        "<think>\n\n</think>\n\n")
    for thinking in ({}, {"enable_thinking": True}):
        assert tok.apply_chat_template(head, tokenize=False, add_generation_prompt=True, **thinking).endswith(
            "<|im_end|>\n<|im_start|>assistant\n")
    tools = [{"role": "user", "content": "Q"}, {"role": "tool", "content": "r1"}, {"role": "tool", "content": "r2"}]
    assert tok.apply_chat_template(tools, tokenize=False) == (
        "<|im_start|>user\nQ<|im_end|>\n<|im_start|>user\n<tool_response>\nr1\n</tool_response>\n"
        "<tool_response>\nr2\n</tool_response><|im_end|>\n")


def test_template_tokens_equal_the_rendered_string(tok):
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "def f(x):\n    return 1"}]
    ids = tok.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True, enable_thinking=False,
                                  return_dict=False)
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    assert list(ids) == tok.encode(text, add_special_tokens=False)


def test_verl_qwen_continuous_token_builder_accepts_it(tok):
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    builder = create_continuous_token_builder(tok, hf_model_type="qwen3",
                                              chat_template_kwargs={"enable_thinking": False})
    assert type(builder).__name__ == "QwenContinuousTokenBuilder"
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    runtime = builder.build_initial_tokens(msgs) + tok.encode("A", add_special_tokens=False) + [tok.eos_token_id]
    before = msgs + [{"role": "assistant", "content": "A"}]
    merged = builder.merge_context_tokens(before, before + [{"role": "user", "content": "V"}], runtime)
    assert tok.decode(merged.token_ids, skip_special_tokens=False).endswith(
        "A<|im_end|>\n<|im_start|>user\nV<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_vocab_size_must_leave_room_for_merges():
    with pytest.raises(ValueError, match="vocab_size"):
        lt.train_tokenizer(["abc"], vocab_size=200)


# ------------------------------------------------------------------ model
def test_default_model_size_is_in_range(tok):
    import torch
    from transformers import Qwen3ForCausalLM

    cfg = make_config(tok, ModelSize())
    with torch.device("meta"):
        model = Qwen3ForCausalLM(cfg)
    counts = count_parameters(model)
    assert 10e6 <= counts["total"] <= 60e6
    assert cfg.head_dim == 64 and cfg.tie_word_embeddings and cfg.max_position_embeddings >= 4096
    assert cfg.num_attention_heads == 8 and cfg.num_key_value_heads == 4 and cfg.num_hidden_layers == 8


def test_model_size_rejects_what_vllm_rejects():
    with pytest.raises(ValueError, match="head_dim"):
        ModelSize(head_dim=16)
    with pytest.raises(ValueError, match="4096"):
        ModelSize(max_position_embeddings=2048)


def test_tiny_model_saves_loads_and_runs(tok, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    out, counts = build_model(tok, tmp_path / "m", TINY, seed=1)
    model = AutoModelForCausalLM.from_pretrained(str(out))
    assert type(model).__name__ == "Qwen3ForCausalLM"
    assert model.config.vocab_size % 128 == 0 and model.config.vocab_size >= len(tok)
    assert model.config.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")
    assert model.config.pad_token_id == tok.pad_token_id
    assert count_parameters(model) == counts
    gen = GenerationConfig.from_pretrained(str(out))
    assert set(gen.eos_token_id) == {tok.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")}
    reloaded = AutoTokenizer.from_pretrained(str(out))
    assert reloaded.encode(CODE) == tok.encode(CODE) and reloaded.chat_template == lt.CHAT_TEMPLATE
    ids = torch.tensor([tok.encode(CODE, add_special_tokens=False)[:16]])
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    assert logits.shape == (1, ids.shape[1], model.config.vocab_size) and torch.isfinite(logits).all()


# ------------------------------------------------------------------ mutants
def _diff(a: str, b: str) -> list[tuple[str, str]]:
    return [(x, y) for x, y in zip(a.splitlines(), b.splitlines(), strict=False) if x != y]


def test_mutants_are_single_local_edits():
    found = mutants(CODE)
    kinds = {m.kind for m in found}
    assert {"off_by_one", "operator", "comparison"} - kinds == {"comparison"}  # CODE has no comparison
    assert "edge_case" not in kinds  # no if statement
    for m in found:
        assert m.code != CODE
        compile(m.code, "<mutant>", "exec")
        assert len(_diff(CODE, m.code)) == 1
    # augmented assignments are never touched (endless loops rather than wrong answers)
    assert all("total += i" in m.code for m in found)
    assert any("range(1, n - 1)" in m.code for m in found)  # operator
    assert any("range(2, n + 1)" in m.code for m in found) and any("range(0, n + 1)" in m.code for m in found)


def test_mutant_kinds_and_unicode_offsets():
    code = ("s = 'ünï'\nn = int(input())\nif n == 0:\n    print('zero')\n    exit()\n"
            "while n > 0:\n    n -= 1\nprint(len(s) >= 3 and n < 10)\n")
    found = {(m.kind, m.line): m.code for m in mutants(code)}
    assert found[("comparison", 3)].splitlines()[2] == "if n != 0:"
    assert found[("boolean", 8)].splitlines()[-1] == "print(len(s) >= 3 or n < 10)"
    assert found[("edge_case", 3)] == code.replace("if n == 0:\n    print('zero')\n    exit()\n", "")
    assert found[("comparison", 8)].splitlines()[-1] in ("print(len(s) > 3 and n < 10)",
                                                         "print(len(s) >= 3 and n <= 10)")
    assert not any(kind == "comparison" and line == 6 for kind, line in found)  # while conditions are kept
    assert all(c.startswith("s = 'ünï'\n") for c in found.values())


def test_shuffled_mutants_are_deterministic_and_varied():
    a, b = shuffled_mutants(CODE, "0:x"), shuffled_mutants(CODE, "0:x")
    assert [m.code for m in a] == [m.code for m in b]
    assert sorted(m.code for m in a) == sorted(m.code for m in mutants(CODE))
    assert len({m.kind for m in a[:2]}) == 2
    assert mutants("def broken(:\n") == []
