"""PyTorch/transformers replay of a `ragtime train autorag` run: the speed and loss reference for `--device cuda`.

Reads the plan that `ragtime train autorag ... --dump-plan PLAN.jsonl` writes (the settings, the tokenized
dialogues with their loss masks, and every update's micro-batches and learning rate) and trains the same base
model on exactly those tokens, in the same order, with the same loss and optimizer:

- loss of an update = sum of -log p(target) over the model-turn tokens of its micro-batches / their count
  (Auto-RAG's Eq. 3, token-weighted, as ragtime), the LM head applied only to the positions that predict a target;
- torch.optim.AdamW (decoupled decay on matrices only), the plan's learning rate per update, global-norm clipping;
- right padding with the plan's pad id and plain causal attention (pads come last, so they change nothing); a
  plan written with `--pack` gives each micro-batch as rows of several dialogues, replayed packed the same way
  (each dialogue at positions from 0, a block-diagonal causal mask passed to transformers as a 4D mask);
- float32 throughout, like ragtime; SDPA attention. A plan written with `--dtype bf16` runs under
  `torch.autocast(dtype=torch.bfloat16)` (products in bf16, softmax and loss in f32, f32 master weights and
  optimizer: PyTorch's mixed precision, the peer of ragtime's).

The base model is a Hugging Face folder: `ragtime train autorag --model M.gguf --export-base DIR` writes the
de-quantized GGUF base that ragtime itself starts from, so update 1 of both runs sees the same weights and data.

A plan written with `--lora R` is replayed as LoRA: the base frozen, each target layer `y = base(x) + (alpha / R)
(x A^T) B^T` with `A [R, in]`, `B [out, R]` trainable (no dropout), started from the adapters ragtime starts from
(`--export-base` with the same `--lora` flags writes them as DIR/adapter_init.safetensors, PEFT's names), with
AdamW's decay on both (they are matrices) and clipping over them alone, as ragtime.

    python3 scripts/train_autorag_torch.py --plan PLAN.jsonl --base DIR [--device cuda] [--report OUT.json]
        [--gradient-checkpointing]

Prints one line per update (loss, lr, gradient norm, tokens, tokens/s), the validation losses, and a summary with
tokens/s over the updates and the peak GPU memory that PyTorch allocated and reserved.
"""

import argparse
import contextlib
import json
import time

import os

import torch
from transformers import AutoModelForCausalLM


class LoraLinear(torch.nn.Module):
    """A frozen linear layer plus a trainable low-rank update: base(x) + scale * (x A^T) B^T."""

    def __init__(self, base, a, b, scale):
        super().__init__()
        self.base, self.scale = base, scale
        self.lora_A = torch.nn.Parameter(a.clone())  # [r, in]
        self.lora_B = torch.nn.Parameter(b.clone())  # [out, r]

    def forward(self, x):
        low = torch.nn.functional.linear(x, self.lora_A)  # [.., r]
        return self.base(x) + torch.nn.functional.linear(low, self.lora_B) * self.scale


def attach_lora(model, lora, path):
    """Freezes the model and wraps the layers `path` (ragtime's adapter_init.safetensors) holds adapters for."""
    from safetensors.torch import load_file

    if not os.path.exists(path):
        raise SystemExit(f"{path}: missing; the plan is a LoRA run: write it with `ragtime train autorag ... "
                         f"--lora {lora['rank']} --export-base DIR` (the same flags as the plan)")
    tensors = load_file(path)
    for p in model.parameters():
        p.requires_grad_(False)
    prefix, scale, n = "base_model.model.", lora["alpha"] / lora["rank"], 0
    for name in sorted(k for k in tensors if k.endswith(".lora_A.weight")):
        module = name[len(prefix):-len(".lora_A.weight")]  # model.layers.L.self_attn.q_proj
        parent_name, child = module.rsplit(".", 1)
        parent = model.get_submodule(parent_name)
        a, b = tensors[name], tensors[name.replace(".lora_A.", ".lora_B.")]
        setattr(parent, child, LoraLinear(getattr(parent, child), a, b, scale))
        n += 1
    if n == 0:
        raise SystemExit(f"{path}: no lora_A weights")
    return n


def load_plan(path):
    cfg, train, valid, updates = None, [], [], []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit(f"{path}:{n}: not JSON ({e})")
            kind = r.get("kind")
            if kind == "config":
                cfg = r
            elif kind == "example":
                (train if r["split"] == "train" else valid).append(r)
            elif kind == "update":
                updates.append(r)
            else:
                raise SystemExit(f"{path}:{n}: unknown record kind {kind!r}")
    if cfg is None or not updates:
        raise SystemExit(f"{path}: no config line or no updates (write it with `ragtime train autorag --dump-plan`)")
    for s in (train, valid):
        s.sort(key=lambda r: r["index"])
    return cfg, train, valid, updates


