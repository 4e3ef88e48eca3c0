#!/usr/bin/env python3
"""Does a trigger stay silent on the questions the model can answer without retrieval?

For each eval run, split its questions into those it answered without retrieving ("silent") and those it
retrieved on, and compare the no-retrieval run's F1 on the two sets: a trigger that knows when the model needs
help is silent where the closed-book answer is good. One-sided permutation test (the run's silent/retrieved
labels shuffled over the questions, 10,000 times, seeded): p = share of shuffles with a gap at least as large.

    scripts/silence_vs_closed_book.py runs/matched-qwen/test/none runs/matched-qwen/test/{rind-b1,mlp-b1,...}
"""
import json
import random
import sys


def load(run):
    try:
        return {r["id"]: r for r in map(json.loads, open(f"{run}/predictions.jsonl"))}
    except OSError as e:
        sys.exit(f"silence_vs_closed_book.py: {run} is not an eval run directory: {e}")


def means(f1, silent):
    """Mean F1 over the silent questions and over the retrieved ones (nan for an empty set)."""
    a = [x for x, s in zip(f1, silent) if s]
    b = [x for x, s in zip(f1, silent) if not s]
    mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")
    return mean(a), mean(b)


def gap(f1, silent):
    fs, fr = means(f1, silent)
    return fs - fr


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    none = load(sys.argv[1])
    print("| run | silent | retrieved | closed-book F1, silent | closed-book F1, retrieved | gap | p (one-sided) | closed-book right (F1 >= 0.5): silent / retrieved |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for run in sys.argv[2:]:
        r = load(run)
        ids = [i for i in r if i in none]
        silent = [not r[i]["retrievals"] for i in ids]
        f1 = [none[i]["metrics"]["f1"] for i in ids]
        fs, fr = means(f1, silent)
        g = fs - fr
        rng = random.Random(0)
        perm, hits = silent[:], 0
        for _ in range(10000):
            rng.shuffle(perm)
            hits += gap(f1, perm) >= g
        ns = sum(silent)
        rs = sum(x >= 0.5 for x, s in zip(f1, silent) if s)
        rr = sum(x >= 0.5 for x, s in zip(f1, silent) if not s)
        print(f"| {run} | {ns} | {len(ids) - ns} | {fs:.3f} | {fr:.3f} | {g:+.3f} | {hits / 10000:.3f} | {rs} / {rr} |")


if __name__ == "__main__":
    main()
