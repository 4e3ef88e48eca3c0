#!/usr/bin/env python3
"""How often does a run's first retrieval bring back the question's own BioASQ snippets?

BioASQ ships with each question the snippets its experts marked as evidence; `ragtime data corpus bioasq-list`
indexes every question's snippets together, so a retriever can find a question's own or another's. For each
eval run: the questions whose first retrieval holds at least one of its own snippets, and the share of the
first retrieval's passages that are (passages compared as text with whitespace collapsed; a snippet split into
several passages of the index counts only where a passage is the whole snippet).

    scripts/bioasq_own_snippets.py runs/bioasq-list/corpus.jsonl runs/bioasq-list-1.5b/test-200/single ...

The questions are read from the shared data (`RAGTIME_DATA` or ../shared/data), `qa/bioasq/*/*.json`.
"""
import glob
import json
import os
import sys


def squash(text):
    return " ".join(text.split())


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    corpus_path, runs = sys.argv[1], sys.argv[2:]
    data = os.environ.get("RAGTIME_DATA", os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data"))
    own = {}
    files = glob.glob(os.path.join(data, "qa", "bioasq", "*", "*.json"))
    if not files:
        sys.exit(f"no BioASQ files under {data}/qa/bioasq")
    for f in files:
        for q in json.load(open(f))["questions"]:
            own.setdefault(q["id"], set()).update(squash(s["text"]) for s in q.get("snippets", []))
    for run in runs:
        path = os.path.join(run, "predictions.jsonl")
        if not os.path.isfile(path):
            sys.exit(f"{path}: no such file (give eval run directories)")
    if not os.path.isfile(corpus_path):
        sys.exit(f"{corpus_path}: no such file (`ragtime data corpus bioasq-list --out FILE` writes it)")
    corpus = {}
    for line in open(corpus_path):
        d = json.loads(line)
        corpus[d["id"]] = squash(d["text"])
    print("| run | questions | first retrieval holds an own snippet | own snippets among its passages |")
    print("|---|---:|---:|---:|")
    for run in runs:
        records = [json.loads(line) for line in open(os.path.join(run, "predictions.jsonl"))]
        questions = with_own = own_passages = passages = 0
        for r in records:
            questions += 1
            if not r["retrievals"]:
                continue
            ids = r["retrievals"][0]["passage_ids"]
            hits = [corpus.get(p) in own.get(r["id"], set()) for p in ids]
            with_own += any(hits)
            own_passages += sum(hits)
            passages += len(ids)
        share = own_passages / passages if passages else 0.0
        held = with_own / questions if questions else 0.0
        print(f"| {run} | {questions} | {with_own} ({held:.0%}) | {share:.0%} |")


if __name__ == "__main__":
    main()
