"""The gold paragraphs of the shared HotpotQA questions in the DPR-layout corpus, for the recall scripts
(bench_retrieval.py, recall_retrievers.py). A supporting paragraph is the corpus row with the same title and text,
whitespace collapsed. Standard library only.
"""
import json, re, sys


def norm(s):
    return re.sub(r"\s+", " ", s).strip()


def load(corpus, questions_file):
    """Returns (ids, titles, texts) of the corpus and (questions, gold): each question's text and the set of its
    supporting paragraphs' ids. Warns on stderr about supporting paragraphs the corpus lacks."""
    ids, titles, texts = [], [], []
    with open(corpus, encoding="utf-8") as f:
        for i, line in enumerate(f):
            parts = line.rstrip("\n").split("\t")
            if i == 0 and parts == ["id", "text", "title"]:
                continue
            ids.append(parts[0]); texts.append(parts[1]); titles.append(parts[2])
    key_to_id = {(norm(t), norm(x)): i for i, t, x in zip(ids, titles, texts)}
    questions, gold, missing = [], [], 0
    with open(questions_file, encoding="utf-8") as f:
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
            questions.append(q["question_text"]); gold.append(sup)
    if missing:
        print(f"warning: {missing} supporting paragraphs not found in the corpus", file=sys.stderr)
    return (ids, titles, texts), (questions, gold)
