//! Rule family 2: capitalised names. A name is a run of capitalised words ("Georgia Institute of
//! Technology", "J. R. R. Tolkien", "Edward III") that may hold lower-case connector words ("of",
//! "de", "the", "von", ...) between capitalised ones. Single capitalised words count too ("Europe",
//! "English"): in running English text a capital letter inside a sentence marks a proper noun.
//!
//! The first word of a sentence is capitalised anyway; it starts a name only when it is not a common
//! word. Common words are a built-in list of function words plus, when built from a corpus
//! ([`NameExtractor::with_vocabulary`]), every word the corpus writes in lower case more often than
//! capitalised inside a sentence.
//!
//! With `include_article` (default on) a "the" right before a name of two or more capitalised words is
//! part of it ("the Australian Army", "the Second World War"), as OntoNotes annotates most such names.

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use regex::Regex;

use super::{to_entities, EntityExtractor, EntityLabel, Span};
use crate::text::sentences::sentence_starts;

/// Lower-case words allowed inside a name between capitalised words.
#[rustfmt::skip]
const CONNECTORS: &[&str] = &[
    "of", "de", "del", "della", "di", "da", "do", "dos", "das", "du", "des", "van", "von", "der", "den", "ter",
    "the", "la", "le", "les", "y", "al", "el", "bin", "ibn", "bint", "&", "for", "upon", "zu", "af", "av",
];

/// Function words that, capitalised at the start of a sentence, never start a name.
#[rustfmt::skip]
const FUNCTION_WORDS: &[&str] = &[
    "a", "an", "the", "in", "on", "at", "of", "to", "for", "from", "by", "with", "as", "into", "after", "before",
    "during", "while", "when", "where", "although", "though", "however", "despite", "since", "because", "if",
    "he", "she", "it", "they", "we", "i", "you", "his", "her", "its", "their", "our", "this", "that", "these",
    "those", "there", "here", "many", "some", "most", "several", "both", "each", "all", "other", "another",
    "such", "following", "born", "under", "over", "between", "among", "about", "according", "also", "later",
    "early", "then", "thus", "today", "now", "originally", "currently", "once", "not", "no", "only", "but",
    "and", "or", "so", "what", "which", "who", "whose", "how", "why", "until", "upon", "within", "without",
    "along", "although", "because", "though", "unlike", "like", "located", "known", "based", "founded",
    "formerly", "previously", "its", "one", "two", "three", "first", "second", "a", "as", "throughout",
    "meanwhile", "nevertheless", "nonetheless", "additionally", "furthermore", "moreover", "subsequently",
    "eventually", "initially", "afterwards", "afterward", "consequently", "finally", "instead", "together",
    "despite", "whilst", "whereas", "hence", "therefore", "yet", "still", "even", "every", "any", "no",
    "my", "your", "she", "him", "them", "us", "upon", "via", "per", "against", "toward", "towards",
];

/// Abbreviations whose final period belongs to the word ("St. Louis", "Dr. Who").
#[rustfmt::skip]
const ABBREVIATIONS: &[&str] = &[
    "St", "Dr", "Mr", "Mrs", "Ms", "Jr", "Sr", "Mt", "Ft", "Gen", "Col", "Lt", "Capt", "Sgt", "Rev", "Prof", "Co",
    "Inc", "Ltd", "Corp", "Bros", "No", "Adm", "Maj", "Gov", "Sen", "Hon", "Fr",
];

/// Word tokens of `text` as byte ranges: letters/digits with inner apostrophes, hyphens and periods
/// ("O'Brien", "Anglo-Saxon", "U.S."). A final period is kept only for initials and abbreviations; a
/// possessive "'s" is dropped.
pub(crate) fn word_tokens(text: &str) -> Vec<(usize, usize)> {
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| Regex::new(r"[\p{L}\p{N}&]+(?:[’'\-\.][\p{L}\p{M}\p{N}]+)*\.?").unwrap());
    let mut out = Vec::new();
    for m in re.find_iter(text) {
        let (s, mut e) = (m.start(), m.end());
        let w = &text[s..e];
        if let Some(stem) = w.strip_suffix('.') {
            let initial = stem.chars().count() == 1 && stem.chars().all(char::is_alphabetic);
            let dotted = stem.contains('.');
            if !(initial || dotted || ABBREVIATIONS.contains(&stem)) {
                e -= 1;
            }
        }
        let w = &text[s..e];
        for poss in ["'s", "’s"] {
            if w.len() > poss.len() + 1 && w.ends_with(poss) {
                e -= poss.len();
                break;
            }
        }
        out.push((s, e));
    }
    out
}

