//! Words built from generated sub-tokens, content words, and sentence boundaries over tokens.
//!
//! **Words.** DRAGIN and ETC score *words*, not sub-tokens. DRAGIN's code starts a new word at a token that begins
//! with the tokenizer's space marker (or a newline); we work on decoded token texts and start a new word at a
//! token that
//! - begins with whitespace, or
//! - begins with punctuation (so `.` `,` `'s` `-` are words of their own, like spaCy's tokens), or
//! - follows a token that ends with whitespace or punctuation (so `(Paris` gives `(` and `Paris`),
//!
//! except that a token right after a blank token (only whitespace) continues the blank token's word: byte-level
//! BPEs (SmolLM2, Qwen2.5) write ` 1889` as ` `, `1`, `8`, `8`, `9`, and `\nThe` as `\n`, `The`, so the blank
//! token is the word's leading space (its first token, where truncation at the word cuts).
//! Otherwise the token continues the current word. A [`Word`] carries its token index range and its text
//! (the concatenated token texts, trimmed).
//!
//! **Content words.** DRAGIN's code keeps spaCy POS tags NOUN, ADJ, VERB, PROPN, NUM ("real words"); we have no
//! tagger, so a word is a content word when ([`is_content_word`]): it has a letter or digit, it is not a clitic
//! (`'s`, `n't`, ...), and its lower-cased form (surrounding punctuation stripped, curly apostrophes made
//! straight) is not in spaCy's English stop-word list [`STOP_WORDS`] (the list DRAGIN's spaCy model carries).
//! Any word with a digit counts as a content word (spaCy's NUM), even though the stop list has `one`..`twenty`
//! spelled out (those stay stop words, as in spaCy's `is_stop`).
//!
//! **Sentences.** [`ends_sentence`] decides whether a sentence ends after a token (for
//! [`crate::trigger::Lookahead::Sentence`] and for truncation at a sentence start); [`sentence_spans`] splits a
//! token sequence. A sentence ends after a token whose text, trailing whitespace and closing quotes/brackets
//! removed, ends with `.`, `!` or `?` — unless the period closes an abbreviation or a single capital initial
//! (`Mr.`, `e.g.`, `J.`), or it sits inside a word, a letter or digit on both sides (`3.5`, `uc.160`,
//! `c.1516C>T`, `p.Arg506Ter`; known only once the next token is there) —
//! and after a token holding a newline once the sentence has some non-blank text. Blank tokens right after a
//! boundary open the next sentence.

use std::ops::Range;

use crate::step::TokenStep;