def make_batch(examples, pad_id, device):
    """One example per row, right-padded, plain causal attention (no layout)."""
    return make_rows([[e] for e in examples], pad_id, device, packed=False)


def make_packed_batch(rows, pad_id, device):
    """Packed rows (a plan written with --pack): each example starts again at position 0 and attends only to its own
    tokens up to itself (a block-diagonal causal mask, [b, 1, t, t], True where a query sees a key), as ragtime's
    packed rows."""
    return make_rows(rows, pad_id, device, packed=True)


def make_rows(rows, pad_id, device, packed):
    """Row r holds rows[r]'s examples one after another, then pads. Returns ids [b, t], the flat positions
    (row * t + cell - 1) that predict targets, the targets, the real tokens, and with `packed` the (position_ids,
    mask) pair transformers takes as given (else None)."""
    b, t = len(rows), max(sum(len(e["ids"]) for e in row) for row in rows)
    ids = torch.full((b, t), pad_id, dtype=torch.long)
    position_ids = torch.zeros((b, t), dtype=torch.long) if packed else None
    mask = torch.zeros((b, 1, t, t), dtype=torch.bool) if packed else None
    pos, tgt, tokens = [], [], 0
    for r, row in enumerate(rows):
        at = 0
        for e in row:
            n = len(e["ids"])
            ids[r, at : at + n] = torch.tensor(e["ids"], dtype=torch.long)
            if packed:
                position_ids[r, at : at + n] = torch.arange(n)
                mask[r, 0, at : at + n, at : at + n] = torch.tril(torch.ones((n, n), dtype=torch.bool))
            for j in range(1, n):
                if e["loss"][j]:
                    pos.append(r * t + at + j - 1)
                    tgt.append(e["ids"][j])
            at += n
            tokens += n
        if packed:
            for j in range(at, t):  # pads: each sees itself (no row of the softmax is empty)
                mask[r, 0, j, j] = True
    layout = (position_ids.to(device), mask.to(device)) if packed else None
    return ids.to(device), torch.tensor(pos, device=device), torch.tensor(tgt, device=device), tokens, layout


def nll_sum(model, ids, pos, tgt, layout=None):
    """Sum over targets of -log p(target | prefix); the LM head runs only on the predicting positions. `layout`:
    packed rows' (position_ids, 4D mask), which transformers takes as they are."""
    if layout is None:
        hidden = model.model(input_ids=ids).last_hidden_state  # [b, t, d]
    else:
        position_ids, mask = layout
        hidden = model.model(input_ids=ids, position_ids=position_ids, attention_mask=mask).last_hidden_state
    h = hidden.reshape(-1, hidden.shape[-1]).index_select(0, pos)  # [n, d]
    logp = torch.log_softmax(model.lm_head(h).float(), dim=-1)  # [n, vocab]
    return -logp.gather(1, tgt[:, None]).sum()


