#!/usr/bin/env python3
"""PubMedQA's retrieval corpus: each labelled question's abstract (its CONTEXTS, in order) as one JSON line
{id, title, text}, the id its PubMed id, for `ragtime index` (which splits it into 100-word passages).

    python3 scripts/pubmedqa_corpus.py ../shared/data/qa/pubmedqa/pqal_dev_500.json > runs/pubmedqa/corpus.jsonl
    ragtime index --corpus runs/pubmedqa/corpus.jsonl --out indexes/pubmedqa

The title is the id only, so that no question text enters the index beyond its abstract.
"""
import json
import sys

if len(sys.argv) != 2:
    sys.exit("usage: pubmedqa_corpus.py PQAL_JSON > corpus.jsonl (e.g. ../shared/data/qa/pubmedqa/pqal_dev_500.json)")
try:
    data = json.load(open(sys.argv[1]))
except (OSError, json.JSONDecodeError) as e:
    sys.exit(f"pubmedqa_corpus.py: {sys.argv[1]}: {e}")
for pmid, q in data.items():
    print(json.dumps({"id": pmid, "title": f"PMID {pmid}", "text": " ".join(q["CONTEXTS"])}))
