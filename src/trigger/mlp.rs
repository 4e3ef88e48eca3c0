//! Learned trigger (RaDIO / MIND): a trained [`Detector`] scores every generated token from its hidden state,
//! and a rule on the scores decides when to retrieve.
//!
//! Per token `t` of the answer the detector gives `s_t = P(hallucinated)` from the token's own features
//! ([`Detector::features_from_step`]: the detector's `*_last` columns map to this token's `hidden_final` /
//! `hidden_mean`, its entropy columns to this token's `entropy`). Rules:
//!
//! - [`MlpRule::Radio`] (RaDIO, Zhu et al., AAAI 2025): retrieve at the first token whose score is above the
//!   running mean of the scores of the answer's earlier tokens *and* crosses 0.5:
//!   `s_t > mean(s_0..s_{t-1})` and `s_t > 0.5`. "Crossing 0.5" is read as "is above 0.5" (not "was at or
//!   below 0.5 at `t-1`"); for the first token, which has no earlier scores, only `s_t > 0.5` applies.
//! - [`MlpRule::Threshold`]: retrieve at the first token with `s_t > threshold`.
//!
//! On a trigger at token `t` the loop keeps `tokens[..t]` (the flagged token is dropped and regenerated
//! after retrieval) and the query former builds the query around `t`.
//!
//! The running mean is over the scores of the tokens the answer currently keeps: a score is computed when its
//! token is first judged and kept while the token is, so tokens re-fed after a retrieval keep the score they
//! had when generated (not re-scored under the new context: that would cost one detector pass per kept token
//! per step for no documented benefit). Tokens before `new_from` that this trigger never judged are scored on
//! first sight.
//!
//! Contract: the decoder must capture `hidden_final` / `hidden_mean` for every token; a token without the
//! states the detector needs is a programming error and panics with a message saying so.

use anyhow::Context;

use crate::detector::Detector;
use crate::trigger::{Decision, GenView, Judgement, Lookahead, Trigger};

/// When the detector's scores trigger retrieval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MlpRule {
    /// Score above the running mean of earlier scores and above 0.5.
    Radio,
    /// Score above a fixed threshold.
    Threshold(f32),
}

impl MlpRule {
    /// Parses `radio`, `threshold` (0.5) or `threshold:0.7`.
    pub fn parse(s: &str) -> anyhow::Result<Self> {
        match s.split_once(':') {
            None if s == "radio" => Ok(MlpRule::Radio),
            None if s == "threshold" => Ok(MlpRule::Threshold(0.5)),
            Some(("threshold", t)) => {
                let t: f32 = t.parse().map_err(|_| anyhow::anyhow!("threshold {t:?} is not a number"))?;
                anyhow::ensure!((0.0..=1.0).contains(&t), "threshold {t} is not a probability");
                Ok(MlpRule::Threshold(t))
            }
            _ => anyhow::bail!("unknown mlp trigger rule {s:?}; expected radio, threshold or threshold:<p>"),
        }
    }
}

/// The learned trigger.
pub struct MlpTrigger {
    detector: Detector,
    rule: MlpRule,
    block: usize,
    /// Score of every kept answer token, by index in `view.tokens`.
    history: Vec<f32>,
}

impl MlpTrigger {
    /// Judges every token (`Lookahead::Tokens(1)`).
    pub fn new(detector: Detector, rule: MlpRule) -> Self {
        MlpTrigger { detector, rule, block: 1, history: Vec::new() }
    }

    /// Judges blocks of `n` tokens instead (cheaper loop; the first firing token of a block decides).
    pub fn with_block(mut self, n: usize) -> Self {
        self.block = n.max(1);
        self
    }

    pub fn detector(&self) -> &Detector {
        &self.detector
    }

