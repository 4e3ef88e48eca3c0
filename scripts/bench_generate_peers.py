"""The peers of scripts/bench-generate.sh on the same GGUF weights and prompts.

  python bench_generate_peers.py hf GGUF PROMPTS B NEW [--internals]
      transformers' batched `generate` (float32, left padding, greedy, exactly NEW new tokens per prompt) over
      the prompts of PROMPTS (one JSON string per line), B at a time; --internals asks for every step's
      attentions and hidden states (what ragtime captures), eager attention; otherwise sdpa.
  python bench_generate_peers.py hf-cuda MODEL PROMPTS "B1 B2 ..." NEW ["f32 bf16"] [--compile]
      transformers on the GPU: the model loaded once, copied to the GPU per dtype (float32, bfloat16, or those
      named), then for each B the first B prompts as one batched `generate` (left padding, greedy, exactly NEW new
      tokens), with internals (eager attention, `output_attentions`/`output_hidden_states`) and without (sdpa),
      after an untimed warm-up of the same shape. --compile adds, in bfloat16, the same runs with transformers'
      static KV cache and the model's forward compiled by `torch.compile(mode="reduce-overhead", fullgraph=True)`
      (the recipe of transformers' LLM-optimization guide; two untimed warm-ups per shape: compilation and CUDA
      graph capture); a run that fails says so in its row. Prints one Markdown table row per run: engine, B,
      prompts, tok/s, peak GPU MiB.
  python bench_generate_peers.py compile-check MODEL [cpu|cuda]
      whether that compiled forward, with internals, gives what the eager one does (same greedy tokens; the
      largest differences of the attentions and hidden states), float32, 2 prompts, 3 tokens; exit 1 if not.
  python bench_generate_peers.py llamacpp GGUF PROMPTS 1 NEW
      llama.cpp (llama-cpp-python) on the same GGUF, one prompt at a time (its high-level API decodes one
      sequence), greedy, NEW tokens, threads = the process's CPUs.
  python bench_generate_peers.py llamacpp-prefill GGUF PROMPTS
      llama.cpp's prefill of the first prompt of PROMPTS (as it stands: no chat template, special tokens parsed),
      in batches of 512 tokens after an untimed warm-up; prints `llama.cpp prefill N tokens in S s: R tok/s`
      (beside `ragtime generate --prompts PROMPTS --batch 1 --max-new-tokens 1 --stats`: its "forward" seconds).

GGUF/MODEL (transformers): a GGUF file, which transformers de-quantizes (and whose tokenizer it converts) itself,
or a Hugging Face folder of the same weights (`ragtime train autorag --model GGUF --export-base DIR`), which loads
in seconds.

Prints one line: `prompts N, generated G tokens in S s: R generated tok/s; peak rss M MiB`.
"""

import copy
import json
import os
import resource
import sys
import time


def peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def load(path, **kw):
    """Tokenizer and model from a GGUF file (de-quantized by transformers) or a Hugging Face folder (such as
    ragtime's export of the same GGUF: `ragtime train autorag --model GGUF --export-base DIR`)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if os.path.isdir(path):
        tok, model = AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path, **kw)
    else:
        d, f = os.path.split(os.path.abspath(path))
        tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
        model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, **kw)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok, model.eval()


def hf(gguf, prompts, b, new, internals):
    import torch

    tok, model = load(gguf, dtype=torch.float32, attn_implementation="eager" if internals else "sdpa")
    kw = dict(output_attentions=True, output_hidden_states=True, return_dict_in_generate=True) if internals else {}
    generated = 0
    with torch.inference_mode():
        model(tok(prompts[0], return_tensors="pt").input_ids[:, :8])  # warm-up
        t0 = time.perf_counter()
        for i in range(0, len(prompts), b):
            enc = tok(prompts[i : i + b], return_tensors="pt", padding=True)
            out = model.generate(
                **enc, max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=tok.pad_token_id, **kw
            )
            seqs = out.sequences if internals else out
            generated += (seqs.shape[1] - enc.input_ids.shape[1]) * seqs.shape[0]
        dt = time.perf_counter() - t0
    return generated, dt


def set_attention(model, impl):
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(impl)
    else:
        model.config._attn_implementation = impl


def timed_generate(model, tok, prompts, b, new, internals, warmups=1, **extra):
    """One batched `generate` of the first b prompts after `warmups` untimed runs of the same shape: (generated
    tokens, seconds, peak GPU MiB)."""
    import torch

    kw = dict(output_attentions=True, output_hidden_states=True, return_dict_in_generate=True) if internals else {}
    enc = tok(prompts[:b], return_tensors="pt", padding=True).to("cuda")
    run = lambda: model.generate(
        **enc, max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=tok.pad_token_id, **kw, **extra
    )
    with torch.inference_mode():
        for _ in range(warmups):
            run()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        out = run()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
    seqs = out.sequences if internals else out
    g = (seqs.shape[1] - enc.input_ids.shape[1]) * seqs.shape[0]
    return g, dt, torch.cuda.max_memory_allocated() / 2**20


def hf_cuda(gguf, prompts, batches, new, dtypes, compiled):
    import torch

    # The model is loaded once; each dtype gets a copy on the GPU, and the attention implementation is switched
    # in place (eager with internals, sdpa without).
    t0 = time.perf_counter()
    tok, base = load(gguf, dtype=torch.float32, attn_implementation="eager")
    print(f"hf-cuda: loaded {gguf} in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    for dtype, name in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        if name not in dtypes:
            continue
        model = copy.deepcopy(base).to(device="cuda", dtype=dtype)
        for internals in (True, False):
            set_attention(model, "eager" if internals else "sdpa")
            mode = "internals, eager" if internals else "sdpa"
            for b in batches:
                g, dt, peak = timed_generate(model, tok, prompts, b, new, internals)
                print(f"| transformers {name} ({mode}) | {b} | {b} | {g / dt:.1f} | {peak:.0f} (GPU) |", flush=True)
        if compiled and name == "bf16":
            compiled_rows(model, tok, prompts, batches, new, name)
        del model
        torch.cuda.empty_cache()


def compile_forward(model, tok, prompts, shapes):
    """Readies `model` for static-cache decoding with its forward compiled; returns (the eager forward, a function
    that compiles it afresh into `model.forward`)."""
    import torch
    import torch._dynamo

    # generate's own compilation of a static cache's decoding step is turned off where the version has it, so
    # that only the compiled forward runs
    model.generation_config.disable_compile = True
    # every batch size compiles graphs of its own (the prefill and the decoding step): past dynamo's limit of 8
    # recompilations a function falls back to eager, or fails under fullgraph
    limit = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
    setattr(torch._dynamo.config, limit, max(64, 4 * shapes))
    # transformers installs its output-capturing hooks (attentions, hidden states) on the first call that asks for
    # them, under a lock that dynamo cannot trace (fullgraph fails on it): one eager call installs them first (with
    # eager attention, which returns attentions; the caller sets each run's attention after)
    set_attention(model, "eager")
    with torch.inference_mode():
        ids = tok(prompts[:1], return_tensors="pt").input_ids.to(model.device)
        model(ids, output_attentions=True, output_hidden_states=True)
    eager = model.forward

    def fresh():
        torch._dynamo.reset()
        model.forward = torch.compile(eager, mode="reduce-overhead", fullgraph=True)

    return eager, fresh


def compiled_rows(model, tok, prompts, batches, new, name):
    """transformers' static KV cache with the forward pass compiled, with internals and without."""
    eager, fresh = compile_forward(model, tok, prompts, len(batches))
    for internals in (True, False):
        fresh()
        set_attention(model, "eager" if internals else "sdpa")
        mode = "static cache, torch.compile, " + ("internals, eager" if internals else "sdpa")
        for b in batches:
            try:
                g, dt, peak = timed_generate(model, tok, prompts, b, new, internals, 2, cache_implementation="static")
                rate, mem = f"{g / dt:.1f}", f"{peak:.0f} (GPU)"
            except Exception as e:  # a version or mode that does not compile: the row says so
                print(f"hf-cuda: {mode}, B {b}: {e!r}", file=sys.stderr, flush=True)
                rate, mem = f"failed: {type(e).__name__}", "-"
            print(f"| transformers {name} ({mode}) | {b} | {b} | {rate} | {mem} |", flush=True)
    model.forward = eager


def compile_check(path, device):
    """The compiled static-cache `generate` with internals against the eager one, float32, two prompts, 3 tokens:
    the same tokens, and how far the attentions and hidden states are apart. Exits 1 if the tokens differ."""
    import torch

    tok, model = load(path, dtype=torch.float32, attn_implementation="eager")
    model.to(device)
    prompts = ["The capital of France is", "Water boils at"]
    enc = tok(prompts, return_tensors="pt", padding=True).to(device)
    kw = dict(output_attentions=True, output_hidden_states=True, return_dict_in_generate=True, max_new_tokens=3,
              min_new_tokens=3, do_sample=False, pad_token_id=tok.pad_token_id, cache_implementation="static")
    eager, fresh = compile_forward(model, tok, prompts, 1)
    with torch.inference_mode():
        ref = model.generate(**enc, **kw)
        fresh()
        out = model.generate(**enc, **kw)
    model.forward = eager
    pairs = lambda a, b: [(x, y) for xs, ys in zip(a, b) for x, y in zip(xs, ys)]
    att = max((x - y).abs().max().item() for x, y in pairs(ref.attentions, out.attentions))
    hid = max(((x - y).abs().max() / x.abs().max()).item() for x, y in pairs(ref.hidden_states, out.hidden_states))
    same = torch.equal(ref.sequences, out.sequences)
    print(f"compile-check ({device}): same tokens {same}, {len(out.attentions)} steps of {len(out.attentions[-1])} "
          f"layers; largest attention difference {att:.2e}, hidden states {hid:.2e} (relative to each's largest)")
    if not same:
        raise SystemExit(1)


