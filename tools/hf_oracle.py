#!/usr/bin/env python3
"""Make model fixtures with Hugging Face transformers, the oracle kvserve is tested against.

Run on the GPU machine (torch and transformers are installed there; the models are small, so HF
runs on its CPU in plain fp32):

    python3 tools/hf_oracle.py --out tests/fixtures/oracle

For each config below it builds a random-weight model with transformers (seeded), saves it with
save_pretrained (bf16 safetensors, config.json, generation_config.json), then runs it in fp32 on a
batch of prompts of different lengths, one prompt at a time (no padding), and writes
expected.json: the prompts, the last-position logits of each prompt, and 64 greedy tokens.
tests/unit/oracle_test.cpp loads the same checkpoints into kvserve and compares.
"""
import argparse
import json
import os

import torch
import transformers
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
                          Qwen2Config, Qwen2ForCausalLM)

VOCAB = 256
COMMON = dict(vocab_size=VOCAB, max_position_embeddings=512, rms_norm_eps=1e-5,
              bos_token_id=1, eos_token_id=2, pad_token_id=None)

CONFIGS = {
    # GQA ratio 1, head_dim 64, tied embeddings.
    "llama_gqa1_hd64_tied": (LlamaForCausalLM, LlamaConfig(
        hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, head_dim=64, rope_theta=10000.0, tie_word_embeddings=True,
        **COMMON)),
    # GQA ratio 4, head_dim 128, untied, llama3 rope scaling with a short original context so
    # that the prompts reach every frequency band.
    "llama_gqa4_hd128_llama3": (LlamaForCausalLM, LlamaConfig(
        hidden_size=128, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=1, head_dim=128, rope_theta=500000.0, tie_word_embeddings=False,
        rope_scaling={"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
        **COMMON)),
    # GQA ratio 8, head_dim 64.
    "llama_gqa8_hd64": (LlamaForCausalLM, LlamaConfig(
        hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=8,
        num_key_value_heads=1, head_dim=64, rope_theta=10000.0, tie_word_embeddings=False,
        **COMMON)),
    # Qwen2: q/k/v bias, tied, rope_theta 1e6.
    "qwen2_bias": (Qwen2ForCausalLM, Qwen2Config(
        hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, rope_theta=1000000.0, tie_word_embeddings=True,
        use_sliding_window=False, **COMMON)),
    # Mistral (no sliding window within these lengths).
    "mistral": (MistralForCausalLM, MistralConfig(
        hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, rope_theta=10000.0, tie_word_embeddings=False, sliding_window=None,
        **COMMON)),
}


def _longrope_factors(n, lo, hi):
    return [lo + (hi - lo) * i / (n - 1) for i in range(n)]


def _extra_configs():
    """Configs of features added after the first five (sliding windows, rope scaling, Qwen3,
    Gemma 2/3). Built lazily: Qwen3 and Gemma classes need a recent transformers."""
    from transformers import (Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM,
                              Gemma3TextConfig, Qwen3Config, Qwen3ForCausalLM)
    small = dict(hidden_size=128, intermediate_size=256, num_attention_heads=4,
                 num_key_value_heads=2)
    return {
        # Sliding window 24 on every layer: prompts of 33 and 100 tokens cross it.
        "mistral_swa": (MistralForCausalLM, MistralConfig(
            num_hidden_layers=2, rope_theta=10000.0, tie_word_embeddings=False, sliding_window=24,
            **small, **COMMON)),
        # Qwen2's max_window_layers: layer 0 attends to everything, layer 1 slides (window 24).
        "qwen2_swa": (Qwen2ForCausalLM, Qwen2Config(
            num_hidden_layers=2, rope_theta=1000000.0, tie_word_embeddings=True,
            use_sliding_window=True, sliding_window=24, max_window_layers=1, **small, **COMMON)),
        # Rope scaling, with an original context of 64 so that prompts and generation pass it.
        "llama_rope_linear": (LlamaForCausalLM, LlamaConfig(
            num_hidden_layers=2, head_dim=64, rope_theta=10000.0,
            rope_scaling={"rope_type": "linear", "factor": 4.0}, **small, **COMMON)),
        "llama_rope_dynamic": (LlamaForCausalLM, LlamaConfig(
            num_hidden_layers=2, head_dim=64, rope_theta=10000.0,
            rope_scaling={"rope_type": "dynamic", "factor": 2.0},
            **small, **{**COMMON, "max_position_embeddings": 64})),
        "qwen2_rope_yarn": (Qwen2ForCausalLM, Qwen2Config(
            num_hidden_layers=2, rope_theta=1000000.0, tie_word_embeddings=True,
            use_sliding_window=False,
            rope_scaling={"rope_type": "yarn", "factor": 4.0,
                          "original_max_position_embeddings": 64},
            **small, **{**COMMON, "max_position_embeddings": 256})),
        "llama_rope_longrope": (LlamaForCausalLM, LlamaConfig(
            num_hidden_layers=2, head_dim=64, rope_theta=10000.0,
            rope_scaling={"rope_type": "longrope", "original_max_position_embeddings": 64,
                          "short_factor": _longrope_factors(32, 1.0, 1.6),
                          "long_factor": _longrope_factors(32, 1.0, 6.0)},
            **small, **{**COMMON, "max_position_embeddings": 256})),
        # Qwen3: q/k RMSNorm, explicit head_dim (64, not hidden / heads = 32), tied.
        "qwen3": (Qwen3ForCausalLM, Qwen3Config(
            num_hidden_layers=2, head_dim=64, rope_theta=1000000.0, tie_word_embeddings=True,
            **small, **COMMON)),
        # Gemma 2: interleaved local (window 16) / global layers, soft-capping small enough to
        # bite on random weights, query_pre_attn_scalar different from head_dim.
        "gemma2": (Gemma2ForCausalLM, Gemma2Config(
            num_hidden_layers=4, head_dim=64, query_pre_attn_scalar=48, sliding_window=16,
            attn_logit_softcapping=3.0, final_logit_softcapping=5.0,
            hidden_activation="gelu_pytorch_tanh", rope_theta=10000.0,
            **small, **COMMON)),
        # Gemma 3 (text): q/k norms, local rope base for sliding layers, linear-scaled global rope.
        "gemma3": (Gemma3ForCausalLM, Gemma3TextConfig(
            num_hidden_layers=4, head_dim=64, query_pre_attn_scalar=64, sliding_window=16,
            layer_types=["sliding_attention", "sliding_attention", "full_attention",
                         "sliding_attention"],
            rope_theta=1000000.0, rope_local_base_freq=10000.0,
            rope_scaling={"rope_type": "linear", "factor": 8.0},
            hidden_activation="gelu_pytorch_tanh", **small, **COMMON)),
    }


PROMPT_LENGTHS = [1, 7, 33, 100]
NEW_TOKENS = 64


def make(name, cls, config, out_dir, seed):
    torch.manual_seed(seed)
    model = cls(config)
    # Larger-than-default weights make the logits spread out, so greedy argmax has clear winners.
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n:
                p.uniform_(0.5, 1.5)
            else:  # matrices and biases
                p.normal_(0.0, 0.08)
    model = model.to(torch.bfloat16)
    path = os.path.join(out_dir, name)
    model.save_pretrained(path, safe_serialization=True)
    # Evaluate exactly the saved (bf16) weights in fp32.

    def load():
        # Eager attention: the SDPA path drops Gemma 2's attention soft-capping. A fresh model per
        # run: "dynamic" and "longrope" rotary embeddings keep state between calls.
        try:  # transformers >= 5 names it dtype, older versions torch_dtype
            return cls.from_pretrained(path, dtype=torch.float32,
                                       attn_implementation="eager").eval()
        except TypeError:
            return cls.from_pretrained(path, torch_dtype=torch.float32,
                                       attn_implementation="eager").eval()

    gen = torch.Generator().manual_seed(seed + 1)
    prompts = [torch.randint(3, VOCAB, (n,), generator=gen).tolist() for n in PROMPT_LENGTHS]
    logits, greedy = [], []
    with torch.no_grad():
        for p in prompts:
            ids = torch.tensor([p])
            model = load()
            out = model(ids)
            model = load()
            logits.append(out.logits[0, -1].float().tolist())
            seq = model.generate(ids, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                                 do_sample=False, eos_token_id=None, pad_token_id=0)
            greedy.append(seq[0, len(p):].tolist())
    with open(os.path.join(path, "expected.json"), "w") as f:
        json.dump({"transformers": transformers.__version__, "torch": torch.__version__,
                   "prompts": prompts, "last_logits": logits, "greedy": greedy}, f)
    size = sum(os.path.getsize(os.path.join(path, x)) for x in os.listdir(path))
    print(f"{name}: {size / 1e6:.2f} MB, {sum(p.numel() for p in model.parameters())} params")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--only", nargs="*", default=[], help="make only these fixtures")
    ap.add_argument("--extra", action="store_true",
                    help="also the sliding-window, rope-scaling, Qwen3 and Gemma fixtures")
    args = ap.parse_args()
    torch.set_num_threads(8)
    os.makedirs(args.out, exist_ok=True)
    configs = dict(CONFIGS)
    if args.only or args.extra:
        configs.update(_extra_configs())
    for i, (name, (cls, config)) in enumerate(configs.items()):
        if args.only and name not in args.only:
            continue
        make(name, cls, config, args.out, args.seed + 100 * i)


if __name__ == "__main__":
    main()
