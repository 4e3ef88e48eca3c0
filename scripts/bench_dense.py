"""Helper of bench-dense.sh: ragtime's dense retrieval beside sentence-transformers and faiss-cpu, one run, one
Markdown table.

1. Encoding: the first --passages HotpotQA paragraphs ("title\\ntext"), all-MiniLM-L6-v2, batch --batch, --threads
   threads for both (ragtime: RAYON_NUM_THREADS; torch: set_num_threads). ragtime's rate is over encoding only
   (model load excluded), like sentence-transformers' encode() call.
2. Vectors: --n synthetic unit vectors x --dim (clustered by default, --clusters 0 for uniform) (the same bytes for both, written by scripts/bench_hnsw.rs), HNSW with
   the same M / efConstruction / efSearch: build time, peak resident memory of the process (data included), query
   latency p50/p99 one query at a time, recall@10 against exact search; then latency and recall at each width of
   --ef-sweep on both sides, so the two can be compared at equal recall.
"""
import argparse, json, os, re, resource, subprocess, sys, time

ap = argparse.ArgumentParser()
ap.add_argument("--ragtime", required=True)
ap.add_argument("--bench-hnsw", required=True)
ap.add_argument("--model", required=True)
ap.add_argument("--corpus", required=True)
ap.add_argument("--work", required=True)
ap.add_argument("--passages", type=int, default=2000)
ap.add_argument("--batch", type=int, default=32)
ap.add_argument("--threads", type=int, default=os.cpu_count())
ap.add_argument("--n", type=int, default=1_000_000)
ap.add_argument("--dim", type=int, default=384)
ap.add_argument("--queries", type=int, default=1000)
ap.add_argument("--clusters", type=int, default=1000, help="0: uniform random unit vectors")
ap.add_argument("--spread", type=float, default=1.0)
ap.add_argument("--m", type=int, default=32)
ap.add_argument("--ef-construction", type=int, default=200)
ap.add_argument("--ef-search", type=int, default=128)
ap.add_argument("--ef-sweep", default="16,32,64,256", help="more efSearch widths, both sides: the recall-latency curve")
ap.add_argument("--f16", action="store_true", help="also ragtime's HNSW over f16 vectors (beside faiss's f32 graph)")
ap.add_argument("--part", default="all", choices=["all", "encode", "vectors", "faiss"])
args = ap.parse_args()
os.makedirs(args.work, exist_ok=True)


def sweep_widths():
    return [int(x) for x in args.ef_sweep.split(",") if x.strip()]


def faiss_side():
    """Runs in its own process so that its peak memory is its own."""
    import numpy as np
    import faiss

    faiss.omp_set_num_threads(args.threads)
    d = args.dim
    base = np.fromfile(os.path.join(args.work, "base.f32"), dtype="<f4").reshape(-1, d)
    qs = np.fromfile(os.path.join(args.work, "queries.f32"), dtype="<f4").reshape(-1, d)
    gt = np.fromfile(os.path.join(args.work, "gt.i64"), dtype="<i8").reshape(-1, 10)
    data_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    index = faiss.IndexHNSWFlat(d, args.m, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = args.ef_construction
    t = time.perf_counter()
    index.add(base)
    build = time.perf_counter() - t
    curve = []
    for ef in [args.ef_search] + sweep_widths():
        index.hnsw.efSearch = ef
        lat, found = [], []
        for q in qs:
            t = time.perf_counter()
            _, ids = index.search(q[None, :], 10)
            lat.append((time.perf_counter() - t) * 1e3)
            found.append(ids[0])
        lat.sort()
        pct = lambda p: lat[round((len(lat) - 1) * p)]
        recall = sum(len(set(f) & set(g)) / 10 for f, g in zip(found, gt)) / len(gt)
        curve.append({"ef_search": ef, "p50_ms": pct(0.5), "p99_ms": pct(0.99), "recall_at_10": recall})
    print(json.dumps({"system": "faiss-cpu IndexHNSWFlat %s" % faiss.__version__, "build_s": build,
                      "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "data_rss_mib": data_rss,
                      "p50_ms": curve[0]["p50_ms"], "p99_ms": curve[0]["p99_ms"], "recall_at_10": curve[0]["recall_at_10"],
                      "sweep": curve[1:], "threads": args.threads}))


if args.part == "faiss":
    faiss_side()
    sys.exit(0)

env = dict(os.environ, RAYON_NUM_THREADS=str(args.threads))
rows = []

# --- 1. encoding ---------------------------------------------------------------------------------------
if args.part in ("all", "encode"):
    texts = []
    with open(args.corpus, encoding="utf-8") as f:
        for i, line in enumerate(f):
            parts = line.rstrip("\n").split("\t")
            if i == 0 and parts == ["id", "text", "title"]:
                continue
            texts.append(parts[2] + "\n" + parts[1])
            if len(texts) == args.passages:
                break
    inp = os.path.join(args.work, "passages.jsonl")
    with open(inp, "w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": i, "text": t}) + "\n")
    out = os.path.join(args.work, "passages.emb.jsonl")
    r = subprocess.run([args.ragtime, "embed", "--model", args.model, "--input", inp, "--out", out, "--batch", str(args.batch),
                        "--passage", "--force", "-q"], check=True, capture_output=True, text=True, env=env).stdout
    rag_rate = float(re.search(r"\(([0-9.]+) texts/s", r).group(1))
    rag_vecs = [json.loads(l)["embedding"] for l in open(out, encoding="utf-8")]

    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(args.threads)
    model = SentenceTransformer(args.model, device="cpu")
    model.encode(texts[: args.batch], batch_size=args.batch)  # warm-up
    t = time.perf_counter()
    st_vecs = model.encode(texts, batch_size=args.batch, convert_to_numpy=True)
    st_rate = len(texts) / (time.perf_counter() - t)
    a = np.asarray(rag_vecs, dtype=np.float64)
    cos = (a * st_vecs).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(st_vecs, axis=1))
    rows.append(("Encoding passages/s (%d HotpotQA paragraphs, batch %d, %d threads)" % (len(texts), args.batch, args.threads),
                 "%.1f" % rag_rate, "%.1f" % st_rate, "sentence-transformers %s, torch %s; min cosine ragtime vs ST %.6f"
                 % (__import__("sentence_transformers").__version__, torch.__version__, cos.min())))

