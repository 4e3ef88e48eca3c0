//! Entity extraction and comparison for RaDIO/MIND-style hallucination-label synthesis.
//!
//! No NER model weights are available here, so entities are found by rule families, one file each:
//! - [`rules`]: dates, years, times, numbers, quantities, percentages, money, ordinals (regular expressions);
//! - [`names`]: capitalised (multi-word) names with connector words ("of", "de", "the", ...) inside;
//! - [`gazetteer`]: the dump's own article titles, matched with aho-corasick (whole words, leftmost-longest);
//! - [`wordnet`]: optional, WordNet 3.0 instance nouns ("Paris", "Abraham Lincoln") when Debian's
//!   `wordnet-base` is installed (also supplies synonyms to [`compare`]);
//! - [`combine`]: merges the families (longest span wins, then priority) and holds the skip rules
//!   (sentence start, inside the title) that the synthesis pipeline applies.
//!
//! [`compare`] decides whether the entity a model wrote matches the original (label 1 = hallucinated),
//! with GloVe ([`glove`], optional) and WordNet (optional) as resources; [`eval`] measures extraction
//! against spaCy's `en_core_web_sm` reference.
//!
//! **Offsets**: [`Entity::start`] and [`Entity::end`] are **character** (Unicode scalar value) offsets
//! into the text given to [`EntityExtractor::extract`], end exclusive, as spaCy's `start_char`/`end_char`.
//! Use [`char_to_byte`] or [`prefix_before`] to slice a `&str` with them.

pub mod combine;
pub mod compare;
pub mod eval;
pub mod gazetteer;
pub mod glove;
pub mod names;
pub mod rules;
pub mod wordnet;

pub use combine::{entity_at_start, synthesis_candidates, CombinedExtractor};
pub use compare::{compare_entities, Comparison, Resources};

use serde::Serialize;

/// What kind of entity a rule found. Rules only claim a fine type they actually know; capitalised
/// names, gazetteer and WordNet hits are all [`EntityLabel::Name`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum EntityLabel {
    Date,
    Time,
    Cardinal,
    Quantity,
    Ordinal,
    Percent,
    Money,
    Name,
}

impl EntityLabel {
    pub const ALL: [EntityLabel; 8] = [
        EntityLabel::Date,
        EntityLabel::Time,
        EntityLabel::Cardinal,
        EntityLabel::Quantity,
        EntityLabel::Ordinal,
        EntityLabel::Percent,
        EntityLabel::Money,
        EntityLabel::Name,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EntityLabel::Date => "DATE",
            EntityLabel::Time => "TIME",
            EntityLabel::Cardinal => "CARDINAL",
            EntityLabel::Quantity => "QUANTITY",
            EntityLabel::Ordinal => "ORDINAL",
            EntityLabel::Percent => "PERCENT",
            EntityLabel::Money => "MONEY",
            EntityLabel::Name => "NAME",
        }
    }

    /// Is this a number-like label (compared by value rather than by string)?
    pub fn is_numeric(self) -> bool {
        self != EntityLabel::Name
    }
}

/// One entity: `start..end` are **character** offsets (end exclusive) into the extracted text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entity {
    pub start: usize,
    pub end: usize,
    pub text: String,
    pub label: EntityLabel,
}

/// Finds entities in a text. Implementations must return spans sorted by start, non-overlapping
/// (the combined extractor guarantees it; single rule families may overlap among themselves only
/// where documented).
pub trait EntityExtractor: Send + Sync {
    fn extract(&self, text: &str) -> Vec<Entity>;
}

/// Byte offset of character offset `c` in `text` (`text.len()` when `c` is at or past the end).
pub fn char_to_byte(text: &str, c: usize) -> usize {
    text.char_indices().nth(c).map_or(text.len(), |(b, _)| b)
}

/// The text just before `entity` (what a model is given to continue): `text[..entity.start chars]`.
pub fn prefix_before<'a>(text: &'a str, entity: &Entity) -> &'a str {
    &text[..char_to_byte(text, entity.start)]
}

/// A span found by one rule family, in **byte** offsets (internal; converted once per text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub start: usize,
    pub end: usize,
    pub label: EntityLabel,
    /// Lower wins among spans of equal length.
    pub priority: u8,
}

/// Byte-to-char offset table for one text.
pub(crate) struct CharIndex {
    byte_to_char: Vec<usize>,
}

impl CharIndex {
    pub fn new(text: &str) -> Self {
        let mut byte_to_char = vec![0; text.len() + 1];
        let mut n = 0;
        for (b, ch) in text.char_indices() {
            for k in 0..ch.len_utf8() {
                byte_to_char[b + k] = n;
            }
            n += 1;
        }
        byte_to_char[text.len()] = n;
        CharIndex { byte_to_char }
    }

    pub fn char_at(&self, byte: usize) -> usize {
        self.byte_to_char[byte]
    }
}

/// Convert byte spans of `text` to entities with char offsets.
pub(crate) fn to_entities(text: &str, spans: &[Span]) -> Vec<Entity> {
    let idx = CharIndex::new(text);
    spans
        .iter()
        .map(|s| Entity {
            start: idx.char_at(s.start),
            end: idx.char_at(s.end),
            text: text[s.start..s.end].to_string(),
            label: s.label,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn char_offsets_and_truncation() {
        // "é" and "–" are multi-byte: char offsets differ from byte offsets after them.
        let text = "Café – built in 1990 by Zoë.";
        let idx = CharIndex::new(text);
        let b = text.find("1990").unwrap();
        // Bytes: "Café" 5 (é is 2), " – " 5 (– is 3), "built in " 9 = 19; chars: 4 + 3 + 9 = 16.
        assert_eq!(b, 19);
        assert_eq!(idx.char_at(b), 16);
        let spans = [Span { start: b, end: b + 4, label: EntityLabel::Date, priority: 0 }];
        let e = &to_entities(text, &spans)[0];
        assert_eq!((e.start, e.end, e.text.as_str()), (16, 20, "1990"));
        assert_eq!(prefix_before(text, e), "Café – built in ");
        assert_eq!(char_to_byte(text, 16), 19);
        assert_eq!(char_to_byte(text, 1000), text.len());
    }
}
