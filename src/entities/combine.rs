//! The combined extractor (rules + names + gazetteer + optional WordNet), the skip rules of label
//! synthesis, and the reader of the entity a model wrote at the start of its continuation.
//!
//! Merging: all spans of all families are pooled; the longest span wins, ties go to the family
//! priority (money, percent, quantity, date, time, ordinal, cardinal, gazetteer, WordNet, names); a
//! span overlapping an already chosen one is dropped. Gazetteer and WordNet hits that begin a sentence
//! with a common word ("The", "Reading") are dropped, as the name rule drops such words.

use crate::corpus::wikiextractor::Article;
use crate::text::sentences::sentence_starts;

use super::gazetteer::PhraseMatcher;
use super::names::{is_sentence_initial, word_tokens, NameExtractor};
use super::rules::{resolve, RuleExtractor};
use super::wordnet::WordNet;
use super::{to_entities, Entity, EntityExtractor, EntityLabel, Span};

pub struct CombinedExtractor {
    pub rules: RuleExtractor,
    pub names: NameExtractor,
    pub gazetteer: Option<PhraseMatcher>,
    pub wordnet: Option<PhraseMatcher>,
}

impl CombinedExtractor {
    /// Rules and names only, with the built-in common-word list.
    pub fn basic() -> Self {
        CombinedExtractor { rules: RuleExtractor::new(), names: NameExtractor::new(), gazetteer: None, wordnet: None }
    }

    /// For a dump: gazetteer of its titles, common words learnt from its texts, and WordNet's
    /// instance nouns when `wordnet` is given.
    pub fn from_articles(articles: &[Article], wordnet: Option<&WordNet>) -> Self {
        CombinedExtractor {
            rules: RuleExtractor::new(),
            names: NameExtractor::with_vocabulary(articles.iter().map(|a| a.text.as_str())),
            gazetteer: Some(PhraseMatcher::from_titles(articles.iter().map(|a| a.title.as_str()))),
            wordnet: wordnet.map(WordNet::instance_matcher),
        }
    }

    /// Merged, non-overlapping spans (byte offsets), sorted by start.
    pub(crate) fn spans(&self, text: &str) -> Vec<Span> {
        let starts = sentence_starts(text);
        let mut all = self.rules.spans(text);
        all.extend(self.names.spans(text, &starts));
        for m in self.gazetteer.iter().chain(self.wordnet.iter()) {
            for s in m.spans(text) {
                let first = word_tokens(&text[s.start..s.end]).first().map(|&(a, b)| &text[s.start + a..s.start + b]);
                if is_sentence_initial(text, s.start, &starts) && first.is_some_and(|w| self.names.is_common(w)) {
                    continue;
                }
                all.push(s);
            }
        }
        resolve(all)
    }
}

impl EntityExtractor for CombinedExtractor {
    fn extract(&self, text: &str) -> Vec<Entity> {
        to_entities(text, &self.spans(text))
    }
}

/// The skip rules of label synthesis: drop entities that open a sentence (the model has no context to
/// predict them from) and entities inside the title (the article's subject is given away by the title
/// line: spans on the title line itself, and entities whose words all occur in the title, as whole
/// words, case-insensitively). `text` is the article text the entities were extracted from
/// (`Article::text`, title line first).
pub fn synthesis_candidates(text: &str, title: &str, entities: &[Entity]) -> Vec<Entity> {
    let starts = sentence_starts(text);
    let title_line_end = if text.starts_with(title) { title.chars().count() } else { 0 };
    let title_words: Vec<String> = word_tokens(title).into_iter().map(|(s, e)| title[s..e].to_lowercase()).collect();
    let char_bytes: Vec<usize> = text.char_indices().map(|(b, _)| b).collect();
    entities
        .iter()
        .filter(|e| {
            let b = char_bytes.get(e.start).copied().unwrap_or(text.len());
            if is_sentence_initial(text, b, &starts) {
                return false;
            }
            if e.start < title_line_end {
                return false;
            }
            let words: Vec<String> =
                word_tokens(&e.text).into_iter().map(|(s, t)| e.text[s..t].to_lowercase()).collect();
            let content: Vec<&String> = words.iter().filter(|w| w.as_str() != "the").collect();
            let inside = !content.is_empty()
                && title_words.windows(content.len()).any(|win| win.iter().zip(&content).all(|(a, b)| a == *b));
            !inside
        })
        .cloned()
        .collect()
}

