"""Offline learnability kit: train a small Qwen3-architecture model from scratch on APPS+-style problems.

- `mrgrpo.learn.tokenizer`: a byte-level BPE tokenizer with Qwen's special tokens and a Qwen3-style chat template.
- `mrgrpo.learn.model`: a random small `Qwen3ForCausalLM` saved with that tokenizer.
- `mrgrpo.learn.transcripts`: SFT transcripts in the agent loop's exact token format (the real
  `PlanCodeAgentLoop.run()` driven by scripted turns; failed attempts are mutants verified in the sandbox).
- `mrgrpo.learn.sft_dataset`: serves those transcripts to verl's SFT trainer (`data.custom_cls`).

    python -m mrgrpo.learn tokenizer|model|sft-data --help
"""
