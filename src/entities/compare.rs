//! Does the entity a model wrote match the original one? RaDIO/MIND label a truncation point 1
//! (hallucinated) when the model's continuation starts with a different entity than the article.
//!
//! Rules, tried in this order; the first that decides wins and is reported in [`Comparison::rule`]:
//! 1. `"empty"`: nothing generated: hallucinated.
//! 2. `"normalised"`: equal after lower-casing, dropping punctuation, possessive "'s" and the articles
//!    a/an/the: not hallucinated.
//! 3. `"date"` / `"number"`: when the original reads as a date or a number (see [`parse_value`]), the
//!    generated text must read as an equivalent value ("1,000" = "one thousand", "1st" = "first",
//!    "March 3, 1990" = "3 March 1990", "12%" = "12 percent", "100 km" = "100 kilometres"); this rule
//!    always decides. Dates are equivalent when they agree on every component both give (so "March
//!    1990" matches "1990"); numbers when the values are equal and, where both give a unit, the units.
//!    Approximators ("about", "more than") are ignored.
//! 4. `"alias"`: one is contained in the other as whole words ("Edward III" in "Edward III of
//!    England"); `"surname"`: same last word and same first word or matching initial ("A. Lincoln",
//!    "Abraham Lincoln"); `"acronym"`: one is the initials of the other's words ("USA", "U.S.", "United
//!    States of America"): not hallucinated.
//! 5. `"wordnet"` (if WordNet is loaded): the two share a synset: not hallucinated.
//! 6. `"glove"` (if GloVe is loaded): cosine of the mean word vectors of the words that differ
//!    between the two (shared words dropped) >= `glove_threshold`: not hallucinated.
//! 7. `"no-match"`: hallucinated.

use anyhow::Result;

use super::glove::Glove;
use super::wordnet::WordNet;

/// Optional resources for the comparison rules.
pub struct Resources {
    pub glove: Option<Glove>,
    pub wordnet: Option<WordNet>,
    /// Cosine at or above which two entities count as the same (rule 6). Default 0.97: 50-d GloVe puts
    /// different entities of one kind close (measured: east/west 0.954, north/south 0.947, Sunday/Monday
    /// 0.926, john/james 0.910, france/germany 0.774) and real variants no closer (colour/color 0.891,
    /// film/movie 0.931, theatre/theater 0.925: WordNet catches those), so only near-identical words pass.
    pub glove_threshold: f32,
}

pub const DEFAULT_GLOVE_THRESHOLD: f32 = 0.97;

impl Resources {
    /// No optional resource: string, alias and number/date rules only.
    pub fn none() -> Self {
        Resources { glove: None, wordnet: None, glove_threshold: DEFAULT_GLOVE_THRESHOLD }
    }