/// spaCy's English stop words (`spacy/lang/en/stop_words.py`), the list behind `token.is_stop` in the
/// `en_core_web_sm` model DRAGIN loads. spaCy also adds the contractions with curly apostrophes; we map `‘’` to
/// `'` before the lookup instead.
#[rustfmt::skip]
pub static STOP_WORDS: &[&str] = &[
    "a", "about", "above", "across", "after", "afterwards", "again", "against", "all", "almost", "alone",
    "along", "already", "also", "although", "always", "am", "among", "amongst", "amount", "an", "and",
    "another", "any", "anyhow", "anyone", "anything", "anyway", "anywhere", "are", "around", "as", "at",
    "back", "be", "became", "because", "become", "becomes", "becoming", "been", "before", "beforehand",
    "behind", "being", "below", "beside", "besides", "between", "beyond", "both", "bottom", "but", "by",
    "call", "can", "cannot", "ca", "could",
    "did", "do", "does", "doing", "done", "down", "due", "during",
    "each", "eight", "either", "eleven", "else", "elsewhere", "empty", "enough", "even", "ever", "every",
    "everyone", "everything", "everywhere", "except",
    "few", "fifteen", "fifty", "first", "five", "for", "former", "formerly", "forty", "four", "from", "front",
    "full", "further",
    "get", "give", "go",
    "had", "has", "have", "he", "hence", "her", "here", "hereafter", "hereby", "herein", "hereupon", "hers",
    "herself", "him", "himself", "his", "how", "however", "hundred",
    "i", "if", "in", "indeed", "into", "is", "it", "its", "itself",
    "keep",
    "last", "latter", "latterly", "least", "less",
    "just",
    "made", "make", "many", "may", "me", "meanwhile", "might", "mine", "more", "moreover", "most", "mostly",
    "move", "much", "must", "my", "myself",
    "name", "namely", "neither", "never", "nevertheless", "next", "nine", "no", "nobody", "none", "noone",
    "nor", "not", "nothing", "now", "nowhere", "n't",
    "of", "off", "often", "on", "once", "one", "only", "onto", "or", "other", "others", "otherwise", "our",
    "ours", "ourselves", "out", "over", "own",
    "part", "per", "perhaps", "please", "put",
    "quite",
    "rather", "re", "really", "regarding",
    "same", "say", "see", "seem", "seemed", "seeming", "seems", "serious", "several", "she", "should", "show",
    "side", "since", "six", "sixty", "so", "some", "somehow", "someone", "something", "sometime", "sometimes",
    "somewhere", "still", "such",
    "take", "ten", "than", "that", "the", "their", "them", "themselves", "then", "thence", "there",
    "thereafter", "thereby", "therefore", "therein", "thereupon", "these", "they", "third", "this", "those",
    "though", "three", "through", "throughout", "thru", "thus", "to", "together", "too", "top", "toward",
    "towards", "twelve", "twenty", "two",
    "under", "until", "up", "unless", "upon", "us", "used", "using",
    "various", "very", "via", "was", "we", "well", "were", "what", "whatever", "when", "whence", "whenever",
    "where", "whereafter", "whereas", "whereby", "wherein", "whereupon", "wherever", "whether", "which",
    "while", "whither", "who", "whoever", "whole", "whom", "whose", "why", "will", "with", "within",
    "without", "would",
    "yet", "you", "your", "yours", "yourself", "yourselves",
    "'d", "'ll", "'m", "'re", "'s", "'ve",
];

/// A word: consecutive generated tokens `tokens` (indices into the token slice) and their text, trimmed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Word {
    pub tokens: Range<usize>,
    pub text: String,
}

impl Word {
    /// Index of the word's first token.
    pub fn start(&self) -> usize {
        self.tokens.start
    }
    /// Whether this is a content word ([`is_content_word`]).
    pub fn is_content(&self) -> bool {
        is_content_word(&self.text)
    }
}

fn is_punct(c: char) -> bool {
    !c.is_alphanumeric() && !c.is_whitespace()
}

/// Does `cur` begin a new word, given the previous token's text (`None` for the first token)?
pub fn starts_word(prev: Option<&str>, cur: &str) -> bool {
    let Some(prev) = prev else { return true };
    let Some(first) = cur.chars().next() else { return false };
    if first.is_whitespace() || is_punct(first) {
        return true;
    }
    if !prev.is_empty() && prev.chars().all(char::is_whitespace) {
        return false; // a blank token is the leading space of the word that follows (" " + "1" "8" "8" "9")
    }
    matches!(prev.chars().last(), Some(c) if c.is_whitespace() || is_punct(c))
}

/// Merges token texts into words (see the module doc for the rule).
pub fn words_from_texts<S: AsRef<str>>(texts: &[S]) -> Vec<Word> {
    let mut words: Vec<Word> = Vec::new();
    let mut raw = String::new();
    for (i, t) in texts.iter().enumerate() {
        let t = t.as_ref();
        let prev = if i == 0 { None } else { Some(texts[i - 1].as_ref()) };
        if starts_word(prev, t) {
            if let Some(w) = words.last_mut() {
                w.text = raw.trim().to_string();
            }
            raw.clear();
            words.push(Word { tokens: i..i + 1, text: String::new() });
        } else if let Some(w) = words.last_mut() {
            w.tokens.end = i + 1;
        }
        raw.push_str(t);
    }
    if let Some(w) = words.last_mut() {
        w.text = raw.trim().to_string();
    }
    words
}

/// Merges generated tokens into words.
pub fn words(tokens: &[TokenStep]) -> Vec<Word> {
    let texts: Vec<&str> = tokens.iter().map(|t| t.text.as_str()).collect();
    words_from_texts(&texts)
}

