#!/usr/bin/env python3
"""Writes tests/data/rope_scaling_reference.json: what Hugging Face transformers computes for a tiny Llama whose
RoPE is scaled as Llama 3.1 and 3.2 scale it (`rope_scaling` type `llama3`), as position interpolation does
(`linear`) and as YaRN does (`yarn`, Qwen2.5's long-context option). The Rust test `tests/rope_scaling.rs` builds the same model from the same formula (weights from a
hash of each tensor's name and each element's index, so none are stored) as a Hugging Face folder and (llama3,
linear) as a GGUF file, and checks ragtime's RoPE frequencies, next-token entropies and final hidden states against these.

    scripts/make_rope_scaling_reference.py [--out tests/data/rope_scaling_reference.json]

Needs torch and transformers (any environment that has them; `python3 -m venv V && V/bin/pip install torch
transformers`). Float32 on the CPU, eager attention. The GGUF case's `rope_freqs` are the per-frequency divisors
llama.cpp's converter (`convert_hf_to_gguf.py`, `LlamaModel.generate_extra_tensors`) writes for `llama3`,
computed here with its formula, so that the test reads them as a converted file would carry them.
"""
import argparse, json, math, os

import numpy as np
import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ap = argparse.ArgumentParser()
ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "rope_scaling_reference.json"))
args = ap.parse_args()

M64 = (1 << 64) - 1
VOCAB, HIDDEN, INTER, LAYERS, HEADS, KV_HEADS, THETA = 49152, 32, 64, 2, 2, 1, 10000.0
HEAD_DIM = HIDDEN // HEADS
SEQ = 96


def fnv1a(name):
    h = 0xCBF29CE484222325
    for b in name.encode():
        h = ((h ^ b) * 0x100000001B3) & M64
    return h


def uniform(name, n):
    """splitmix64 of (fnv1a(name) + index), mapped to [-1, 1): the same numbers the Rust test makes."""
    x = (np.uint64(fnv1a(name)) + np.arange(n, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15))
    z = x
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return ((z >> np.uint64(11)).astype(np.float64) * 2.0**-53 * 2.0 - 1.0).astype(np.float32)


def weight(name, shape):
    n = int(np.prod(shape))
    u = uniform(name, n).reshape(shape)
    if name.endswith("norm.weight"):
        return 1.0 + 0.1 * u
    if name == "model.embed_tokens.weight":
        return u
    return 0.3 * u


def state_dict():
    sd = {"model.embed_tokens.weight": (VOCAB, HIDDEN), "model.norm.weight": (HIDDEN,)}
    kv = KV_HEADS * HEAD_DIM
    for l in range(LAYERS):
        p = f"model.layers.{l}"
        sd.update({
            f"{p}.self_attn.q_proj.weight": (HIDDEN, HIDDEN), f"{p}.self_attn.k_proj.weight": (kv, HIDDEN),
            f"{p}.self_attn.v_proj.weight": (kv, HIDDEN), f"{p}.self_attn.o_proj.weight": (HIDDEN, HIDDEN),
            f"{p}.mlp.gate_proj.weight": (INTER, HIDDEN), f"{p}.mlp.up_proj.weight": (INTER, HIDDEN),
            f"{p}.mlp.down_proj.weight": (HIDDEN, INTER),
            f"{p}.input_layernorm.weight": (HIDDEN,), f"{p}.post_attention_layernorm.weight": (HIDDEN,),
        })
    return {k: torch.from_numpy(weight(k, s)) for k, s in sd.items()}


def llama_cpp_factors(inv_freq, rs):
    """convert_hf_to_gguf.py's rope_freqs for rope_type llama3: one divisor per frequency."""
    factor, low, high, old = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"], rs["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / low, old / high
    out = []
    for freq in inv_freq:
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return out


def config(rope_scaling):
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": HIDDEN,
        "intermediate_size": INTER, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS, "vocab_size": VOCAB, "max_position_embeddings": 2048,
        "rope_theta": THETA, "rope_scaling": rope_scaling, "rms_norm_eps": 1e-5, "tie_word_embeddings": True,
        "hidden_act": "silu", "attention_bias": False, "torch_dtype": "float32",
    }


ids = [(i * 7919 + 13) % VOCAB for i in range(SEQ)]
weights = state_dict()
cases = []
# llama3 with the wavelength bounds 64 / 4 = 16 and 64 / 1 = 64: of the 8 frequencies (wavelengths 6.3 to
# 19,869), one is kept, two are blended, five divided by 8, all within the 96 positions
for name, rs in [
    ("llama3", {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64}),
    ("linear", {"rope_type": "linear", "factor": 4.0}),
    # YaRN over 32 original positions: pairs 0..2 ramp from kept to divided by 4, cos and sin times 0.1 ln 4 + 1
    ("yarn", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}),
]:
    cfg = config(rs)
    if name == "yarn":
        cfg["max_position_embeddings"] = 4 * 32  # the extended context YaRN's factor implies
    model = LlamaForCausalLM(LlamaConfig.from_dict(dict(cfg), attn_implementation="eager")).eval()
    missing, unexpected = model.load_state_dict(weights, strict=False)
    assert not unexpected and all(k == "lm_head.weight" for k in missing), (missing, unexpected)
    model.tie_weights()
    inv_freq = model.model.rotary_emb.inv_freq.tolist()
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_hidden_states=True)
    logp = torch.log_softmax(out.logits[0].double(), dim=-1)
    entropy = (-(logp.exp() * logp).sum(-1)).tolist()
    hidden = out.hidden_states[-1][0]  # after the final norm
    plain = [1.0 / THETA ** (2 * i / HEAD_DIM) for i in range(HEAD_DIM // 2)]
    gguf = {"rope_freqs": llama_cpp_factors(plain, rs)} if name == "llama3" else \
        {"metadata": {"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": rs["factor"]}} \
        if name == "linear" else None  # YaRN: no GGUF form ragtime reads
    attention_scaling = model.model.rotary_emb.attention_scaling
    cases.append({
        "name": name, "config": cfg, "gguf": gguf, "inv_freq": inv_freq, "attention_scaling": attention_scaling,
        "entropy": entropy,
        "hidden_final": {str(p): hidden[p].tolist() for p in range(3, SEQ, 4)},
    })

doc = {
    "about": "transformers' outputs for a tiny Llama with scaled RoPE (scripts/make_rope_scaling_reference.py): "
             "inv_freq and the factor cos and sin are multiplied by, the entropy of the next-token distribution at every position, the final hidden state "
             "(after the last norm) at every fourth position",
    "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    "ids": ids, "cases": cases,
}
with open(args.out, "w") as f:
    json.dump(doc, f, separators=(",", ":"))
    f.write("\n")
print(f"wrote {args.out}: {len(cases)} cases, {SEQ} positions")
