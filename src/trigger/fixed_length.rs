//! `fixed-length` — FL-RAG: retrieve every `n` generated tokens; the query is the last `n` tokens
//! (pair it with the `last-tokens` query former, `n` equal).
//!
//! As DRAGIN's paper describes its FL-RAG baseline (after Khandelwal et al.'s / Ram et al.'s fixed-stride
//! retrieval): an initial retrieval with the question, then a retrieval after each block of `n` tokens, keeping
//! all generated text. **Code differs:** DRAGIN's `FixLengthRAG` retrieves with the *question* every time
//! (`query_formulation = "direct"`); pair this trigger with the `question` query former to reproduce that.
//! A block shorter than `n` (the generation ended) does not trigger.
//! Scores: none (NaN).

use anyhow::Result;

use super::params::Params;
use super::{Decision, GenView, Judgement, Lookahead, Trigger};

/// Retrieves after every `n` tokens.
#[derive(Debug, Clone)]
pub struct FixedLength {
    n: usize,
    initial: bool,
}

impl FixedLength {
    pub fn new(n: usize, initial: bool) -> Self {
        FixedLength { n: n.max(1), initial }
    }

    /// Config keys: `n` (tokens per block; DRAGIN's configs use `fix_length` 16 on 2Wiki, 32 on HotpotQA),
    /// `initial_retrieval` (default true).
    pub fn from_config(config: &toml::Value) -> Result<Self> {
        let p = Params::new("fixed-length", config)?;
        let n = p.usize("n", None)?;
        let initial = p.bool("initial_retrieval", true)?;
        if n == 0 {
            return Err(p.invalid("n", "must be positive"));
        }
        p.finish()?;
        Ok(FixedLength::new(n, initial))
    }
}

impl Trigger for FixedLength {
    fn name(&self) -> &str {
        "fixed-length"
    }
    fn lookahead(&self) -> Lookahead {
        Lookahead::Tokens(self.n)
    }
    fn before_generation(&mut self, _question: &str) -> bool {
        self.initial
    }
    fn judge(&mut self, view: &GenView) -> anyhow::Result<Judgement> {
        let block = view.tokens.len() - view.new_from;
        let decision = if block >= self.n {
            Decision::Retrieve { keep: view.tokens.len(), at: view.tokens.len() - 1 }
        } else {
            Decision::Continue
        };
        Ok(Judgement::new(decision, vec![f32::NAN; block]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step::TokenStep;

    fn toks(n: usize) -> Vec<TokenStep> {
        (0..n).map(|i| TokenStep { pos: 20 + i, text: format!(" w{i}"), prob: 0.99, ..Default::default() }).collect()
    }

    #[test]
    fn retrieves_after_each_full_block_keeping_everything() {
        let cfg: toml::Value = toml::from_str("n = 4").unwrap();
        let mut t = FixedLength::from_config(&cfg).unwrap();
        assert_eq!(t.lookahead(), Lookahead::Tokens(4));
        assert!(t.before_generation("q"));
        let ts = toks(8);
        // second block: tokens 4..8, full -> retrieve, keep all 8, triggered by the last token (7)
        let j = t.judge(&GenView { question: "q", tokens: &ts, new_from: 4 }).unwrap();
        assert_eq!(j.decision, Decision::Retrieve { keep: 8, at: 7 });
        // a short final block (3 < 4 tokens) does not trigger
        let ts = toks(7);
        let j = t.judge(&GenView { question: "q", tokens: &ts, new_from: 4 }).unwrap();
        assert_eq!(j.decision, Decision::Continue);
        assert_eq!(j.scores.len(), 3);
    }

    #[test]
    fn n_is_required() {
        let e = FixedLength::from_config(&toml::Value::Table(Default::default())).unwrap_err().to_string();
        assert!(e.contains("fixed-length: config key 'n': missing (it has no default)"), "{e}");
    }
}
