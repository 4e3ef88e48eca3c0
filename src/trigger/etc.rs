//! `etc` — ETC, Entropy-Trend Constraint (Li et al., AAAI 2026, "Modeling Uncertainty Trends for Timely
//! Retrieval in Dynamic RAG"). Pair it with the `qfs` query former (ETC reuses DRAGIN's QFS).
//!
//! ETC triggers on the *trend* of uncertainty rather than its level. Over the entropy sequence of the content
//! words generated so far, `h_1, h_2, ...` (stop words and punctuation skipped,
//! [`crate::text::words::is_content_word`]):
//! - first and second differences `d1_t = h_t - h_{t-1}`, `d2_t = d1_t - d1_{t-1}` (defined from the third
//!   content word on);
//! - `E_t` = running mean of `d2` up to and including `t`;
//! - dynamic weight `w_t = |d2_{t-1} - E_t| / (|d2_t - E_t| + |d2_{t-1} - E_t|)` (a `d2_t` far from the mean,
//!   relative to the previous one, gets a small weight; `0/0` gives `w_t = 1/2`);
//! - smoothed second difference `d̃2_t = w_t · d2_t + (1 - w_t) · d̃2_{t-1}`, `d̃2` = `d2` at the first one
//!   (exponential smoothing on the previous *smoothed* value: our reading of the paper, set against the code's
//!   use of the raw previous `d2`; the paper's text could not be re-checked offline);
//! - retrieval triggers at the first content word with `|d̃2_t| >= α`, truncating at that word.
//!
//! # Paper vs code (`variant = "paper"`, default, or `"code"`)
//!
//! | | paper (default) | code |
//! |---|---|---|
//! | word entropy from sub-tokens | mean (as DRAGIN's code; not checked against the paper) | max |
//! | smoothing | `w_t d2_t + (1 - w_t) d̃2_{t-1}` | `λ d2_t + (1 - λ) d2_{t-1}`, `λ = 0.9 + 0.1 w_t`, raw previous `d2` |
//! | score compared with `α` | `|d̃2_t|` | `|d̃2_t| · a_pay(w)` |
//! | truncation | at the word | at the word |
//!
//! `a_pay(w)` (code): the largest head-averaged attention the word *pays*: max over its sub-tokens `i` and key
//! positions `k ≤ pos_i` (its own row, all keys) of `mean_h attn[i][h][k]`.
//!
//! The sequence runs over every content word in the view (kept text and the new block, recomputed from the
//! view's tokens at each call, so it follows the re-fed tokens after a retrieval); words overlapping the block
//! are judged. `at` = the triggering word's first token; `keep` = `at` (`truncate = "token"`, default) or its
//! sentence start. The threshold `α` has no default here: the paper's value could not be checked offline; the
//! value in `configs/etc.toml` is marked as such.
//!
//! `accept_after_retrieval = true` accepts the first sentence after a retrieval unjudged, as DRAGIN's code
//! (which ETC's builds on) does; off by default for both forms, since we could not check ETC's code for it.
//!
//! Scores: the word's `|d̃2_t|` (paper) or `|d̃2_t| · a_pay` (code) over its sub-tokens; NaN for non-content
//! words and the first two content words (no second difference yet).

use anyhow::Result;

use super::params::{Pacing, Params, Truncate};
use super::{Decision, GenView, Judgement, Lookahead, Trigger};
use crate::step::TokenStep;
use crate::text::words::{self, Word};

/// Which form of ETC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    Paper,
    Code,
}

/// The entropy-trend trigger.
#[derive(Debug, Clone)]
pub struct Etc {
    alpha: f32,
    variant: Variant,
    pacing: Pacing,
    /// Retrieve with the question before generating (not ETC's: off by default).
    initial: bool,
}