    /// From a `[trigger]` table: `detector` (checkpoint directory from `ragtime train detector`, required),
    /// `rule` (`radio` | `threshold` | `threshold:<p>`, default `radio`), `block` (tokens judged at once,
    /// default 1).
    pub fn from_config(config: &toml::Value) -> anyhow::Result<Self> {
        let p = crate::trigger::params::Params::new("mlp", config)?;
        let dir = match p.raw("detector") {
            Some(toml::Value::String(s)) => s.clone(),
            Some(v) => return Err(p.invalid("detector", format!("expected a directory path, found {v}"))),
            None => anyhow::bail!("mlp: needs a detector: set [trigger] detector = \"DIR\" or pass --detector DIR"),
        };
        let rule = match p.raw("rule") {
            Some(toml::Value::String(s)) => MlpRule::parse(s)?,
            Some(v) => return Err(p.invalid("rule", format!("expected a string, found {v}"))),
            None => MlpRule::Radio,
        };
        let block = p.usize("block", Some(1))?;
        p.finish()?;
        let detector = Detector::load(&dir).with_context(|| {
            format!(
                "mlp trigger: cannot load detector {dir} (a folder written by `ragtime train detector --out {dir}`; \
                 --detector DIR names another)"
            )
        })?;
        Ok(MlpTrigger::new(detector, rule).with_block(block))
    }

    fn score(&self, view: &GenView, j: usize) -> anyhow::Result<f32> {
        self.detector.score_step(&view.tokens[j]).context("mlp trigger")
    }

    fn fires(&self, s: f32) -> bool {
        match self.rule {
            MlpRule::Threshold(t) => s > t,
            MlpRule::Radio => {
                let above_mean = if self.history.is_empty() {
                    true
                } else {
                    s > self.history.iter().sum::<f32>() / self.history.len() as f32
                };
                above_mean && s > 0.5
            }
        }
    }
}

impl Trigger for MlpTrigger {
    fn name(&self) -> &str {
        "mlp"
    }

    fn lookahead(&self) -> Lookahead {
        Lookahead::Tokens(self.block)
    }

    fn reset(&mut self) {
        self.history.clear();
    }

    fn check_model(&self, model_id: &str, hidden: usize) -> anyhow::Result<()> {
        self.detector.check_model(model_id, hidden)
    }

