#!/usr/bin/env python3
"""SMOKE-TEST DATA ONLY: template-built Auto-RAG-format dialogues from the shared HotpotQA questions and their
gold paragraphs, for exercising `ragtime train autorag` before real synthesized dialogues exist.

No language model wrote these: the reasoning text is a fixed template around the gold paragraph titles and the
gold answer, so they test the trainer (format, masking, loss going down), not Auto-RAG's method. Every record is
labelled dataset = "hotpotqa-smoke-template".

    python3 scripts/autorag_smoke_dialogues.py [OUT.jsonl] [--long]   # default datasets/autorag/smoke/dialogues.jsonl

--long: each retrieval turn also shows the question's other context paragraphs (HotpotQA's distractors), about
five per turn, for long dialogues (~1,500-2,500 tokens) such as a memory benchmark needs.
"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the shared data folder as ragtime finds it: $RAGTIME_DATA, else ../shared/data beside the repository
DATA = os.environ.get("RAGTIME_DATA") or os.path.join(ROOT, "..", "shared", "data")
SRC = os.path.join(DATA, "qa", "hotpotqa", "ircot_dev_250.jsonl")
ARGS = [a for a in sys.argv[1:] if a != "--long"]
LONG = "--long" in sys.argv[1:]
OUT = ARGS[0] if ARGS else os.path.join(ROOT, "datasets", "autorag", "smoke", "dialogues.jsonl")


def documents(first, gold, others):
    """Retrieved Document_first: the gold paragraph, then (with --long) the distractors `others`, numbered on."""
    shown = [gold] + (others if LONG else [])
    return "\n\n".join(f"Retrieved Document_{first + i}: {c['title']}: {c['paragraph_text']}"
                       for i, c in enumerate(shown))


def main():
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    n = 0
    with open(SRC) as f, open(OUT, "w") as out:
        for line in f:
            q = json.loads(line)
            gold = [c for c in q["contexts"] if c["is_supporting"]]
            others = [c for c in q["contexts"] if not c["is_supporting"]]
            answers = [s for a in q["answers_objects"] for s in a["spans"]]
            if len(gold) < 2 or not answers:
                continue
            question, answer = q["question_text"], answers[0]
            t1, t2 = gold[0]["title"], gold[1]["title"]
            turns = [
                {"input": question,
                 "output": f"Analysis: To answer this question, I would need to know about {t1} and about {t2}.\n\n"
                           f"Initial Query: {t1}"},
                {"input": documents(1, gold[0], others[0::2]),
                 "output": f"Intermediate Answer_1: Based on the Retrieved Document_1, I have information about {t1}. "
                           f"To answer the question, I still need information about {t2}.\n\nRefined Query: {t2}"},
                {"input": documents(2 + (len(others[0::2]) if LONG else 0), gold[1], others[1::2]),
                 "output": f"Intermediate Answer_2: Based on the Retrieved Document_2, together with the first "
                           f"document, the information is sufficient to answer the question.\n\nFinal Answer: {answer}"},
            ]
            rec = {"id": q["question_id"], "dataset": "hotpotqa-smoke-template", "question": question,
                   "answers": answers, "turns": turns, "iterations": 2, "final_answer": answer}
            out.write(json.dumps(rec, ensure_ascii=False) + "\n")
            n += 1
    print(f"wrote {n} SMOKE-TEST dialogues (template, not synthesized) to {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