def llamacpp(gguf, prompts, new):
    from llama_cpp import Llama

    import numpy as np
    from llama_cpp import LogitsProcessorList

    llm = Llama(model_path=gguf, n_ctx=2048, n_threads=len(os.sched_getaffinity(0)), verbose=False, logits_all=False)
    # exactly `new` tokens, as the other engines: end-of-sequence and end-of-turn tokens are masked
    stops = {llm.token_eos()}
    for t in (b"<|im_end|>", b"<|endoftext|>"):
        ids = llm.tokenize(t, add_bos=False, special=True)
        if len(ids) == 1:
            stops.add(ids[0])
    stops = sorted(stops)

    def no_stop(_ids, scores):
        scores[stops] = -np.inf
        return scores

    keep_going = LogitsProcessorList([no_stop])
    llm("warm up", max_tokens=4, temperature=0.0)
    generated = 0
    t0 = time.perf_counter()
    for p in prompts:
        out = llm(p, max_tokens=new, temperature=0.0, top_k=1, logits_processor=keep_going)
        generated += out["usage"]["completion_tokens"]
    return generated, time.perf_counter() - t0


def llamacpp_prefill(gguf, path):
    text = next((json.loads(l) for l in open(path, encoding="utf-8") if l.strip()), None)
    if not isinstance(text, str):
        raise SystemExit(f"{path}: expected a prompt (a JSON string) on its first non-empty line")
    from llama_cpp import Llama

    llm = Llama(model_path=gguf, n_ctx=8192, n_batch=512, n_threads=len(os.sched_getaffinity(0)), verbose=False)
    tokens = llm.tokenize(text.encode(), add_bos=False, special=True)
    llm.eval(llm.tokenize(b"warm up", add_bos=False))
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(tokens)
    dt = time.perf_counter() - t0
    print(f"llama.cpp prefill {len(tokens)} tokens in {dt:.2f} s: {len(tokens) / dt:.1f} tok/s")


def main():
    if sys.argv[1] == "compile-check":
        device = sys.argv[3] if len(sys.argv) > 3 else "cpu"
        if len(sys.argv) < 3 or len(sys.argv) > 4 or device not in ("cpu", "cuda"):
            raise SystemExit("usage: bench_generate_peers.py compile-check MODEL [cpu|cuda]")
        compile_check(sys.argv[2], device)
        return
    if sys.argv[1] == "hf-cuda":
        prompts = [json.loads(l) for l in open(sys.argv[3], encoding="utf-8") if l.strip()]
        args = [a for a in sys.argv[6:] if a != "--compile"]
        dtypes = args[0].split() if args else ("f32", "bf16")
        unknown = [d for d in dtypes if d not in ("f32", "bf16")]
        if unknown or not dtypes:
            raise SystemExit(f"hf-cuda: dtypes {' '.join(unknown) or '(none)'}: expected f32 and/or bf16 (HF_DTYPES)")
        batches = [int(b) for b in sys.argv[4].split()]
        hf_cuda(sys.argv[2], prompts, batches, int(sys.argv[5]), dtypes, "--compile" in sys.argv[6:])
        return
    if sys.argv[1] == "llamacpp-prefill":
        if len(sys.argv) != 4:
            raise SystemExit("usage: bench_generate_peers.py llamacpp-prefill GGUF PROMPTS")
        llamacpp_prefill(sys.argv[2], sys.argv[3])
        return
    peer, gguf, prompts_file, b, new = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    prompts = [json.loads(l) for l in open(prompts_file, encoding="utf-8") if l.strip()]
    if peer == "hf":
        g, dt = hf(gguf, prompts, b, new, "--internals" in sys.argv[6:])
    else:
        g, dt = llamacpp(gguf, prompts, new)
    print(f"prompts {len(prompts)}, generated {g} tokens in {dt:.3f} s: {g / dt:.1f} generated tok/s; "
          f"peak rss {peak_mib():.0f} MiB")


if __name__ == "__main__":
    main()
