//! NQ-open (and the EfficientQA files in the same layout): JSON lines `{question, answer: [aliases]}`; extra fields
//! (EfficientQA's def_correct_predictions, ...) are ignored. The id is the 0-based line index among questions.

use std::path::Path;

use anyhow::Result;

use super::{non_empty_answers, read_jsonl, str_field, str_list, AnswerKind, At, Example};

pub fn load(path: &Path) -> Result<Vec<Example>> {
    read_jsonl(path)?
        .into_iter()
        .enumerate()
        .map(|(index, (line, v))| {
            let at = At { path, line: Some(line), index };
            Ok(Example {
                id: v.get("id").and_then(|x| x.as_str()).map(str::to_string).unwrap_or_else(|| index.to_string()),
                question: str_field(&v, "question", &at)?,
                answers: non_empty_answers(str_list(&v, "answer", &at)?, &at)?,
                kind: AnswerKind::Span,
                supporting: vec![],
                contexts: vec![],
                entries: vec![],
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_shared_files() {
        let ex = load(&crate::require_data!("qa/nq/NQ-open.dev.jsonl")).unwrap();
        assert_eq!(ex.len(), 3610);
        assert_eq!(ex[0].question, "when was the last time anyone was on the moon");
        assert_eq!(ex[0].answers, vec!["14 December 1972 UTC", "December 1972"]);
        assert_eq!(load(&crate::require_data!("qa/nq/NQ-open.efficientqa.test.1.1.jsonl")).unwrap().len(), 1769);
    }
}
