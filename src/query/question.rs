//! `question` — the query is always the question (DRAGIN code's `query_formulation = "direct"` for SR-RAG,
//! FL-RAG and FS-RAG; SR-RAG's only query).

use super::QueryFormer;
use crate::trigger::GenView;

/// Always asks the question.
#[derive(Debug, Clone, Default)]
pub struct Question;

impl QueryFormer for Question {
    fn name(&self) -> &str {
        "question"
    }
    fn form(&self, view: &GenView, _at: usize, _keep: usize) -> anyhow::Result<String> {
        Ok(view.question.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step::TokenStep;

    #[test]
    fn asks_the_question() {
        let ts = vec![TokenStep { text: " Paris".into(), ..Default::default() }];
        let v = GenView { question: "Where is the tower?", tokens: &ts, new_from: 0 };
        assert_eq!(Question.form(&v, 0, 1).unwrap(), "Where is the tower?");
        assert_eq!(Question.initial("Q"), "Q");
    }
}
