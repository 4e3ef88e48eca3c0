//! HotpotQA "simplified" (ReAct's hotpot_dev_v1_simplified.json): a JSON array of {question, answer, type}, no
//! paragraphs and no ids; the id is the 0-based record index.

use std::path::Path;

use anyhow::{bail, Result};
use serde_json::Value;

use super::{id_or_index, non_empty_answers, read_json, str_field, AnswerKind, At, Example};

pub fn load(path: &Path) -> Result<Vec<Example>> {
    let Value::Array(items) = read_json(path)? else { bail!("{}: expected a JSON array of questions", path.display()) };
    items
        .iter()
        .enumerate()
        .map(|(index, v)| {
            let at = At { path, line: None, index };
            Ok(Example::bare(
                id_or_index(v, &["_id"], &at)?,
                str_field(v, "question", &at)?,
                non_empty_answers(vec![str_field(v, "answer", &at)?], &at)?,
                AnswerKind::Span,
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_shared_file() {
        let ex = load(&crate::require_data!("qa/hotpotqa/hotpot_dev_simplified.json")).unwrap();
        assert_eq!(ex.len(), 7155);
        assert_eq!(ex[0].answers, vec!["Chief of Protocol"]);
        assert_eq!(ex[2].id, "2");
        // 378 comparison questions answer yes or no (counted with Python when the file was examined).
        assert_eq!(ex.iter().filter(|e| e.answers[0] == "yes" || e.answers[0] == "no").count(), 378);
    }
}
