//! `none` — wo-RAG: the model answers from its parameters alone; never retrieves.
//!
//! DRAGIN's "wo-RAG" baseline (`BasicRAG.inference` in the authors' code).

use anyhow::Result;

use super::params::{read_lookahead, Params};
use super::{Decision, GenView, Judgement, Lookahead, Trigger};

/// Never retrieves.
#[derive(Debug, Clone)]
pub struct NoRetrieval {
    lookahead: Lookahead,
}

impl NoRetrieval {
    /// `block` tokens are generated between two (trivial) judgements.
    pub fn new(block: usize) -> Self {
        NoRetrieval { lookahead: Lookahead::Tokens(block.max(1)) }
    }

    /// Config keys: `lookahead` (tokens per block, default 64; only sets how often the loop checks in).
    pub fn from_config(config: &toml::Value) -> Result<Self> {
        let p = Params::new("none", config)?;
        let lookahead = read_lookahead(&p, Lookahead::Tokens(64))?;
        p.finish()?;
        Ok(NoRetrieval { lookahead })
    }
}

impl Trigger for NoRetrieval {
    fn name(&self) -> &str {
        "none"
    }
    fn lookahead(&self) -> Lookahead {
        self.lookahead
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
    fn never_retrieves() {
        let toks: Vec<TokenStep> = (0..5)
            .map(|i| TokenStep { pos: 10 + i, text: " x".into(), entropy: 9.0, prob: 0.01, ..Default::default() })
            .collect();
        let mut t = NoRetrieval::from_config(&toml::Value::Table(Default::default())).unwrap();
        assert!(!t.before_generation("q"));
        let j = t.judge(&GenView { question: "q", tokens: &toks, new_from: 2 }).unwrap();
        assert_eq!(j.decision, Decision::Continue);
        assert_eq!(j.scores.len(), 3);
    }
}
