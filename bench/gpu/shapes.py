# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Random-weight models of the catalog's shapes, made on the GPU host (no download).

Each shape keeps a real model's per-layer shapes (hidden size, heads, KV heads, experts,
latent ranks) with fewer layers, and the lab's tokenizer (lab/make_tiny_models.py: a
byte-level BPE of 1,024 tokens, so the vocabulary is the tokenizer's, not the model's).
Weights are drawn N(0, 1/fan_in) per matrix, norms 1 and biases 0: with the usual
N(0, 0.02) a random model's greedy output settles on one token, which makes a fingerprint
(token ids before and after a wake) mean nothing; the suite also counts the distinct ids.

Shapes (sources: each model's config.json on the Hugging Face Hub):
- minimax_m2: MiniMaxAI/MiniMax-M2 (MiniMaxM2ForCausalLM, GQA 48/8 heads, 256 experts of
  1,536, top 8, per-layer q/k norms) - the catalog's minimax_m25 family;
- qwen3_moe_m2: the same per-layer shapes as Qwen3MoeForCausalLM (vLLM's reload path
  differs: its q/k norms are per head);
- deepseek_v3_mla: deepseek-ai/DeepSeek-V3's attention (MLA: q_lora 1,536, kv_lora 512,
  rope 64, nope 128, 128 heads) and expert size, one dense layer and one MoE layer of 64
  experts (256 would not leave room beside a sleeper) - the catalog's kimi_k25 family;
- llama_gqa: Llama-3.1-8B's per-layer shapes (GQA 32/8, MLP 14,336).
"""

import json
import math
import sys
from pathlib import Path

SHAPES = {
    "minimax_m2": {
        "architectures": ["MiniMaxM2ForCausalLM"], "model_type": "minimax_m2",
        "hidden_size": 3072, "num_attention_heads": 48, "num_key_value_heads": 8,
        "head_dim": 128, "intermediate_size": 1536, "num_local_experts": 256,
        "num_experts_per_tok": 8, "num_hidden_layers": 4, "rotary_dim": 64,
        "partial_rotary_factor": 0.5, "use_qk_norm": True, "qk_norm_type": "per_layer",
        "scoring_func": "sigmoid", "use_routing_bias": True, "rope_theta": 5000000,
        "rms_norm_eps": 1e-6, "max_position_embeddings": 8192,
        "tie_word_embeddings": False, "attention_dropout": 0.0,
    },
    "qwen3_moe_m2": {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
        "hidden_size": 3072, "num_attention_heads": 48, "num_key_value_heads": 8,
        "head_dim": 128, "intermediate_size": 1536, "moe_intermediate_size": 1536,
        "num_experts": 256, "num_experts_per_tok": 8, "num_hidden_layers": 2,
        "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [],
        "rope_theta": 5000000, "rms_norm_eps": 1e-6, "max_position_embeddings": 8192,
        "tie_word_embeddings": False,
    },
    "deepseek_v3_mla": {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
        "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
        "num_hidden_layers": 2, "first_k_dense_replace": 1, "num_attention_heads": 128,
        "num_key_value_heads": 128, "n_shared_experts": 1, "n_routed_experts": 64,
        "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4,
        "routed_scaling_factor": 2.5, "norm_topk_prob": True, "topk_method": "noaux_tc",
        "scoring_func": "sigmoid", "q_lora_rank": 1536, "kv_lora_rank": 512,
        "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
        "rope_theta": 10000, "rope_scaling": None, "rms_norm_eps": 1e-6,
        "max_position_embeddings": 8192, "tie_word_embeddings": False,
    },
    "llama_gqa": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 16,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
        "rope_theta": 500000, "rms_norm_eps": 1e-5, "max_position_embeddings": 8192,
        "tie_word_embeddings": False,
    },
}
MLA_SHAPES = ("deepseek_v3_mla",)
MADE = "made.json"  # written last: a model made earlier (the same layers) is reused


SHRUNK_WIDTHS = ("hidden_size", "intermediate_size", "moe_intermediate_size")
SHRUNK_EXPERTS = ("num_local_experts", "num_experts", "n_routed_experts")
SHRUNK_EXPERT_COUNT = 16


def config_for(shape, vocab_size, layers=None, shrink=1):
    """config.json's dict for `shape` with the tokenizer's vocabulary (and `layers`).
    shrink > 1 (the suite's own test, on a CPU): widths divided by it, 16 experts."""
    cfg = dict(SHAPES[shape], vocab_size=vocab_size, bos_token_id=1, eos_token_id=2,
               pad_token_id=0, torch_dtype="bfloat16")
    if layers:
        cfg["num_hidden_layers"] = int(layers)
    if shrink > 1:
        for key in SHRUNK_WIDTHS:
            if key in cfg:
                cfg[key] //= shrink
        for key in SHRUNK_EXPERTS:
            if key in cfg:
                cfg[key] = SHRUNK_EXPERT_COUNT
    return cfg


def init_std(name, shape):
    """The std a weight is drawn with (None: a norm, set to 1; 0: a bias, zeroed)."""
    if "norm" in name and len(shape) == 1:
        return None
    if len(shape) == 1 or "bias" in name:
        return 0.0
    if "embed_tokens" in name:
        return 1.0
    return 1.0 / math.sqrt(shape[-1])


def make(out_root, shape, layers=None, seed=0, device="cuda", repo_root=None, shrink=1):
    """Write shape `shape` under out_root/shape (weights, config, tokenizer); returns
    {"path", "weights_bytes", "config"}. Weights are made on `device` with transformers."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    root = Path(repo_root or Path(__file__).resolve().parents[2])
    sys.path.insert(0, str(root / "lab"))
    import make_tiny_models as lab

    out = Path(out_root) / shape
    out.mkdir(parents=True, exist_ok=True)
    lab.train_tokenizer(out)
    cfg_dict = config_for(shape, lab.VOCAB_SIZE, layers, shrink)
    config = AutoConfig.for_model(**{k: v for k, v in cfg_dict.items() if k != "architectures"})
    config.architectures = cfg_dict["architectures"]
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    with torch.no_grad():
        for name, param in model.named_parameters():
            std = init_std(name, tuple(param.shape))
            if std is None:
                param.fill_(1.0)
            elif std == 0:
                param.zero_()
            else:
                param.normal_(0.0, std)
        for name, buf in model.named_buffers():
            if "e_score_correction_bias" in name:
                buf.zero_()
    model.save_pretrained(out, safe_serialization=True, max_shard_size="5GB")
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    saved = json.loads((out / "config.json").read_text(encoding="utf-8"))
    info = {"path": str(out), "weights_bytes": weights,
            "safetensors_bytes": sum(f.stat().st_size for f in out.glob("*.safetensors")),
            "architectures": saved.get("architectures"),
            "layers": saved.get("num_hidden_layers"), "seed": seed}
    (out / MADE).write_text(json.dumps(info) + "\n", encoding="utf-8")
    return info


def made(out_root, shape, layers=None):
    """What make() wrote earlier for this shape at this many layers, or None."""
    path = Path(out_root) / shape / MADE
    if not path.is_file():
        return None
    info = json.loads(path.read_text(encoding="utf-8"))
    return info if layers in (None, info.get("layers")) else None