/// The entity the model wrote at the start of `continuation`, read as the same kind of span as
/// `original`: the extractor's entity that starts right there if it is of the same kind (number-like
/// or name); for a name, else the capitalised span there; else, as a fallback, as many words as the
/// original has (trailing punctuation dropped). `None` when the continuation is blank.
pub fn entity_at_start(continuation: &str, original: &Entity, extractor: &dyn EntityExtractor) -> Option<String> {
    let lead = continuation.len() - continuation.trim_start().len();
    let cont = &continuation[lead..];
    if cont.is_empty() {
        return None;
    }
    if let Some(e) = extractor.extract(cont).into_iter().find(|e| e.start == 0) {
        if e.label.is_numeric() == original.label.is_numeric() {
            return Some(e.text);
        }
    }
    if original.label == EntityLabel::Name {
        if let Some((s, e)) = NameExtractor::new().leading_name(cont) {
            return Some(cont[s..e].to_string());
        }
    } else if let Some(e) = fallback_rules().extract(cont).into_iter().find(|e| e.start == 0) {
        return Some(e.text);
    }
    let n = word_tokens(&original.text).len().max(1);
    let toks = word_tokens(cont);
    let last = toks.get(n - 1).or(toks.last())?;
    Some(cont[..last.1].trim_end_matches(|c: char| !c.is_alphanumeric()).to_string())
}

/// Compiled once: [`entity_at_start`] runs for every truncation point of a corpus.
fn fallback_rules() -> &'static RuleExtractor {
    static RULES: std::sync::OnceLock<RuleExtractor> = std::sync::OnceLock::new();
    RULES.get_or_init(RuleExtractor::new)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ent(text: &str, s: usize, label: EntityLabel) -> Entity {
        Entity { start: s, end: s + text.chars().count(), text: text.to_string(), label }
    }

    #[test]
    fn merges_families_longest_first() {
        let x = CombinedExtractor {
            gazetteer: Some(PhraseMatcher::from_titles(["Edward III of England", "Black Death"])),
            ..CombinedExtractor::basic()
        };
        let t = "Edward III of England\n\nEdward III (13 November 1312 – 21 June 1377) saw the Black Death in March 1349 with 2,000 men.";
        let got: Vec<(String, &str)> = x.extract(t).into_iter().map(|e| (e.text, e.label.as_str())).collect();
        let want = [
            ("Edward III of England", "NAME"),
            ("Edward III", "NAME"),
            ("13 November 1312", "DATE"),
            ("21 June 1377", "DATE"),
            ("the Black Death", "NAME"), // names (with "the") outlast the gazetteer's "Black Death"
            ("March 1349", "DATE"),
            ("2,000", "CARDINAL"),
        ];
        assert_eq!(got, want.iter().map(|(a, b)| (a.to_string(), *b)).collect::<Vec<_>>());
        // Non-overlapping and sorted.
        let es = x.extract(t);
        assert!(es.windows(2).all(|w| w[0].end <= w[1].start));
    }

    #[test]
    fn skip_rules_sentence_start_and_title() {
        let x = CombinedExtractor::basic();
        let text = "Edward III of England\n\nEdward III was King of England from 1327. Paris fell, and England and Spain fought in 1340.";
        let es = x.extract(text);
        let kept: Vec<String> =
            synthesis_candidates(text, "Edward III of England", &es).into_iter().map(|e| e.text).collect();
        // Title line, sentence-initial "Edward III" and "Paris", and "England" (a title word) are skipped.
        assert_eq!(kept, vec!["King of England", "1327", "Spain", "1340"]);
    }

    #[test]
    fn reads_entity_at_start_of_continuation() {
        let x = CombinedExtractor::basic();
        let date = ent("21 June 1377", 10, EntityLabel::Date);
        assert_eq!(entity_at_start(" 3 March 1390, he died", &date, &x).as_deref(), Some("3 March 1390"));
        let num = ent("1,200", 0, EntityLabel::Cardinal);
        assert_eq!(entity_at_start("about 900 men", &num, &x).as_deref(), Some("about 900"));
        let name = ent("Edward II", 0, EntityLabel::Name);
        // "The" opens the continuation: the extractor would skip it, the name reader keeps the span.
        assert_eq!(entity_at_start("The Black Prince, his son", &name, &x).as_deref(), Some("The Black Prince"));
        // No entity there: as many words as the original.
        assert_eq!(entity_at_start("his own son, who", &name, &x).as_deref(), Some("his own"));
        assert_eq!(entity_at_start("  ", &name, &x), None);
    }
}

