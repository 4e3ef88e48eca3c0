#!/usr/bin/env bash
# Prefill and decode speed of the burn runtime beside Hugging Face transformers, on the same prompt and weights.
#
#   scripts/bench-decode.sh [runs]        # default 5 runs of each engine, interleaved; medians in the table
#
# ragtime: `ragtime generate --stats` (internals captured at every decoded token: entropy, last-layer attention,
# final hidden state, mean over layers), CPU unless DEVICE=cuda. On the CPU, decoding multiplies the GGUF's own
# quantized blocks held as 4-bit or 8-bit integers (src/model/quant/); `--f32-decode` makes it use the f32 weights instead.
# transformers: scripts/bench_decode_hf.py, float32, the GGUF de-quantized by transformers, KV cache, greedy; the
# same prompt (the 153-token case of ../shared/reference/smollm2_135m_q4_1.json) and 64 new tokens. Its venv
# (torch, transformers, gguf, accelerate from PyPI) is made once under ${RAGTIME_CACHE:-~/.cache/ragtime}/bench-venv;
# HF=0 skips it. REFERENCE=1 adds a third row: ragtime's reference engine (`--engine reference`: burn's tensor ops,
# the training forward pass) instead of the CPU engine (src/model/engine/cpu.rs), to show what the CPU engine changes.
# F32=1 adds the CPU engine holding every weight in f32 (`--f32-decode`), beside it holding a quantized GGUF's
# integer blocks only (the default). Peak memory is each process's peak resident set (VmHWM / ru_maxrss); load is
# ragtime's own time to read the model (`--stats`).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-5}"
DEVICE="${DEVICE:-cpu}"
MODEL="${MODEL:-checkpoints/smollm2-135m-instruct-q4_1.gguf}"
NEW="${NEW:-64}"
HF="${HF:-1}"
REFERENCE="${REFERENCE:-0}"
F32="${F32:-0}"
CACHE="${RAGTIME_CACHE:-$HOME/.cache/ragtime}"
VENV="$CACHE/bench-venv"
[[ -f $MODEL ]] || { echo "bench-decode: $MODEL missing (run scripts/setup.sh)" >&2; exit 1; }
cargo build --release -q
BIN=target/release/ragtime
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
python3 -c "import json,sys;sys.stdout.write(json.load(open('../shared/reference/smollm2_135m_q4_1.json'))['cases'][2]['prompt'])" >"$WORK/prompt.txt"
if [[ $HF == 1 && ! -x $VENV/bin/python ]]; then
  echo "bench-decode: making $VENV (torch, transformers, gguf, accelerate from PyPI; once) ..." >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q torch transformers gguf accelerate numpy
fi
for r in $(seq "$RUNS"); do
  $BIN generate --model "$MODEL" --device "$DEVICE" --prompt-file "$WORK/prompt.txt" --max-new-tokens "$NEW" \
    --ignore-eos --stats 2>&1 >/dev/null | tail -1 >>"$WORK/ragtime.txt"
  if [[ $REFERENCE == 1 ]]; then
    $BIN generate --engine reference --model "$MODEL" --device "$DEVICE" --prompt-file "$WORK/prompt.txt" \
      --max-new-tokens "$NEW" --ignore-eos --stats 2>&1 >/dev/null | tail -1 >>"$WORK/ragtime-reference.txt"
  fi
  if [[ $F32 == 1 ]]; then
    $BIN generate --f32-decode --model "$MODEL" --device "$DEVICE" --prompt-file "$WORK/prompt.txt" \
      --max-new-tokens "$NEW" --ignore-eos --stats 2>&1 >/dev/null | tail -1 >>"$WORK/ragtime-f32.txt"
  fi
  if [[ $HF == 1 ]]; then
    "$VENV/bin/python" scripts/bench_decode_hf.py "$MODEL" "$WORK/prompt.txt" "$NEW" 2>/dev/null | tail -1 >>"$WORK/hf.txt"
  fi
done
python3 - "$WORK" "$RUNS" <<'PY'
import os, re, statistics, sys
work, runs = sys.argv[1], int(sys.argv[2])
pat = re.compile(r"prompt (\d+) tokens in [0-9.]+s \(([0-9.]+) tok/s\); generated (\d+) tokens in [0-9.]+s "
                 r"\(([0-9.]+) tok/s\); peak rss ([0-9.]+) MiB")
rows = {}
load_pat = re.compile(r"model loaded in ([0-9.]+)s")
engines = (("ragtime, CPU engine (the GGUF's 4/8-bit blocks: f32 gemm on de-quantized tiles for prefill, block "
            "products for decode; internals captured)", "ragtime.txt"),
           ("transformers (torch, f32)", "hf.txt"),
           ("ragtime, reference engine (burn's ops, --engine reference)", "ragtime-reference.txt"),
           ("ragtime, CPU engine holding f32 weights (--f32-decode)", "ragtime-f32.txt"))
for name, f in engines:
    p = os.path.join(work, f)
    if not os.path.exists(p):
        continue
    lines = [l for l in open(p) if pat.search(l)]
    ms = [pat.search(l) for l in lines]
    loads = [float(m.group(1)) for m in (load_pat.search(l) for l in lines) if m]
    if not ms:
        print(f"{name}: no timing line parsed from {f}", file=sys.stderr)
        continue
    col = lambda i: [float(m.group(i)) for m in ms]
    rows[name] = dict(n=len(ms), prompt=int(ms[0].group(1)), gen=int(ms[0].group(3)),
                      pre=col(2), dec=col(4), rss=statistics.median(col(5)),
                      load=statistics.median(loads) if loads else None)
print(f"| engine | runs | prompt tokens | new tokens | prefill tok/s median (min-max) | decode tok/s median (min-max) "
      f"| peak RSS MiB | load s |")
print("|---|---|---|---|---|---|---|---|")
for name, r in rows.items():
    fmt = lambda v: f"{statistics.median(v):.1f} ({min(v):.1f}-{max(v):.1f})"
    load = "-" if r["load"] is None else f"{r['load']:.2f}"
    print(f"| {name} | {r['n']} | {r['prompt']} | {r['gen']} | {fmt(r['pre'])} | {fmt(r['dec'])} | {r['rss']:.0f} "
          f"| {load} |")
names = [n for n, _ in engines]
def ratio(label, a, b):
    if a in rows and b in rows:
        a, b = rows[a], rows[b]
        print(f"\n{label}: prefill {statistics.median(a['pre']) / statistics.median(b['pre']):.2f}x, "
              f"decode {statistics.median(a['dec']) / statistics.median(b['dec']):.2f}x, "
              f"peak RSS {a['rss'] / b['rss']:.2f}x (medians)")
ratio("ragtime / transformers", names[0], names[1])
ratio("ragtime integer blocks / f32 weights", names[0], names[3])
PY
