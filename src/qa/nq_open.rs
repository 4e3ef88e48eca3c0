//! NQ-open (and the EfficientQA files in the same layout): JSON lines `{question, answer: [aliases]}`; extra fields
//! (EfficientQA's def_correct_predictions, ...) are ignored. The id is `id` where a line has one, else the 0-based
//! line index among questions.

use std::path::Path;

use anyhow::Result;

use super::Example;

pub fn load(path: &Path) -> Result<Vec<Example>> {
    super::read_span_questions(path, "answer")
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
