//! Rule family 1: dates, years, times, numbers, quantities, percentages, money and ordinals, by regular
//! expression. Labels follow spaCy/OntoNotes where the rule knows the type: a duration in years or days
//! is a DATE (as OntoNotes annotates "fifty years"), one in hours or minutes a TIME; a number with a
//! unit of measure a QUANTITY; approximators ("about", "more than", "only") are part of the span, as in
//! OntoNotes.
//!
//! The patterns may overlap one another (a year is also a number); [`RuleExtractor`] resolves them as
//! the combined extractor does: longest span first, then the order MONEY, PERCENT, QUANTITY, DATE,
//! TIME, ORDINAL, CARDINAL.

use regex::Regex;

use super::{to_entities, EntityExtractor, EntityLabel, Span};

const NUM_WORDS: &str = "seventeen|thirteen|fourteen|eighteen|nineteen|fifteen|sixteen|seventy|twenty|thirty|\
forty|fifty|sixty|eighty|ninety|eleven|twelve|seven|three|eight|hundred|thousand|million|billion|trillion|\
dozen|four|five|nine|one|two|six|ten";
const ORD_WORDS: &str = "(?:(?:twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety)[\\s-])?\
(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth)|thirteenth|fourteenth|fifteenth|sixteenth|\
seventeenth|eighteenth|nineteenth|twentieth|thirtieth|fortieth|fiftieth|sixtieth|seventieth|eightieth|\
ninetieth|hundredth|thousandth|millionth|tenth|eleventh|twelfth";
const MONTHS: &str = "January|February|March|April|May|June|July|August|September|October|November|December|\
(?:Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)\\.";
const UNITS: &str =
    "km\\s?/\\s?h|km²|km2|m²|sq\\.? ?mi|square (?:miles?|kilometres?|kilometers?|feet|foot|metres?|meters?)|\
nautical miles?|kilometres?|kilometers?|miles per hour|miles?|mph|mi|metres?|meters?|centimetres?|centimeters?|\
millimetres?|millimeters?|cm|mm|km|m|feet|foot|ft|inches|inch|yards?|yd|kilograms?|kg|grams?|tonnes?|tons?|\
pounds|lbs?|acres?|hectares?|ha|knots|kn|horsepower|hp|MW|kW|GW|litres?|liters?|gallons?|°\\s?[CF]|degrees|\
storeys|stories|floors";
const CURRENCY_WORDS: &str = "dollars|euros|yen|francs|marks|rupees|guineas|shillings|pesos|US dollars|cents";

/// The regular expressions of this family, compiled once.
pub struct RuleExtractor {
    patterns: Vec<(Regex, EntityLabel, u8)>,
}

impl Default for RuleExtractor {
    fn default() -> Self {
        Self::new()
    }
}

