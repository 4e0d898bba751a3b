"""``mrgrpo eval --model global_step_N``: a verl FSDP checkpoint is merged to HF by verl's own model merger.

The checkpoint is laid out as verl's FSDP checkpoint manager writes it for one rank (``actor/fsdp_config.json``,
``actor/model_world_size_1_rank_0.pt``, ``actor/huggingface/`` with config and tokenizer), from a tiny random
Qwen3; the merged model must hold the same weights and load with its tokenizer.
"""

from __future__ import annotations

import json
import shutil

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from mrgrpo.eval.cli import resolve_model  # noqa: E402
from mrgrpo.tiny_model import build_tiny_qwen3  # noqa: E402


def test_verl_checkpoint_is_merged_once_by_verls_merger(tmp_path):
    hf = build_tiny_qwen3(tmp_path / "tiny")
    model = transformers.AutoModelForCausalLM.from_pretrained(str(hf))
    actor = tmp_path / "ckpt" / "global_step_3" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    torch.save(model.state_dict(), actor / "model_world_size_1_rank_0.pt")
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))
    for f in hf.iterdir():
        if f.suffix in (".json", ".jinja", ".txt"):
            shutil.copy(f, actor / "huggingface" / f.name)

    merged = tmp_path / "out" / "merged_hf"
    path, how = resolve_model(str(actor.parent), merged)
    assert path == merged and "merged by verl.model_merger" in how
    again = transformers.AutoModelForCausalLM.from_pretrained(str(merged))
    a, b = model.state_dict(), again.state_dict()
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
    tok = transformers.AutoTokenizer.from_pretrained(str(merged))
    assert tok.convert_tokens_to_ids("<|im_end|>") == transformers.AutoTokenizer.from_pretrained(
        str(hf)).convert_tokens_to_ids("<|im_end|>")
    assert resolve_model(str(actor.parent), merged)[1].endswith("merged earlier")  # not merged twice
