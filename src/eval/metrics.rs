//! Answer scoring: SQuAD-normalised exact match and token F1/precision/recall (max over gold aliases, with
//! HotpotQA's yes/no rule), accuracy for yes/no(/maybe) questions, BioASQ's list measures for list questions
//! ([`super::list_answers`]), and a containment score.
//!
//! Normalisation is SQuAD's `normalize_answer`: lower-case, drop ASCII punctuation (Python's
//! `string.punctuation`), replace the whole words a/an/the by a space, collapse whitespace.
//!
//! F1, precision and recall are each the maximum over the aliases, taken independently (as DRAGIN's evaluation
//! and the MRQA/TriviaQA scripts do), so precision and recall may come from different aliases.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

pub use super::list_answers::list_scores;
use crate::qa::{AnswerKind, Example};

/// SQuAD's answer normalisation.
pub fn normalize_answer(s: &str) -> String {
    let lower = s.to_lowercase();
    let no_punct: String = lower.chars().filter(|c| !c.is_ascii_punctuation()).collect();
    // Remove articles as whole words (`\b(a|an|the)\b`, where word characters are alphanumerics and '_').
    let mut out = String::with_capacity(no_punct.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if matches!(word.as_str(), "a" | "an" | "the") {
            out.push(' ');
        } else {
            out.push_str(word);
        }
        word.clear();
    };
    for c in no_punct.chars() {
        if c.is_alphanumeric() || c == '_' {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// 1.0 when the normalised prediction equals some normalised gold answer.
pub fn exact_match(prediction: &str, golds: &[String]) -> f64 {
    let p = normalize_answer(prediction);
    if golds.iter().any(|g| normalize_answer(g) == p) {
        1.0
    } else {
        0.0
    }
}

/// Token-overlap scores of one prediction.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Overlap {
    pub f1: f64,
    pub precision: f64,
    pub recall: f64,
}

/// Token F1/precision/recall against one gold answer, with HotpotQA's rule: when the normalised prediction or
/// gold is "yes", "no" or "noanswer" and the two differ, everything is 0.
pub fn overlap_one(prediction: &str, gold: &str) -> Overlap {
    let p = normalize_answer(prediction);
    let g = normalize_answer(gold);
    let special = |s: &str| matches!(s, "yes" | "no" | "noanswer");
    if (special(&p) || special(&g)) && p != g {
        return Overlap::default();
    }
    let pt: Vec<&str> = p.split_whitespace().collect();
    let gt: Vec<&str> = g.split_whitespace().collect();
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for t in &gt {
        *counts.entry(t).or_default() += 1;
    }
    let mut same = 0usize;
    for t in &pt {
        if let Some(c) = counts.get_mut(t) {
            if *c > 0 {
                *c -= 1;
                same += 1;
            }
        }
    }
    if same == 0 {
        return Overlap::default();
    }
    let precision = same as f64 / pt.len() as f64;
    let recall = same as f64 / gt.len() as f64;
    Overlap { f1: 2.0 * precision * recall / (precision + recall), precision, recall }
}

/// [`overlap_one`] maximised over the aliases, each component independently.
pub fn overlap(prediction: &str, golds: &[String]) -> Overlap {
    golds.iter().map(|g| overlap_one(prediction, g)).fold(Overlap::default(), |a, b| Overlap {
        f1: a.f1.max(b.f1),
        precision: a.precision.max(b.precision),
        recall: a.recall.max(b.recall),
    })
}

/// 1.0 when some normalised gold answer occurs in the normalised prediction as a whole-word sequence (the
/// "accuracy" of PopQA/TriviaQA in Self-RAG and CtrlA).
pub fn contains_answer(prediction: &str, golds: &[String]) -> f64 {
    let p = format!(" {} ", normalize_answer(prediction));
    let hit = golds.iter().map(|g| normalize_answer(g)).any(|g| !g.is_empty() && p.contains(&format!(" {g} ")));
    if hit {
        1.0
    } else {
        0.0
    }
}

/// The choices of a yes/no/maybe question, in the order reports list them.
pub const CHOICES: [&str; 3] = ["yes", "no", "maybe"];

/// Maps an answer text to "yes", "no" or (with `allow_maybe`) "maybe": the first normalised word that is one of
/// them and picks it. A list of the choices is no pick, and is passed over: a choice followed by "or" and another
/// choice ("yes or no"), or by another choice and "or" ("yes, no, or maybe"), up to its last choice not named
/// before in it; a model told the choices may echo them before, or instead of, answering, and read as a pick the
/// echo would score on every question whose gold is its first word. `None` when no pick is left.
///
/// Deviation: DRAGIN's StrategyQA evaluation maps every answer not starting with "yes" to "no", which scores an
/// empty or off-topic answer as correct whenever the gold is "no"; here such answers are wrong.
pub fn yes_no_label(answer: &str, allow_maybe: bool) -> Option<&'static str> {
    let norm = normalize_answer(answer);
    let words: Vec<&str> = norm.split_whitespace().collect();
    let choice = |i: usize| words.get(i).and_then(|w| CHOICES.iter().find(|c| *c == w)).copied();
    let or = |i: usize| words.get(i) == Some(&"or");
    let mut i = 0;
    while i < words.len() {
        let Some(c) = choice(i) else {
            i += 1;
            continue;
        };
        let other = |j: usize| choice(j).is_some_and(|d| d != c);
        if (or(i + 1) && other(i + 2)) || (other(i + 1) && or(i + 2)) {
            // a list of the choices: skip to its end, the last choice not named before in it
            let mut named = vec![c];
            i += 1;
            loop {
                let j = if or(i) { i + 1 } else { i };
                match choice(j) {
                    Some(d) if !named.contains(&d) => {
                        named.push(d);
                        i = j + 1;
                    }
                    _ => break,
                }
            }
            continue;
        }
        if allow_maybe || c != "maybe" {
            return Some(c);
        }
        i += 1;
    }
    None
}

/// Everything scored for one question.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Scores {
    pub em: f64,
    pub f1: f64,
    pub precision: f64,
    pub recall: f64,
    /// Yes/no(/maybe) questions only: the mapped label equals the gold label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accuracy: Option<f64>,
    /// Some gold alias occurs in the prediction.
    #[serde(default)]
    pub contains: f64,
}

