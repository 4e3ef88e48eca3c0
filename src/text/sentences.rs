//! A small rule-based sentence splitter for English prose (Wikipedia openings, model continuations).
//!
//! Rules, in order:
//! - every line break ends a sentence (WikiExtractor puts the title on its own line, paragraphs on
//!   their own lines);
//! - `.`, `!` or `?`, optionally followed by closing quotes or brackets, then whitespace, then an
//!   upper-case letter, a digit or an opening quote/bracket, ends a sentence;
//! - except after a period that closes an abbreviation: a single letter (an initial, "J. R. R."),
//!   a token with an inner period ("U.S.", "e.g."), or a known title/short form ("Dr.", "St.", "Jan.").
//!
//! All offsets are **byte** offsets into the input `&str` (the entity module converts to char offsets).

use std::ops::Range;

/// Abbreviations (without their final period) after which a period does not end a sentence.
const ABBREVIATIONS: &[&str] = &[
    "mr", "mrs", "ms", "dr", "st", "jr", "sr", "prof", "gen", "col", "lt", "capt", "sgt", "rev", "mt", "ft", "no",
    "nos", "vs", "etc", "inc", "ltd", "co", "corp", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept",
    "oct", "nov", "dec", "ca", "approx", "gov", "sen", "rep", "adm", "maj", "cpl", "pvt", "hon", "fr", "bros", "ave",
    "blvd", "rd", "vol", "pp", "fig", "op", "cf", "al", "esq", "messrs", "cmdr", "brig", "pres",
];

/// Byte ranges of the sentences of `text`, each trimmed of surrounding whitespace; empty ones are dropped.
pub fn sentence_spans(text: &str) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut i = 0;
    while i < chars.len() {
        let (b, c) = chars[i];
        if c == '\n' || c == '\r' {
            push_trimmed(text, start..b, &mut out);
            start = b + c.len_utf8();
        } else if matches!(c, '.' | '!' | '?') {
            // Closing punctuation that belongs to this sentence.
            let mut j = i + 1;
            while j < chars.len() && matches!(chars[j].1, '"' | '\'' | '”' | '’' | ')' | ']' | '.' | '!' | '?') {
                j += 1;
            }
            let end = if j < chars.len() { chars[j].0 } else { text.len() };
            // Whitespace (not a line break: that is handled above) then a plausible sentence opener.
            let mut k = j;
            while k < chars.len() && chars[k].1.is_whitespace() && chars[k].1 != '\n' && chars[k].1 != '\r' {
                k += 1;
            }
            let opener = k > j
                && k < chars.len()
                && (chars[k].1.is_uppercase()
                    || chars[k].1.is_ascii_digit()
                    || matches!(chars[k].1, '"' | '“' | '\'' | '‘' | '(' | '['));
            if opener && !(c == '.' && ends_with_abbreviation(&text[start..b])) {
                push_trimmed(text, start..end, &mut out);
                start = chars[k].0;
                i = k;
                continue;
            }
        }
        i += 1;
    }
    push_trimmed(text, start..text.len(), &mut out);
    out
}

/// Byte offsets where sentences start (the first non-blank character of each sentence).
pub fn sentence_starts(text: &str) -> Vec<usize> {
    sentence_spans(text).into_iter().map(|r| r.start).collect()
}

/// Does the text before a period end with an abbreviation (so the period is not a sentence end)?
fn ends_with_abbreviation(before: &str) -> bool {
    let word = before.rsplit(|c: char| c.is_whitespace() || c == '(' || c == '"').next().unwrap_or("");
    if word.is_empty() {
        return false;
    }
    let n = word.chars().count();
    if n == 1 && word.chars().all(|c| c.is_alphabetic()) {
        return true; // an initial: "J. Smith"
    }
    if word.contains('.') && word.chars().all(|c| c.is_alphabetic() || c == '.') {
        return true; // "U.S", "e.g"
    }
    ABBREVIATIONS.contains(&word.to_lowercase().as_str())
}

fn push_trimmed(text: &str, r: Range<usize>, out: &mut Vec<Range<usize>>) {
    let s = &text[r.clone()];
    let lead = s.len() - s.trim_start().len();
    let trail = s.len() - s.trim_end().len();
    if lead + trail < s.len() {
        out.push(r.start + lead..r.end - trail);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(t: &str) -> Vec<&str> {
        sentence_spans(t).into_iter().map(|r| &t[r]).collect()
    }

    #[test]
    fn splits_on_terminal_punctuation_and_lines() {
        assert_eq!(
            split("Title (x)\n\nIt rained. Then it snowed! Did it? \"Yes.\" 1990 was cold."),
            vec!["Title (x)", "It rained.", "Then it snowed!", "Did it?", "\"Yes.\"", "1990 was cold."]
        );
    }

    #[test]
    fn keeps_abbreviations_and_initials() {
        assert_eq!(
            split("Dr. Smith moved to the U.S. in 1990. J. R. R. Tolkien wrote it in St. Louis. The end."),
            vec!["Dr. Smith moved to the U.S. in 1990.", "J. R. R. Tolkien wrote it in St. Louis.", "The end."]
        );
    }

    #[test]
    fn lower_case_after_period_does_not_split() {
        assert_eq!(split("He earned 3.5 pts. vs. others. ok"), vec!["He earned 3.5 pts. vs. others. ok"]);
    }

    #[test]
    fn byte_offsets_with_multibyte_text() {
        let t = "Zoë sang – well. Über alles.";
        let s = sentence_spans(t);
        assert_eq!(&t[s[1].clone()], "Über alles.");
        assert_eq!(s[0], 0..t.find(" Ü").unwrap());
        assert_eq!(sentence_starts(t), vec![0, t.find('Ü').unwrap()]);
    }
}
