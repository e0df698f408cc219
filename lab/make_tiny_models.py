# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Make the lab's tiny models: random weights, a locally trained tokenizer.

Two Hugging Face-format repositories are written under OUT/<org>/<name>/,
ready for lab/hub_server.py to serve:

- vllm-fleet-lab/tiny-gqa: a 2-layer Llama with grouped-query attention
  (4 query heads, 2 KV heads) - the lab stand-in for MiniMax-M2.5 (GQA).
- vllm-fleet-lab/tiny-mla: a 2-layer DeepSeek-V3 with multi-head latent
  attention and a mixture of experts - the stand-in for Kimi-K2.5 (MLA).
  vLLM's CPU backend serves MLA only with the real latent sizes
  (kv_lora_rank 512, qk_rope_head_dim 64) and noaux_tc/sigmoid routing.

The tokenizer is a byte-level BPE trained here with `tokenizers` on a small
built-in corpus, with a ChatML chat template. Weights come from
transformers' own initialisation with a fixed seed. Runs in seconds, needs
no download. Usage: python lab/make_tiny_models.py --out .lab/hub

tiny-gqa (the catalog's tiny_gqa) also gets two extra revisions for update
tests, as trees hub_server.py serves by label (see its "Revisions:"):

- .revisions/update-good/: main's files plus a README.md and a lab.json that
  say "revision update-good" (vLLM reads neither: it loads as main does).
- .revisions/update-broken/: main's files with tokenizer.json cut short,
  invalid JSON, so vLLM fails while starting; config.json is main's, so a
  preflight that reads it passes.

Large files are hard links to main's, small ones copies. Each tree is
checked against main on every run and rebuilt only when it differs, under
a dot name renamed into place, so a re-run is cheap and a Hub root made
before the revisions existed gets them. Revision messages go to stderr.
"""

import argparse
import filecmp
import json
import os
import shutil
import sys
from pathlib import Path

VOCAB_SIZE = 1024
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "vLLM serves large language models with paged attention and continuous batching.",
    "Tensor parallel splits every layer across GPUs; expert parallel places experts on GPUs.",
    "Grouped-query attention shares each key and value head among several query heads.",
    "Multi-head latent attention caches one compressed latent vector per token.",
    "A blue/green cutover starts the new model, checks its health, then moves traffic.",
    "Time to first token, time per output token and tokens per second measure a server.",
    "Hello! How can I help you today? Tell me a story about GPUs and fast networks.",
    "0123456789 +-*/=()[]{}<>,.;:!?'\"@#$%^&_|~`",
]


def train_tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 20, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)


def llama_gqa():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=VOCAB_SIZE, hidden_size=128, intermediate_size=256,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=32, max_position_embeddings=2048, tie_word_embeddings=False,
        bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )
    return LlamaForCausalLM(cfg)


def deepseek_mla():
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    cfg = DeepseekV3Config(
        vocab_size=VOCAB_SIZE, hidden_size=256, intermediate_size=512,
        moe_intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, n_shared_experts=1, n_routed_experts=8,
        num_experts_per_tok=2, first_k_dense_replace=1, n_group=1, topk_group=1,
        routed_scaling_factor=1.0, norm_topk_prob=True, topk_method="noaux_tc",
        scoring_func="sigmoid", kv_lora_rank=512, q_lora_rank=None,
        qk_rope_head_dim=64, qk_nope_head_dim=64, v_head_dim=64,
        max_position_embeddings=2048, rope_scaling=None, tie_word_embeddings=False,
        bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )
    return DeepseekV3ForCausalLM(cfg)


MODELS = {
    "vllm-fleet-lab/tiny-gqa": llama_gqa,
    "vllm-fleet-lab/tiny-mla": deepseek_mla,
}


# The catalog's tiny_gqa (roles/vllm_model/defaults/main/catalog.yml) gets these.
REVISIONS_OF = "vllm-fleet-lab/tiny-gqa"
REVISIONS_DIR = ".revisions"
REVISION_LABELS = ("update-good", "update-broken")
LINK_AT = 1024 * 1024  # files this large, and *.safetensors, are hard-linked


def revision_plan(repo_dir: Path, label: str) -> dict[str, Path | bytes]:
    """{path: main's file to link or copy, or the bytes to write} of one extra revision."""
    main = {  # what the Hub serves as main: no dot names (.revisions/, .gated, .tags)
        f.relative_to(repo_dir).as_posix(): f
        for f in sorted(repo_dir.rglob("*"))
        if f.is_file() and not any(p.startswith(".") for p in f.relative_to(repo_dir).parts)
    }
    plan: dict[str, Path | bytes] = dict(main)
    if label == "update-good":
        plan["README.md"] = b"# tiny-gqa\n\nrevision update-good: main's model, a new README.\n"
        lab = json.loads(main["lab.json"].read_text(encoding="utf-8"))
        lab["revision"] = "update-good"
        plan["lab.json"] = (json.dumps(lab, indent=2) + "\n").encode()
    elif label == "update-broken":
        tokenizer = main["tokenizer.json"].read_bytes()
        plan["tokenizer.json"] = tokenizer[: len(tokenizer) // 2]  # cut mid-JSON: invalid
    else:
        raise ValueError(f"unknown revision {label}")
    return plan


def _linked(rel: str, src: Path) -> bool:
    return rel.endswith(".safetensors") or src.stat().st_size >= LINK_AT


def _tree_matches(tree: Path, plan: dict[str, Path | bytes]) -> bool:
    if not tree.is_dir():
        return False
    have = {f.relative_to(tree).as_posix(): f for f in tree.rglob("*") if f.is_file()}
    if set(have) != set(plan):
        return False
    for rel, want in plan.items():
        if isinstance(want, bytes):
            if have[rel].read_bytes() != want:
                return False
        elif not (os.path.samefile(have[rel], want) or filecmp.cmp(have[rel], want, False)):
            return False
    return True


def write_revisions(repo_dir: Path, labels=REVISION_LABELS) -> list[str]:
    """Write the extra revision trees that are missing or differ from main; the labels written."""
    written = []
    for label in labels:
        plan = revision_plan(repo_dir, label)
        tree = repo_dir / REVISIONS_DIR / label
        tmp = repo_dir / REVISIONS_DIR / f".{label}.tmp"  # the Hub skips dot names
        shutil.rmtree(tmp, ignore_errors=True)  # left by a run that stopped half-way
        if _tree_matches(tree, plan):
            continue
        for rel, want in plan.items():
            dest = tmp / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(want, bytes):
                dest.write_bytes(want)
                continue
            if _linked(rel, want):
                try:
                    os.link(want, dest)
                    continue
                except OSError:  # no hard links on this file system: a copy does
                    pass
            shutil.copy2(want, dest)
        if tree.exists():
            shutil.rmtree(tree)
        tmp.rename(tree)
        written.append(label)
    return written


def make(out_root: Path, repo_id: str, seed: int) -> Path:
    import torch

    torch.manual_seed(seed)
    out = out_root / repo_id
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    model = MODELS[repo_id]().to(torch.bfloat16)
    model.generation_config.max_new_tokens = 32
    model.save_pretrained(out, safe_serialization=True)
    train_tokenizer(out)
    readme = {"repo_id": repo_id, "made_by": "lab/make_tiny_models.py", "seed": seed}
    (out / "lab.json").write_text(json.dumps(readme, indent=2) + "\n", encoding="utf-8")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="hub root folder")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--force", action="store_true", help="remake existing repos")
    args = parser.parse_args()
    for repo_id in MODELS:
        target = args.out / repo_id
        if (target / "config.json").exists() and not args.force:
            print(f"lab: {repo_id} present in {target}")
            continue
        path = make(args.out, repo_id, args.seed)
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        print(f"lab: made {repo_id} in {path} ({size} bytes)")
    # After main, and on every run: a root made before the revisions existed gets them.
    target = args.out / REVISIONS_OF
    for label in write_revisions(target):
        print(f"lab: wrote revision {label} of {REVISIONS_OF}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