/// Scores `prediction` (the extracted answer, not the whole generation) for `example`: [`score`], with the list
/// entries' synonyms for [`AnswerKind::List`].
pub fn score_example(example: &Example, prediction: &str) -> Scores {
    match example.kind {
        AnswerKind::List if !example.entries.is_empty() => list_scores(prediction, &example.entries),
        kind => score(kind, prediction, &example.answers),
    }
}

/// Scores `prediction` (the extracted answer, not the whole generation) against `golds`.
///
/// For [`AnswerKind::YesNo`]/[`AnswerKind::YesNoMaybe`] the prediction is first mapped with [`yes_no_label`]
/// (as DRAGIN maps StrategyQA answers before EM); EM, F1, precision, recall and accuracy are then all 1 or 0.
/// For [`AnswerKind::List`] each gold is one entry without synonyms ([`list_scores`]; [`score_example`] passes
/// the synonyms).
pub fn score(kind: AnswerKind, prediction: &str, golds: &[String]) -> Scores {
    match kind {
        AnswerKind::List => {
            let entries: Vec<Vec<String>> = golds.iter().map(|g| vec![g.clone()]).collect();
            list_scores(prediction, &entries)
        }
        AnswerKind::Span => {
            let o = overlap(prediction, golds);
            Scores {
                em: exact_match(prediction, golds),
                f1: o.f1,
                precision: o.precision,
                recall: o.recall,
                accuracy: None,
                contains: contains_answer(prediction, golds),
            }
        }
        AnswerKind::YesNo | AnswerKind::YesNoMaybe => {
            let label = yes_no_label(prediction, kind == AnswerKind::YesNoMaybe);
            let right = label.is_some_and(|l| golds.iter().any(|g| yes_no_label(g, true) == Some(l)));
            let v = if right { 1.0 } else { 0.0 };
            Scores { em: v, f1: v, precision: v, recall: v, accuracy: Some(v), contains: v }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(xs: &[&str]) -> Vec<String> {
        xs.iter().map(|s| s.to_string()).collect()
    }

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-12, "{a} != {b}");
    }

    #[test]
    fn normalisation_follows_squad() {
        assert_eq!(normalize_answer("The  Phantom Hour."), "phantom hour");
        assert_eq!(normalize_answer("An apple, a day!"), "apple day");
        // Articles only as whole words; punctuation is removed before, so "the-end" becomes "theend".
        assert_eq!(normalize_answer("Theatre of the-end"), "theatre of theend");
        assert_eq!(normalize_answer("15,140"), "15140");
        assert_eq!(normalize_answer("Małgorzata BRAUNEK"), "małgorzata braunek");
        assert_eq!(normalize_answer("  "), "");
    }

    #[test]
    fn exact_match_over_aliases() {
        let golds = g(&["Mask of Fu Manchu", "The Mask of Fu Manchu"]);
        assert_eq!(exact_match("the mask of fu manchu.", &golds), 1.0);
        assert_eq!(exact_match("Mask of Fu", &golds), 0.0);
        assert_eq!(exact_match("Missoula", &g(&["Missoula", "Missoula, Montana"])), 1.0);
    }

    #[test]
    fn f1_hand_computed() {
        // pred "Walls and Bridges album" -> [walls, and, bridges, album]; gold "Walls and Bridges" -> 3 tokens.
        // common = 3, P = 3/4, R = 3/3, F1 = 2*0.75*1/(1.75) = 6/7.
        let o = overlap("Walls and Bridges album", &g(&["Walls and Bridges"]));
        close(o.precision, 0.75);
        close(o.recall, 1.0);
        close(o.f1, 6.0 / 7.0);
        // Repeated tokens count once per occurrence: pred "the cat cat" -> [cat, cat]; gold "cat sat" -> [cat, sat].
        // common = 1, P = 1/2, R = 1/2, F1 = 1/2.
        let o = overlap("the cat cat", &g(&["cat sat"]));
        close(o.f1, 0.5);
        assert_eq!(overlap("dog", &g(&["cat"])), Overlap::default());
    }

    #[test]
    fn f1_max_over_aliases_componentwise() {
        // pred "Missoula Montana USA" (3 tokens).
        // alias "Missoula": common 1, P = 1/3, R = 1, F1 = 2*(1/3)/(4/3) = 1/2.
        // alias "Missoula, Montana": common 2, P = 2/3, R = 1, F1 = 2*(2/3)/(5/3) = 4/5.
        // alias "Montana USA Canada Mexico": common 2, P = 2/3, R = 2/4, F1 = 2*(1/3)/(7/6) = 4/7.
        let o = overlap("Missoula Montana USA", &g(&["Missoula", "Missoula, Montana", "Montana USA Canada Mexico"]));
        close(o.f1, 0.8);
        close(o.precision, 2.0 / 3.0);
        close(o.recall, 1.0);
    }

    #[test]
    fn hotpot_yes_no_rule() {
        // "no" vs gold "no way": plain token F1 would be 2/3, the rule makes it 0.
        assert_eq!(overlap_one("no", "no way"), Overlap::default());
        assert_eq!(overlap_one("yes it is", "yes"), Overlap::default());
        close(overlap_one("Yes.", "yes").f1, 1.0);
        // "noanswer" is special too.
        assert_eq!(overlap_one("noanswer", "no answer"), Overlap::default());
        let s = score(AnswerKind::Span, "no", &g(&["yes"]));
        assert_eq!((s.em, s.f1), (0.0, 0.0));
    }

    #[test]
    fn yes_no_accuracy() {
        assert_eq!(yes_no_label("Yes, because frost happens in December.", false), Some("yes"));
        assert_eq!(yes_no_label("probably no", false), Some("no"));
        assert_eq!(yes_no_label("maybe", false), None);
        assert_eq!(yes_no_label("Maybe.", true), Some("maybe"));
        // the choices listed back are no pick, whether or not an answer follows them
        assert_eq!(yes_no_label("yes, no, or maybe, let's analyze the question step by step:", true), None);
        assert_eq!(yes_no_label("\"Yes or no?\" The study says no.", false), Some("no"), "the pick after the list");
        assert_eq!(yes_no_label("yes or maybe", false), None, "maybe lists a choice though it is none here");
        assert_eq!(
            yes_no_label("Yes or no? No, it is not.", false),
            Some("no"),
            "the list ends where a choice repeats"
        );
        // a pick with a later yes/no/maybe in it is still a pick
        assert_eq!(yes_no_label("Yes, there is no need for it", false), Some("yes"));
        assert_eq!(yes_no_label("No, maybe not", true), Some("no"));
        assert_eq!(yes_no_label("yes or yes", false), Some("yes"), "one choice repeated");
        assert_eq!(yes_no_label("Maybe. No, it does not", false), Some("no"), "maybe is no pick on a yes/no question");
        let s = score(AnswerKind::YesNoMaybe, "yes, no, or maybe", &g(&["yes"]));
        assert_eq!(s.accuracy, Some(0.0), "listing the choices scores on no gold");
        let s = score(AnswerKind::YesNo, "No.", &g(&["no"]));
        assert_eq!((s.accuracy, s.em, s.f1), (Some(1.0), 1.0, 1.0));
        let s = score(AnswerKind::YesNo, "", &g(&["no"]));
        assert_eq!(s.accuracy, Some(0.0), "an empty answer is not a 'no'");
        let s = score(AnswerKind::YesNoMaybe, "maybe", &g(&["maybe"]));
        assert_eq!(s.accuracy, Some(1.0));
        let s = score(AnswerKind::YesNo, "maybe", &g(&["maybe"]));
        assert_eq!(s.accuracy, Some(0.0), "maybe is not an answer to a yes/no question");
    }

    #[test]
    fn containment() {
        assert_eq!(contains_answer("He was Yuri Gagarin, a cosmonaut", &g(&["yuri gagarin"])), 1.0);
        assert_eq!(contains_answer("Gagarinsky", &g(&["Gagarin"])), 0.0, "whole words only");
        assert_eq!(score(AnswerKind::Span, "in 1988 I think", &g(&["1988"])).contains, 1.0);
    }
}
