//! 2WikiMultihopQA: a JSON array of {test_id | _id, question, answer (a string or a list of aliases)}. The
//! official release also has `context` `[[title, [sentences]]]` and `supporting_facts` `[[title, sentence_id]]`
//! (HotpotQA's official distractor file has the same shape): when present, every context paragraph becomes a
//! context doc (sentences joined with a space) and the paragraphs named by supporting_facts become supporting.

use std::path::Path;

use anyhow::{bail, Result};
use serde_json::Value;

use super::{field, id_or_index, non_empty_answers, read_json, str_field, str_list, AnswerKind, At, Doc, Example};

pub fn load(path: &Path) -> Result<Vec<Example>> {
    let Value::Array(items) = read_json(path)? else { bail!("{}: expected a JSON array of questions", path.display()) };
    let mut out = Vec::with_capacity(items.len());
    for (index, v) in items.iter().enumerate() {
        let at = At { path, line: None, index };
        let id = id_or_index(v, &["_id", "test_id"], &at)?;
        let mut contexts = Vec::new();
        if let Some(ctx) = v.get("context") {
            let Value::Array(ctx) = ctx else { bail!("{at}: 'context' should be a list of [title, sentences]") };
            for c in ctx {
                let (Some(title), Some(Value::Array(sents))) = (c.get(0).and_then(Value::as_str), c.get(1)) else {
                    bail!("{at}: 'context' entries should be [title, [sentences]]")
                };
                let text: Vec<&str> = sents.iter().filter_map(Value::as_str).map(str::trim).collect();
                contexts.push(Doc { title: title.to_string(), text: text.join(" ") });
            }
        }
        let mut supporting: Vec<Doc> = Vec::new();
        if let Some(Value::Array(facts)) = v.get("supporting_facts") {
            for f in facts {
                let Some(title) = f.get(0).and_then(Value::as_str) else {
                    bail!("{at}: 'supporting_facts' entries should be [title, sentence_id]")
                };
                if let Some(doc) = contexts.iter().find(|d| d.title == title) {
                    if !supporting.contains(doc) {
                        supporting.push(doc.clone());
                    }
                }
            }
        }
        field(v, "answer", &at)?;
        out.push(Example {
            id,
            question: str_field(v, "question", &at)?,
            answers: non_empty_answers(str_list(v, "answer", &at)?, &at)?,
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
    fn reads_shared_file_with_string_and_list_answers() {
        let ex = load(&crate::require_data!("qa/2wikimultihopqa/dev_100.json")).unwrap();
        assert_eq!(ex.len(), 100);
        assert_eq!(ex[1].answers, vec!["Mask of Fu Manchu", "The Mask of Fu Manchu"]);
        assert_eq!(ex[2].answers, vec!["12 June 1516"]);
        assert_eq!(ex[4].id, "4");
    }

    #[test]
    fn official_layout_gives_supporting_paragraphs() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("dev.json");
        std::fs::write(
            &p,
            r#"[{"_id":"x1","question":"q?","answer":"B","type":"comparison",
            "context":[["A",["a1.","a2."]],["B",["b1."]],["C",["c1."]]],
            "supporting_facts":[["A",0],["A",1],["C",0]]}]"#,
        )
        .unwrap();
        let ex = load(&p).unwrap();
        assert_eq!(ex[0].id, "x1");
        assert_eq!(ex[0].contexts.len(), 3);
        assert_eq!(
            ex[0].supporting,
            vec![Doc { title: "A".into(), text: "a1. a2.".into() }, Doc { title: "C".into(), text: "c1.".into() }]
        );
    }

    #[test]
    fn bad_answer_type_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("dev.json");
        std::fs::write(
            &p,
            r#"[{"test_id":0,"question":"q","answer":"a"},{"test_id":1,"question":"q","answer":{"x":1}}]"#,
        )
        .unwrap();
        let err = format!("{:#}", load(&p).unwrap_err());
        assert!(err.contains("record 1") && err.contains("'answer'"), "{err}");
    }
}
