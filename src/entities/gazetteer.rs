//! Rule family 3: a gazetteer, i.e. a list of known names matched verbatim. Built from the titles of a
//! WikiExtractor dump ([`PhraseMatcher::from_titles`]: "Edward III of England", "Atlanta") and reused for
//! WordNet's instance nouns. Matching is aho-corasick (all overlapping matches), case-sensitive, on
//! whole words only (a match must not start or end inside a word), then leftmost-longest selection.

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};

use super::{to_entities, EntityExtractor, EntityLabel, Span};

/// Case-sensitive whole-word matcher over a list of phrases.
pub struct PhraseMatcher {
    ac: Option<AhoCorasick>,
    priority: u8,
    len: usize,
}

impl PhraseMatcher {
    /// Phrases shorter than 3 characters or not starting with an upper-case letter or digit are left
    /// out (they would match ordinary words); duplicates are dropped.
    pub fn new<S: AsRef<str>>(phrases: impl IntoIterator<Item = S>, priority: u8) -> Self {
        let mut list: Vec<String> = phrases
            .into_iter()
            .map(|p| p.as_ref().trim().to_string())
            .filter(|p| {
                p.chars().count() >= 3 && p.chars().next().is_some_and(|c| c.is_uppercase() || c.is_ascii_digit())
            })
            .collect();
        list.sort();
        list.dedup();
        let len = list.len();
        let ac = if list.is_empty() {
            None
        } else {
            Some(
                AhoCorasickBuilder::new()
                    .match_kind(MatchKind::Standard)
                    .build(&list)
                    .expect("aho-corasick automaton over gazetteer phrases"),
            )
        };
        PhraseMatcher { ac, priority, len }
    }

    /// Gazetteer of article titles: a trailing disambiguation in parentheses is dropped
    /// ("1st Parachute Battalion (Australia)" gives "1st Parachute Battalion").
    ///
    /// Titles with a lower-case word other than a connector ("Chacma baboon", "Madagascar women's
    /// national football team") are left out: they name topics rather than entities, and their
    /// capitalised part is found by the name rule anyway.
    pub fn from_titles<S: AsRef<str>>(titles: impl IntoIterator<Item = S>) -> Self {
        let names = titles.into_iter().map(|t| strip_disambiguation(t.as_ref()).to_string()).filter(|t| {
            t.split_whitespace()
                .all(|w| !w.chars().next().is_some_and(char::is_lowercase) || super::names::is_connector(w))
        });
        Self::new(names, 8)
    }

    /// Number of phrases in the automaton.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whole-word, leftmost-longest matches (byte offsets). All matches are found (overlapping), those
    /// that cut a word are rejected, then the leftmost-longest non-overlapping ones are kept, so a
    /// shorter phrase still matches where a longer one would cut a word.
    pub(crate) fn spans(&self, text: &str) -> Vec<Span> {
        let Some(ac) = &self.ac else { return Vec::new() };
        let mut found: Vec<(usize, usize)> = ac
            .find_overlapping_iter(text)
            .map(|m| (m.start(), m.end()))
            .filter(|&(s, e)| {
                !text[..s].chars().next_back().is_some_and(|c| c.is_alphanumeric())
                    && !text[e..].chars().next().is_some_and(|c| c.is_alphanumeric())
            })
            .collect();
        found.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        let mut out: Vec<Span> = Vec::new();
        for (s, e) in found {
            if out.last().is_some_and(|l| s < l.end) {
                continue;
            }
            out.push(Span { start: s, end: e, label: EntityLabel::Name, priority: self.priority });
        }
        out
    }
}

/// "Mercury (planet)" gives "Mercury"; titles without a trailing parenthesis are returned as they are.
pub fn strip_disambiguation(title: &str) -> &str {
    let t = title.trim();
    if t.ends_with(')') {
        if let Some(p) = t.rfind(" (") {
            return t[..p].trim_end();
        }
    }
    t
}

impl EntityExtractor for PhraseMatcher {
    fn extract(&self, text: &str) -> Vec<super::Entity> {
        to_entities(text, &self.spans(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_word_leftmost_longest() {
        let g = PhraseMatcher::from_titles([
            "Edward III of England",
            "Edward III",
            "England",
            "Eng",
            "of",
            "Mercury (planet)",
            "Chacma baboon",
        ]);
        // "of" is too short; "Mercury (planet)" is "Mercury"; "Chacma baboon" has a lower-case word.
        assert_eq!(g.len(), 5);
        let text = "Edward III of England met Edward III in Englander lands near England. Mercury rose.";
        let got: Vec<String> = g.extract(text).into_iter().map(|e| e.text).collect();
        assert_eq!(got, vec!["Edward III of England", "Edward III", "England", "Mercury"]);
        let e = &g.extract("Über England")[0];
        assert_eq!((e.start, e.end), (5, 12)); // char offsets: "Ü" is two bytes
    }

    #[test]
    fn rejected_match_does_not_hide_a_later_one() {
        // "Ada Lovelace" cuts "Lovelaces"; "Lovelace" cannot match either, but "Ada" can.
        let g = PhraseMatcher::new(["Ada Lovelace", "Ada"], 8);
        let got: Vec<String> = g.extract("Ada Lovelaces").into_iter().map(|e| e.text).collect();
        assert_eq!(got, vec!["Ada"]);
        assert!(PhraseMatcher::new(Vec::<String>::new(), 8).extract("anything").is_empty());
    }
}
