#!/usr/bin/env python3
"""The generation benchmarks' prompts: the first N questions of NQ-open dev, each as a one-sentence-answer prompt,
one JSON string per line (what `ragtime generate --prompts` reads).

    nq_prompts.py N [DATA]     # DATA: the shared data folder (default ../shared/data)
"""
import json
import sys

if len(sys.argv) not in (2, 3) or not sys.argv[1].isdigit() or int(sys.argv[1]) < 1:
    sys.exit("usage: nq_prompts.py N [DATA]  (N: a positive number of prompts)")
n = int(sys.argv[1])
data = sys.argv[2] if len(sys.argv) == 3 else "../shared/data"
path = data + "/qa/nq/NQ-open.dev.jsonl"
try:
    with open(path, encoding="utf-8") as f:
        qs = [json.loads(line)["question"] for _, line in zip(range(n), f)]
except OSError as e:
    sys.exit(f"nq_prompts: {path}: {e.strerror}")
for q in qs:
    print(json.dumps(f"Answer the question in one short sentence.\nQuestion: {q}?\nAnswer:"))
