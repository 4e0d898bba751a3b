"""A byte-level BPE tokenizer for a from-scratch Qwen3-architecture model, with a Qwen3-style chat template.

- Byte-level BPE (`tokenizers`), trained on a text corpus (statements, solutions, the loop's fixed prompt texts,
  feedback texts: `corpus_from_rows`). Lossless: ``decode(encode(text)) == text`` for any text without special
  token strings (indentation, unicode, digits). Pre-tokenization follows Qwen's rules: digits one by one, letters
  with at most one leading non-letter, punctuation runs, newline runs, whitespace runs.
- Special tokens as Qwen3 has them: ``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>`` (special, skipped by
  ``skip_special_tokens``) and ``<think>``, ``</think>``, ``<tool_call>``, ``</tool_call>``, ``<tool_response>``,
  ``</tool_response>`` (added, not special, as in Qwen3). ``eos = <|im_end|>`` (Qwen3 instruct), ``pad =
  <|endoftext|>``, no bos.
- `CHAT_TEMPLATE` renders turns as Qwen3's template does (written here from its observable behaviour, not copied):
  ChatML turns; ``enable_thinking=False`` puts ``<think>\\n\\n</think>\\n\\n`` after the generation prompt;
  an assistant message's ``<think>`` block (or ``reasoning_content``) is dropped for turns before the last user
  query and kept as ``<think>\\nR\\n</think>\\n\\n`` after it (always for the last message, even when empty);
  consecutive ``tool`` messages form one user turn of ``<tool_response>`` blocks. Tool definitions and
  tool calls are not supported (the template raises).

The agent loop never re-renders a conversation (it appends generated tokens and renders only injected user turns
and generation prompts, through verl's Continuous Token builder), so the assistant-message rules matter for
tools that render whole chats (verl's MultiTurnSFTDataset, chat UIs), not for the rollout token stream.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from mrgrpo import prompts
from mrgrpo.tiny_model import SPECIAL_TOKENS as _TINY_SPECIAL_TOKENS

# Special (control) tokens, skipped by decode(skip_special_tokens=True); the rest are ordinary added tokens.
CONTROL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
MARKUP_TOKENS = ("<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
# The tiny test tokenizer's set must stay a subset of ours: tests and smoke runs swap one for the other.
assert set(_TINY_SPECIAL_TOKENS) <= set(CONTROL_TOKENS + MARKUP_TOKENS)

EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"

# Qwen-style pre-tokenization: contractions, letter runs with one optional leading non-letter, single digits,
# punctuation runs (with trailing newlines), newline runs, whitespace runs (the last space stays with the next word).
PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

CHAT_TEMPLATE = (
    "{%- if tools %}{{ raise_exception('this chat template does not support tool definitions') }}{%- endif %}"
    "{%- if messages and messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    # the last user query: the last user message that is not a wrapped tool response
    "{%- set ns = namespace(last_query=messages|length - 1, found=false) %}"
    "{%- for m in messages|reverse %}"
    "{%- if not ns.found and m['role'] == 'user' and m['content'] is string"
    " and not (m['content'].startswith('<tool_response>') and m['content'].endswith('</tool_response>')) %}"
    "{%- set ns.found = true %}{%- set ns.last_query = messages|length - 1 - loop.index0 %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- for m in messages %}"
    "{%- set content = m['content'] if m['content'] is string else '' %}"
    "{%- if m['role'] == 'user' or (m['role'] == 'system' and not loop.first) %}"
    "{{- '<|im_start|>' + m['role'] + '\\n' + content + '<|im_end|>\\n' }}"
    "{%- elif m['role'] == 'assistant' %}"
    "{%- if m['tool_calls'] %}{{ raise_exception('this chat template does not support tool calls') }}{%- endif %}"
    "{%- set reasoning = '' %}"
    "{%- if m['reasoning_content'] is string %}{%- set reasoning = m['reasoning_content'] %}"
    "{%- elif '</think>' in content %}"
    "{%- set reasoning = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') %}"
    "{%- endif %}"
    "{%- if loop.index0 > ns.last_query and (loop.last or reasoning) %}"
    "{{- '<|im_start|>assistant\\n<think>\\n' + reasoning.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}"
    "{%- else %}"
    "{{- '<|im_start|>assistant\\n' + content }}"
    "{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif m['role'] == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)


def fixed_prompt_texts() -> list[str]:
    """Every fixed text of `mrgrpo.prompts` a trajectory contains (system prompt, instructions, plan and code
    requests, feedback header/footer and verdict names), so the tokenizer has merges for them."""
    texts = [
        prompts.SYSTEM_PROMPT,
        prompts.STDIO_INSTRUCTIONS,
        prompts.CALL_INSTRUCTIONS,
        prompts.PLAN_INTRO,
        prompts.PLAN_RULES,
        prompts.CODE_AFTER_PLAN_PROMPT,
        prompts.FEEDBACK_HEADER.format(n_failed=1, n_shown=1),
        prompts.FEEDBACK_FOOTER,
        prompts.build_user_prompt("Print the answer.", "", "stdio", None),
        prompts.build_plan_turn_prompt("Print the answer.", "", "stdio", None),
        prompts.build_plan_turn_prompt("Return the answer.", "def f(a):\n    pass", "call", "f"),
    ]
    verdicts = ["WA (wrong answer)", "RE (runtime error)", "TLE (time limit exceeded)", "MLE (memory limit exceeded)",
                "OLE (output limit exceeded)", "SE (syntax error)",
                "NO_CODE (no ```python code block found in your answer)"]
    for v in verdicts:
        texts.append(prompts.build_feedback_prompt(
            [{"verdict": v, "input": "3\n1 2 3\n", "expected": "6\n", "got": "5\n",
              "stderr": "Traceback (most recent call last):\n  File \"<string>\", line 1\nValueError: bad"}],
            n_shown=1))
    return texts


def corpus_from_rows(rows: Iterable[dict]) -> Iterator[str]:
    """Training text from prepared parquet rows (`mrgrpo data prepare`): every prompt message, statement, starter
    code, plan, reference solution and public test I/O, then the fixed prompt texts."""
    for row in rows:
        for message in row.get("prompt") or []:
            if message.get("content"):
                yield message["content"]
        info = row.get("extra_info") or {}
        for key in ("statement", "starter_code", "plan", "reference_solution", "public_tests"):
            if info.get(key):
                yield str(info[key])
    yield from fixed_prompt_texts()


def corpus_from_problems(problems: Iterable) -> Iterator[str]:
    """Training text from `mrgrpo.apps.Problem` objects (an APPS+ jsonl): statements, starter code, reference
    solutions and (a few) test inputs/outputs, then the fixed prompt texts."""
    for p in problems:
        yield p.statement
        if p.starter_code:
            yield p.starter_code
        if p.reference_solution:
            yield p.reference_solution
        for value in list(p.inputs[:3]) + list(p.outputs[:3]):
            yield value if isinstance(value, str) else repr(value)
    yield from fixed_prompt_texts()


def train_tokenizer(corpus: Iterable[str], vocab_size: int = 6144, min_frequency: int = 2, show_progress: bool = False):
    """Train the byte-level BPE on ``corpus``; return a `transformers.PreTrainedTokenizerFast` (not saved)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    n_fixed = 256 + len(CONTROL_TOKENS) + len(MARKUP_TOKENS)
    if vocab_size <= n_fixed:
        raise ValueError(f"vocab_size must exceed the {n_fixed} byte and added tokens, got {vocab_size}")
    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(MARKUP_TOKENS),
        min_frequency=min_frequency,
        special_tokens=list(CONTROL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=show_progress,
    )
    tok.train_from_iterator(corpus, trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in MARKUP_TOKENS])
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        unk_token=None,
        chat_template=CHAT_TEMPLATE,
        model_max_length=131072,
        clean_up_tokenization_spaces=False,
        add_bos_token=False,
    )
    hf.padding_side = "right"
    return hf


