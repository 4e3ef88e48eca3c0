//! The stop rule of Algorithm 1: does the reasoning R_t still express an information need?
//!
//! The paper stops iterating when the model's reasoning no longer asks for information; its exemplars phrase a
//! need as "However, there is no information about ...", "we need to refine our query and search again", "we need
//! to find ...". [`needs_more_information`] looks for such cues as whole words or phrases, case-insensitively:
//! see [`NEED_CUES`]. A reasoning that already gives a final answer never needs more.
//!
//! This is a heuristic chosen here (the paper gives no rule beyond "no further information need"): a reasoning
//! like "X is Y, so we do not need to find more" would count as a need ("find"). Both kinds of error only cost
//! yield (a dialogue stops early and answers wrong, or iterates to T), not correctness of kept dialogues, which
//! must still end with the gold answer.

use regex::Regex;

/// Phrases that express an information need (matched as whole words, case-insensitively).
pub const NEED_CUES: [&str; 14] = [
    "however",
    "no information",
    "not mentioned",
    "not provide",
    "does not provide",
    "doesn't provide",
    "not enough information",
    "insufficient",
    "find",
    "refine",
    "search again",
    "need to know",
    "need more information",
    "unknown",
];

fn cue_re() -> &'static Regex {
    static RE: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| {
        let alts: Vec<String> = NEED_CUES.iter().map(|c| regex::escape(c).replace(' ', r"\s+")).collect();
        Regex::new(&format!(r"(?i)\b(?:{})\b", alts.join("|"))).unwrap()
    })
}

/// The first information-need cue in `reasoning`, if any.
pub fn need_cue(reasoning: &str) -> Option<&str> {
    cue_re().find(reasoning).map(|m| m.as_str())
}

/// Whether `reasoning` (R_t, without its query or final answer) still asks for information.
pub fn needs_more_information(reasoning: &str) -> bool {
    need_cue(reasoning).is_some()
}

/// What to do after a model turn in synthesis.
#[derive(Debug, Clone, PartialEq)]
pub enum StopDecision {
    /// The turn gave a final answer: stop with it.
    Answer(String),
    /// No information need left (or the model wrote no query): stop and ask for the final answer.
    Finish,
    /// An information need and a query: retrieve again.
    Continue,
}

/// The stop rule: a final answer stops; otherwise an information need with a query continues; anything else
/// (no need expressed, or a need without a query the loop could follow) finishes.
pub fn decide(reasoning: &str, query: Option<&str>, answer: Option<&str>) -> StopDecision {
    if let Some(a) = answer {
        return StopDecision::Answer(a.to_string());
    }
    if needs_more_information(reasoning) && query.is_some_and(|q| !q.trim().is_empty()) {
        StopDecision::Continue
    } else {
        StopDecision::Finish
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exemplar_reasonings() {
        // from the 2Wiki exemplars
        assert!(needs_more_information("Based on the Retrieved Document_1, the director of film Coolie No. 1 (1995 Film) is David Dhawan. However, there is no information about the nationality of David Dhawan in this document."));
        assert!(needs_more_information("Based on the Retrieved Document_3, there is no\ninformation about the director of film The Sensational Trial. We need to refine our query and search again."));
        assert!(needs_more_information("To answer the question, we need to find Karl Freund's nationality."));
        assert!(!needs_more_information("Based on the Retrieved Document_2, Miguel Morayta died on 19 June 2013. Therefore, the director of film Hypocrite (Film) died on 19 June 2013."));
        assert!(!needs_more_information("Based on the Retrieved Document_6, Karl Freund was a German Jewish cinematographer. Comparing the nationalities, they differ."));
        assert_eq!(need_cue("HOWEVER, x"), Some("HOWEVER"));
        // whole words only: "findings", "refined", "Dunfind" are not cues
        assert!(!needs_more_information("The findings were refined in Dunfind."));
    }

    #[test]
    fn decisions() {
        assert_eq!(decide("However, no information.", Some("q"), Some("Paris")), StopDecision::Answer("Paris".into()));
        assert_eq!(decide("However, no information.", Some("q"), None), StopDecision::Continue);
        assert_eq!(decide("However, no information.", None, None), StopDecision::Finish);
        assert_eq!(decide("However, no information.", Some("  "), None), StopDecision::Finish);
        assert_eq!(decide("X is Paris.", Some("q"), None), StopDecision::Finish);
    }
}