/// Smoothed second differences of `h` (`None` for the first two entries).
pub fn smoothed_d2(h: &[f32], variant: Variant) -> Vec<Option<f32>> {
    let mut out = vec![None; h.len()];
    let mut d2 = Vec::new(); // raw second differences so far
    let mut prev_sm = 0.0f32;
    for t in 2..h.len() {
        let cur = (h[t] - h[t - 1]) - (h[t - 1] - h[t - 2]);
        d2.push(cur);
        let sm = if d2.len() == 1 {
            cur
        } else {
            let mean = d2.iter().sum::<f32>() / d2.len() as f32;
            let prev = d2[d2.len() - 2];
            let (num, den) = ((prev - mean).abs(), (cur - mean).abs() + (prev - mean).abs());
            let w = if den > 0.0 { num / den } else { 0.5 };
            match variant {
                Variant::Paper => w * cur + (1.0 - w) * prev_sm,
                Variant::Code => {
                    let l = 0.9 + 0.1 * w;
                    l * cur + (1.0 - l) * prev
                }
            }
        };
        prev_sm = sm;
        out[t] = Some(sm);
    }
    out
}

/// The largest head-averaged attention the word's sub-tokens pay to any key.
pub fn a_pay(tokens: &[TokenStep], w: &Word) -> f32 {
    tokens[w.tokens.clone()].iter().map(|t| (0..=t.pos).map(|k| t.attn_mean(k)).fold(0.0, f32::max)).fold(0.0, f32::max)
}

impl Etc {
    pub fn new(alpha: f32, variant: Variant) -> Self {
        Etc {
            alpha,
            variant,
            pacing: Pacing::new(Truncate::Token, Lookahead::Sentence { max_tokens: 64 }, false),
            initial: false,
        }
    }

    /// Config keys: `alpha` (required), `variant` (`"paper"` | `"code"`), `truncate` (`"token"` default |
    /// `"sentence"`), `lookahead` (`"sentence"` default, or a token count), `max_sentence_tokens` (64),
    /// `accept_after_retrieval` (false), `initial_retrieval` (retrieve with the question first; default false, as
    /// ETC).
    pub fn from_config(config: &toml::Value) -> Result<Self> {
        let p = Params::new("etc", config)?;
        let alpha = p.f32("alpha", None)?;
        let variant = match p.choice("variant", &["paper", "code"])?.as_str() {
            "paper" => Variant::Paper,
            _ => Variant::Code,
        };
        let mut e = Etc::new(alpha, variant);
        e.pacing = e.pacing.read(&p)?;
        e.initial = p.bool("initial_retrieval", false)?;
        p.finish()?;
        Ok(e)
    }

    fn word_entropy(&self, tokens: &[TokenStep], w: &Word) -> f32 {
        let hs = tokens[w.tokens.clone()].iter().map(|t| t.entropy);
        match self.variant {
            Variant::Paper => hs.sum::<f32>() / w.tokens.len().max(1) as f32,
            Variant::Code => hs.fold(f32::NEG_INFINITY, f32::max),
        }
    }
}

impl Trigger for Etc {
    fn name(&self) -> &str {
        "etc"
    }
    fn lookahead(&self) -> Lookahead {
        self.pacing.lookahead()
    }
    fn reset(&mut self) {
        self.pacing.reset();
    }
    fn before_generation(&mut self, _question: &str) -> bool {
        self.initial
    }
    fn on_retrieval(&mut self) {
        self.pacing.on_retrieval();
    }
    fn judge(&mut self, view: &GenView) -> anyhow::Result<Judgement> {
        let tokens = view.tokens;
        if self.pacing.take_accept() {
            return Ok(Judgement::new(Decision::Continue, vec![f32::NAN; tokens.len() - view.new_from]));
        }
        let content: Vec<Word> = words::words(tokens).into_iter().filter(Word::is_content).collect();
        let h: Vec<f32> = content.iter().map(|w| self.word_entropy(tokens, w)).collect();
        let sm = smoothed_d2(&h, self.variant);
        let mut scores = vec![f32::NAN; tokens.len() - view.new_from];
        let mut decision = Decision::Continue;
        for (w, s) in content.iter().zip(&sm) {
            if w.tokens.end <= view.new_from {
                continue;
            }
            let Some(s) = s else { continue };
            let score = match self.variant {
                Variant::Paper => s.abs(),
                Variant::Code => s.abs() * a_pay(tokens, w),
            };
            for i in w.tokens.clone().filter(|&i| i >= view.new_from) {
                scores[i - view.new_from] = score;
            }
            if score >= self.alpha && decision == Decision::Continue {
                decision = Decision::Retrieve { keep: self.pacing.truncate.keep(tokens, w.start()), at: w.start() };
            }
        }
        Ok(Judgement::new(decision, scores))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f32, b: f32) -> bool {
        (a - b).abs() < 1e-5
    }

