//! HotpotQA in IRCoT's processed layout: JSON lines {question_id, question_text, answers_objects[] {number,
//! date, spans[]}, contexts[] {id, title, paragraph_text, is_supporting}}.

use std::path::Path;

use anyhow::{bail, Result};
use serde_json::Value;

use super::{field, non_empty_answers, read_jsonl, str_field, titled_paragraphs, AnswerKind, At, Example};

pub fn load(path: &Path) -> Result<Vec<Example>> {
    let mut out = Vec::new();
    for (index, (line, v)) in read_jsonl(path)?.into_iter().enumerate() {
        let at = At { path, line: Some(line), index };
        let mut answers = Vec::new();
        let objs = field(&v, "answers_objects", &at)?;
        let Value::Array(objs) = objs else { bail!("{at}: 'answers_objects' should be a list") };
        for obj in objs {
            if let Some(Value::Array(spans)) = obj.get("spans") {
                answers.extend(spans.iter().filter_map(|s| s.as_str().map(str::to_string)));
            }
            if let Some(Value::String(n)) = obj.get("number") {
                answers.push(n.clone());
            }
        }
        let (contexts, supporting) = titled_paragraphs(&v, "contexts", &at)?;
        out.push(Example {
            id: str_field(&v, "question_id", &at)?,
            question: str_field(&v, "question_text", &at)?,
            answers: non_empty_answers(answers, &at)?,
            kind: AnswerKind::Span,
            supporting,
            contexts,
            entries: vec![],
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_shared_file() {
        let ex = load(&crate::require_data!("qa/hotpotqa/ircot_dev_250.jsonl")).unwrap();
        assert_eq!(ex.len(), 250);
        let first = &ex[0];
        assert_eq!(first.id, "5a8c7595554299585d9e36b6");
        assert_eq!(first.answers, vec!["Chief of Protocol"]);
        assert!(first.supporting.iter().any(|d| d.title == "Shirley Temple"));
        assert!(first.supporting.len() >= 2 && first.contexts.len() > first.supporting.len());
    }

    #[test]
    fn every_supporting_paragraph_is_in_the_shared_corpus() {
        // The corpus (DPR layout id\ttext\ttitle, whitespace collapsed) holds every context paragraph; the
        // title+text match of Example::is_supporting must find each supporting one there.
        let corpus = std::fs::read_to_string(crate::require_data!("corpus/hotpotqa_paragraphs.tsv")).unwrap();
        let rows: Vec<(&str, &str)> = corpus
            .lines()
            .skip(1)
            .map(|l| {
                let f: Vec<&str> = l.split('\t').collect();
                (f[2], f[1])
            })
            .collect();
        let by_title: std::collections::HashMap<&str, Vec<&str>> =
            rows.iter().fold(Default::default(), |mut m, (t, x)| {
                m.entry(*t).or_default().push(*x);
                m
            });
        let ex = load(&crate::require_data!("qa/hotpotqa/ircot_dev_250.jsonl")).unwrap();
        let mut n = 0;
        for e in &ex {
            for d in &e.supporting {
                let texts =
                    by_title.get(d.title.trim()).unwrap_or_else(|| panic!("{}: title {} not in corpus", e.id, d.title));
                assert!(texts.iter().any(|x| e.is_supporting(&d.title, x)), "{}: {}", e.id, d.title);
                n += 1;
            }
        }
        assert!(n >= 500, "{n} supporting paragraphs checked");
    }

    #[test]
    fn malformed_line_names_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("h.jsonl");
        std::fs::write(&p, "{\"question_id\":\"a\",\"question_text\":\"q\",\"answers_objects\":[{\"spans\":[\"x\"]}],\"contexts\":[]}\n{oops\n").unwrap();
        let err = format!("{:#}", load(&p).unwrap_err());
        assert!(err.contains("h.jsonl:2"), "{err}");
        std::fs::write(&p, "{\"question_id\":\"a\",\"answers_objects\":[]}\n").unwrap();
        let err = format!("{:#}", load(&p).unwrap_err());
        assert!(err.contains("h.jsonl:1") && err.contains("question_text"), "{err}");
        std::fs::write(&p, "{\"question_id\":\"a\",\"question_text\":\"q\",\"answers_objects\":[{\"spans\":[\"x\"]}],\"contexts\":[{\"title\":\"T\",\"paragraph_text\":\"t\",\"is_supporting\":\"yes\"}]}\n").unwrap();
        let err = format!("{:#}", load(&p).unwrap_err());
        assert!(err.contains("h.jsonl:1") && err.contains("'is_supporting' should be true or false"), "{err}");
    }
}
