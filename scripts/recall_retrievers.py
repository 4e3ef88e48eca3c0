"""Helper of bench-recall.sh: recall@1/3/5/10 of the supporting paragraphs of the shared HotpotQA questions for
ragtime's retrievers (`ragtime search --retriever bm25|dense|hybrid`), one index built with `--encoder`.
Gold matching: hotpot_gold.py. Standard library only.
"""
import argparse, json, subprocess, sys

import hotpot_gold

ap = argparse.ArgumentParser()
ap.add_argument("--ragtime", required=True)
ap.add_argument("--index", required=True)
ap.add_argument("--corpus", required=True)
ap.add_argument("--questions", required=True)
ap.add_argument("--queries-file", required=True)
ap.add_argument("--retrievers", default="bm25,dense,hybrid")
args = ap.parse_args()
KS = (1, 3, 5, 10)

_, (questions, gold) = hotpot_gold.load(args.corpus, args.questions)
questions = [q.replace("\n", " ") for q in questions]
with open(args.queries_file, "w", encoding="utf-8") as f:
    f.write("".join(q + "\n" for q in questions))

print("| retriever | recall@1 | recall@3 | recall@5 | recall@10 |")
print("|---|---|---|---|---|")
for r in args.retrievers.split(","):
    out = subprocess.run([args.ragtime, "search", "--index", args.index, "--queries", args.queries_file, "-k", "10", "--retriever", r],
                         check=True, capture_output=True, text=True).stdout
    ranked = [[p["id"] for p in json.loads(l)["passages"]] for l in out.splitlines()]
    assert len(ranked) == len(gold), (len(ranked), len(gold))
    cells = []
    for k in KS:
        vals = [len(set(x[:k]) & g) / len(g) for x, g in zip(ranked, gold) if g]
        cells.append("%.3f" % (sum(vals) / len(vals)))
    print("| %s | %s |" % (r, " | ".join(cells)))
print()
print("%d questions, %d with supporting paragraphs in the corpus." % (len(gold), sum(1 for g in gold if g)))