/// Index of the word containing token `i` (words must cover the tokens, as [`words_from_texts`] makes them).
pub fn word_of(words: &[Word], i: usize) -> Option<usize> {
    words.iter().position(|w| w.tokens.contains(&i))
}

/// spaCy-style stop word test (case-insensitive, curly apostrophes made straight).
pub fn is_stop_word(word: &str) -> bool {
    let w: String = word.trim().to_lowercase().replace(['\u{2018}', '\u{2019}'], "'");
    STOP_WORDS.contains(&w.as_str())
}

/// Content word test: see the module doc.
pub fn is_content_word(word: &str) -> bool {
    let w = word.trim().replace(['\u{2018}', '\u{2019}'], "'");
    if !w.chars().any(char::is_alphanumeric) {
        return false;
    }
    let lower = w.to_lowercase();
    if lower.starts_with('\'') || lower == "n't" {
        return false; // clitics: 's 'd 'll 'm 're 've 't n't
    }
    let core = lower.trim_matches(|c: char| is_punct(c));
    if core.chars().any(|c| c.is_ascii_digit()) {
        return true;
    }
    !STOP_WORDS.contains(&core)
}

const ABBREVIATIONS: &[&str] = &[
    "mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "etc", "e.g", "i.e", "inc", "ltd", "co", "corp", "mt",
    "ft", "no", "vol", "gen", "col", "lt", "sgt", "capt", "gov", "sen", "rep", "rev", "u.s", "u.k", "jan", "feb",
    "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec", "approx", "est", "fig",
];

/// Does a period, `!` or `?` at the end of token `i` close a sentence? (Newlines are handled by the scan.)
fn closes_sentence<S: AsRef<str>>(texts: &[S], i: usize) -> bool {
    let t = texts[i].as_ref();
    let closing = |c: char| matches!(c, '"' | '\'' | ')' | ']' | '}' | '\u{201d}' | '\u{2019}');
    let core = t.trim_end().trim_end_matches(closing);
    match core.chars().last() {
        Some('!') | Some('?') => true,
        Some('.') => {
            // the text of the last word(s), up to and including this period
            let mut tail = String::new();
            for k in (0..=i).rev() {
                let s = texts[k].as_ref();
                tail.insert_str(0, s);
                if (k < i && s.contains(char::is_whitespace)) || tail.len() > 64 {
                    break;
                }
            }
            let tail = tail.trim_end().trim_end_matches(closing);
            let before = &tail[..tail.len() - 1]; // drop the period
            let chunk = before.rsplit(char::is_whitespace).next().unwrap_or("");
            let chunk = chunk.trim_start_matches(|c: char| is_punct(c) && c != '.');
            let lower = chunk.to_lowercase();
            let mut chars = chunk.chars();
            let initial = matches!((chars.next(), chars.next()), (Some(c), None) if c.is_uppercase());
            let acronym = chunk.contains('.')
                && chunk.split('.').all(|p| p.chars().count() == 1 && p.chars().all(char::is_alphabetic));
            if initial || acronym || ABBREVIATIONS.contains(&lower.as_str()) {
                return false;
            }
            // inside a word: a letter or digit before the period and right after it (3.5, uc.160, p.Arg506Ter)
            if core.len() == t.len() && before.ends_with(char::is_alphanumeric) {
                if let Some(next) = texts.get(i + 1) {
                    if next.as_ref().starts_with(char::is_alphanumeric) {
                        return false;
                    }
                }
            }
            true
        }
        _ => false,
    }
}

/// Sentence boundaries: `out[i]` is true when a sentence ends right after token `i`.
fn boundaries<S: AsRef<str>>(texts: &[S]) -> Vec<bool> {
    let mut out = vec![false; texts.len()];
    let mut has_text = false;
    for (i, t) in texts.iter().enumerate() {
        let t = t.as_ref();
        has_text |= t.chars().any(|c| !c.is_whitespace());
        // a newline ends a sentence that has text; blank tokens after a boundary open the next one
        if has_text && (closes_sentence(texts, i) || t.contains('\n')) {
            out[i] = true;
            has_text = false;
        }
    }
    out
}

