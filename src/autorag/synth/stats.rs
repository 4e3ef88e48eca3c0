//! Yield statistics of a synthesis run (stats.json, and the progress line).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Attempt;

/// Yield statistics (stats.json).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Stats {
    pub tried: usize,
    /// Questions with a kept dialogue.
    pub kept: usize,
    /// Dialogues kept (more than `kept` when several samples of a question are kept, [`super::SynthConfig::keep`]).
    #[serde(default)]
    pub dialogues: usize,
    /// Attempts whose final answer matched the gold (kept, or dropped by a quality filter).
    #[serde(default)]
    pub correct: usize,
    /// kept / tried (0 when nothing was tried).
    pub yield_rate: f64,
    /// Attempts per reason (`kept`, `wrong_answer`, ...).
    pub reasons: BTreeMap<String, usize>,
    /// Iterations (queries) of kept dialogues: count per number of iterations.
    pub iterations_kept: BTreeMap<usize, usize>,
    /// Iterations of all attempts.
    pub iterations_tried: BTreeMap<usize, usize>,
    /// Share of issued queries whose chosen candidate held a sub-answer (0 when no query).
    pub sub_answer_rate: f64,
    /// Share of attempts whose answer was forced.
    pub forced_rate: f64,
    pub seconds_per_question: f64,
    /// What a question costs the model, over all its samples: tokens generated, and tokens run forward (prompts
    /// past the cached prefixes, plus the generated ones; 0 when the attempts predate the count).
    #[serde(default)]
    pub generated_tokens_per_question: f64,
    #[serde(default)]
    pub forward_tokens_per_question: f64,
    /// Rejection sampling: samples tried over all questions, and kept dialogues per sample index (0: the first
    /// sample) — the yield each further sample adds.
    #[serde(default)]
    pub samples_tried: usize,
    #[serde(default)]
    pub kept_by_sample: BTreeMap<usize, usize>,
    /// Why the samples that rejection sampling dropped before the recorded one were dropped: count per reason.
    #[serde(default)]
    pub rejected_reasons: BTreeMap<String, usize>,
}

impl Stats {
    /// Statistics of a set of attempts.
    pub fn of(attempts: &[Attempt]) -> Stats {
        let mut s = Stats { tried: attempts.len(), ..Default::default() };
        let (mut queries, mut hits, mut forced, mut secs) = (0usize, 0usize, 0usize, 0f64);
        let (mut generated, mut forward) = (0usize, 0usize);
        for a in attempts {
            *s.reasons.entry(a.reason.clone()).or_default() += 1;
            *s.iterations_tried.entry(a.iterations).or_default() += 1;
            if a.kept {
                s.kept += 1;
                *s.iterations_kept.entry(a.iterations).or_default() += 1;
            }
            for k in a.kept_sample_indices() {
                *s.kept_by_sample.entry(k).or_default() += 1;
                s.dialogues += 1;
            }
            s.samples_tried += a.samples;
            for r in &a.rejected {
                *s.rejected_reasons.entry(r.clone()).or_default() += 1;
            }
            queries += a.sub_answers.len();
            hits += a.sub_answers.iter().filter(|x| x.is_some()).count();
            forced += a.forced_answer as usize;
            s.correct += a.answer_correct as usize;
            secs += a.seconds;
            generated += a.generated_tokens;
            forward += a.forward_tokens;
        }
        let div = |a: f64, b: usize| if b == 0 { 0.0 } else { a / b as f64 };
        s.yield_rate = div(s.kept as f64, s.tried);
        s.sub_answer_rate = div(hits as f64, queries);
        s.forced_rate = div(forced as f64, s.tried);
        s.seconds_per_question = div(secs, s.tried);
        s.generated_tokens_per_question = div(generated as f64, s.tried);
        s.forward_tokens_per_question = div(forward as f64, s.tried);
        s
    }