def save_tokenizer(tokenizer, out_dir: str | Path) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # the chat template inside tokenizer_config.json (not a separate .jinja file): every loader reads it there
    tokenizer.save_pretrained(str(out), save_jinja_files=False)
    return out


def check_tokenizer(tokenizer) -> None:
    """Raise unless ``tokenizer`` has what the agent loop and verl's Qwen Continuous Token builder need."""
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in CONTROL_TOKENS + MARKUP_TOKENS}
    bad = [t for t, i in ids.items() if not isinstance(i, int) or i < 0 or i == tokenizer.unk_token_id]
    if bad:
        raise ValueError(f"tokenizer lacks tokens {bad}")
    if tokenizer.eos_token != EOS_TOKEN or tokenizer.pad_token != PAD_TOKEN:
        raise ValueError(f"eos/pad must be {EOS_TOKEN}/{PAD_TOKEN}, got {tokenizer.eos_token}/{tokenizer.pad_token}")
    if len(tokenizer.encode("\n", add_special_tokens=False)) != 1:
        raise ValueError("'\\n' must be one token (verl's Qwen Continuous Token builder inserts it after <|im_end|>)")
    probe = "def f(x):\n    return x * 10  # ünï 😀\n\n\tprint(f(12345))\n"
    if tokenizer.decode(tokenizer.encode(probe, add_special_tokens=False), skip_special_tokens=False) != probe:
        raise ValueError("tokenizer does not round-trip text exactly")
