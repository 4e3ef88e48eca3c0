//! TriviaQA as JSON lines `{id, question, answers: [aliases]}` (the layout of CtrlA's triviaqa_test.jsonl).

use std::path::Path;

use anyhow::Result;

use super::Example;

pub fn load(path: &Path) -> Result<Vec<Example>> {
    super::read_span_questions(path, "answers")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_shared_file() {
        let ex = load(&crate::require_data!("qa/triviaqa/triviaqa_test_1000.jsonl")).unwrap();
        assert_eq!(ex.len(), 1000);
        assert_eq!(ex[0].id, "qw_2021");
        assert!(ex[0].answers.iter().any(|a| a == "Yuri Gagarin"));
    }

    #[test]
    fn missing_answers_names_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.jsonl");
        std::fs::write(
            &p,
            "{\"id\":\"a\",\"question\":\"q\",\"answers\":[\"x\"]}\n\n{\"id\":\"b\",\"question\":\"q\"}\n",
        )
        .unwrap();
        let err = format!("{:#}", load(&p).unwrap_err());
        assert!(err.contains("t.jsonl:3: missing field 'answers'"), "{err}");
    }
}