# --- 2. vectors --------------------------------------------------------------------------------------------
if args.part in ("all", "vectors"):
    cmd = [args.bench_hnsw, "--n", str(args.n), "--dim", str(args.dim), "--queries", str(args.queries), "--m", str(args.m),
           "--ef-construction", str(args.ef_construction), "--ef-search", str(args.ef_search), "--dump", args.work,
           "--clusters", str(args.clusters), "--spread", str(args.spread), "--ef-sweep", args.ef_sweep] + (["--f16"] if args.f16 else [])
    rag = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout.strip().splitlines()[-1])
    with open(os.path.join(args.work, "ragtime-hnsw.json"), "w") as f:
        json.dump(rag, f)
    argv, skip = [], False
    for a in sys.argv[1:]:
        if skip or a == "--part" or a.startswith("--part="):
            skip = a == "--part"
            continue
        argv.append(a)
    fa = json.loads(subprocess.run([sys.executable, __file__, "--part", "faiss"] + argv,
                                   check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
    data = ("%d clusters, spread %g" % (args.clusters, args.spread)) if args.clusters else "uniform"
    what = "%d x %d synthetic unit vectors (%s), M %d, efConstruction %d, efSearch %d, %d threads" % (
        args.n, args.dim, data, args.m, args.ef_construction, args.ef_search, args.threads)
    rows.append(("HNSW build time, s (%s)" % what, "%.1f" % rag["build_s"], "%.1f" % fa["build_s"], "faiss: %s; usearch SIMD: %s" % (fa["system"], rag["simd"])))
    rows.append(("Peak memory of the process, MiB (vectors alone: ragtime %.0f, faiss %.0f)" % (rag["data_rss_mib"], fa["data_rss_mib"]),
                 "%.0f" % rag["peak_rss_mib"], "%.0f" % fa["peak_rss_mib"], "whole process: faiss's includes the Python interpreter, numpy and faiss's libraries"))
    rows.append(("Query latency p50 / p99, ms (%d queries, one at a time, k 10)" % args.queries,
                 "%.3f / %.3f" % (rag["p50_ms"], rag["p99_ms"]), "%.3f / %.3f" % (fa["p50_ms"], fa["p99_ms"]), ""))
    rows.append(("Recall@10 vs exact search", "%.4f" % rag["recall_at_10"], "%.4f" % fa["recall_at_10"],
                 "exact search (ragtime flat): %.1f ms a query" % rag["exact_ms_per_query"]))
    # The recall-latency curve: every width, both sides (ann-benchmarks' view: compare latency at equal recall).
    by_width = lambda curve: sorted(curve, key=lambda c: c.get("ef_search", args.ef_search))
    fa_curve = by_width([fa] + fa["sweep"])
    for r, f in zip(by_width([rag] + rag["sweep"]), fa_curve):
        ef = r.get("ef_search", args.ef_search)
        rows.append(("efSearch %d: p50 / p99 ms, recall@10" % ef,
                     "%.3f / %.3f, %.4f" % (r["p50_ms"], r["p99_ms"], r["recall_at_10"]),
                     "%.3f / %.3f, %.4f" % (f["p50_ms"], f["p99_ms"], f["recall_at_10"]), "recall-latency curve"))
    if rag.get("f16"):
        h = rag["f16"]
        rows.append(("HNSW build time, s, ragtime on f16 vectors", "%.1f" % h["build_s"], "%.1f" % fa["build_s"],
                     "usearch's graph and vectors: %.0f MiB (f32: %.0f)" % (h["index_mib"], rag["index_mib"])))
        for r, f in zip(by_width(h["curve"]), fa_curve):
            rows.append(("efSearch %d, ragtime on f16 vectors: p50 / p99 ms, recall@10" % r["ef_search"],
                         "%.3f / %.3f, %.4f" % (r["p50_ms"], r["p99_ms"], r["recall_at_10"]),
                         "%.3f / %.3f, %.4f" % (f["p50_ms"], f["p99_ms"], f["recall_at_10"]), "faiss: f32 vectors"))

print("| measure | ragtime | reference (sentence-transformers / faiss-cpu) | notes |")
print("|---|---|---|---|")
for r in rows:
    print("| %s | %s | %s | %s |" % r)
