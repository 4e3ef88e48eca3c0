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
//! - [`MlpRule::Threshold`]: retrieve at the first token with `s_t > threshold`, compared as log-odds:
//!   `logit(s_t) > ln(threshold / (1 - threshold))`, the detector's margin `logit_1 - logit_0` against the
//!   threshold's log-odds in f64. The same rule as on the probabilities, but it keeps its resolution near 1: a
//!   detector fit hard on its labels puts many tokens at margins above 17, where `s_t` is 1.0 in f32 and no
//!   threshold on it could tell them apart (`threshold:0.999999999` is a margin of 20.7).
//!
//! On a trigger at token `t` the loop keeps `tokens[..t]` (the flagged token is dropped and regenerated
//! after retrieval) and the query former builds the query around `t`.
//!
//! Which tokens may trigger ([`MlpGate`], `gate` in the `[trigger]` table):
//!
//! - [`MlpGate::All`] (default, the papers' reading): every token, as above.
//! - [`MlpGate::Content`] (not in the papers): only tokens of content words, with RIND's content-word test `s_i`
//!   ([`is_content_word`]) and its words built from sub-tokens ([`crate::text::words`]). A token the rule flags
//!   is held until its word is known: the word triggers at its latest token if any of its tokens was flagged and
//!   the word as generated so far is a content word (so `" the"` flagged, then `"ater"`, triggers on
//!   "theater"); a flagged token whose word ends as a stop word or punctuation never triggers. On a trigger
//!   the loop keeps the tokens before the word's first token (`keep = at =` the word's start: the whole word is
//!   regenerated after retrieval, as RIND's). The scores and RaDIO's running mean are the ungated ones. Why:
//!   detectors trained on entity spans (MIND) or sentences (QA labels) and applied to single tokens put their
//!   highest scores on function words (" is", " the", " of": 69% of the first firings on Qwen2.5-Coder-0.5B in
//!   `docs/results/matched-budgets-hotpotqa-qwen/`), where RIND and ETC fire on content words.
//!
//! The running mean is over the scores of the tokens the answer currently keeps: a score is computed when its
//! token is first judged and kept while the token is, so tokens re-fed after a retrieval keep the score they
//! had when generated (not re-scored under the new context: that would cost one detector pass per kept token
//! per step for no documented benefit). Tokens before `new_from` that this trigger never judged are scored on
//! first sight.
//!
//! Contract: the decoder must capture `hidden_final` / `hidden_mean` for every token; for a token without the
//! states the detector needs, `judge` returns an error saying so.

use anyhow::Context;

use crate::detector::mlp::{log_odds, sigmoid};
use crate::detector::Detector;
use crate::text::words::{self, is_content_word};
use crate::trigger::{Decision, GenView, Judgement, Lookahead, Trigger};

/// When the detector's scores trigger retrieval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MlpRule {
    /// Score above the running mean of earlier scores and above 0.5.
    Radio,
    /// Score above a fixed threshold (a probability, compared as log-odds: see the module doc).
    Threshold(f64),
}

impl MlpRule {
    /// Parses `radio`, `threshold` (0.5) or `threshold:0.7`.
    pub fn parse(s: &str) -> anyhow::Result<Self> {
        match s.split_once(':') {
            None if s == "radio" => Ok(MlpRule::Radio),
            None if s == "threshold" => Ok(MlpRule::Threshold(0.5)),
            Some(("threshold", t)) => {
                let t: f64 = t.parse().map_err(|_| anyhow::anyhow!("threshold {t:?} is not a number"))?;
                anyhow::ensure!((0.0..=1.0).contains(&t), "threshold {t} is not a probability");
                Ok(MlpRule::Threshold(t))
            }
            _ => anyhow::bail!("unknown mlp trigger rule {s:?}; expected radio, threshold or threshold:<p>"),
        }
    }
}