    /// GloVe and WordNet from their default places, each only if installed.
    pub fn load_default(glove_threshold: f32) -> Result<Self> {
        Ok(Resources { glove: Glove::load_default()?, wordnet: WordNet::load_default()?, glove_threshold })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Comparison {
    /// Label 1 (true) = hallucinated, 0 (false) = not.
    pub hallucinated: bool,
    /// Which rule decided.
    pub rule: &'static str,
}

fn decide(hallucinated: bool, rule: &'static str) -> Comparison {
    Comparison { hallucinated, rule }
}

/// Compare the original entity text with what the model generated in its place.
pub fn compare_entities(original: &str, generated: &str, res: &Resources) -> Comparison {
    let (no, ng) = (normalise(original), normalise(generated));
    if ng.is_empty() {
        return decide(true, "empty");
    }
    if no == ng {
        return decide(false, "normalised");
    }
    if let Some(vo) = parse_value(original) {
        let rule = if matches!(vo, Value::Date { .. }) { "date" } else { "number" };
        let same = parse_value(generated).is_some_and(|vg| equivalent(&vo, &vg));
        return decide(!same, rule);
    }
    let (to, tg) = (tokens(&no), tokens(&ng));
    if contains_words(&to, &tg) || contains_words(&tg, &to) {
        return decide(false, "alias");
    }
    if surname_match(original, generated) {
        return decide(false, "surname");
    }
    if is_acronym_of(original, generated) || is_acronym_of(generated, original) {
        return decide(false, "acronym");
    }
    if let Some(wn) = &res.wordnet {
        if wn.synonyms(&no, &ng) {
            return decide(false, "wordnet");
        }
    }
    if let Some(g) = &res.glove {
        // Words both share would pull the means together ("John Smith" / "James Smith"): compare
        // only the words that differ.
        let only_o: Vec<&str> = to.iter().copied().filter(|w| !tg.contains(w)).collect();
        let only_g: Vec<&str> = tg.iter().copied().filter(|w| !to.contains(w)).collect();
        if g.cosine(&only_o.join(" "), &only_g.join(" ")).is_some_and(|c| c >= res.glove_threshold) {
            return decide(false, "glove");
        }
    }
    decide(true, "no-match")
}

/// Lower-case, punctuation to spaces (digits kept, "1,000" kept whole), possessive and articles dropped.
pub fn normalise(s: &str) -> String {
    let lower = s.to_lowercase().replace("'s ", " ").replace("’s ", " ");
    let lower = lower.strip_suffix("'s").or_else(|| lower.strip_suffix("’s")).unwrap_or(&lower).to_string();
    let chars: Vec<char> = lower.chars().collect();
    let mut cleaned = String::new();
    for (i, &c) in chars.iter().enumerate() {
        let digit_sep = (c == ',' || c == '.')
            && i > 0
            && chars[i - 1].is_ascii_digit()
            && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit());
        if c.is_alphanumeric() || digit_sep || c == '%' || c == '$' || c == '£' || c == '€' {
            cleaned.push(c);
        } else {
            cleaned.push(' ');
        }
    }
    cleaned.split_whitespace().filter(|w| !matches!(*w, "the" | "a" | "an")).collect::<Vec<_>>().join(" ")
}

fn tokens(s: &str) -> Vec<&str> {
    s.split_whitespace().collect()
}

/// Is `small` a contiguous run of whole words of `big`, holding at least one word that is not a
/// connector?
fn contains_words(big: &[&str], small: &[&str]) -> bool {
    if small.is_empty() || small.len() > big.len() {
        return false;
    }
    if small.iter().all(|w| matches!(*w, "of" | "and" | "de" | "in" | "on" | "for")) {
        return false;
    }
    big.windows(small.len()).any(|w| w == small)
}

/// Same last word and same first word (or one an initial of the other), both with 2+ words.
fn surname_match(a: &str, b: &str) -> bool {
    let wa: Vec<String> = normalise(a).split_whitespace().map(str::to_string).collect();
    let wb: Vec<String> = normalise(b).split_whitespace().map(str::to_string).collect();
    if wa.len() < 2 || wb.len() < 2 || wa.last() != wb.last() {
        return false;
    }
    let (fa, fb) = (&wa[0], &wb[0]);
    fa == fb
        || (fa.chars().count() == 1 && fb.starts_with(fa.as_str()))
        || (fb.chars().count() == 1 && fa.starts_with(fb.as_str()))
}

/// Is `acro` ("USA", "U.S.", "NASA") the initials of the capitalised words of `full`?
fn is_acronym_of(acro: &str, full: &str) -> bool {
    let letters: String = acro.chars().filter(|c| *c != '.').collect();
    if letters.chars().count() < 2 || !letters.chars().all(|c| c.is_uppercase()) || acro.contains(' ') {
        return false;
    }
    let initials: String = full
        .split(|c: char| c.is_whitespace() || c == '-')
        .filter(|w| w.chars().next().is_some_and(char::is_uppercase))
        .filter_map(|w| w.chars().next())
        .collect();
    initials.chars().count() >= 2 && initials == letters
}

/// A value a number or date entity denotes.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Number { value: f64, ordinal: bool, unit: Option<String> },
    Date { year: Option<i64>, month: Option<u32>, day: Option<u32> },
}

#[rustfmt::skip]
const MONTHS: [&str; 12] =
    ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october", "november", "december"];

fn month_of(w: &str) -> Option<u32> {
    let w = w.trim_end_matches('.');
    MONTHS.iter().position(|m| *m == w || (w.len() >= 3 && m.starts_with(w))).map(|i| i as u32 + 1)
}

