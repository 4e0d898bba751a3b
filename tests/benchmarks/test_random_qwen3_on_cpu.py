"""benchmarks/random_qwen3.py: a random Qwen3 with the real tokenizer, loadable by transformers, offline."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "random_qwen3.py"


def _module():
    spec = importlib.util.spec_from_file_location("random_qwen3", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tiny_model(qwen3_tokenizer_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("random_qwen3")
    subprocess.run([sys.executable, str(SCRIPT), "--arch", "tiny-test", "--tokenizer", str(qwen3_tokenizer_dir),
                    "--out", str(out)], check=True, timeout=300)
    return out


def test_published_architectures():
    """../shared/notes/qwen3-architectures.md (the models' config.json values)."""
    rq = _module()
    expect = {
        "0.6B": (1024, 3072, 28, 16, 8, 128, True),
        "1.7B": (2048, 6144, 28, 16, 8, 128, True),
        "4B": (2560, 9728, 36, 32, 8, 128, True),
        "8B": (4096, 12288, 36, 32, 8, 128, False),
    }
    keys = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "head_dim", "tie_word_embeddings")
    for arch, values in expect.items():
        config = rq.model_config(arch)
        assert tuple(config[k] for k in keys) == values, arch
        assert (config["vocab_size"], config["max_position_embeddings"], config["rope_theta"]) == (151936, 40960,
                                                                                                    1000000)
        assert (config["rms_norm_eps"], config["hidden_act"], config["attention_bias"]) == (1e-6, "silu", False)
        assert (config["bos_token_id"], config["eos_token_id"], config["model_type"]) == (151643, 151645, "qwen3")
    assert rq.model_config("0.6B", layers=2)["num_hidden_layers"] == 2


def test_parameter_count_of_0_6b():
    """Qwen3-0.6B: 0.6B parameters, 0.44B of them outside the (tied) embedding (its model card)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = _module().model_config("0.6B")
    with torch.device("meta"):
        model = Qwen3ForCausalLM(Qwen3Config(**{k: v for k, v in config.items() if k != "architectures"}))
    total = sum(p.numel() for p in model.parameters())
    embedding = config["vocab_size"] * config["hidden_size"]
    assert round(total / 1e9, 2) == 0.60 and round((total - embedding) / 1e9, 2) == 0.44


def test_tiny_model_loads_and_generates(tiny_model):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    tok = AutoTokenizer.from_pretrained(str(tiny_model))
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model), dtype=torch.bfloat16)
    assert type(model).__name__ == "Qwen3ForCausalLM" and model.dtype == torch.bfloat16
    assert model.config.vocab_size == 151936 and len(tok) == 151669
    assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()  # tied
    gen = GenerationConfig.from_pretrained(str(tiny_model))
    assert gen.eos_token_id == [151645, 151643] and (gen.top_k, gen.top_p, gen.temperature) == (20, 0.95, 0.6)
    ids = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True,
                                  enable_thinking=False, return_tensors="pt", return_dict=True)
    out = model.generate(**ids, max_new_tokens=4, do_sample=False)
    assert out.shape[1] == ids["input_ids"].shape[1] + 4
    weights = dict(model.named_parameters())
    norm = weights["model.layers.0.input_layernorm.weight"]
    assert torch.all(norm == 1)
    proj = weights["model.layers.0.mlp.up_proj.weight"].float()
    assert abs(proj.std().item() - 0.02) < 0.002 and abs(proj.mean().item()) < 0.002


def test_same_seed_same_bytes(tiny_model, qwen3_tokenizer_dir, tmp_path):
    _module().build("tiny-test", qwen3_tokenizer_dir, tmp_path, seed=0)
    assert (tmp_path / "model.safetensors").read_bytes() == (tiny_model / "model.safetensors").read_bytes()
    assert json.loads((tmp_path / "config.json").read_text())["num_hidden_layers"] == 2


def test_untied_arch_shards_with_an_index(qwen3_tokenizer_dir, tmp_path, monkeypatch):
    """8B's untied LM head, on a small shard limit: several shards and an index naming every tensor once."""
    from safetensors import safe_open

    rq = _module()
    monkeypatch.setattr(rq, "SHARD_BYTES", 16 * 1024**2)
    monkeypatch.setitem(rq.ARCHS, "tiny-untied", {**rq.ARCHS["tiny-test"], "tie_word_embeddings": False})
    rq.build("tiny-untied", qwen3_tokenizer_dir, tmp_path)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert len(files) >= 2 and "lm_head.weight" in index["weight_map"]
    names = set()
    for fname in files:
        with safe_open(str(tmp_path / fname), "pt") as f:
            names |= set(f.keys())
    assert names == set(index["weight_map"])
