"""Helper of bench-retrieval.sh: recall and speed of ragtime's BM25 vs bm25s on HotpotQA.

bm25s is set up as FlashRAG does (corpus text = '"title"\\ntext', English stopwords, PyStemmer's
English Snowball stemmer) with method "lucene", k1 1.2, b 0.75. Query speed counts query
tokenization + retrieval of the top 10, for both systems, on queries already in memory.
"""
import argparse, json, os, re, shutil, subprocess, sys, time

import hotpot_gold

ap = argparse.ArgumentParser()
ap.add_argument("--ragtime", required=True)
ap.add_argument("--corpus", required=True)
ap.add_argument("--questions", required=True)
ap.add_argument("--work", required=True)
ap.add_argument("--repeat", type=int, default=40)
ap.add_argument("--rounds", type=int, default=3, help="timing rounds, ragtime and bm25s interleaved; medians reported")
args = ap.parse_args()
KS = (1, 3, 5, 10)
THREADS = os.cpu_count()

# --- corpus and gold ---------------------------------------------------------------------------
(ids, titles, texts), (questions, gold) = hotpot_gold.load(args.corpus, args.questions)


def recall(ranked):
    out = {}
    for k in KS:
        vals = [len(set(r[:k]) & g) / len(g) for r, g in zip(ranked, gold) if g]
        out[k] = sum(vals) / len(vals)
    return out


os.makedirs(args.work, exist_ok=True)
qfile = os.path.join(args.work, "queries.txt")
tfile = os.path.join(args.work, "queries_x%d.txt" % args.repeat)
for path, qs in ((qfile, questions), (tfile, questions * args.repeat)):
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(q.replace("\n", " ") + "\n" for q in qs))
timing_queries = questions * args.repeat
rows = {}

# --- ragtime ---------------------------------------------------------------------------------
def ragtime_run(fields, multi="best", tie="0", build=True):
    idx = os.path.join(args.work, "index-" + fields)
    t0 = time.perf_counter()
    if build:
        subprocess.run([args.ragtime, "index", "--corpus", args.corpus, "--out", idx, "--fields", fields, "--force", "-q"],
                       check=True, stdout=subprocess.DEVNULL)
    t_index = time.perf_counter() - t0 if build else float("nan")
    opts = ["--multi-field", multi, "--tie-breaker", tie]
    out = subprocess.run([args.ragtime, "search", "--index", idx, "--queries", qfile, "-k", "10"] + opts,
                         check=True, capture_output=True, text=True).stdout
    ranked = [[p["id"] for p in json.loads(l)["passages"]] for l in out.splitlines()]

    def timer(th, k=10):
        err = subprocess.run([args.ragtime, "search", "--index", idx, "--queries", tfile, "-k", str(k), "--threads", str(th)] + opts, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True).stderr
        return float(re.search(r"([0-9.]+) queries/s", err).group(1))
    return recall(ranked), t_index, timer


rows["ragtime title+text one field (default)"] = ragtime_run("combined")
rows["ragtime separate fields, best_fields"] = ragtime_run("separate", "best")
rows["ragtime separate fields, best_fields, tie_breaker 0.5 (DRAGIN's ES query)"] = ragtime_run("separate", "best", "0.5", build=False)
rows["ragtime separate fields, most_fields"] = ragtime_run("separate", "most", build=False)

# --- bm25s (FlashRAG's BM25) ---------------------------------------------------------------------
import bm25s, Stemmer  # noqa: E402

stemmer = Stemmer.Stemmer("english")
contents = ['"%s"\n%s' % (t, x) for t, x in zip(titles, texts)]
t0 = time.perf_counter()
tok = bm25s.tokenize(contents, stopwords="en", stemmer=stemmer, show_progress=False)
bm = bm25s.BM25(method="lucene", k1=1.2, b=0.75)
bm.index(tok, show_progress=False)
t_index = time.perf_counter() - t0


def bm25s_search(qs, n_threads, k=10):
    qt = bm25s.tokenize(qs, stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)
    docs, _ = bm.retrieve(qt, k=k, n_threads=n_threads, show_progress=False)
    return docs


ranked = [[ids[j] for j in row] for row in bm25s_search(questions, 1)]


def bm25s_timer(th, k=10):
    t0 = time.perf_counter()
    bm25s_search(timing_queries, th, k)
    return len(timing_queries) / (time.perf_counter() - t0)


BM25S = "bm25s %s (lucene, k1 1.2, b 0.75)" % bm25s.__version__
rows[BM25S] = (recall(ranked), t_index, bm25s_timer)

# --- speed: systems interleaved round by round (the machine is shared and noisy), medians --------
DEFAULT = "ragtime title+text one field (default)"
samples = {name: {1: [], THREADS: []} for name in rows}
k3 = {DEFAULT: [], BM25S: []}  # one thread, top 3 (DRAGIN retrieves 3)
for r in range(args.rounds):
    for name, (_, _, timer) in rows.items():
        if r > 0 and name.startswith("ragtime separate"):
            continue  # one round is enough for the variants
        for th in (1, THREADS):
            samples[name][th].append(timer(th))
        if name in k3:
            k3[name].append(timer(1, 3))
med = lambda xs: sorted(xs)[len(xs) // 2]
rows = {name: (rc, ti, {th: med(samples[name][th]) for th in (1, THREADS)}) for name, (rc, ti, _) in rows.items()}

# --- table -----------------------------------------------------------------------------------------
print(f"HotpotQA: {len(ids)} paragraphs, {len(questions)} questions, {sum(map(len, gold))} supporting paragraphs; "
      f"speed over {len(timing_queries)} queries (top 10), {THREADS} threads = all")
hdr = f"| system | R@1 | R@3 | R@5 | R@10 | index s | q/s 1 thread | q/s {THREADS} threads |"
print(hdr)
print("|" + "---|" * (hdr.count("|") - 1))
for name, (r, ti, q) in rows.items():
    print(f"| {name} | " + " | ".join(f"{r[k]:.3f}" for k in KS) + f" | {ti:.2f} | {q[1]:,.0f} | {q[THREADS]:,.0f} |".replace("nan", "same index"))
ours, theirs = rows[DEFAULT], rows[BM25S]
print("ragtime (default) vs bm25s: recall difference at k=1/3/5/10: "
      + " / ".join(f"{ours[0][k] - theirs[0][k]:+.3f}" for k in KS)
      + f"; queries/s ratio 1 thread {ours[2][1] / theirs[2][1]:.2f}x, {THREADS} threads {ours[2][THREADS] / theirs[2][THREADS]:.2f}x"
      + f" (medians of {args.rounds} interleaved rounds; index time includes process start for ragtime)")
print(f"top 3 instead of 10, one thread: ragtime {med(k3[DEFAULT]):,.0f} queries/s, bm25s {med(k3[BM25S]):,.0f} queries/s, "
      f"ratio {med(k3[DEFAULT]) / med(k3[BM25S]):.2f}x")