/// Does a sentence end right after token `i`? Looks at `texts[..=i]` and, when present, `texts[i + 1]`
/// (the rule of a period inside a word, `3.5`), so the decode loop can call it on the tokens decoded so far.
pub fn ends_sentence<S: AsRef<str>>(texts: &[S], i: usize) -> bool {
    let upto = (i + 2).min(texts.len());
    boundaries(&texts[..upto])[i]
}

/// Could the sentence end [`ends_sentence`] finds after the last token, `texts[i]`, still be a period inside a
/// word (a decimal point, `$15.` then `00`; an identifier, `uc.` then `160`)? True when a digit as the next token
/// would undo it and no token after it is known yet: the next token decides.
pub fn may_be_inside_a_word<S: AsRef<str>>(texts: &[S], i: usize) -> bool {
    if i + 1 < texts.len() {
        return false;
    }
    let mut with_digit: Vec<&str> = texts.iter().map(AsRef::as_ref).collect();
    with_digit.push("0");
    ends_sentence(texts, i) && !ends_sentence(&with_digit, i)
}

/// Splits `texts` into sentences (token index ranges covering all tokens, in order).
pub fn sentence_spans<S: AsRef<str>>(texts: &[S]) -> Vec<Range<usize>> {
    let mut spans = Vec::new();
    let mut start = 0;
    for (i, end) in boundaries(texts).into_iter().enumerate() {
        if end {
            spans.push(start..i + 1);
            start = i + 1;
        }
    }
    if start < texts.len() {
        spans.push(start..texts.len());
    }
    spans
}

/// Sentence spans of generated tokens.
pub fn token_sentences(tokens: &[TokenStep]) -> Vec<Range<usize>> {
    let texts: Vec<&str> = tokens.iter().map(|t| t.text.as_str()).collect();
    sentence_spans(&texts)
}