/// Is `w` a connector word allowed inside a name ("of", "de", "the", ...)?
pub(crate) fn is_connector(w: &str) -> bool {
    CONNECTORS.contains(&w)
}

fn is_capitalised(w: &str) -> bool {
    w.chars().next().is_some_and(char::is_uppercase)
}

/// Finds capitalised names.
pub struct NameExtractor {
    common: HashSet<String>,
    function: HashSet<String>,
    pub include_article: bool,
}

impl Default for NameExtractor {
    fn default() -> Self {
        Self::new()
    }
}

impl NameExtractor {
    /// With the built-in function-word list only.
    pub fn new() -> Self {
        let function: HashSet<String> = FUNCTION_WORDS.iter().map(|w| w.to_string()).collect();
        NameExtractor { common: function.clone(), function, include_article: true }
    }

    /// Built-in list plus the words `texts` write in lower case more often than capitalised mid-sentence.
    pub fn with_vocabulary<'a>(texts: impl IntoIterator<Item = &'a str>) -> Self {
        let mut lower: HashMap<String, u32> = HashMap::new();
        let mut cap: HashMap<String, u32> = HashMap::new();
        for text in texts {
            let starts = sentence_starts(text);
            for (s, e) in word_tokens(text) {
                let w = &text[s..e];
                if is_capitalised(w) {
                    if !is_sentence_initial(text, s, &starts) {
                        *cap.entry(w.to_lowercase()).or_default() += 1;
                    }
                } else if w.chars().next().is_some_and(char::is_lowercase) {
                    *lower.entry(w.to_string()).or_default() += 1;
                }
            }
        }
        let mut me = Self::new();
        for (w, n) in lower {
            if n > cap.get(&w).copied().unwrap_or(0) {
                me.common.insert(w);
            }
        }
        me
    }

    /// Is `word` (any case) a common word, i.e. not a name when it opens a sentence?
    pub fn is_common(&self, word: &str) -> bool {
        self.common.contains(&word.to_lowercase())
    }

    /// Name spans (byte offsets), given the sentence starts of `text`.
    pub(crate) fn spans(&self, text: &str, starts: &[usize]) -> Vec<Span> {
        let toks = word_tokens(text);
        let mut out = Vec::new();
        let mut i = 0;
        while i < toks.len() {
            let (s, _) = toks[i];
            let w = &text[toks[i].0..toks[i].1];
            if !is_capitalised(w) || w == "I" {
                i += 1;
                continue;
            }
            // A sentence-initial word opens a name unless it is common: a function word always, a
            // corpus-common word ("Hurricane", "Saint") only when no capitalised word follows it.
            let initial = is_sentence_initial(text, s, starts);
            let lower = w.to_lowercase();
            let followed =
                toks.get(i + 1).is_some_and(|&(a, b)| contiguous(text, toks[i].1, a) && is_capitalised(&text[a..b]));
            if initial && (self.function.contains(&lower) || (!followed && self.common.contains(&lower))) {
                // "The Beatles ...": OntoNotes keeps a sentence-initial "The" of a multi-word name.
                if self.include_article && w == "The" && followed {
                    let (_, last, next) = extend(text, &toks, i + 1);
                    if count_capitalised(text, &toks[i + 1..=last]) >= 2 {
                        out.push(Span { start: s, end: toks[last].1, label: EntityLabel::Name, priority: 10 });
                        i = next;
                        continue;
                    }
                }
                i += 1;
                continue;
            }
            let (first, last, next) = extend(text, &toks, i);
            let mut start = toks[first].0;
            let end = toks[last].1;
            if self.include_article && count_capitalised(text, &toks[first..=last]) >= 2 {
                start = with_article(text, start);
            }
            out.push(Span { start, end, label: EntityLabel::Name, priority: 10 });
            i = next;
        }
        out
    }

    /// The capitalised span right at the start of `text` (after blanks), first word included whatever
    /// it is: what a model wrote where a name was expected. Byte range.
    pub fn leading_name(&self, text: &str) -> Option<(usize, usize)> {
        let toks = word_tokens(text);
        let (s, e) = *toks.first()?;
        if !text[..s].trim().is_empty() || !is_capitalised(&text[s..e]) {
            return None;
        }
        let (_, last, _) = extend(text, &toks, 0);
        Some((s, toks[last].1))
    }
}

