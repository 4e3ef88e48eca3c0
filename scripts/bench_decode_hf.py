"""Hugging Face transformers on the same GGUF weights, the reference column of scripts/bench-decode.sh.

Loads the GGUF with transformers (de-quantized to float32), then times a prefill of the prompt and a greedy
decode of N tokens with the KV cache, like `ragtime generate --stats`. Prints one line:

    prompt P tokens in Xs (A tok/s); generated G tokens in Ys (B tok/s); peak rss M MiB

Usage: python bench_decode_hf.py GGUF_PATH PROMPT_FILE MAX_NEW_TOKENS [--attn]
  --attn also asks for attentions and hidden states at every step (what ragtime captures while decoding).
"""

import os
import resource
import sys
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def main():
    gguf, prompt_file, max_new = sys.argv[1], sys.argv[2], int(sys.argv[3])
    internals = "--attn" in sys.argv[4:]
    d, f = os.path.split(os.path.abspath(gguf))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(
        d, gguf_file=f, dtype=torch.float32, attn_implementation="eager" if internals else "sdpa"
    )
    model.eval()
    prompt = open(prompt_file, encoding="utf-8").read()
    ids = tok(prompt, return_tensors="pt").input_ids
    kw = dict(output_attentions=True, output_hidden_states=True) if internals else {}
    with torch.inference_mode():
        model(ids[:, :8])  # warm-up (allocator, kernels)
        t0 = time.perf_counter()
        out = model(ids, use_cache=True, **kw)
        t_prefill = time.perf_counter() - t0
        past = out.past_key_values
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        n = 0
        t1 = time.perf_counter()
        for _ in range(max_new):
            out = model(nxt, past_key_values=past, use_cache=True, **kw)
            past = out.past_key_values
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            n += 1
        t_dec = time.perf_counter() - t1
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"prompt {ids.shape[1]} tokens in {t_prefill:.3f}s ({ids.shape[1] / t_prefill:.1f} tok/s); "
        f"generated {n} tokens in {t_dec:.3f}s ({n / t_dec:.1f} tok/s); peak rss {peak:.0f} MiB"
    )


if __name__ == "__main__":
    main()