/// Token range of the sentence containing token `i`.
pub fn sentence_of(tokens: &[TokenStep], i: usize) -> Range<usize> {
    token_sentences(tokens).into_iter().find(|s| s.contains(&i)).unwrap_or(i..i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_period_may_be_inside_a_word_until_the_next_token() {
        // the decode loop's view: the tokens so far, the last one just decoded
        assert!(ends_sentence(&[" is", " $", "15", "."], 3) && may_be_inside_a_word(&[" is", " $", "15", "."], 3));
        assert!(may_be_inside_a_word(&[" is", " $15."], 1), "digit and period in one token");
        assert!(!ends_sentence(&[" is", " $", "15", ".", "00"], 3), "3.5 rule once the next token is known");
        assert!(!may_be_inside_a_word(&[" is", " $", "15", ".", " The"], 3), "the next token is known");
        assert!(ends_sentence(&[" is", " $", "15", ".", " The"], 3));
        // a letter before it: an identifier (uc.160+, p.Arg506Ter) or the end of a word
        assert!(may_be_inside_a_word(&[" is", " Uc", "."], 2));
        assert!(!ends_sentence(&[" is", " Uc", ".", "38"], 2) && !ends_sentence(&[" p", ".", "Arg"], 1));
        assert!(ends_sentence(&[" in", " Paris", ".", " It"], 2) && ends_sentence(&[" in", " Paris", ".", "\n"], 2));
        assert!(!may_be_inside_a_word(&[" in", " 1889", ".\""], 2), "a closing quote after it");
        assert!(!may_be_inside_a_word(&[" in", " (1889)", "."], 2), "a bracket before it");
        assert!(!may_be_inside_a_word(&[" is", " 5", "!"], 2));
        assert!(!may_be_inside_a_word(&["."], 0));
    }

    #[test]
    fn merges_sub_tokens_at_word_starts() {
        let texts = [" The", " Eiff", "el", " Tower", " is", " in", " Paris", ".", " It", "'s", " tall", "."];
        let w = words_from_texts(&texts);
        let got: Vec<(&str, Range<usize>)> = w.iter().map(|w| (w.text.as_str(), w.tokens.clone())).collect();
        assert_eq!(
            got,
            vec![
                ("The", 0..1),
                ("Eiffel", 1..3),
                ("Tower", 3..4),
                ("is", 4..5),
                ("in", 5..6),
                ("Paris", 6..7),
                (".", 7..8),
                ("It", 8..9),
                ("'s", 9..10),
                ("tall", 10..11),
                (".", 11..12),
            ]
        );
        assert_eq!(word_of(&w, 2), Some(1));
    }

    #[test]
    fn punctuation_before_a_token_starts_a_word() {
        let w = words_from_texts(&[" (", "Par", "is", ")", "\n", "Born", " ", "1", "9"]);
        let texts: Vec<&str> = w.iter().map(|w| w.text.as_str()).collect();
        assert_eq!(texts, vec!["(", "Paris", ")", "Born", "19"]);
        assert_eq!(w[1].tokens, 1..3);
        assert_eq!(w[3].tokens, 4..6); // "\n" + "Born"
        assert_eq!(w[4].tokens, 6..9); // " " + "1" + "9"
    }

    #[test]
    fn content_words() {
        for w in ["Paris", "Eiffel", "tower", "1889", "3rd", "built", "\"Paris\""] {
            assert!(is_content_word(w), "{w} should be a content word");
        }
        for w in ["the", "The", "was", "'s", "n't", "’s", ".", ",", "", "one", "whereupon", "because"] {
            assert!(!is_content_word(w), "{w:?} should not be a content word");
        }
        assert!(is_stop_word("Whereas"));
        assert!(!is_stop_word("Paris"));
    }

    #[test]
    fn sentence_boundaries() {
        let t = [
            " Mr", ".", " J", ".", " Smith", " left", " the", " U", ".", "S", ".", " in", " 1", ".", "5", " h", "!",
            "\n", "So", " it", " goes", "\n",
        ];
        // "Mr." abbreviation, "J." initial, "U." initial, "U.S." acronym, "1.5" digit after: no boundary;
        // "!" ends; the "\n" after it opens the next sentence; the final "\n" ends "So it goes".
        assert_eq!(sentence_spans(&t), vec![0..17, 17..22]);
        assert!(!ends_sentence(&t, 1));
        assert!(ends_sentence(&t, 16));
        assert!(!ends_sentence(&t, 17));
        let t2 = [" It", " was", " 1889", ".", " Then"];
        assert_eq!(sentence_spans(&t2), vec![0..4, 4..5]);
        let t3 = [" He", " said", " \"", "yes", ".\"", " Then"];
        assert!(ends_sentence(&t3, 4));
        assert_eq!(sentence_spans(&t3), vec![0..5, 5..6]);
    }

    /// Real sub-tokens: SmolLM2's byte-level BPE (shared data), each id decoded alone as the decoder does.
    #[test]
    fn smollm2_sub_tokens_merge_into_words() {
        let path = crate::require_data!("models/smollm2-135m-instruct/tokenizer.json");
        let tok = tokenizers::Tokenizer::from_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let text = " The Eiffel Tower, completed in 1889, is in Paris. It's 330 m tall.";
        let ids = tok.encode(text, false).unwrap().get_ids().to_vec();
        let texts: Vec<String> = ids.iter().map(|&id| tok.decode(&[id], false).unwrap()).collect();
        assert_eq!(texts.concat(), text, "decoding token by token must give the text back");
        let got: Vec<String> = words_from_texts(&texts).into_iter().map(|w| w.text).collect();
        let want = [
            "The",
            "Eiffel",
            "Tower",
            ",",
            "completed",
            "in",
            "1889",
            ",",
            "is",
            "in",
            "Paris",
            ".",
            "It",
            "'s",
            "330",
            "m",
            "tall",
            ".",
        ];
        assert_eq!(got, want, "tokens: {texts:?}");
        let content: Vec<&str> = want.iter().copied().filter(|w| is_content_word(w)).collect();
        assert_eq!(content, ["Eiffel", "Tower", "completed", "1889", "Paris", "330", "m", "tall"]);
        let spans = sentence_spans(&texts);
        assert_eq!(spans.len(), 2, "{spans:?} over {texts:?}");
        assert_eq!(texts[spans[1].clone()].concat(), " It's 330 m tall.");
    }
}
