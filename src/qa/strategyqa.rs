//! StrategyQA, yes/no questions, in two layouts:
//! - BIG-bench's task.json: {examples: [{input, target_scores {Yes: 0|1, No: 0|1}, target}]}; the id is the
//!   0-based index in `examples`, the gold answer the choice scored 1.
//! - the original release (strategyqa_train.json): a JSON array of {qid, term, description, question,
//!   answer: bool, facts, decomposition, evidence}.

use std::path::Path;

use anyhow::{bail, Result};
use serde_json::Value;

use super::{field, read_json, str_field, AnswerKind, At, Example};

pub fn load_bigbench(path: &Path) -> Result<Vec<Example>> {
    let doc = read_json(path)?;
    let Some(Value::Array(items)) = doc.get("examples") else {
        bail!("{}: expected an object with an 'examples' list", path.display())
    };
    let mut out = Vec::with_capacity(items.len());
    for (index, v) in items.iter().enumerate() {
        let at = At { path, line: None, index };
        let scores = field(v, "target_scores", &at)?;
        let score = |k: &str| scores.get(k).and_then(Value::as_f64);
        let answer = match (score("Yes"), score("No")) {
            (Some(y), Some(n)) if y > n => "yes",
            (Some(y), Some(n)) if n > y => "no",
            _ => bail!("{at}: 'target_scores' should score exactly one of Yes and No higher"),
        };
        out.push(Example::bare(index.to_string(), str_field(v, "input", &at)?, vec![answer.into()], AnswerKind::YesNo));
    }
    Ok(out)
}

pub fn load_original(path: &Path) -> Result<Vec<Example>> {
    let Value::Array(items) = read_json(path)? else { bail!("{}: expected a JSON array of questions", path.display()) };
    items
        .iter()
        .enumerate()
        .map(|(index, v)| {
            let at = At { path, line: None, index };
            let answer = match field(v, "answer", &at)? {
                Value::Bool(true) => "yes",
                Value::Bool(false) => "no",
                _ => bail!("{at}: 'answer' should be true or false"),
            };
            Ok(Example::bare(
                str_field(v, "qid", &at)?,
                str_field(v, "question", &at)?,
                vec![answer.into()],
                AnswerKind::YesNo,
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_bigbench_file() {
        let ex = load_bigbench(&crate::require_data!("qa/strategyqa/bigbench_task.json")).unwrap();
        assert_eq!(ex.len(), 2290);
        assert_eq!(ex[0].question, "Is it common to see frost during some college commencements?");
        assert_eq!(ex[0].answers, vec!["yes"]);
        assert_eq!(ex[1].answers, vec!["no"]);
        assert!(ex.iter().all(|e| e.kind == AnswerKind::YesNo));
    }

    #[test]
    fn reads_original_layout() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("strategyqa_train.json");
        std::fs::write(&p, r#"[{"qid":"abc","term":"Hamster","description":"d","question":"Do hamsters provide food for any animals?","answer":true,"facts":["f"],"decomposition":["d"]},
            {"qid":"def","term":"t","description":"d","question":"q2","answer":false,"facts":[],"decomposition":[]}]"#).unwrap();
        let ex = load_original(&p).unwrap();
        assert_eq!((ex[0].id.as_str(), ex[0].answers[0].as_str()), ("abc", "yes"));
        assert_eq!(ex[1].answers, vec!["no"]);
        std::fs::write(&p, r#"[{"qid":"abc","question":"q","answer":"yes"}]"#).unwrap();
        assert!(format!("{:#}", load_original(&p).unwrap_err()).contains("record 0: 'answer' should be true or false"));
    }
}