/// Which tokens may trigger a retrieval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MlpGate {
    /// Every token (the papers' rule).
    All,
    /// Only the tokens of content words, the word decided when known (see the module doc).
    Content,
}

impl MlpGate {
    /// Parses `all` or `content`.
    pub fn parse(s: &str) -> anyhow::Result<Self> {
        match s {
            "all" => Ok(MlpGate::All),
            "content" => Ok(MlpGate::Content),
            _ => anyhow::bail!("unknown mlp gate {s:?}; expected all or content"),
        }
    }
}

/// The learned trigger.
pub struct MlpTrigger {
    detector: Detector,
    rule: MlpRule,
    gate: MlpGate,
    block: usize,
    /// Retrieve with the question before generating (not RaDIO's: off by default).
    initial: bool,
    /// Score of every kept answer token, by index in `view.tokens`.
    history: Vec<f32>,
    /// Whether the rule flagged each kept token when it was judged (false for tokens scored on first sight).
    flagged: Vec<bool>,
}

impl MlpTrigger {
    /// Judges every token (`Lookahead::Tokens(1)`); every token may trigger.
    pub fn new(detector: Detector, rule: MlpRule) -> Self {
        MlpTrigger {
            detector,
            rule,
            gate: MlpGate::All,
            block: 1,
            initial: false,
            history: Vec::new(),
            flagged: Vec::new(),
        }
    }

    /// Lets only the tokens `gate` admits trigger.
    pub fn with_gate(mut self, gate: MlpGate) -> Self {
        self.gate = gate;
        self
    }

    /// Judges blocks of `n` tokens instead (cheaper loop; the first firing token of a block decides).
    pub fn with_block(mut self, n: usize) -> Self {
        self.block = n.max(1);
        self
    }

    /// Retrieves with the question before generating anything (as FLARE and FL-RAG do).
    pub fn with_initial_retrieval(mut self, initial: bool) -> Self {
        self.initial = initial;
        self
    }

    pub fn detector(&self) -> &Detector {
        &self.detector
    }