@torch.no_grad()
def evaluate(model, examples, batch, pad_id, device):
    """Mean NLL per model-turn token; batches sorted by length as in ragtime's eval_batches."""
    if not examples:
        return float("nan")
    model.eval()
    order = sorted(range(len(examples)), key=lambda i: -len(examples[i]["ids"]))
    total, n = 0.0, 0
    for k in range(0, len(order), batch):
        ids, pos, tgt, _, _ = make_batch([examples[i] for i in order[k : k + batch]], pad_id, device)
        total += nll_sum(model, ids, pos, tgt).item()
        n += len(tgt)
    model.train()
    return total / n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", required=True)
    ap.add_argument("--base", required=True, help="Hugging Face folder of the base model")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--report", help="write the loss curves and measurements here (JSON)")
    ap.add_argument("--gradient-checkpointing", action="store_true",
                    help="transformers' gradient_checkpointing_enable() (one checkpoint per decoder layer), the peer "
                         "of ragtime's --gradient-checkpointing")
    a = ap.parse_args()

    meta, train, valid, updates = load_plan(a.plan)
    cfg, pad_id, dev = meta["config"], meta["pad_id"], torch.device(a.device)
    torch.manual_seed(cfg.get("seed", 0))
    bf16 = cfg.get("dtype", "f32") == "bf16"
    amp = (lambda: torch.autocast(dev.type, dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext
    t_load = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(a.base, dtype=torch.float32, attn_implementation="sdpa")
    if cfg.get("lora"):
        n = attach_lora(model, cfg["lora"], os.path.join(a.base, "adapter_init.safetensors"))
        print(f"LoRA r={cfg['lora']['rank']} alpha={cfg['lora']['alpha']} on {n} layers", flush=True)
    model = model.to(dev)
    if a.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    print(f"loaded {a.base} in {time.perf_counter() - t_load:.1f}s; {sum(p.numel() for p in model.parameters())/1e6:.1f}M "
          f"parameters ({sum(p.numel() for p in model.parameters() if p.requires_grad)/1e6:.2f}M trained); train {len(train)}, valid {len(valid)}, {len(updates)} updates", flush=True)
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": cfg["weight_decay"]},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=updates[0]["lr"], betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"])
    clip = cfg["clip_norm"]
    eval_every, bs = cfg["eval_every"], max(1, cfg["batch_size"])
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)

    history, valid_log = [], []

    def validate(step):
        t0 = time.perf_counter()
        with amp():
            loss = evaluate(model, valid, bs, pad_id, dev)
        valid_log.append({"step": step, "loss": loss})
        print(f"valid  step {step:>5}  loss {loss:.4f}  ({len(valid)} dialogues, {time.perf_counter() - t0:.1f}s)", flush=True)

    validate(0)
    for up in updates:
        if "rows" in up:  # packed: each micro-batch is rows of several dialogues
            micro = [make_packed_batch([[train[i] for i in row] for row in rows], pad_id, dev) for rows in up["rows"]]
        else:
            micro = [make_batch([train[i] for i in idx], pad_id, dev) for idx in up["micro"]]
        n_targets = sum(len(m[2]) for m in micro)
        tokens = sum(m[3] for m in micro)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        loss_sum = 0.0
        for ids, pos, tgt, _, layout in micro:
            with amp():
                loss = nll_sum(model, ids, pos, tgt, layout) / n_targets
            loss.backward()
            loss_sum += loss.item()
        norm = torch.nn.utils.clip_grad_norm_(params, clip).item() if clip > 0 else float("nan")
        for g in opt.param_groups:
            g["lr"] = up["lr"]
        opt.step()
        opt.zero_grad(set_to_none=True)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        secs = time.perf_counter() - t0
        row = {"step": up["step"], "epoch": up["epoch"], "loss": loss_sum, "lr": up["lr"], "grad_norm": norm,
               "tokens": tokens, "target_tokens": n_targets, "secs": secs}
        history.append(row)
        print(f"step {up['step']:>5}/{len(updates)}  epoch {up['epoch']}  loss {loss_sum:.4f}  lr {up['lr']:.2e}  "
              f"|g| {norm:.3f}  {tokens} tok ({n_targets} target)  {tokens / secs:.0f} tok/s", flush=True)
        if up["step"] == len(updates) or (eval_every > 0 and up["step"] % eval_every == 0):
            validate(up["step"])

    secs = sum(r["secs"] for r in history)
    toks = sum(r["tokens"] for r in history)
    k = max(1, len(history) // 5)
    mean = lambda rs: sum(r["loss"] for r in rs) / len(rs)
    summary = {"updates": len(history), "tokens": toks, "train_secs": secs, "tokens_per_s": toks / secs,
               "first_loss_mean": mean(history[:k]), "last_loss_mean": mean(history[-k:])}
    if dev.type == "cuda":
        summary["peak_allocated_mib"] = torch.cuda.max_memory_allocated(dev) / 2**20
        summary["peak_reserved_mib"] = torch.cuda.max_memory_reserved(dev) / 2**20
        summary["gpu"] = torch.cuda.get_device_name(dev)
    summary["torch"] = torch.__version__
    print(f"train loss {summary['first_loss_mean']:.4f} (first {k} updates) -> {summary['last_loss_mean']:.4f} (last {k}); "
          f"{summary['tokens_per_s']:.0f} tokens/s over {len(history)} updates ({secs:.1f}s)")
    for v in valid_log:
        print(f"valid loss at update {v['step']:>5}: {v['loss']:.4f}")
    if "peak_allocated_mib" in summary:
        print(f"peak GPU memory: {summary['peak_allocated_mib']:.0f} MiB allocated, {summary['peak_reserved_mib']:.0f} MiB reserved by PyTorch")
    if a.report:
        with open(a.report, "w") as f:
            json.dump({"summary": summary, "history": history, "valid": valid_log}, f, indent=1)


if __name__ == "__main__":
    main()
