//! The sub-answer filter of Algorithm 1: does a candidate query's retrieval bring back something that answers
//! (part of) the question?
//!
//! - Questions with supporting paragraphs (HotpotQA, 2Wiki with the official context): a retrieved passage is a
//!   supporting paragraph ([`Example::is_supporting`], title + text after whitespace collapsing), or a passage
//!   contains the answer.
//! - Otherwise (2Wiki dev without context, NQ, TriviaQA): a passage contains the answer or one of its aliases.
//!
//! "Contains" is [`contains_answer`]: the SQuAD-normalised alias occurs in the normalised `title text` as a
//! whole-word sequence. Yes/no/maybe answers never count as contained (any passage has the word "no"); for such
//! questions only a supporting paragraph is a sub-answer.
//!
//! [`malformed_query`] is a quality filter of the dialogues (not in the paper, `drop_malformed_queries`): a query
//! that is a reply rather than a search, or that is about nothing the dialogue has seen.

use std::collections::HashSet;

use crate::eval::metrics::{contains_answer, normalize_answer};
use crate::qa::Example;
use crate::retrieval::Passage;
use crate::text::words::is_stop_word;

/// Why a set of documents counts as holding a sub-answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubAnswer {
    /// A supporting paragraph of the question was retrieved.
    Supporting,
    /// A passage contains the gold answer (or an alias).
    Answer,
}

fn is_yes_no(a: &str) -> bool {
    crate::eval::metrics::CHOICES.contains(&normalize_answer(a).as_str())
}

/// Whether `passage` contains one of the (non yes/no) gold answers.
pub fn passage_has_answer(passage: &Passage, answers: &[String]) -> bool {
    let golds: Vec<String> = answers.iter().filter(|a| !is_yes_no(a)).cloned().collect();
    !golds.is_empty() && contains_answer(&format!("{} {}", passage.title, passage.text), &golds) > 0.0
}

/// The first reason (supporting paragraph before answer string) why `docs` hold a sub-answer of `ex`, if any.
pub fn sub_answer(ex: &Example, docs: &[Passage]) -> Option<SubAnswer> {
    if !ex.supporting.is_empty() && docs.iter().any(|p| ex.is_supporting(&p.title, &p.text)) {
        return Some(SubAnswer::Supporting);
    }
    docs.iter().any(|p| passage_has_answer(p, &ex.answers)).then_some(SubAnswer::Answer)
}

/// Index of the first of the candidates `allowed` (indices into `candidates`, in order) whose documents hold a
/// sub-answer.
pub fn first_with_sub_answer(
    ex: &Example,
    candidates: &[Vec<Passage>],
    allowed: &[usize],
) -> Option<(usize, SubAnswer)> {
    allowed.iter().find_map(|&i| sub_answer(ex, &candidates[i]).map(|s| (i, s)))
}

/// The candidate queries a dialogue may take: those that are searches (not [`malformed_query`] against `known`),
/// in order, or all of them when none is.
pub fn well_formed(queries: &[String], known: &HashSet<String>) -> Vec<usize> {
    let ok: Vec<usize> = (0..queries.len()).filter(|&i| !malformed_query(&queries[i], known)).collect();
    if ok.is_empty() {
        (0..queries.len()).collect()
    } else {
        ok
    }
}

/// Whether a final answer matches the gold: exact match after SQuAD normalisation, or the answer has at most
/// `max_words` words and contains a (non yes/no) gold alias as a whole-word sequence ("Reese Witherspoon, the
/// actress" for "Reese Witherspoon"). Yes/no golds need the answer's yes/no word to agree: its first word when
/// `yes_no_first_word` (so "There is no information on X" is no "no"), else its first yes/no word anywhere (the
/// evaluation's mapping, [`crate::eval::metrics::yes_no_label`]).
pub fn answer_matches(answer: &str, golds: &[String], max_words: usize, yes_no_first_word: bool) -> bool {
    if crate::eval::metrics::exact_match(answer, golds) > 0.0 {
        return true;
    }
    if golds.iter().any(|g| is_yes_no(g)) {
        let label = if yes_no_first_word {
            let norm = normalize_answer(answer);
            let first = norm.split_whitespace().next().unwrap_or("");
            crate::eval::metrics::yes_no_label(first, true)
        } else {
            crate::eval::metrics::yes_no_label(answer, true)
        };
        return label.is_some_and(|l| golds.iter().any(|g| normalize_answer(g) == l));
    }
    let words = normalize_answer(answer).split_whitespace().count();
    words <= max_words && contains_answer(answer, golds) > 0.0
}