impl RuleExtractor {
    pub fn new() -> Self {
        let digits = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?";
        let scale = r"(?:\s(?i:hundred|thousand|million|billion|trillion))?";
        let numw = format!(r"(?i:(?:{NUM_WORDS})(?:[ -](?:{NUM_WORDS}))*)");
        let num = format!(r"(?:(?:{digits}){scale}|{numw})");
        let approx = r"(?:(?i:about|approximately|around|nearly|almost|over|under|more than|less than|fewer than|at least|up to|only|some|roughly|just over|just under|an estimated)\s)?";
        let day = r"(?:[12]\d|3[01]|0?[1-9])(?:st|nd|rd|th)?";
        let year = r"(?:\d{1,4}\s?(?:BC|AD|BCE|CE|B\.C\.|A\.D\.)|(?:AD|A\.D\.)\s?\d{1,4}|1\d{3}|20\d{2})";
        let pre = r"(?:(?:the\s)?(?i:early|late|mid)[\s-])?";
        let months = format!("(?:{MONTHS})");
        let ordw = format!("(?i:{ORD_WORDS})");
        let date = [
            format!(r"{pre}{day}\s(?:of\s)?{months},?\s\d{{1,4}}(?:\s?(?:BC|AD))?"),
            format!(r"{pre}{months}\s{day},?\s\d{{4}}"),
            format!(r"{pre}{months}\s{day}(?:\s?[–-]\s?{day})?\b"),
            format!(r"{day}(?:\s?[–-]\s?{day})?\s{months}"),
            format!(r"{pre}{months},?\s(?:of\s)?{year}"),
            format!(r"{pre}(?:the\s)?(?:\d{{2,3}}0|'\d0)s\b"),
            format!(r"(?:the\s)?(?:(?i:early|late|mid)[\s-])?(?:{ordw}|\d{{1,2}}(?:st|nd|rd|th))[\s-](?:century|centuries|millennium)(?:\s(?:BC|AD|BCE|CE))?"),
            format!(r"(?i:between\s)?{pre}{year}(?:\s(?:to|and|or|until|through)\s{year})?(?:\s?[–—-]\s?(?:{year}|\d{{2}}))?(?:\s(?:season|census))?"),
            format!(r"(?i:spring|summer|autumn|fall|winter)\s(?:of\s)?{year}"),
            format!(r"(?:the\s)?(?:{ordw}|\d{{1,2}}(?:st|nd|rd|th))\s(?:season|series)"),
            format!(r"{approx}(?:{num}|a\sfew|several|many)[\s-](?i:years?|months?|weeks?|days?|decades?|centuries)(?:\s(?:old|later|ago|earlier|long))?"),
            r"(?i:today|yesterday|tomorrow|annually|the following year|the previous year|the same year|that year|this year|the next year|the next day|the following day|each year|every year)".to_string(),
            r"(?:January|February|March|April|June|July|August|September|October|November|December)".to_string(),
        ];
        let time = [
            r"\d{1,2}:\d{2}(?:\s?(?i:a\.m\.|p\.m\.|am|pm))?(?:\s[A-Z]{3})?".to_string(),
            r"\d{1,2}(?:\.\d{2})?\s?(?:a\.m\.|p\.m\.|AM|PM|am|pm)".to_string(),
            format!(r"{approx}(?:{num}|a\sfew|several)[\s-](?i:hours?|minutes?|seconds?)"),
        ];
        let money = [
            format!(r"{approx}(?:US|A|C|NZ|HK)?[$£€¥₹]\s?(?:{digits}){scale}(?:\s(?i:million|billion))?"),
            format!(r"{approx}{num}\s(?:{CURRENCY_WORDS})"),
        ];
        let percent = [format!(r"{approx}(?:{digits}|{numw})\s?(?:%|percent|per cent)")];
        let quantity = [format!(r"{approx}{num}(?:\s?[–-]\s?{num})?[\s-]?(?:{UNITS})")];
        let ordinal = [format!(r"\d+(?:st|nd|rd|th)|{ordw}")];
        let cardinal = [
            format!(r"{approx}{num}"),
            r"(?i:hundreds|thousands|millions|dozens|tens of thousands|hundreds of thousands)".to_string(),
        ];
        let mut patterns = Vec::new();
        let mut add = |list: &[String], label: EntityLabel, priority: u8| {
            for p in list {
                // Whole words only: checked in `spans` (a leading `\b` would reject "$5" after a space).
                let re = Regex::new(p).unwrap_or_else(|e| panic!("bad rule regex {p}: {e}"));
                patterns.push((re, label, priority));
            }
        };
        add(&money, EntityLabel::Money, 0);
        add(&percent, EntityLabel::Percent, 1);
        add(&quantity, EntityLabel::Quantity, 2);
        add(&date, EntityLabel::Date, 3);
        add(&time, EntityLabel::Time, 4);
        add(&ordinal, EntityLabel::Ordinal, 5);
        add(&cardinal, EntityLabel::Cardinal, 6);
        RuleExtractor { patterns }
    }

    /// Every match of every pattern (they may overlap), byte offsets.
    pub(crate) fn spans(&self, text: &str) -> Vec<Span> {
        let mut out = Vec::new();
        for (re, label, priority) in &self.patterns {
            let mut pos = 0;
            while let Some(m) = re.find_at(text, pos) {
                let (s, mut e) = (m.start(), m.end());
                // A trailing period belongs to the sentence unless it closes "B.C."-style tokens.
                if text[s..e].ends_with('.') && !text[s..e].ends_with(".C.") && !text[s..e].ends_with(".D.") {
                    e -= 1;
                }
                if e > s && word_boundaries(text, s, e) {
                    out.push(Span { start: s, end: e, label: *label, priority: *priority });
                    pos = m.end();
                } else {
                    // Rejected (inside a word): retry from the next character, not after the match.
                    pos = s + text[s..].chars().next().map_or(1, |c| c.len_utf8());
                }
                if pos >= text.len() {
                    break;
                }
            }
        }
        out
    }
}

