"""Does transformers read a folder that ragtime exported (`train autorag`, `--export-base`) as ragtime does?

Runs a greedy continuation of PROMPT with transformers on the folder and compares it, token by token, with the
JSON lines that `ragtime inspect --model DIR --prompt PROMPT --max-new-tokens N` printed: the chosen token, the
entropy and the top-5 logits. Prints the largest differences and exits 1 if a chosen token differs.

    ragtime inspect --model DIR --prompt "$P" --max-new-tokens 16 > inspect.jsonl
    python3 scripts/check_hf_export.py --model DIR --prompt "$P" --inspect inspect.jsonl [--device cuda]
"""

import argparse
import json
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt", required=True)
    ap.add_argument("--inspect", required=True, help="ragtime inspect's JSON lines for the same prompt")
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()

    rows = [r for r in (json.loads(l) for l in open(a.inspect, encoding="utf-8") if l.strip()) if "id" in r and "top5" in r]
    if not rows:
        sys.exit(f"{a.inspect}: no JSON lines")
    tok = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32).to(a.device).eval()
    ids = tok(a.prompt, return_tensors="pt", add_special_tokens=False).input_ids.to(a.device)
    if ids.shape[1] != rows[0]["pos"]:
        sys.exit(f"prompt is {ids.shape[1]} tokens for transformers but ragtime's first generated position is {rows[0]['pos']}")
    worst_logit, worst_entropy, same = 0.0, 0.0, True
    with torch.no_grad():
        for r in rows:
            logits = model(ids).logits[0, -1].float()
            p = torch.softmax(logits, -1)
            entropy = -(p * torch.log(p.clamp_min(1e-30))).sum().item()
            top = torch.topk(logits, 5)
            mine = int(top.indices[0])
            same &= mine == r["id"]
            for tid, val in r["top5"]:
                worst_logit = max(worst_logit, abs(logits[tid].item() - val))
            worst_entropy = max(worst_entropy, abs(entropy - r["entropy"]))
            print(f"pos {r['pos']:>4}  ragtime {r['id']:>6}  transformers {mine:>6}  "
                  f"top logit {r['top5'][0][1]:9.4f} vs {top.values[0].item():9.4f}  entropy {r['entropy']:.4f} vs {entropy:.4f}")
            ids = torch.cat([ids, torch.tensor([[r["id"]]], device=a.device)], 1)
    print(f"{len(rows)} tokens: chosen tokens {'identical' if same else 'DIFFER'}; "
          f"max |logit diff| over ragtime's top-5 {worst_logit:.2e}; max |entropy diff| {worst_entropy:.2e}")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
