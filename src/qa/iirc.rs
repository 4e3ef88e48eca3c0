//! IIRC's official layout (dev.json): a JSON array of main passages {title, text, links, questions[]}, each
//! question {qid, question, answer {type: span|binary|value|none, answer_spans[] {text, passage, ...} |
//! answer_value}, context[] {passage, text, indices}}.
//!
//! As DRAGIN's loader: questions whose answer type is `none` are skipped, `binary`/`value` answers give one gold
//! answer (`answer_value`), and the spans of a `span` answer are gold aliases. The `context` snippets become the
//! supporting docs (title = the passage they come from; `main` means the question's own passage).

use std::path::Path;

use anyhow::{bail, Result};
use serde_json::Value;

use super::{field, non_empty_answers, read_json, str_field, AnswerKind, At, Doc, Example};

pub fn load(path: &Path) -> Result<Vec<Example>> {
    let Value::Array(passages) = read_json(path)? else {
        bail!("{}: expected a JSON array of passages", path.display())
    };
    let mut out = Vec::new();
    for (index, p) in passages.iter().enumerate() {
        let at = At { path, line: None, index };
        let main_title = p.get("title").and_then(Value::as_str).unwrap_or("").to_string();
        let Value::Array(questions) = field(p, "questions", &at)? else { bail!("{at}: 'questions' should be a list") };
        for q in questions {
            let qid = str_field(q, "qid", &at)?;
            let qat = At { path, line: None, index };
            let answer = field(q, "answer", &qat)?;
            let answers =
                match answer.get("type").and_then(Value::as_str) {
                    Some("none") => continue,
                    Some("binary") | Some("value") => vec![str_field(answer, "answer_value", &qat)
                        .map_err(|e| anyhow::anyhow!("{e:#} (question {qid})"))?],
                    Some("span") => {
                        let Some(Value::Array(spans)) = answer.get("answer_spans") else {
                            bail!("{at}: question {qid}: span answer without 'answer_spans' list")
                        };
                        spans
                            .iter()
                            .filter_map(|s| s.get("text").and_then(Value::as_str))
                            .map(|s| s.trim().to_string())
                            .collect()
                    }
                    other => bail!("{at}: question {qid}: unknown answer type {other:?} (span, binary, value or none)"),
                };
            let mut supporting = Vec::new();
            if let Some(Value::Array(ctx)) = q.get("context") {
                for c in ctx {
                    let passage = c.get("passage").and_then(Value::as_str).unwrap_or("main");
                    let title = if passage == "main" { main_title.clone() } else { passage.to_string() };
                    let text = c.get("text").and_then(Value::as_str).unwrap_or("").to_string();
                    supporting.push(Doc { title, text });
                }
            }
            out.push(Example {
                id: qid.clone(),
                question: str_field(q, "question", &qat)?,
                answers: non_empty_answers(answers, &qat).map_err(|e| anyhow::anyhow!("{e:#} (question {qid})"))?,
                kind: AnswerKind::Span,
                supporting,
                contexts: vec![],
                entries: vec![],
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_official_layout() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("dev.json");
        std::fs::write(&p, r#"[{"title":"Walter Dill Scott","text":"Scott was born in Cooksville.","links":[],
          "questions":[
            {"qid":"q1","question":"When was the town Scott was born in founded?",
             "answer":{"type":"span","answer_spans":[{"text":" 1882 ","passage":"cooksville, illinois","type":"answer","start":10,"end":14}]},
             "context":[{"passage":"main","text":"Scott was born in Cooksville","indices":[0,28]},
                        {"passage":"Cooksville, Illinois","text":"laid out on December 4, 1882","indices":[5,30]}]},
            {"qid":"q2","question":"Did he live longer?","answer":{"type":"binary","answer_value":"yes"},"context":[]},
            {"qid":"q3","question":"How many?","answer":{"type":"value","answer_value":"847","answer_unit":"casualties"},"context":[]},
            {"qid":"q4","question":"Unanswerable?","answer":{"type":"none"},"context":[]}
          ]}]"#).unwrap();
        let ex = load(&p).unwrap();
        assert_eq!(ex.len(), 3, "the 'none' question is skipped");
        assert_eq!(ex[0].answers, vec!["1882"]);
        assert_eq!(ex[0].supporting[0].title, "Walter Dill Scott");
        assert_eq!(ex[0].supporting[1].title, "Cooksville, Illinois");
        assert_eq!(ex[1].answers, vec!["yes"]);
        assert_eq!((ex[2].id.as_str(), ex[2].answers[0].as_str()), ("q3", "847"));
    }

    #[test]
    fn unknown_answer_type_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("dev.json");
        std::fs::write(&p, r#"[{"title":"T","questions":[{"qid":"q9","question":"?","answer":{"type":"list"}}]}]"#)
            .unwrap();
        let err = format!("{:#}", load(&p).unwrap_err());
        assert!(err.contains("record 0") && err.contains("q9") && err.contains("unknown answer type"), "{err}");
    }
}