#[cfg(test)]
mod shared_data_tests {
    use super::*;
    use crate::entities::char_to_byte;
    use crate::entities::compare::{compare_entities, Resources};

    /// Self-consistency on real articles: feeding the article's own text as the "continuation", the
    /// entity read at its start must be judged the same entity (label 0) for nearly every candidate.
    #[test]
    fn own_continuation_is_not_hallucinated() {
        let dump = crate::require_data!("wiki/dump_valid");
        let articles = crate::corpus::wikiextractor::read_dump(&dump).unwrap();
        let x = CombinedExtractor::from_articles(&articles, None);
        let res = Resources::none();
        let (mut n, mut same) = (0, 0);
        let mut bad = Vec::new();
        for a in articles.iter().take(300) {
            let ents = x.extract(&a.text);
            for e in synthesis_candidates(&a.text, &a.title, &ents) {
                let cont = &a.text[char_to_byte(&a.text, e.start)..];
                let got = entity_at_start(cont, &e, &x).unwrap_or_default();
                n += 1;
                if !compare_entities(&e.text, &got, &res).hallucinated {
                    same += 1;
                } else if bad.len() < 20 {
                    bad.push(format!("{:?} -> {got:?}", e.text));
                }
            }
        }
        let rate = same as f64 / n as f64;
        eprintln!("{same}/{n} = {rate:.4}; {bad:#?}");
        assert!(n > 2000, "{n} candidates");
        assert!(rate >= 0.99, "{same}/{n} = {rate:.4}; {bad:#?}");
    }

    /// The other way round: a continuation that starts with a different entity of the same kind from
    /// the same article (a plausible confusion) must mostly be judged hallucinated. Aliases ("Edward
    /// III" for "Edward III of England") and equal values legitimately are not, so the bar is lower.
    #[test]
    fn swapped_entity_is_hallucinated() {
        let dump = crate::require_data!("wiki/dump_valid");
        let articles = crate::corpus::wikiextractor::read_dump(&dump).unwrap();
        let x = CombinedExtractor::from_articles(&articles, None);
        let res = Resources::none();
        let (mut n, mut flagged) = (0, 0);
        let mut missed = Vec::new();
        for a in articles.iter().take(300) {
            let ents = synthesis_candidates(&a.text, &a.title, &x.extract(&a.text));
            for (i, e) in ents.iter().enumerate() {
                let Some(other) = ents[i + 1..].iter().find(|o| o.label == e.label && o.text != e.text) else {
                    continue;
                };
                let cont = &a.text[char_to_byte(&a.text, other.start)..];
                let got = entity_at_start(cont, e, &x).unwrap_or_default();
                n += 1;
                if compare_entities(&e.text, &got, &res).hallucinated {
                    flagged += 1;
                } else if missed.len() < 30 {
                    missed.push(format!("{:?} vs {got:?}", e.text));
                }
            }
        }
        let rate = flagged as f64 / n as f64;
        eprintln!("{flagged}/{n} = {rate:.4}; {missed:#?}");
        assert!(n > 1000, "{n} pairs");
        assert!(rate >= 0.90, "{flagged}/{n} = {rate:.4}; {missed:#?}");
    }
}