#[rustfmt::skip]
const APPROX: &[&str] =
    &["about", "approximately", "around", "nearly", "almost", "over", "under", "more", "less", "fewer", "than", "at", "least", "up", "to", "only", "some", "roughly", "just", "an", "estimated", "in", "on", "of", "the", "a"];

fn small_number(w: &str) -> Option<(f64, bool)> {
    #[rustfmt::skip]
    const UNITS: [&str; 20] = [
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
        "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
    ];
    const ORD: [&str; 20] = [
        "zeroth",
        "first",
        "second",
        "third",
        "fourth",
        "fifth",
        "sixth",
        "seventh",
        "eighth",
        "ninth",
        "tenth",
        "eleventh",
        "twelfth",
        "thirteenth",
        "fourteenth",
        "fifteenth",
        "sixteenth",
        "seventeenth",
        "eighteenth",
        "nineteenth",
    ];
    const TENS: [&str; 8] = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"];
    const TENS_ORD: [&str; 8] =
        ["twentieth", "thirtieth", "fortieth", "fiftieth", "sixtieth", "seventieth", "eightieth", "ninetieth"];
    if let Some(i) = UNITS.iter().position(|u| *u == w) {
        return Some((i as f64, false));
    }
    if let Some(i) = ORD.iter().position(|u| *u == w) {
        return Some((i as f64, true));
    }
    if let Some(i) = TENS.iter().position(|u| *u == w) {
        return Some((20.0 + 10.0 * i as f64, false));
    }
    if let Some(i) = TENS_ORD.iter().position(|u| *u == w) {
        return Some((20.0 + 10.0 * i as f64, true));
    }
    None
}

fn scale_of(w: &str) -> Option<f64> {
    match w {
        "hundred" | "hundredth" => Some(100.0),
        "thousand" | "thousandth" => Some(1e3),
        "million" | "millionth" => Some(1e6),
        "billion" => Some(1e9),
        "trillion" => Some(1e12),
        "dozen" => Some(12.0),
        _ => None,
    }
}

fn unit_of(w: &str) -> Option<&'static str> {
    Some(match w {
        "km" | "kilometre" | "kilometres" | "kilometer" | "kilometers" => "km",
        "mi" | "mile" | "miles" => "mi",
        "mph" => "mi/hour",
        "m" | "metre" | "metres" | "meter" | "meters" => "m",
        "cm" | "centimetre" | "centimetres" | "centimeter" | "centimeters" => "cm",
        "mm" | "millimetre" | "millimetres" | "millimeter" | "millimeters" => "mm",
        "ft" | "feet" | "foot" => "ft",
        "in" | "inch" | "inches" => "in",
        "kg" | "kilogram" | "kilograms" => "kg",
        "lb" | "lbs" | "pound" | "pounds" => "lb",
        "t" | "ton" | "tons" | "tonne" | "tonnes" => "t",
        "acre" | "acres" => "acre",
        "ha" | "hectare" | "hectares" => "ha",
        "%" | "percent" | "per cent" => "%",
        "$" | "dollar" | "dollars" | "usd" => "$",
        "£" => "£",
        "€" | "euro" | "euros" => "€",
        "year" | "years" => "year",
        "month" | "months" => "month",
        "week" | "weeks" => "week",
        "day" | "days" => "day",
        "decade" | "decades" => "decade",
        "century" | "centuries" => "century",
        "h" | "hour" | "hours" => "hour",
        "minute" | "minutes" => "minute",
        "second" | "seconds" => "second",
        "knots" | "kn" => "kn",
        "hp" | "horsepower" => "hp",
        _ => return None,
    })
}

