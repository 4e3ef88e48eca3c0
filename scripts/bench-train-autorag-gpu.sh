#!/usr/bin/env bash
# Auto-RAG fine-tuning on a GPU machine: `ragtime train autorag` with burn's CUDA backend beside the same fine-tune in
# PyTorch/transformers (scripts/train_autorag_torch.py replays ragtime's plan: same base weights, tokens, batches,
# learning rates, loss and optimizer), then a check that transformers reads ragtime's exported folder.
#
#   scripts/bench-train-autorag-gpu.sh STEP...     # STEP: ragtime | torch | check | table (default: all four)
#
# Env: BIN (ragtime binary, default target/release/ragtime), MODEL (SmolLM2 GGUF), TOKENIZER (its tokenizer.json;
#      empty: the GGUF's own, e.g. TOKENIZER= MODEL=checkpoints/qwen2.5-coder-0.5b-instruct.gguf),
#      DATA (dialogues folder, default datasets/autorag/smoke from scripts/autorag_smoke_dialogues.py),
#      OUT (results, default runs/train-autorag-gpu), EPOCHS (5), BATCH (8), ACCUM (2), LR (5e-5), MAXLEN (1024),
#      EXTRA (more flags for ragtime's trainer, e.g. "--static-shapes", or "--lora 16" for LoRA: the plan and the
#      base PyTorch replays are written with them too, so the replay is LoRA from ragtime's initial adapters),
#      TORCH_EXTRA (more flags for the PyTorch replay, e.g. "--gradient-checkpointing" beside EXTRA's),
#      DTYPE (f32 or bf16, default f32: bf16 is ragtime's `--dtype bf16` and, from the same plan, PyTorch's autocast).
# Each step writes under OUT and can run in a separate call; `ragtime` resumes from its checkpoint if cut off.
# Peak GPU memory is the largest `nvidia-smi` reading (whole device, sampled every 100 ms) while a trainer runs;
# PyTorch's own allocator peaks are printed by the torch step as well.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${BIN:-target/release/ragtime}"
MODEL="${MODEL:-checkpoints/smollm2-135m-instruct-q4_1.gguf}"
TOKENIZER="${TOKENIZER-../shared/data/models/smollm2-135m-instruct/tokenizer.json}"
DATA="${DATA:-datasets/autorag/smoke}"
OUT="${OUT:-runs/train-autorag-gpu}"
EPOCHS="${EPOCHS:-5}" BATCH="${BATCH:-8}" ACCUM="${ACCUM:-2}" LR="${LR:-5e-5}" MAXLEN="${MAXLEN:-1024}"
mkdir -p "$OUT"
STEPS=("$@")
[[ ${#STEPS[@]} -gt 0 ]] || STEPS=(ragtime torch check table)

tok=()
[[ -z $TOKENIZER ]] || tok=(--tokenizer "$TOKENIZER")
common=(--model "$MODEL" "${tok[@]}" --data "$DATA" --epochs "$EPOCHS" --batch-size "$BATCH"
  --grad-accum "$ACCUM" --lr "$LR" --warmup-ratio 0.1 --max-len "$MAXLEN" --eval-every 15 --save-every 25
  --dtype "${DTYPE:-f32}")

# Runs "$@" while sampling the GPU's used memory; writes the peak (MiB) to $1.mem-peak.
with_mem() {
  local tag="$1"; shift
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 >"$OUT/$tag.mem" 2>/dev/null &
  local smi=$!
  local rc=0
  "$@" || rc=$?
  kill "$smi" 2>/dev/null || true
  wait "$smi" 2>/dev/null || true
  sort -n "$OUT/$tag.mem" | tail -1 >"$OUT/$tag.mem-peak"
  return $rc
}

for step in "${STEPS[@]}"; do
  case "$step" in
    ragtime)
      nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
      read -ra extra <<<"${EXTRA:-}"
      with_mem ragtime "$BIN" train autorag "${common[@]}" "${extra[@]}" --out "$OUT/ragtime-cuda" --device cuda \
        >>"$OUT/ragtime.stdout" 2>>"$OUT/ragtime.log" || { tail -20 "$OUT/ragtime.log"; exit 1; }
      tail -4 "$OUT/ragtime.log"; cat "$OUT/ragtime.stdout"
      ;;
    torch)
      read -ra extra <<<"${EXTRA:-}"
      "$BIN" train autorag "${common[@]}" "${extra[@]}" --dump-plan "$OUT/plan.jsonl"
      # written every time: a LoRA plan also needs the adapters ragtime starts from (beside the base, same flags)
      "$BIN" train autorag "${common[@]}" "${extra[@]}" --export-base "$OUT/base-hf"
      read -ra textra <<<"${TORCH_EXTRA:-}"
      with_mem torch env PYTHONUNBUFFERED=1 python3 scripts/train_autorag_torch.py --plan "$OUT/plan.jsonl" \
        --base "$OUT/base-hf" --device cuda --report "$OUT/torch.json" "${textra[@]}" >"$OUT/torch.log" 2>&1 || { tail -20 "$OUT/torch.log"; exit 1; }
      tail -12 "$OUT/torch.log"
      ;;
    check)
      # A prompt the fine-tune continues for a while (on the bare question it ends its turn after one token).
      P="Question: Which magazine was started first, Arthur's Magazine or First for Women? Analysis: To answer this question, I would need to know"
      for dev in cpu cuda; do
        "$BIN" inspect --model "$OUT/ragtime-cuda" --prompt "$P" --max-new-tokens 24 --device $dev >"$OUT/inspect-$dev.jsonl" 2>"$OUT/inspect-$dev.log"
        python3 scripts/check_hf_export.py --model "$OUT/ragtime-cuda" --prompt "$P" --inspect "$OUT/inspect-$dev.jsonl" --device cuda \
          >"$OUT/check-$dev.txt" 2>&1 && echo "transformers vs ragtime ($dev): $(tail -1 "$OUT/check-$dev.txt")" \
          || { echo "transformers vs ragtime ($dev) FAILED:"; tail -5 "$OUT/check-$dev.txt"; }
      done
      ;;
    table)
      python3 - "$OUT" "${DTYPE:-f32}" <<'EOF'
