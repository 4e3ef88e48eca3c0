//! `flare` — FLARE-direct (Jiang et al., 2023, "Active Retrieval Augmented Generation"), the trigger half.
//!
//! Paper, Section 3.2 (direct FLARE): at each step the LM drafts a temporary next sentence `ŝ_t` (the look-ahead,
//! at most 64 tokens) without new retrieval. If every token of `ŝ_t` has probability `>= θ` the draft is
//! accepted; otherwise retrieval is triggered and the sentence is *regenerated* with the retrieved documents,
//! so the whole draft is dropped (`keep` = start of the draft = `view.new_from`). The query (Section 3.2.2,
//! masked query) is the draft with tokens of probability `< β` masked out: the `flare-masked` query former.
//! FLARE also retrieves with the user input before generating (`q_1 = x`): `initial_retrieval = true`.
//! Hyperparameters (the paper's defaults): `theta = 0.8`, `beta = 0.4` (former), look-ahead 64.
//!
//! `at` is the first token of the draft below `θ`. Scores: each token's probability (the quantity compared with
//! `θ`). **Not reproduced:** DRAGIN's re-implementation of FLARE (`TokenRAG`, averaging `1 - p` over a sentence
//! against `hallucination_threshold`), which is not FLARE's rule.

use anyhow::Result;

use super::params::{read_lookahead, Params};
use super::{Decision, GenView, Judgement, Lookahead, Trigger};

/// FLARE's confidence trigger over a look-ahead sentence.
#[derive(Debug, Clone)]
pub struct Flare {
    theta: f32,
    lookahead: Lookahead,
    initial: bool,
}

impl Flare {
    pub fn new(theta: f32, max_tokens: usize, initial: bool) -> Self {
        Flare { theta, lookahead: Lookahead::Sentence { max_tokens }, initial }
    }

    /// Config keys: `theta` (default 0.8), `lookahead` (`"sentence"`, default) and `max_sentence_tokens`
    /// (default 64), `initial_retrieval` (default true).
    pub fn from_config(config: &toml::Value) -> Result<Self> {
        let p = Params::new("flare", config)?;
        let theta = p.f32("theta", Some(0.8))?;
        let lookahead = read_lookahead(&p, Lookahead::Sentence { max_tokens: 64 })?;
        let initial = p.bool("initial_retrieval", true)?;
        if !(0.0..=1.0).contains(&theta) {
            return Err(p.invalid("theta", format!("must be in [0, 1], got {theta}")));
        }
        p.finish()?;
        Ok(Flare { theta, lookahead, initial })
    }
}

impl Trigger for Flare {
    fn name(&self) -> &str {
        "flare"
    }
    fn lookahead(&self) -> Lookahead {
        self.lookahead
    }
    fn before_generation(&mut self, _question: &str) -> bool {
        self.initial
    }
    fn judge(&mut self, view: &GenView) -> anyhow::Result<Judgement> {
        let block = &view.tokens[view.new_from..];
        let scores: Vec<f32> = block.iter().map(|t| t.prob).collect();
        let decision = match block.iter().position(|t| t.prob < self.theta) {
            Some(k) => Decision::Retrieve { keep: view.new_from, at: view.new_from + k },
            None => Decision::Continue,
        };
        Ok(Judgement::new(decision, scores))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step::TokenStep;

    fn steps(items: &[(&str, f32)]) -> Vec<TokenStep> {
        items
            .iter()
            .enumerate()
            .map(|(i, (t, p))| TokenStep { pos: 50 + i, text: t.to_string(), prob: *p, ..Default::default() })
            .collect()
    }

    #[test]
    fn triggers_on_first_token_below_theta_and_drops_the_draft() {
        // kept sentence (judged before), then the draft " It opened in 1889 ." with probs
        // 0.95 0.9 0.85 0.3 0.99: 0.3 < 0.8 at draft index 3 -> at = 5 + 3 = 8, keep = new_from = 5.
        let ts = steps(&[
            (" The", 0.9),
            (" tower", 0.9),
            (" is", 0.9),
            (" tall", 0.1),
            (".", 0.9),
            (" It", 0.95),
            (" opened", 0.9),
            (" in", 0.85),
            (" 1889", 0.3),
            (".", 0.99),
        ]);
        let mut t = Flare::from_config(&toml::from_str("theta = 0.8").unwrap()).unwrap();
        assert!(t.before_generation("q"));
        assert_eq!(t.lookahead(), Lookahead::Sentence { max_tokens: 64 });
        let j = t.judge(&GenView { question: "q", tokens: &ts, new_from: 5 }).unwrap();
        assert_eq!(j.decision, Decision::Retrieve { keep: 5, at: 8 });
        assert_eq!(j.scores, vec![0.95, 0.9, 0.85, 0.3, 0.99]);
    }

    #[test]
    fn confident_draft_is_kept() {
        // all >= 0.8 (0.8 itself is not below theta)
        let ts = steps(&[(" It", 0.95), (" opened", 0.8), (".", 0.99)]);
        let mut t = Flare::new(0.8, 64, true);
        let j = t.judge(&GenView { question: "q", tokens: &ts, new_from: 0 }).unwrap();
        assert_eq!(j.decision, Decision::Continue);
    }
}