/// Read a date or a number (with optional unit) out of an entity string; `None` if it is neither.
/// Units are canonicalised ("kilometres" = "km", "mph" = "miles per hour" = "mi/hour").
pub fn parse_value(s: &str) -> Option<Value> {
    let lower = s.to_lowercase().replace(['–', '—'], " - ");
    // Digit-group commas ("1,000,000") go first, so that the number stays one word; such a number is
    // never read as a year.
    let lc: Vec<char> = lower.chars().collect();
    let mut grouped = false;
    let mut spaced = String::new();
    for (i, &c) in lc.iter().enumerate() {
        let group_comma = c == ','
            && i > 0
            && lc[i - 1].is_ascii_digit()
            && lc.len() >= i + 4
            && lc[i + 1..i + 4].iter().all(|d| d.is_ascii_digit())
            && lc.get(i + 4).is_none_or(|d| !d.is_ascii_digit());
        if group_comma {
            grouped = true;
        } else if matches!(c, '$' | '£' | '€' | '%' | '/') {
            // Separate symbols from digits: "$35" -> "$ 35", "12%" -> "12 %".
            spaced.push(' ');
            spaced.push(c);
            spaced.push(' ');
        } else if matches!(c, ',' | '(' | ')' | '"' | ';' | ':') {
            spaced.push(' ');
        } else {
            spaced.push(c);
        }
    }
    let words: Vec<String> = spaced
        .split([' ', '-'])
        .map(|w| w.trim_end_matches('.'))
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect();
    let words: Vec<&str> = words.iter().map(String::as_str).filter(|w| !APPROX.contains(w)).collect();
    if words.is_empty() {
        return None;
    }
    // Dates: a month name somewhere, or a lone year (with "early"/"late"/"mid" or "bc"/"ad").
    let month_pos = words.iter().position(|w| month_of(w).is_some() && *w != "may" || *w == "may" && words.len() > 1);
    let era_bc = words.iter().any(|w| matches!(*w, "bc" | "bce" | "b.c"));
    let date_words: Vec<&str> = words
        .iter()
        .copied()
        .filter(|w| !matches!(*w, "early" | "late" | "mid" | "bc" | "bce" | "ad" | "ce" | "b.c" | "a.d"))
        .collect();
    if let Some(mp) = month_pos {
        let month = month_of(words[mp]);
        let (mut year, mut day) = (None, None);
        for (i, w) in words.iter().enumerate() {
            if i == mp {
                continue;
            }
            let digits = w.trim_end_matches(|c: char| c.is_alphabetic());
            let Ok(n) = digits.parse::<i64>() else {
                if matches!(*w, "early" | "late" | "mid" | "bc" | "bce" | "ad" | "ce" | "of") {
                    continue;
                }
                return None;
            };
            if (1..=31).contains(&n) && day.is_none() && (w.len() <= 2 || !digits.eq(*w)) && year.is_none() {
                day = Some(n as u32);
            } else if year.is_none() {
                year = Some(if era_bc { -n } else { n });
            } else {
                return None;
            }
        }
        return Some(Value::Date { year, month, day });
    }
    if date_words.len() == 1 {
        let w = date_words[0];
        if let Ok(n) = w.parse::<i64>() {
            if !grouped && (w.len() == 4 && (1000..=2100).contains(&n) || era_bc || words.len() > date_words.len()) {
                return Some(Value::Date { year: Some(if era_bc { -n } else { n }), month: None, day: None });
            }
        }
    }
    // Numbers: digits or number words, an optional scale, an optional unit.
    let (mut total, mut current, mut seen, mut ordinal) = (0f64, 0f64, false, false);
    let mut unit: Option<String> = None;
    let mut per = false;
    for w in &words {
        let stem = w.trim_end_matches(|c: char| c.is_alphabetic());
        let suffix = &w[stem.len()..];
        if !stem.is_empty()
            && stem.chars().all(|c| c.is_ascii_digit() || c == '.')
            && stem.chars().next().is_some_and(|c| c.is_ascii_digit())
        {
            let Ok(v) = stem.parse::<f64>() else { return None };
            match suffix {
                "" => {}
                "st" | "nd" | "rd" | "th" => ordinal = true,
                "s" => {}
                other => {
                    unit = Some(unit_of(other)?.to_string());
                }
            }
            current += v;
            seen = true;
        } else if let Some((v, ord)) = small_number(w) {
            current += v;
            ordinal |= ord;
            seen = true;
        } else if let Some(sc) = scale_of(w) {
            if !seen {
                current = 1.0;
                seen = true;
            }
            if sc == 100.0 || sc == 12.0 {
                current *= sc;
            } else {
                total += current * sc;
                current = 0.0;
            }
            if w.ends_with("th") {
                ordinal = true;
            }
        } else if *w == "and" {
            continue;
        } else if *w == "per" || *w == "/" {
            per = true;
        } else if let Some(u) = unit_of(w) {
            unit = Some(match unit.take() {
                Some(prev) if per => format!("{prev}/{u}"),
                Some(prev) => format!("{prev} {u}"),
                None => u.to_string(),
            });
            per = false;
        } else {
            return None;
        }
    }
    if !seen {
        return None;
    }
    Some(Value::Number { value: total + current, ordinal, unit })
}