/// The span must not cut a word or a code like "F-16", "A380", "3.5" on either side.
fn word_boundaries(text: &str, s: usize, e: usize) -> bool {
    let before = text[..s].chars().next_back();
    let before2 = text[..s].chars().rev().nth(1);
    let after = text[e..].chars().next();
    let after2 = text[e..].chars().nth(1);
    if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
        return false;
    }
    if after.is_some_and(|c| c.is_alphanumeric() || c == '_') {
        return false;
    }
    // "F-16", "B-52": a number glued to letters by a hyphen is part of a name; "-3" handled alike.
    if matches!(before, Some('-' | '/' | '.' | ',')) && before2.is_some_and(|c| c.is_alphanumeric()) {
        return false;
    }
    if matches!(after, Some('-' | '/' | '.' | ',')) && after2.is_some_and(|c| c.is_ascii_digit()) {
        return false;
    }
    true
}

/// Resolve overlapping spans: longest first, then lower priority value, then earlier start.
pub(crate) fn resolve(mut spans: Vec<Span>) -> Vec<Span> {
    spans.sort_by(|a, b| {
        (b.end - b.start).cmp(&(a.end - a.start)).then(a.priority.cmp(&b.priority)).then(a.start.cmp(&b.start))
    });
    let mut chosen: Vec<Span> = Vec::new();
    for s in spans {
        if chosen.iter().all(|c| s.end <= c.start || s.start >= c.end) {
            chosen.push(s);
        }
    }
    chosen.sort_by_key(|s| s.start);
    chosen
}

impl EntityExtractor for RuleExtractor {
    fn extract(&self, text: &str) -> Vec<super::Entity> {
        to_entities(text, &resolve(self.spans(text)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(text: &str) -> Vec<(String, &'static str)> {
        RuleExtractor::new().extract(text).into_iter().map(|e| (e.text, e.label.as_str())).collect()
    }

    fn pairs(v: &[(&str, &'static str)]) -> Vec<(String, &'static str)> {
        v.iter().map(|(a, b)| (a.to_string(), *b)).collect()
    }

    #[test]
    fn dates() {
        assert_eq!(
            found("Edward III (13 November 1312 – 21 June 1377) was King from 25 January 1327."),
            pairs(&[("13 November 1312", "DATE"), ("21 June 1377", "DATE"), ("25 January 1327", "DATE")])
        );
        assert_eq!(
            found("Born July 19, 1896, formed in early 1943, in the 1990s, in the 19th century, in September."),
            pairs(&[
                ("July 19, 1896", "DATE"),
                ("early 1943", "DATE"),
                ("the 1990s", "DATE"),
                ("the 19th century", "DATE"),
                ("September", "DATE")
            ])
        );
        assert_eq!(
            found("It ran from 1965 to 1972 for fifty years."),
            pairs(&[("1965 to 1972", "DATE"), ("fifty years", "DATE")])
        );
        assert_eq!(found("the 2010–11 season"), pairs(&[("2010–11 season", "DATE")]));
        assert_eq!(found("in 44 BC"), pairs(&[("44 BC", "DATE")]));
    }

    #[test]
    fn numbers_ordinals_quantities_money_percent() {
        assert_eq!(
            found("Only five of the 1,200 men, more than sixty, came second and 3rd."),
            pairs(&[
                ("Only five", "CARDINAL"),
                ("1,200", "CARDINAL"),
                ("more than sixty", "CARDINAL"),
                ("second", "ORDINAL"),
                ("3rd", "ORDINAL")
            ])
        );
        assert_eq!(
            found("winds of 175 km / h and 65 miles per hour, about 310 miles away"),
            pairs(&[("175 km / h", "QUANTITY"), ("65 miles per hour", "QUANTITY"), ("about 310 miles", "QUANTITY")])
        );
        assert_eq!(
            found("It cost $35 million, over $750 million and 12 dollars; About 8% and 85 percent."),
            pairs(&[
                ("$35 million", "MONEY"),
                ("over $750 million", "MONEY"),
                ("12 dollars", "MONEY"),
                ("About 8%", "PERCENT"),
                ("85 percent", "PERCENT")
            ])
        );
        assert_eq!(found("at 02:30 PM EST, 48 hours later"), pairs(&[("02:30 PM EST", "TIME"), ("48 hours", "TIME")]));
        assert_eq!(
            found("twenty-first and one hundred"),
            pairs(&[("twenty-first", "ORDINAL"), ("one hundred", "CARDINAL")])
        );
    }

    #[test]
    fn no_numbers_inside_codes_or_words() {
        assert!(found("the F-16 and A380 and B2B").is_empty(), "{:?}", found("the F-16 and A380 and B2B"));
        assert!(found("someone, everyone, stone").is_empty());
        assert_eq!(found("version 3.5."), pairs(&[("3.5", "CARDINAL")]));
    }
}