import json, sys, os
out, dtype = sys.argv[1], sys.argv[2]
torch_dtype = "f32" if dtype == "f32" else "bf16 autocast, f32 master weights"
rows = []
r = json.load(open(os.path.join(out, "ragtime-cuda", "train_report.json")))
t = json.load(open(os.path.join(out, "torch.json")))
def peak(tag):
    try: return open(os.path.join(out, tag + ".mem-peak")).read().strip()
    except OSError: return "?"
h = r["history"]
th = t["history"]
def rate(rows):
    return sum(x["tokens"] for x in rows) / sum(x["secs"] for x in rows)
# steady state: the updates after the first fifth (kernel compilation and allocator growth happen early)
skip = max(1, len(h) // 5)
secs = sum(x["secs"] for x in h); toks = sum(x["tokens"] for x in h)
# the allocators' own peaks: burn's pool (live tensors at most, reserved; sampled by the trainer) and PyTorch's
def most(key):
    v = [x[key] for x in h if x.get(key) is not None]
    return f"{max(v):.0f}" if v else "?"
s = t["summary"]
pool_r = f"{most('gpu_in_use_mib')} / {most('gpu_reserved_mib')}"
pool_t = f"{s.get('peak_allocated_mib', float('nan')):.0f} / {s.get('peak_reserved_mib', float('nan')):.0f}"
print(f"| trainer | updates | tokens | train s | tokens/s | tokens/s, updates {skip + 1}+ | peak GPU MiB (nvidia-smi) | peak in use / reserved MiB (allocator) | valid loss first -> last |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
print(f"| ragtime (burn 0.21, CUDA, {dtype}) | {len(h)} | {toks} | {secs:.1f} | {toks/secs:.0f} | {rate(h[skip:]):.0f} | {peak('ragtime')} | {pool_r} | {r['valid'][0]['loss']:.4f} -> {r['valid'][-1]['loss']:.4f} |")
print(f"| PyTorch {s['torch']} + transformers ({torch_dtype}, SDPA) | {s['updates']} | {s['tokens']} | {s['train_secs']:.1f} | {s['tokens_per_s']:.0f} | {rate(th[skip:]):.0f} | {peak('torch')} | {pool_t} | {t['valid'][0]['loss']:.4f} -> {t['valid'][-1]['loss']:.4f} |")
print()
print("| update | ragtime loss | torch loss | ragtime |g| | torch |g| |")
print("|---:|---:|---:|---:|---:|")
for i in sorted(set([0, 1, 2, 4, 9] + list(range(0, len(h), max(1, len(h) // 8))) + [len(h) - 1])):
    if i < len(h) and i < len(th):
        print(f"| {h[i]['step']} | {h[i]['loss']:.4f} | {th[i]['loss']:.4f} | {h[i]['grad_norm']:.3f} | {th[i]['grad_norm']:.3f} |")
print()
print("| valid at update | ragtime | torch |")
print("|---:|---:|---:|")
tv = {v["step"]: v["loss"] for v in t["valid"]}
for v in r["valid"]:
    print(f"| {v['step']} | {v['loss']:.4f} | {tv.get(v['step'], float('nan')):.4f} |")
EOF
      ;;
    *) echo "unknown step $step (ragtime | torch | check | table)" >&2; exit 2 ;;
  esac
done