fn agree<T: PartialEq>(x: &Option<T>, y: &Option<T>) -> bool {
    x.is_none() || y.is_none() || x == y
}

fn equivalent(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Date { year: ya, month: ma, day: da }, Value::Date { year: yb, month: mb, day: db }) => {
            let shared = (ya.is_some() && yb.is_some()) || (ma.is_some() && mb.is_some());
            shared && agree(ya, yb) && agree(ma, mb) && agree(da, db)
        }
        (Value::Number { value: va, ordinal: oa, unit: ua }, Value::Number { value: vb, ordinal: ob, unit: ub }) => {
            (va - vb).abs() <= 1e-9 * va.abs().max(1.0) && oa == ob && (ua.is_none() || ub.is_none() || ua == ub)
        }
        // "1000" reads as a year, "1,000" or "one thousand" as a number: same value, same entity.
        (
            Value::Date { year: Some(y), month: None, day: None },
            Value::Number { value, ordinal: false, unit: None },
        )
        | (
            Value::Number { value, ordinal: false, unit: None },
            Value::Date { year: Some(y), month: None, day: None },
        ) => *y as f64 == *value,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmp(a: &str, b: &str) -> (bool, &'static str) {
        let c = compare_entities(a, b, &Resources::none());
        (c.hallucinated, c.rule)
    }

    #[test]
    fn normalised_string_rule() {
        assert_eq!(cmp("the Australian Army", "Australian Army"), (false, "normalised"));
        assert_eq!(cmp("Georgia Tech", "georgia tech."), (false, "normalised"));
        assert_eq!(cmp("Edward's", "Edward"), (false, "normalised"));
        assert_eq!(cmp("Paris", ""), (true, "empty"));
        assert_eq!(normalise("The U.S. Army's 1,000 men."), "u s army 1,000 men");
    }

    #[test]
    fn number_rule() {
        assert_eq!(cmp("1,000", "one thousand"), (false, "number"));
        assert_eq!(cmp("1,000", "1000"), (false, "number"));
        assert_eq!(cmp("1st", "first"), (false, "number"));
        assert_eq!(cmp("twenty-first", "21st"), (false, "number"));
        assert_eq!(cmp("first", "1"), (true, "number")); // ordinal vs cardinal
        assert_eq!(cmp("three", "four"), (true, "number"));
        assert_eq!(cmp("$35 million", "35 million dollars"), (false, "number"));
        assert_eq!(cmp("12%", "12 percent"), (false, "number"));
        assert_eq!(cmp("about 310 miles", "310 mi"), (false, "number"));
        assert_eq!(cmp("100 km", "100 miles"), (true, "number"));
        assert_eq!(cmp("175 km / h", "175 km/h"), (false, "normalised"));
        assert_eq!(cmp("175 km / h", "175 kilometres per hour"), (false, "number"));
        assert_eq!(cmp("65 mph", "65 miles per hour"), (false, "number"));
        assert_eq!(cmp("fifty years", "50 years"), (false, "number"));
        assert_eq!(cmp("one hundred and twenty", "120"), (false, "number"));
        assert_eq!(cmp("2.5 million", "2,500,000"), (false, "number"));
        assert_eq!(cmp("seven", "several"), (true, "number")); // not a number at all
        assert_eq!(
            parse_value("more than 1,200 km"),
            Some(Value::Number { value: 1200.0, ordinal: false, unit: Some("km".into()) })
        );
    }

    #[test]
    fn date_rule() {
        assert_eq!(cmp("March 3, 1990", "3 March 1990"), (false, "date"));
        assert_eq!(cmp("3 March 1990", "4 March 1990"), (true, "date"));
        assert_eq!(cmp("1943", "early 1943"), (false, "date"));
        assert_eq!(cmp("1943", "1944"), (true, "date"));
        assert_eq!(cmp("June 1377", "1377"), (false, "date")); // agree on every shared component
        assert_eq!(cmp("June 1377", "July 1377"), (true, "date"));
        assert_eq!(cmp("1377", "June"), (true, "date")); // nothing shared to check
        assert_eq!(cmp("44 BC", "44 AD"), (true, "date"));
        assert_eq!(parse_value("21 June 1377"), Some(Value::Date { year: Some(1377), month: Some(6), day: Some(21) }));
        assert_eq!(
            parse_value("Sept. 9th, 2001"),
            Some(Value::Date { year: Some(2001), month: Some(9), day: Some(9) })
        );
    }

    #[test]
    fn alias_surname_acronym_rules() {
        assert_eq!(cmp("Edward III of England", "Edward III"), (false, "alias"));
        assert_eq!(cmp("Lincoln", "Abraham Lincoln"), (false, "alias"));
        assert_eq!(cmp("John Smith", "J. Smith"), (false, "surname"));
        assert_eq!(cmp("Abraham Lincoln", "Mary Lincoln"), (true, "no-match"));
        assert_eq!(cmp("United States of America", "USA"), (false, "acronym"));
        assert_eq!(cmp("U.S.", "United States"), (false, "acronym"));
        assert_eq!(cmp("NASA", "National Aeronautics and Space Administration"), (false, "acronym"));
        assert_eq!(cmp("France", "Germany"), (true, "no-match"));
        assert_eq!(cmp("Bank of America", "of"), (true, "no-match")); // a connector alone is no alias
    }

    #[test]
    fn wordnet_and_glove_rules_with_hand_made_resources() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("data.noun"), "09826204 18 n 02 car 0 automobile 0 000 | a motor vehicle\n")
            .unwrap();
        let wn = WordNet::load(dir.path()).unwrap();
        let npy = super::super::glove::Npy { rows: 3, cols: 2, data: vec![1., 0., 0.96, 0.28, 0., 1.] };
        // cos(boat, ship) = 0.96 / 1 = 0.96; cos(boat, plane) = 0.
        let g = Glove::from_parts(vec!["boat".into(), "ship".into(), "plane".into()], npy);
        let res = Resources { glove: Some(g), wordnet: Some(wn), glove_threshold: 0.9 };
        assert_eq!(compare_entities("car", "automobile", &res), Comparison { hallucinated: false, rule: "wordnet" });
        assert_eq!(compare_entities("boat", "ship", &res), Comparison { hallucinated: false, rule: "glove" });
        assert_eq!(compare_entities("boat", "plane", &res), Comparison { hallucinated: true, rule: "no-match" });
        let strict = Resources { glove_threshold: 0.97, ..res };
        assert_eq!(compare_entities("boat", "ship", &strict).rule, "no-match");
    }

    /// Runs with whatever optional resources are installed here (WordNet, GloVe); each check only
    /// where its resource is present.
    #[test]
    fn real_resources_when_installed() {
        let res = Resources::load_default(DEFAULT_GLOVE_THRESHOLD).unwrap();
        assert_eq!(compare_entities("France", "Germany", &res).rule, "no-match");
        assert_eq!(compare_entities("John Smith", "James Smith", &res).rule, "no-match");
        // Pairs 50-d GloVe puts close (cosines measured: 0.957 for the means of "Edward II"/"Edward III",
        // east/west 0.954, north/south 0.947, Sunday/Monday 0.926): all different entities.
        for (a, b) in [
            ("Edward II", "Edward III"),
            ("east", "west"),
            ("north", "south"),
            ("Sunday", "Monday"),
            ("Louis XIV", "Louis XVI"),
        ] {
            assert!(compare_entities(a, b, &res).hallucinated, "{a} / {b}");
        }
        if res.wordnet.is_some() {
            assert_eq!(
                compare_entities("United States", "America", &res),
                Comparison { hallucinated: false, rule: "wordnet" }
            );
            assert_eq!(compare_entities("physician", "doctor", &res).rule, "wordnet");
            for (a, b) in [("colour", "color"), ("film", "movie"), ("Soviet Union", "USSR"), ("Peking", "Beijing")] {
                assert_eq!(compare_entities(a, b, &res).rule, "wordnet", "{a} / {b}");
            }
        }
    }
}