    /// From a `[trigger]` table: `detector` (checkpoint directory from `ragtime train detector`, required),
    /// `rule` (`radio` | `threshold` | `threshold:<p>`, default `radio`), `gate` (`all` | `content`), `block`
    /// (tokens judged at once, default 1), `initial_retrieval` (retrieve with the question first; default false).
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
        let gate = MlpGate::parse(&p.choice("gate", &["all", "content"])?)?;
        let block = p.usize("block", Some(1))?;
        let initial = p.bool("initial_retrieval", false)?;
        p.finish()?;
        let detector = Detector::load(&dir).with_context(|| {
            format!(
                "mlp trigger: cannot load detector {dir} (a folder written by `ragtime train detector --out {dir}`; \
                 --detector DIR names another)"
            )
        })?;
        Ok(MlpTrigger::new(detector, rule).with_gate(gate).with_block(block).with_initial_retrieval(initial))
    }

    /// The detector's probability and log-odds for token `j`.
    fn score(&self, view: &GenView, j: usize) -> anyhow::Result<(f32, f32)> {
        let m = self.detector.margin_step(&view.tokens[j]).context("mlp trigger")?;
        Ok((sigmoid(m), m))
    }

    /// Whether the rule flags a token of probability `s` and log-odds `m`.
    fn fires(&self, s: f32, m: f32) -> bool {
        match self.rule {
            MlpRule::Threshold(t) => f64::from(m) > log_odds(t),
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
        self.flagged.clear();
    }

    fn before_generation(&mut self, _question: &str) -> bool {
        self.initial
    }

    fn check_model(&self, model_id: &str, hidden: usize) -> anyhow::Result<()> {
        self.detector.check_model(model_id, hidden)
    }

    fn judge(&mut self, view: &GenView) -> anyhow::Result<Judgement> {
        self.history.truncate(view.new_from);
        self.flagged.truncate(view.new_from);
        while self.history.len() < view.new_from {
            let (s, _) = self.score(view, self.history.len())?;
            self.history.push(s);
            self.flagged.push(false);
        }
        // the words of the view as generated so far (Content only): a word's last one may still grow
        let words = match self.gate {
            MlpGate::All => Vec::new(),
            MlpGate::Content => words::words(view.tokens),
        };
        let mut scores = Vec::with_capacity(view.tokens.len() - view.new_from);
        let mut decision = Decision::Continue;
        for j in view.new_from..view.tokens.len() {
            let (s, m) = self.score(view, j)?;
            scores.push(s);
            let flag = self.fires(s, m);
            self.history.push(s);
            self.flagged.push(flag);
            if decision != Decision::Continue {
                continue;
            }
            match self.gate {
                MlpGate::All if flag => decision = Decision::Retrieve { keep: j, at: j },
                MlpGate::All => {}
                MlpGate::Content => {
                    // the word of token j, up to j: triggers if content and any of its tokens was flagged
                    let w = words::word_of(&words, j).map(|k| &words[k]).context("mlp trigger: token in no word")?;
                    let text: String = view.tokens[w.start()..=j].iter().map(|t| t.text.as_str()).collect();
                    if self.flagged[w.start()..=j].iter().any(|&f| f) && is_content_word(&text) {
                        decision = Decision::Retrieve { keep: w.start(), at: w.start() };
                    }
                }
            }
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
    fn a_threshold_near_one_is_compared_as_log_odds() {
        // margins 2e - 1: e = 10 -> 19, e = 12 -> 23; both probabilities round to 1.0 in f32
        let toks = tokens(&[10.0, 12.0]);
        let d = entropy_detector();
        assert_eq!((d.score_step(&toks[0]).unwrap(), d.score_step(&toks[1]).unwrap()), (1.0, 1.0));
        assert_eq!((d.margin_step(&toks[0]).unwrap(), d.margin_step(&toks[1]).unwrap()), (19.0, 23.0));
        // 1 - 1e-9 is a margin of ln((1 - 1e-9) / 1e-9) = 20.72: between them
        let rule = MlpRule::parse("threshold:0.999999999").unwrap();
        let mut t = MlpTrigger::new(entropy_detector(), rule);
        assert_eq!(first_trigger(&mut t, &toks), Some((1, Decision::Retrieve { keep: 1, at: 1 })));
        // the ends: 1 never fires, 0 fires at once
        let mut never = MlpTrigger::new(entropy_detector(), MlpRule::Threshold(1.0));
        assert_eq!(first_trigger(&mut never, &toks), None);
        let mut always = MlpTrigger::new(entropy_detector(), MlpRule::Threshold(0.0));
        assert_eq!(first_trigger(&mut always, &tokens(&[0.0])), Some((0, Decision::Retrieve { keep: 0, at: 0 })));
    }

    fn words_of(words: &[(&str, f32)]) -> Vec<TokenStep> {
        words
            .iter()
            .enumerate()
            .map(|(i, &(text, e))| TokenStep { pos: 10 + i, text: text.into(), entropy: e, ..Default::default() })
            .collect()
    }

    /// Judges the tokens one at a time, as the loop does with `Lookahead::Tokens(1)`; the first decision that is
    /// not `Continue`, with the index of the token judged when it came.
    fn first_trigger(t: &mut MlpTrigger, toks: &[TokenStep]) -> Option<(usize, Decision)> {
        t.reset();
        (0..toks.len()).find_map(|j| {
            let d = t.judge(&view(&toks[..=j], j)).unwrap().decision;
            (d != Decision::Continue).then_some((j, d))
        })
    }

    #[test]
    fn content_gate_skips_function_words_and_triggers_on_the_whole_word() {
        // scores: " was" 0.8808, " Eif" 0.2689, "fel" 0.8808; threshold 0.8
        let toks = words_of(&[(" was", 1.5), (" Eif", 0.0), ("fel", 1.5)]);
        let mut all = MlpTrigger::new(entropy_detector(), MlpRule::Threshold(0.8));
        assert_eq!(first_trigger(&mut all, &toks), Some((0, Decision::Retrieve { keep: 0, at: 0 })));
        let mut content = MlpTrigger::new(entropy_detector(), MlpRule::Threshold(0.8)).with_gate(MlpGate::Content);
        // " was" is a stop word: held, never triggers; "fel" completes "Eiffel": the whole word is dropped
        assert_eq!(first_trigger(&mut content, &toks), Some((2, Decision::Retrieve { keep: 1, at: 1 })));
        // the reported scores are the ungated ones
        content.reset();
        let j = content.judge(&view(&toks, 0)).unwrap();
        assert!((j.scores[0] - S15).abs() < 1e-6 && (j.scores[1] - S0).abs() < 1e-6, "{:?}", j.scores);
        assert_eq!(j.decision, Decision::Retrieve { keep: 1, at: 1 });
    }

    #[test]
    fn content_gate_holds_a_flag_until_its_word_is_known() {
        let gated = || MlpTrigger::new(entropy_detector(), MlpRule::Threshold(0.8)).with_gate(MlpGate::Content);
        // " the" is flagged (0.8808) while it reads as a stop word; "ater" (0.2689) makes it "theater": triggers
        let toks = words_of(&[(" the", 1.5), ("ater", 0.0)]);
        assert_eq!(first_trigger(&mut gated(), &toks), Some((1, Decision::Retrieve { keep: 0, at: 0 })));
        // the word ends as "the" (" cat" starts another, unflagged): the flag dies with it
        let toks = words_of(&[(" the", 1.5), (" cat", 0.0), (".", 1.5), (" 18", 0.0), ("89", 0.0)]);
        assert_eq!(first_trigger(&mut gated(), &toks), None, "punctuation and unflagged words never trigger");
        // a number is a content word (RIND's test): its flagged first token triggers at once
        let toks = words_of(&[(" in", 0.0), (" 18", 1.5), ("89", 0.0)]);
        assert_eq!(first_trigger(&mut gated(), &toks), Some((1, Decision::Retrieve { keep: 1, at: 1 })));
        // RaDIO's rule under the gate: " is" (0.8808) is flagged but held; " Par" (0.7311) is above 0.5 but below
        // the running mean 0.8808; "isian" (0.8808) is above the mean 0.8060 of the two before it ("Parisian")
        let toks = words_of(&[(" is", 1.5), (" Par", 1.0), ("isian", 1.5)]);
        let mut radio = MlpTrigger::new(entropy_detector(), MlpRule::Radio).with_gate(MlpGate::Content);
        assert_eq!(first_trigger(&mut radio, &toks), Some((2, Decision::Retrieve { keep: 1, at: 1 })));
    }

    #[test]
    fn the_gate_is_read_from_the_config() {
        let dir = tempfile::tempdir().unwrap();
        entropy_detector().save(dir.path()).unwrap();
        let d = dir.path().display().to_string();
        let read = |extra: &str| {
            let config: toml::Value = toml::from_str(&format!("detector = {d:?}\n{extra}")).unwrap();
            MlpTrigger::from_config(&config)
        };
        assert_eq!(read("").unwrap().gate, MlpGate::All);
        assert_eq!(read("gate = \"content\"").unwrap().gate, MlpGate::Content);
        // RaDIO's trigger starts without retrieving; `initial_retrieval` retrieves with the question first
        assert!(!read("").unwrap().before_generation("Q"));
        assert!(read("initial_retrieval = true").unwrap().before_generation("Q"));
        assert!(read("initial_retrieval = 1").is_err(), "not a boolean");
        let msg = format!("{:#}", read("gate = \"words\"").err().expect("not a gate"));
        assert!(msg.contains("gate") && msg.contains("content"), "{msg}");
        assert!(MlpGate::parse("none").is_err());
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