/// The content words of `text`: lowercase alphanumeric runs of 3 characters or more, not stop words
/// ([`is_stop_word`], spaCy's list), a final "s" dropped (so "genes" meets "gene"). What a dialogue has seen is
/// the content words of its question and of every passage shown so far.
pub fn content_words(text: &str) -> HashSet<String> {
    text.to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 3 && !is_stop_word(w))
        .map(|w| w.strip_suffix('s').filter(|s| s.chars().count() >= 3).unwrap_or(w).to_string())
        .collect()
}

/// Whether a chosen query is not a search: empty of content words; opening as a reply does ("Based on the
/// information provided...", "I'm sorry, ...", "To answer ..."); or sharing no content word with `known`, the
/// [`content_words`] of the question and of every passage shown so far — a query copied from the exemplars'
/// questions, for one. A later hop's query may name what a passage brought up: that counts as known.
pub fn malformed_query(query: &str, known: &HashSet<String>) -> bool {
    let lower = query.trim().to_lowercase();
    const REPLIES: &[&str] = &[
        "based on",
        "according to the",
        "i'm sorry",
        "i am sorry",
        "i apologi",
        "i cannot",
        "i can't",
        "i don't",
        "i do not",
        "unfortunately",
        "as an ai",
        "to answer",
        "to determine",
        "the retrieved",
        "the provided",
        "there is no",
        "sorry",
    ];
    if REPLIES.iter().any(|r| lower.starts_with(r)) {
        return true;
    }
    let words = content_words(query);
    words.is_empty() || words.is_disjoint(known)
}

#[cfg(test)]
mod tests {
    /// What a dialogue knows after showing the passages `seen`.
    fn known(question: &str, seen: &[&str]) -> HashSet<String> {
        let mut k = content_words(question);
        seen.iter().for_each(|t| k.extend(content_words(t)));
        k
    }

    #[test]
    fn malformed_queries_by_hand() {
        let q = "Which gene controls the consistency of cerumen (ear wax)?";
        // queries about the question, in its words or a passage's
        assert!(!malformed_query("Gene controlling the consistency of cerumen", &known(q, &[])));
        assert!(!malformed_query("ear-wax genes", &known(q, &[])));
        assert!(!malformed_query("ABCC11 function", &known(q, &["ABCC11 determines wet or dry earwax."])));
        // a reply, not a search
        assert!(malformed_query("Based on the information provided, there is no answer.", &known(q, &[])));
        assert!(malformed_query("I'm sorry, but I can't assist with that.", &known(q, &[])));
        assert!(malformed_query("  To determine the gene, search for cerumen", &known(q, &[])));
        // copied from an exemplar: nothing the dialogue has seen
        assert!(malformed_query("Who is the director of film The Sensational Trial?", &known(q, &[])));
        assert!(malformed_query("ABCC11 function", &known(q, &[])));
        // no content words at all
        assert!(malformed_query("What is it?", &known(q, &[])));
        assert!(malformed_query("", &known(q, &[])));
    }

    /// A malformed candidate is passed over while a search exists, even when its retrieval holds the answer.
    #[test]
    fn malformed_candidates_are_passed_over() {
        let e = Example { question: "Which gene controls cerumen?".into(), ..ex(&["ABCC11"], &[]) };
        let queries: Vec<String> =
            ["I'm sorry, I cannot help", "director of film Hypocrite", "cerumen gene", "gene for cerumen type"]
                .map(String::from)
                .to_vec();
        let allowed = well_formed(&queries, &known(&e.question, &[]));
        assert_eq!(allowed, vec![2, 3]);
        let cands =
            vec![vec![p("A", "ABCC11")], vec![p("B", "ABCC11")], vec![p("C", "nothing")], vec![p("D", "ABCC11 SNP")]];
        assert_eq!(first_with_sub_answer(&e, &cands, &[0, 1, 2, 3]), Some((0, SubAnswer::Answer)));
        assert_eq!(first_with_sub_answer(&e, &cands, &allowed), Some((3, SubAnswer::Answer)));
        // none is a search: all may be taken
        assert_eq!(well_formed(&queries[..2], &known(&e.question, &[])), vec![0, 1]);
    }

