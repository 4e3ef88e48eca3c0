//! The oracle context: a "retriever" that hands over the question's own supporting paragraphs (HotpotQA's
//! `is_supporting` paragraphs; where a layout has none, the paragraphs shipped with the question, as PubMedQA's
//! abstract). It bounds what retrieval can add: the model answers with the right passages in its prompt.
//!
//! The decode loop knows only [`Retriever`], so the question is recognised by the query: the oracle runs with
//! the `single` trigger and the `question` query former (`configs/oracle.toml`), whose one query is the question
//! itself. Every gold paragraph is returned, whatever `k` (HotpotQA has two per question); a query that is not one
//! of the questions gets none.

use std::collections::HashMap;

use anyhow::Result;

use super::{Passage, Retriever};
use crate::qa::Example;

/// The supporting paragraphs of each question, by question text.
pub struct GoldRetriever {
    by_question: HashMap<String, Vec<Passage>>,
}

impl GoldRetriever {
    pub fn new(examples: &[Example]) -> Self {
        let mut by_question = HashMap::new();
        for ex in examples {
            let docs = if ex.supporting.is_empty() { &ex.contexts } else { &ex.supporting };
            let passages = docs
                .iter()
                .enumerate()
                .map(|(i, d)| Passage {
                    id: format!("gold:{}:{i}", ex.id),
                    title: d.title.clone(),
                    text: d.text.clone(),
                    score: 1.0,
                })
                .collect();
            by_question.insert(ex.question.clone(), passages);
        }
        GoldRetriever { by_question }
    }
}

impl Retriever for GoldRetriever {
    fn search(&self, query: &str, _k: usize) -> Result<Vec<Passage>> {
        Ok(self.by_question.get(query).cloned().unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qa::{AnswerKind, Doc};

    fn ex(id: &str, q: &str, supporting: &[&str], contexts: &[&str]) -> Example {
        let docs = |v: &[&str]| v.iter().map(|t| Doc { title: format!("T {t}"), text: t.to_string() }).collect();
        Example {
            id: id.into(),
            question: q.into(),
            answers: vec!["a".into()],
            kind: AnswerKind::Span,
            supporting: docs(supporting),
            contexts: docs(contexts),
            entries: vec![],
        }
    }

    #[test]
    fn hands_over_the_supporting_paragraphs_else_the_contexts() {
        let r = GoldRetriever::new(&[
            ex("1", "Who?", &["s1", "s2"], &["s1", "d1", "s2"]),
            ex("2", "Is it?", &[], &["abstract part 1", "part 2"]),
        ]);
        let p = r.search("Who?", 1).unwrap();
        assert_eq!(p.iter().map(|p| p.text.as_str()).collect::<Vec<_>>(), vec!["s1", "s2"]);
        assert_eq!(p[0].id, "gold:1:0");
        assert_eq!(r.search("Is it?", 3).unwrap().len(), 2);
        assert!(r.search("Something else", 3).unwrap().is_empty());
    }
}