    /// Tokens `(text, entropy, max attention paid)`, one head, answer starting at sequence position 20.
    fn tokens(items: &[(&str, f32, f32)]) -> Vec<TokenStep> {
        items
            .iter()
            .enumerate()
            .map(|(j, (t, h, a))| {
                let mut row = vec![0.0; 20 + j + 1];
                row[0] = *a;
                TokenStep { pos: 20 + j, text: t.to_string(), entropy: *h, attn: vec![row], ..Default::default() }
            })
            .collect()
    }

    /// Content words Paris(1.0) France(1.2) capital(1.1) Seine|land(1.0,2.0) river(3.0), stop words between.
    fn example() -> Vec<TokenStep> {
        tokens(&[
            (" Paris", 1.0, 0.5),
            (" is", 4.0, 0.5),
            (" in", 4.0, 0.5),
            (" France", 1.2, 0.5),
            (",", 5.0, 0.5),
            (" the", 4.0, 0.5),
            (" capital", 1.1, 0.5),
            (" on", 4.0, 0.5),
            (" Seine", 1.0, 0.6),
            ("land", 2.0, 0.3),
            (" river", 3.0, 0.5),
            (".", 0.2, 0.5),
        ])
    }

    #[test]
    fn paper_differences_and_weights_by_hand() {
        // word entropies (mean): h = [1.0, 1.2, 1.1, 1.5, 3.0]
        // d1 = [_, 0.2, -0.1, 0.4, 1.5];  d2 = [_, _, -0.3, 0.5, 1.1]
        // t=2: d̃2 = -0.3
        // t=3: E = (-0.3+0.5)/2 = 0.1; w = |-0.3-0.1| / (|0.5-0.1| + 0.4) = 0.5; d̃2 = 0.5*0.5 + 0.5*(-0.3) = 0.1
        // t=4: E = 1.3/3 = 0.433333; w = |0.5-0.43333| / (|1.1-0.43333| + 0.066667) = 0.066667/0.733333 = 1/11
        //      d̃2 = 1.1/11 + (10/11)*0.1 = 0.190909
        let sm = smoothed_d2(&[1.0, 1.2, 1.1, 1.5, 3.0], Variant::Paper);
        assert_eq!((sm[0], sm[1]), (None, None));
        assert!(close(sm[2].unwrap(), -0.3) && close(sm[3].unwrap(), 0.1) && close(sm[4].unwrap(), 0.190909));
        // with alpha 0.5 nothing triggers: the spike at "river" is damped by its small weight
        let ts = example();
        let mut e = Etc::new(0.5, Variant::Paper);
        let j = e.judge(&GenView { question: "q", tokens: &ts, new_from: 0 }).unwrap();
        assert_eq!(j.decision, Decision::Continue);
        // scores: NaN except capital (6) 0.3, Seineland (8,9) 0.1, river (10) 0.190909
        assert!(j.scores[..6].iter().all(|s| s.is_nan()));
        assert!(close(j.scores[6], 0.3) && close(j.scores[8], 0.1) && close(j.scores[9], 0.1));
        assert!(close(j.scores[10], 0.190909) && j.scores[11].is_nan() && j.scores[7].is_nan());
    }

