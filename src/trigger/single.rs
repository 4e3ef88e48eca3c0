//! `single` — SR-RAG (single-round RAG): retrieve once with the question before generating, then never again.
//!
//! DRAGIN's baseline "SR-RAG" (`SingleRAG` in the authors' code: `retrieve(question, topk)` then one
//! generation). The query is whatever the configured query former's [`crate::query::QueryFormer::initial`]
//! returns (the question for every former here).

use anyhow::Result;

use super::params::{read_lookahead, Params};
use super::{Decision, GenView, Judgement, Lookahead, Trigger};

/// Retrieves once, before generation.
#[derive(Debug, Clone)]
pub struct SingleRound {
    lookahead: Lookahead,
}

impl SingleRound {
    pub fn new(block: usize) -> Self {
        SingleRound { lookahead: Lookahead::Tokens(block.max(1)) }
    }

    /// Config keys: `lookahead` (tokens per block, default 64).
    pub fn from_config(config: &toml::Value) -> Result<Self> {
        let p = Params::new("single", config)?;
        let lookahead = read_lookahead(&p, Lookahead::Tokens(64))?;
        p.finish()?;
        Ok(SingleRound { lookahead })
    }
}

impl Trigger for SingleRound {
    fn name(&self) -> &str {
        "single"
    }
    fn lookahead(&self) -> Lookahead {
        self.lookahead
    }
    fn before_generation(&mut self, _question: &str) -> bool {
        true
    }
    fn judge(&mut self, view: &GenView) -> anyhow::Result<Judgement> {
        Ok(Judgement::new(Decision::Continue, vec![f32::NAN; view.tokens.len() - view.new_from]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step::TokenStep;

    #[test]
    fn retrieves_only_before_generation() {
        let toks: Vec<TokenStep> = (0..4)
            .map(|i| TokenStep { pos: i, text: " x".into(), entropy: 9.0, prob: 0.01, ..Default::default() })
            .collect();
        let mut t = SingleRound::new(16);
        assert!(t.before_generation("q"));
        assert_eq!(t.lookahead(), Lookahead::Tokens(16));
        let j = t.judge(&GenView { question: "q", tokens: &toks, new_from: 0 }).unwrap();
        assert_eq!(j.decision, Decision::Continue);
        assert_eq!(j.scores.len(), 4);
        assert!(j.scores.iter().all(|s| s.is_nan()));
    }
}