    use super::*;
    use crate::qa::{AnswerKind, Doc};

    fn p(title: &str, text: &str) -> Passage {
        Passage { id: title.into(), title: title.into(), text: text.into(), score: 0.0 }
    }

    fn ex(answers: &[&str], supporting: &[(&str, &str)]) -> Example {
        Example {
            id: "q".into(),
            question: "?".into(),
            answers: answers.iter().map(|s| s.to_string()).collect(),
            kind: AnswerKind::Span,
            supporting: supporting.iter().map(|(t, x)| Doc { title: t.to_string(), text: x.to_string() }).collect(),
            contexts: vec![],
            entries: vec![],
        }
    }

    #[test]
    fn supporting_paragraph_or_answer_string() {
        let e = ex(&["Chief of Protocol"], &[("Shirley Temple", "Shirley  Temple was an actress.")]);
        // supporting paragraph (whitespace collapsed) without the answer
        assert_eq!(
            sub_answer(&e, &[p("Other", "x"), p("Shirley Temple", "Shirley Temple was an actress.")]),
            Some(SubAnswer::Supporting)
        );
        // same title, different text: not supporting, and no answer
        assert_eq!(sub_answer(&e, &[p("Shirley Temple", "She was born in 1928.")]), None);
        // answer string, case and punctuation normalised
        assert_eq!(sub_answer(&e, &[p("US", "She served as chief of protocol.")]), Some(SubAnswer::Answer));
        // not as a whole word sequence
        assert_eq!(sub_answer(&e, &[p("US", "the chief of protocols office")]), None);
    }

    #[test]
    fn aliases_and_yes_no() {
        let e = ex(&["JFK", "John F. Kennedy"], &[]);
        assert_eq!(sub_answer(&e, &[p("Dallas", "John F Kennedy was shot.")]), Some(SubAnswer::Answer));
        assert_eq!(sub_answer(&e, &[p("JFK airport", "an airport")]), Some(SubAnswer::Answer)); // title counts
        let yn = ex(&["no"], &[]);
        assert_eq!(sub_answer(&yn, &[p("X", "There is no such thing.")]), None);
        let cands = vec![vec![p("A", "nothing")], vec![p("B", "Kennedy")], vec![p("C", "JFK")], vec![p("D", "JFK")]];
        assert_eq!(first_with_sub_answer(&e, &cands, &[0, 1, 2, 3]), Some((2, SubAnswer::Answer)));
        assert_eq!(first_with_sub_answer(&e, &cands[..2], &[0, 1]), None);
    }

    #[test]
    fn final_answer_match() {
        let g = vec!["Reese Witherspoon".to_string()];
        for first in [true, false] {
            assert!(answer_matches("reese witherspoon.", &g, 10, first));
            assert!(answer_matches("The actress Reese Witherspoon", &g, 10, first));
            // 6 normalised words > 5
            assert!(!answer_matches("it was played by reese witherspoon", &g, 5, first));
            assert!(!answer_matches("Witherspoon", &g, 10, first));
            let yn = vec!["no".to_string()];
            assert!(answer_matches("No, they do not.", &yn, 10, first));
            assert!(!answer_matches("Yes, not the same", &yn, 10, first));
            assert!(!answer_matches("Indian", &yn, 10, first));
        }
        // the first yes/no word anywhere, or the first word only
        let no = vec!["no".to_string()];
        let unsure = "There is no information provided that the research indicates X";
        assert!(answer_matches(unsure, &no, 10, false));
        assert!(!answer_matches(unsure, &no, 10, true));
        assert!(answer_matches("\"No.\" The trial found none", &no, 10, true), "punctuation before it is dropped");
        assert!(!answer_matches("The answer is no", &no, 10, true));
    }
}