    fn judge(&mut self, view: &GenView) -> anyhow::Result<Judgement> {
        self.history.truncate(view.new_from);
        while self.history.len() < view.new_from {
            let s = self.score(view, self.history.len())?;
            self.history.push(s);
        }
        let mut scores = Vec::with_capacity(view.tokens.len() - view.new_from);
        let mut decision = Decision::Continue;
        for j in view.new_from..view.tokens.len() {
            let s = self.score(view, j)?;
            scores.push(s);
            if decision == Decision::Continue && self.fires(s) {
                decision = Decision::Retrieve { keep: j, at: j };
            }
            self.history.push(s);
        }
        Ok(Judgement::new(decision, scores))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detector::tests::entropy_detector;
    use crate::step::TokenStep;

    fn tokens(entropies: &[f32]) -> Vec<TokenStep> {
        entropies
            .iter()
            .enumerate()
            .map(|(i, &e)| TokenStep { pos: 10 + i, text: format!("t{i}"), entropy: e, ..Default::default() })
            .collect()
    }

    fn view<'a>(t: &'a [TokenStep], new_from: usize) -> GenView<'a> {
        GenView { question: "q", tokens: t, new_from }
    }

    // The hand-set detector scores entropy e as 1 / (1 + exp(1 - 2e)) (for e >= 0):
    // e = 0 -> 0.2689, e = 0.5 -> 0.5, e = 1 -> 0.7311, e = 1.5 -> 0.8808.
    const S0: f32 = 0.268_941_4;
    const S1: f32 = 0.731_058_6;
    const S15: f32 = 0.880_797;

    #[test]
    fn radio_needs_above_running_mean_and_above_half() {
        let mut t = MlpTrigger::new(entropy_detector(), MlpRule::Radio);
        assert_eq!(t.lookahead(), Lookahead::Tokens(1));
        // Tokens 0, 1 (e = 1.5) were generated earlier; the trigger scores them on first sight: [0.8808, 0.8808].
        let toks = tokens(&[1.5, 1.5, 1.0, 1.5]);
        // Token 2: 0.7311 > 0.5 but below the running mean 0.8808 -> continue.
        let j = t.judge(&view(&toks[..3], 2)).unwrap();
        assert_eq!(j.decision, Decision::Continue);
        assert!((j.scores[0] - S1).abs() < 1e-6, "{:?}", j.scores);
        // Token 3: 0.8808 > mean(0.8808, 0.8808, 0.7311) = 0.8309 and > 0.5 -> retrieve, drop token 3.
        let j = t.judge(&view(&toks, 3)).unwrap();
        assert_eq!(j.decision, Decision::Retrieve { keep: 3, at: 3 });
        assert!((j.scores[0] - S15).abs() < 1e-6);

        // After the retrieval the loop keeps tokens[..3] and generates a new token 3 (e = 0.5 -> exactly 0.5,
        // not above 0.5): continue. The dropped score is gone from the mean.
        let toks2 = tokens(&[1.5, 1.5, 1.0, 0.5]);
        assert_eq!(t.judge(&view(&toks2, 3)).unwrap().decision, Decision::Continue);
        assert_eq!(t.history.len(), 4);

        // First token of a fresh answer: no earlier scores, 0.2689 < 0.5 -> continue; then 0.7311 -> retrieve.
        t.reset();
        let toks3 = tokens(&[0.0, 1.0]);
        let j = t.judge(&view(&toks3[..1], 0)).unwrap();
        assert_eq!(j.decision, Decision::Continue);
        assert!((j.scores[0] - S0).abs() < 1e-6);
        assert_eq!(t.judge(&view(&toks3, 1)).unwrap().decision, Decision::Retrieve { keep: 1, at: 1 });
    }

    #[test]
    fn threshold_ignores_the_running_mean() {
        let toks = tokens(&[1.5, 1.5, 1.0, 1.5]);
        let mut t = MlpTrigger::new(entropy_detector(), MlpRule::Threshold(0.5));
        // Same token 2 as above (0.7311 below the running mean 0.8808): a plain threshold fires.
        assert_eq!(t.judge(&view(&toks[..3], 2)).unwrap().decision, Decision::Retrieve { keep: 2, at: 2 });
        let mut t = MlpTrigger::new(entropy_detector(), MlpRule::Threshold(0.8)).with_block(2);
        // Block of tokens 2 and 3: 0.7311 <= 0.8, 0.8808 > 0.8 -> retrieve at 3; both scores reported.
        let j = t.judge(&view(&toks, 2)).unwrap();
        assert_eq!(j.decision, Decision::Retrieve { keep: 3, at: 3 });
        assert_eq!(j.scores.len(), 2);
        assert!((j.scores[0] - S1).abs() < 1e-6 && (j.scores[1] - S15).abs() < 1e-6);
    }

    #[test]
    fn parses_rules() {
        assert_eq!(MlpRule::parse("radio").unwrap(), MlpRule::Radio);
        assert_eq!(MlpRule::parse("threshold").unwrap(), MlpRule::Threshold(0.5));
        assert_eq!(MlpRule::parse("threshold:0.7").unwrap(), MlpRule::Threshold(0.7));
        assert!(MlpRule::parse("threshold:2").is_err());
        assert!(MlpRule::parse("rind").is_err());
    }

    #[test]
    fn a_missing_detector_names_the_folder_and_how_to_make_one() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no-detector");
        let config: toml::Value = toml::from_str(&format!("detector = {:?}", missing.display().to_string())).unwrap();
        let e = MlpTrigger::from_config(&config).err().expect("no detector there");
        let msg = format!("{e:#}");
        assert!(msg.contains(&missing.display().to_string()), "{msg}");
        assert!(msg.contains("ragtime train detector --out"), "{msg}");
        assert!(msg.contains("detector.json"), "{msg}");
    }

    #[test]
    fn errors_without_hidden_states() {
        let mut d = entropy_detector();
        // a detector over hidden states, fed a token without them
        let mut info = d.info().clone();
        info.columns = vec![("hidden_mean_last".into(), 3)];
        info.mlp.input = 3;
        let mut w = d.weights().clone();
        w.layers[0] = crate::detector::mlp::LinearWeights { d_in: 3, d_out: 1, weight: vec![1.0; 3], bias: vec![0.0] };
        d = Detector::new(info, w, None).unwrap();
        let toks = tokens(&[1.0]);
        let e = MlpTrigger::new(d, MlpRule::Radio).judge(&view(&toks, 0)).unwrap_err();
        assert!(format!("{e:#}").contains("was the hidden state captured"), "{e:#}");
    }
}