    #[test]
    fn paper_triggers_on_a_sustained_rise() {
        let ts = tokens(&[
            (" Paris", 1.0, 0.1),
            (" France", 1.0, 0.1),
            (" tower", 1.0, 0.1),
            (" by", 4.0, 0.1),
            (" architect", 9.0, 0.1),
            (" Gustave", 3.0, 0.1),
        ]);
        // content words (not "by"): h = [1, 1, 1, 9, 3]; d1 = [_, 0, 0, 8, -6], d2 = [_, _, 0, 8, -14]
        // t=2: d̃2 = 0; t=3: E = 4, w = |0-4|/(|8-4|+|0-4|) = 0.5, d̃2 = 0.5*8 + 0.5*0 = 4.0 >= 0.5
        // -> triggers at "architect" (token 4)
        let mut e = Etc::new(0.5, Variant::Paper);
        let j = e.judge(&GenView { question: "q", tokens: &ts, new_from: 0 }).unwrap();
        assert_eq!(j.decision, Decision::Retrieve { keep: 4, at: 4 });
        assert!(close(j.scores[4], 4.0));
        // judged from the block only: with the block starting after "architect", the first score is at t=4:
        // E = (0+8-14)/3 = -2, w = |8+2|/(|-14+2|+|8+2|) = 10/22, d̃2 = (10/22)(-14) + (12/22)(4.0) = -4.181818
        let j = e.judge(&GenView { question: "q", tokens: &ts, new_from: 5 }).unwrap();
        assert!(close(j.scores[0], 4.181818), "{:?}", j.scores);
        assert_eq!(j.decision, Decision::Retrieve { keep: 5, at: 5 });
    }

    #[test]
    fn code_form_by_hand() {
        // word entropies (max): h = [1.0, 1.2, 1.1, 2.0, 3.0]
        // d1 = [_, 0.2, -0.1, 0.9, 1.0]; d2 = [_, _, -0.3, 1.0, 0.1]
        // t=2: -0.3
        // t=3: E = 0.35; w = |-0.3-0.35| / (|1.0-0.35| + 0.65) = 0.5; λ = 0.95; d̃2 = 0.95*1.0 + 0.05*(-0.3) = 0.935
        // t=4: E = 0.8/3 = 0.266667; w = 0.733333 / (0.166667 + 0.733333) = 0.814815; λ = 0.9814815;
        //      d̃2 = 0.9814815*0.1 + 0.0185185*1.0 = 0.1166667
        let sm = smoothed_d2(&[1.0, 1.2, 1.1, 2.0, 3.0], Variant::Code);
        assert!(close(sm[2].unwrap(), -0.3) && close(sm[3].unwrap(), 0.935) && close(sm[4].unwrap(), 0.1166667));
        // scores x a_pay: capital 0.3*0.5 = 0.15; Seineland 0.935*max(0.6,0.3) = 0.561 >= 0.5 -> trigger
        let ts = example();
        let mut e = Etc::new(0.5, Variant::Code);
        let j = e.judge(&GenView { question: "q", tokens: &ts, new_from: 0 }).unwrap();
        assert!(close(j.scores[6], 0.15) && close(j.scores[8], 0.561), "{:?}", j.scores);
        assert!(close(j.scores[10], 0.1166667 * 0.5));
        assert_eq!(j.decision, Decision::Retrieve { keep: 8, at: 8 });
        // truncate = "sentence": back to the start of the only sentence
        let mut e =
            Etc::from_config(&toml::from_str("alpha = 0.5\nvariant = \"code\"\ntruncate = \"sentence\"").unwrap())
                .unwrap();
        let j = e.judge(&GenView { question: "q", tokens: &ts, new_from: 0 }).unwrap();
        assert_eq!(j.decision, Decision::Retrieve { keep: 0, at: 8 });
    }
}