    /// One progress line: `[12/250] kept 3 (25.0%), correct 4 | iterations of kept {1: 2, 2: 1} | ...`, with
    /// `kept 3 (25.0%, 5 dialogues)` when questions gave several.
    pub fn line(&self, total: usize) -> String {
        let several =
            if self.dialogues > self.kept { format!(", {} dialogues", self.dialogues) } else { String::new() };
        format!(
            "[{}/{}] kept {} ({:.1}%{several}), correct {} | iterations of kept {:?} | sub-answer {:.1}% | {:.1} s/q",
            self.tried,
            total,
            self.kept,
            100.0 * self.yield_rate,
            self.correct,
            self.iterations_kept,
            100.0 * self.sub_answer_rate,
            self.seconds_per_question
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autorag::filter::SubAnswer;
    use crate::autorag::synth::fixtures::attempt;

    #[test]
    fn stats_yield_and_histograms() {
        let a = vec![
            attempt("1", true, 1, vec![Some(SubAnswer::Supporting)]),
            attempt("2", false, 2, vec![None, Some(SubAnswer::Answer)]),
            attempt("3", true, 2, vec![None, None]),
            attempt("4", false, 0, vec![]),
        ];
        let s = Stats::of(&a);
        assert_eq!((s.tried, s.kept, s.correct), (4, 2, 3));
        assert!((s.yield_rate - 0.5).abs() < 1e-12);
        // 2 of 5 queries had a sub-answer
        assert!((s.sub_answer_rate - 0.4).abs() < 1e-12);
        assert_eq!(s.iterations_kept, BTreeMap::from([(1, 1), (2, 1)]));
        assert_eq!(s.iterations_tried, BTreeMap::from([(0, 1), (1, 1), (2, 2)]));
        assert_eq!(s.reasons, BTreeMap::from([("kept".to_string(), 2), ("wrong_answer".to_string(), 2)]));
        assert!((s.forced_rate - 0.5).abs() < 1e-12);
        assert_eq!(Stats::of(&[]).yield_rate, 0.0);
        // cost per question: 10 generated tokens each (the fixture); forward tokens 0 (not counted) on three,
        // 400 on one -> 100 per question
        assert_eq!((s.generated_tokens_per_question, s.forward_tokens_per_question), (10.0, 0.0));
        let mut b = a.clone();
        b[1].forward_tokens = 400;
        assert_eq!(Stats::of(&b).forward_tokens_per_question, 100.0);
        // rejection sampling: question 3 kept at its third sample, question 4 given up after three
        let mut a = a;
        (a[2].sample, a[2].samples, a[3].sample, a[3].samples) = (2, 3, 2, 3);
        a[2].rejected = vec!["wrong_answer".into(), "no_answer".into()];
        a[3].rejected = vec!["wrong_answer".into(), "wrong_answer".into()];
        let s = Stats::of(&a);
        assert_eq!(s.samples_tried, 1 + 1 + 3 + 3);
        assert_eq!(s.kept_by_sample, BTreeMap::from([(0, 1), (2, 1)]));
        let want = BTreeMap::from([("no_answer".to_string(), 1), ("wrong_answer".to_string(), 3)]);
        assert_eq!(s.rejected_reasons, want);
        assert_eq!(s.dialogues, 2);
        // several kept samples of question 1 (samples 0 and 3 of 4): two dialogues, one kept question more
        (a[0].samples, a[0].kept_samples) = (4, vec![0, 3]);
        a[0].rejected = vec!["wrong_answer".into(), "duplicate_dialogue".into()];
        let s = Stats::of(&a);
        assert_eq!((s.tried, s.kept, s.dialogues, s.samples_tried), (4, 2, 3, 4 + 1 + 3 + 3));
        assert_eq!(s.kept_by_sample, BTreeMap::from([(0, 1), (2, 1), (3, 1)]));
        assert_eq!(s.rejected_reasons.get("duplicate_dialogue"), Some(&1));
        assert!(s.line(10).contains("kept 2 (50.0%, 3 dialogues)"), "{}", s.line(10));
    }
}