/// From capitalised token `i`, the last token of the name and the index to continue scanning at.
fn extend(text: &str, toks: &[(usize, usize)], i: usize) -> (usize, usize, usize) {
    let mut last = i;
    let mut j = i + 1;
    while j < toks.len() {
        if !contiguous(text, toks[j - 1].1, toks[j].0) {
            break;
        }
        let w = &text[toks[j].0..toks[j].1];
        if is_capitalised(w) {
            last = j;
            j += 1;
            continue;
        }
        // A run of connectors must be followed by a capitalised word.
        let mut k = j;
        while k < toks.len()
            && CONNECTORS.contains(&&text[toks[k].0..toks[k].1])
            && contiguous(text, toks[k - 1].1, toks[k].0)
        {
            k += 1;
        }
        if k > j
            && k < toks.len()
            && contiguous(text, toks[k - 1].1, toks[k].0)
            && is_capitalised(&text[toks[k].0..toks[k].1])
        {
            last = k;
            j = k + 1;
            continue;
        }
        break;
    }
    (i, last, last + 1)
}

/// Only spaces (no line break, no punctuation) between two tokens.
fn contiguous(text: &str, a: usize, b: usize) -> bool {
    text[a..b].chars().all(|c| c == ' ' || c == '\u{a0}') && b > a
}

fn count_capitalised(text: &str, toks: &[(usize, usize)]) -> usize {
    toks.iter().filter(|(s, e)| is_capitalised(&text[*s..*e])).count()
}

/// Move `start` back over a directly preceding lower-case "the ".
fn with_article(text: &str, start: usize) -> usize {
    let before = &text[..start];
    if let Some(p) = before.strip_suffix("the ") {
        if p.is_empty() || p.ends_with(|c: char| !c.is_alphanumeric()) {
            return start - 4;
        }
    }
    start
}

/// Is the word at byte `s` the first word of its sentence (only punctuation or blanks before it)?
pub(crate) fn is_sentence_initial(text: &str, s: usize, starts: &[usize]) -> bool {
    let k = starts.partition_point(|&x| x <= s);
    if k == 0 {
        return text[..s].chars().all(|c| !c.is_alphanumeric());
    }
    text[starts[k - 1]..s].chars().all(|c| !c.is_alphanumeric())
}

impl EntityExtractor for NameExtractor {
    fn extract(&self, text: &str) -> Vec<super::Entity> {
        let starts = sentence_starts(text);
        to_entities(text, &self.spans(text, &starts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(x: &NameExtractor, text: &str) -> Vec<String> {
        x.extract(text).into_iter().map(|e| e.text).collect()
    }

    #[test]
    fn tokens_keep_initials_and_drop_possessives() {
        let t = "J. R. R. Tolkien's U.S. book. Anglo-Saxon O'Brien.";
        let toks: Vec<&str> = word_tokens(t).into_iter().map(|(s, e)| &t[s..e]).collect();
        assert_eq!(toks, vec!["J.", "R.", "R.", "Tolkien", "U.S.", "book", "Anglo-Saxon", "O'Brien"]);
    }

    #[test]
    fn multi_word_names_with_connectors() {
        let x = NameExtractor::new();
        assert_eq!(
            names(&x, "The ANAK Society is at the Georgia Institute of Technology (Georgia Tech) in Atlanta, Georgia."),
            vec!["The ANAK Society", "the Georgia Institute of Technology", "Georgia Tech", "Atlanta", "Georgia"]
        );
        // A sentence-initial "The" is kept only before a name of 2+ capitalised words.
        assert_eq!(names(&x, "The Beatles. The Rolling Stones."), vec!["Beatles", "The Rolling Stones"]);
        assert_eq!(
            names(&x, "He read The Lord of the Rings by J. R. R. Tolkien."),
            vec!["The Lord of the Rings", "J. R. R. Tolkien"]
        );
        // A connector not followed by a capitalised word is not part of the name.
        assert_eq!(
            names(&x, "She went to Paris of old and to England and France."),
            vec!["Paris", "England", "France"]
        );
    }

    #[test]
    fn sentence_start_common_words_are_skipped() {
        let x = NameExtractor::new();
        assert_eq!(names(&x, "In 1990 it grew. Edward III ruled. They left."), vec!["Edward III"]);
        // Without vocabulary "Rain" is not known to be common; with it, it is.
        assert_eq!(names(&x, "Rain fell on Rome."), vec!["Rain", "Rome"]);
        let v = NameExtractor::with_vocabulary(["the rain in Spain", "more rain fell"]);
        assert_eq!(names(&v, "Rain fell on Rome."), vec!["Rome"]);
        assert!(v.is_common("rain") && !v.is_common("spain"));
    }

    #[test]
    fn leading_name_reads_the_capitalised_span() {
        let x = NameExtractor::new();
        let t = "  The Kingdom of France, which";
        let (s, e) = x.leading_name(t).unwrap();
        assert_eq!(&t[s..e], "The Kingdom of France");
        assert_eq!(x.leading_name("a dog"), None);
    }
}
