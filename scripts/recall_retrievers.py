"""Helper of bench-recall.sh: recall@1/3/5/10 of the supporting paragraphs of the shared HotpotQA questions for
ragtime's retrievers (`ragtime search --retriever bm25|dense|hybrid`), one index built with `--encoder`.
Gold matching as in bench_retrieval.py: a supporting paragraph is the corpus row with the same title and text
(whitespace collapsed). Standard library only.
"""
import argparse, json, re, subprocess, sys

ap = argparse.ArgumentParser()
ap.add_argument("--ragtime", required=True)
ap.add_argument("--index", required=True)
ap.add_argument("--corpus", required=True)
ap.add_argument("--questions", required=True)
ap.add_argument("--queries-file", required=True)
ap.add_argument("--retrievers", default="bm25,dense,hybrid")
args = ap.parse_args()
KS = (1, 3, 5, 10)


def norm(s):
    return re.sub(r"\s+", " ", s).strip()


key_to_id = {}
with open(args.corpus, encoding="utf-8") as f:
    for i, line in enumerate(f):
        parts = line.rstrip("\n").split("\t")
        if i == 0 and parts == ["id", "text", "title"]:
            continue
        key_to_id[(norm(parts[2]), norm(parts[1]))] = parts[0]
questions, gold, missing = [], [], 0
with open(args.questions, encoding="utf-8") as f:
    for line in f:
        q = json.loads(line)
        sup = set()
        for c in q["contexts"]:
            if c["is_supporting"]:
                pid = key_to_id.get((norm(c["title"]), norm(c["paragraph_text"])))
                if pid is None:
                    missing += 1
                else:
                    sup.add(pid)
        questions.append(q["question_text"].replace("\n", " "))
        gold.append(sup)
if missing:
    print(f"warning: {missing} supporting paragraphs not found in the corpus", file=sys.stderr)
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
