"""Write a synthetic DPR-layout passage corpus (id, text, title) for the scale benchmark.

Words are drawn independently from the word frequencies of a real corpus (the shared HotpotQA
paragraphs, so term statistics follow Wikipedia's Zipf curve), 100 words a passage; one word in
ten is replaced by a rare token drawn from a vocabulary of 5 million (real Wikipedia has millions of
distinct terms, the seed corpus only ~40 thousand). Titles are real titles with a number. Seeded,
so the corpus is the same on every run.
"""
import collections, sys

seed_tsv, out_path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
words, titles = collections.Counter(), []
with open(seed_tsv, encoding="utf-8") as f:
    for i, line in enumerate(f):
        parts = line.rstrip("\n").split("\t")
        if i == 0 and parts == ["id", "text", "title"]:
            continue
        words.update(parts[1].split())
        titles.append(parts[2])
import numpy as np  # noqa: E402

vocab = np.array(list(words), dtype=object)
p = np.array([words[w] for w in vocab], dtype=np.float64)
p /= p.sum()
rng = np.random.default_rng(42)
B = 10000
with open(out_path, "w", encoding="utf-8") as out:
    out.write("id\ttext\ttitle\n")
    for start in range(1, n + 1, B):
        m = min(B, n + 1 - start)
        ws = vocab[rng.choice(len(vocab), size=(m, 100), p=p)]
        rare_pos = rng.integers(0, 10, size=(m, 10)) + np.arange(0, 100, 10)
        rare = rng.integers(0, 5_000_000, size=(m, 10))
        ws[np.arange(m)[:, None], rare_pos] = np.char.add("x", rare.astype(str)).astype(object)
        out.write("".join("%d\t%s\t%s %d\n" % (start + j, " ".join(row), titles[(start + j) % len(titles)], (start + j) // len(titles))
                          for j, row in enumerate(ws.tolist())))
