//! `fixed-sentence` — FS-RAG / IRCoT: retrieve after every generated sentence; the query is the last sentence
//! (pair it with the `last-sentence` query former).
//!
//! IRCoT (Trivedi et al., 2023) interleaves: retrieve with the question, generate one CoT sentence, retrieve with
//! that sentence, and so on; DRAGIN's FS-RAG baseline follows it. All text is kept. **Code differs:** DRAGIN's
//! `FixLengthRAG` in fix-sentence mode retrieves with the *question* every round (`query_formulation =
//! "direct"`); pair with the `question` former to reproduce that. Blank blocks do not trigger.
//! Scores: none (NaN).

use anyhow::Result;

use super::params::Params;
use super::{Decision, GenView, Judgement, Lookahead, Trigger};

/// Retrieves after every sentence.
#[derive(Debug, Clone)]
pub struct FixedSentence {
    max_tokens: usize,
    initial: bool,
}

impl FixedSentence {
    pub fn new(max_tokens: usize, initial: bool) -> Self {
        FixedSentence { max_tokens: max_tokens.max(1), initial }
    }

    /// Config keys: `max_sentence_tokens` (cap on one sentence, default 64), `initial_retrieval` (default true).
    pub fn from_config(config: &toml::Value) -> Result<Self> {
        let p = Params::new("fixed-sentence", config)?;
        let max_tokens = p.usize("max_sentence_tokens", Some(64))?;
        let initial = p.bool("initial_retrieval", true)?;
        p.finish()?;
        Ok(FixedSentence::new(max_tokens, initial))
    }
}

impl Trigger for FixedSentence {
    fn name(&self) -> &str {
        "fixed-sentence"
    }
    fn lookahead(&self) -> Lookahead {
        Lookahead::Sentence { max_tokens: self.max_tokens }
    }
    fn before_generation(&mut self, _question: &str) -> bool {
        self.initial
    }
    fn judge(&mut self, view: &GenView) -> anyhow::Result<Judgement> {
        let block = &view.tokens[view.new_from..];
        let has_text = block.iter().any(|t| t.text.chars().any(|c| !c.is_whitespace()));
        let decision = if has_text {
            Decision::Retrieve { keep: view.tokens.len(), at: view.tokens.len() - 1 }
        } else {
            Decision::Continue
        };
        Ok(Judgement::new(decision, vec![f32::NAN; block.len()]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step::TokenStep;

    #[test]
    fn retrieves_after_each_sentence() {
        let texts = [" Paris", " is", " nice", ".", " It", " is", " big", "."];
        let ts: Vec<TokenStep> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| TokenStep { pos: 30 + i, text: t.to_string(), prob: 0.9, ..Default::default() })
            .collect();
        let mut t = FixedSentence::new(64, true);
        assert_eq!(t.lookahead(), Lookahead::Sentence { max_tokens: 64 });
        let j = t.judge(&GenView { question: "q", tokens: &ts, new_from: 4 }).unwrap();
        assert_eq!(j.decision, Decision::Retrieve { keep: 8, at: 7 });
        let blank = [TokenStep { pos: 30, text: "\n".into(), ..Default::default() }];
        let j = t.judge(&GenView { question: "q", tokens: &blank, new_from: 0 }).unwrap();
        assert_eq!(j.decision, Decision::Continue);
    }
}
