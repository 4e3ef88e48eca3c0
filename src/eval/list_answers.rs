//! BioASQ's measures for list questions: the answer is a list of entries, each gold entry a list of synonyms;
//! per question precision, recall and F-measure, their means over the questions the reported figures (BioASQ Task
//! B, phase B: "mean precision / recall / F-measure").
//!
//! As BioASQ's evaluator (`QuestionAnswerEvaluator.calculatePRFforListQuestions` and
//! `ExactAnswer.containsAnswerSynonym`, github.com/BioASQ/Evaluation-Measures):
//! 1. each predicted entry, in order, takes the first gold entry not yet taken that has a synonym equal to it: a
//!    true positive; a predicted entry that takes none (a wrong one, or a repeat) is a false positive;
//! 2. each gold entry not taken, in order, is matched against the predicted entries not yet used in this pass:
//!    one that names it is used up, and only a gold entry no predicted entry names is a false negative;
//! 3. precision = TP / (TP + FP), recall = TP / (TP + FN), F = 2PR / (P + R) (0 when P or R is 0); an empty
//!    list scores 0.
//!
//! Step 2 is the evaluator's as written: a predicted entry that names two gold entries counts once for precision
//! but covers both for recall.
//!
//! Deviations, because here the entries come from a model's sentence rather than a submitted JSON list:
//! - entries and synonyms are equal after SQuAD's normalisation ([`normalize_answer`]: case, punctuation,
//!   articles, spaces), where the evaluator compares lower-cased strings;
//! - the answer is cut into entries by [`answer_entries`].
//!
//! Exact match of a list question is 1 when precision and recall are both 1; `contains` is 1 when every gold
//! entry has a synonym in the answer ([`contains_answer`]), so closed-book labelling
//! ([`crate::synth::qa_labels`]) counts an answer right only when it names all the entries.

use super::metrics::{contains_answer, normalize_answer, Scores};

/// The entries of a list answer, in order: the text, up to a repeated "So the answer is", is cut at line breaks,
/// semicolons and commas followed by a space (a comma inside a word, as "1,2-dichloroethane" or "15,140", is
/// kept), each piece freed of a leading bullet or number ("-", "*", "•", "1.", "2)", "(3)") and a leading
/// "and"/"or" (", and C"), then cut again at a whole-word "and", "&" or "as well as" — unless the piece as it
/// stands equals a gold synonym ("CD4 and CD8 T cells" is one entry where the gold names it so). Empty pieces and
/// "etc." are dropped. Each entry is a piece of `answer`.
pub fn answer_entries(answer: &str, gold: &[Vec<String>]) -> Vec<String> {
    let synonyms: Vec<String> = gold.iter().flatten().map(|s| normalize_answer(s)).filter(|s| !s.is_empty()).collect();
    entries_given(answer, &synonyms)
}

/// [`answer_entries`] with the gold synonyms already normalised.
fn entries_given(answer: &str, synonyms: &[String]) -> Vec<String> {
    let answer = before_answer_phrase(answer);
    let is_synonym = |piece: &str| synonyms.contains(&normalize_answer(piece));
    let mut out = Vec::new();
    for piece in pieces(answer) {
        let piece = clean(piece);
        if piece.is_empty() {
            continue;
        }
        if is_synonym(piece) {
            out.push(piece.to_string());
            continue;
        }
        for part in split_words(piece, &["and", "&", "as well as"]) {
            let part = clean(part);
            let norm = normalize_answer(part);
            if !norm.is_empty() && norm != "etc" {
                out.push(part.to_string());
            }
        }
    }
    out
}

/// `answer` up to a repeat of the answer phrase: a model that writes no full stop after its list may go on with
/// "..., So the answer is ..." again.
fn before_answer_phrase(answer: &str) -> &str {
    let lower = answer.to_ascii_lowercase();
    let Some(at) = lower.find("the answer is") else { return answer };
    let head = &answer[..at];
    let trimmed = head.trim_end();
    match trimmed.len().checked_sub(2) {
        Some(i) if lower.get(i..trimmed.len()) == Some("so") && !lower[..i].ends_with(char::is_alphanumeric) => {
            &answer[..i]
        }
        _ => head,
    }
}

/// The text cut at line breaks, semicolons, and commas followed by whitespace or ending the text.
fn pieces(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let cut = match c {
            '\n' | ';' => true,
            ',' => chars.peek().is_none_or(|(_, n)| n.is_whitespace()),
            _ => false,
        };
        if cut {
            out.push(&text[start..i]);
            start = i + c.len_utf8();
        }
    }
    out.push(&text[start..]);
    out
}

/// A piece without surrounding spaces, quotes and final full stops, a leading bullet or item number, or a
/// leading "and "/"or ".
fn clean(piece: &str) -> &str {
    fn trim(s: &str) -> &str {
        s.trim_matches(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`'))
    }
    let mut s = trim(piece).trim_end_matches('.');
    s = trim(s);
    if let Some(rest) = s.strip_prefix(['-', '*', '•', '–']) {
        s = trim(rest);
    } else if let Some(rest) = item_number(s) {
        s = trim(rest);
    }
    for word in ["and ", "or "] {
        if s.len() > word.len() && s.get(..word.len()).is_some_and(|w| w.eq_ignore_ascii_case(word)) {
            s = trim(&s[word.len()..]);
        }
    }
    s
}

/// The rest of `s` after an item number "1." / "2)" / "(3)" followed by a space, if it opens with one.
fn item_number(s: &str) -> Option<&str> {
    let (open, body) = match s.strip_prefix('(') {
        Some(b) => (true, b),
        None => (false, s),
    };
    let digits = body.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits > 3 {
        return None;
    }
    let rest = &body[digits..];
    let rest = if open { rest.strip_prefix(')')? } else { rest.strip_prefix(['.', ')'])? };
    rest.starts_with(char::is_whitespace).then_some(rest)
}

/// `piece` cut at each whole-word (case-insensitive) occurrence of one of `words`.
fn split_words<'a>(piece: &'a str, words: &[&str]) -> Vec<&'a str> {
    let lower = piece.to_ascii_lowercase();
    let mut out = Vec::new();
    let (mut start, mut i) = (0, 0);
    while i < piece.len() {
        let at_word_start = i == 0 || piece[..i].ends_with(char::is_whitespace);
        let hit = at_word_start
            .then(|| {
                words.iter().find(|w| {
                    lower[i..].starts_with(*w) && {
                        let rest = &piece[i + w.len()..];
                        rest.is_empty() || rest.starts_with(char::is_whitespace)
                    }
                })
            })
            .flatten();
        match hit {
            Some(w) => {
                out.push(&piece[start..i]);
                i += w.len();
                start = i;
            }
            None => i += piece[i..].chars().next().map_or(1, char::len_utf8),
        }
    }
    out.push(&piece[start..]);
    out
}

/// BioASQ's list precision, recall and F-measure of `prediction` (the extracted answer) against the gold
/// entries `gold` (each a list of synonyms); see the module doc.
pub fn list_scores(prediction: &str, gold: &[Vec<String>]) -> Scores {
    let normed =
        |e: &[String]| -> Vec<String> { e.iter().map(|s| normalize_answer(s)).filter(|s| !s.is_empty()).collect() };
    let golds: Vec<Vec<String>> = gold.iter().map(|e| normed(e)).filter(|e| !e.is_empty()).collect();
    let contains =
        if !golds.is_empty() && gold.iter().all(|e| contains_answer(prediction, e) > 0.0) { 1.0 } else { 0.0 };
    let predicted: Vec<String> =
        entries_given(prediction, &golds.concat()).iter().map(|e| normalize_answer(e)).collect();
    if predicted.is_empty() || golds.is_empty() {
        return Scores { contains, ..Scores::default() };
    }
    let names = |p: &str, g: &[String]| g.iter().any(|s| s == p);
    // 1. each predicted entry takes the first gold entry left that it names
    let mut left: Vec<&[String]> = golds.iter().map(Vec::as_slice).collect();
    let mut tp = 0usize;
    for p in &predicted {
        if let Some(i) = left.iter().position(|g| names(p, g)) {
            left.remove(i);
            tp += 1;
        }
    }
    let fp = predicted.len() - tp;
    // 2. each gold entry left uses up the first predicted entry left in this pass that names it
    let mut unused: Vec<&str> = predicted.iter().map(String::as_str).collect();
    let mut fn_ = 0usize;
    for g in &left {
        match unused.iter().position(|p| names(p, g)) {
            Some(j) => {
                unused.remove(j);
            }
            None => fn_ += 1,
        }
    }
    let precision = tp as f64 / (tp + fp) as f64;
    let recall = if tp + fn_ > 0 { tp as f64 / (tp + fn_) as f64 } else { 0.0 };
    let f1 = if precision > 0.0 && recall > 0.0 { 2.0 * precision * recall / (precision + recall) } else { 0.0 };
    let em = if precision == 1.0 && recall == 1.0 { 1.0 } else { 0.0 };
    Scores { em, f1, precision, recall, accuracy: None, contains }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(xs: &[&[&str]]) -> Vec<Vec<String>> {
        xs.iter().map(|e| e.iter().map(|s| s.to_string()).collect()).collect()
    }

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-12, "{a} != {b}");
    }

    #[test]
    fn cuts_answers_into_entries() {
        let none = entries(&[]);
        assert_eq!(answer_entries("BRCA1, BRCA2, and TP53.", &none), ["BRCA1", "BRCA2", "TP53"]);
        assert_eq!(answer_entries("warts and infections", &none), ["warts", "infections"]);
        assert_eq!(answer_entries("kidney; brain; heart, etc.", &none), ["kidney", "brain", "heart"]);
        assert_eq!(
            answer_entries("1. PARL\n2) Pcp1\n(3) YqgP\n- hiGlpG\n* ecGlpG", &none),
            ["PARL", "Pcp1", "YqgP", "hiGlpG", "ecGlpG"]
        );
        assert_eq!(answer_entries("IL-6 as well as TNF & IL-1", &none), ["IL-6", "TNF", "IL-1"]);
        // a comma inside a word is no cut; "and" inside a word ("Andes", "band") is none either
        assert_eq!(answer_entries("1,2-dichloroethane, Andes band", &none), ["1,2-dichloroethane", "Andes band"]);
        // a piece that is a gold synonym as it stands stays whole
        let gold = entries(&[&["CD4 and CD8 T cells"], &["B cells"]]);
        assert_eq!(answer_entries("CD4 and CD8 T cells, and B cells", &gold), ["CD4 and CD8 T cells", "B cells"]);
        assert_eq!(answer_entries("CD4 and CD8", &gold), ["CD4", "CD8"]);
        // a repeated answer phrase ends the list
        assert_eq!(answer_entries("heart, kidney, So the answer is heart, kidney, So", &none), ["heart", "kidney"]);
        assert_eq!(answer_entries("Pcp1, PARL the answer is Pcp1", &none), ["Pcp1", "PARL"]);
        assert_eq!(answer_entries("Picasso, the answer is", &none), ["Picasso"]);
        assert!(answer_entries("", &none).is_empty());
        assert!(answer_entries(" , ; and .", &none).is_empty());
    }

    #[test]
    fn list_measures_by_hand() {
        // gold: BRCA1; TP53 (synonym p53); PTEN. Answer "BRCA1, p53, p53 and KRAS." -> BRCA1, p53, p53, KRAS.
        // 1: BRCA1 takes BRCA1 (TP), p53 takes TP53 (TP), the second p53 finds none left (FP), KRAS none (FP):
        //    TP = 2, FP = 2, P = 1/2.
        // 2: PTEN is left and named by no predicted entry: FN = 1, R = 2/3. F = 2 (1/2)(2/3) / (7/6) = 4/7.
        let gold = entries(&[&["BRCA1"], &["TP53", "p53"], &["PTEN"]]);
        let s = list_scores("BRCA1, p53, p53 and KRAS.", &gold);
        close(s.precision, 0.5);
        close(s.recall, 2.0 / 3.0);
        close(s.f1, 4.0 / 7.0);
        assert_eq!((s.em, s.contains, s.accuracy), (0.0, 0.0, None));
        // all three, in another order and case, with articles: P = R = F = EM = contains = 1
        let s = list_scores("the pten, tp53 and Brca1", &gold);
        assert_eq!((s.precision, s.recall, s.f1, s.em, s.contains), (1.0, 1.0, 1.0, 1.0, 1.0));
        // one right of one said: P = 1, R = 1/3, F = 2 (1/3) / (4/3) = 1/2
        let s = list_scores("PTEN", &gold);
        assert_eq!((s.precision, s.em), (1.0, 0.0));
        close(s.recall, 1.0 / 3.0);
        close(s.f1, 0.5);
        // nothing right: all 0; nothing said: all 0
        assert_eq!(list_scores("KRAS", &gold), Scores::default());
        assert_eq!(list_scores("", &gold), Scores::default());
        // every entry named inside a sentence: contains = 1 though the one entry cut from it is no gold entry
        let s = list_scores("BRCA1 TP53 PTEN", &gold);
        assert_eq!((s.f1, s.contains), (0.0, 1.0));
    }

    /// Answers made of the words and marks the cutting reads, and of any characters.
    fn answers() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let piece = prop_oneof![
            Just("and ".to_string()),
            Just(", ".to_string()),
            Just(",".to_string()),
            Just("; ".to_string()),
            Just("So the answer is ".to_string()),
            Just("1. ".to_string()),
            Just("(2) ".to_string()),
            Just("- ".to_string()),
            Just("\n".to_string()),
            Just("é".to_string()),
            "[a-cA-C]{1,3} ?",
            "\\PC{1,3}",
        ];
        proptest::collection::vec(piece, 0..12).prop_map(|v| v.concat())
    }

    proptest::proptest! {
        #[test]
        fn entries_are_pieces_of_the_answer_and_scores_lie_in_0_1(
            answer in answers(),
            gold in proptest::collection::vec(proptest::collection::vec("[a-cA-C]{0,3}( and [a-c]{1,2})?", 1..3), 0..4),
        ) {
            for e in answer_entries(&answer, &gold) {
                proptest::prop_assert!(!e.trim().is_empty() && answer.contains(e.as_str()), "{e:?} of {answer:?}");
            }
            let s = list_scores(&answer, &gold);
            for v in [s.precision, s.recall, s.f1, s.em, s.contains] {
                proptest::prop_assert!((0.0..=1.0).contains(&v), "{s:?}");
            }
            proptest::prop_assert!(s.em == 0.0 || s.f1 == 1.0);
        }
    }

    #[test]
    fn a_predicted_entry_naming_two_gold_entries_covers_both_for_recall() {
        // gold: [A, B]; [B]. Answer "B": step 1 takes the first gold entry (TP = 1, FP = 0); step 2 finds [B] left
        // and "B", unused in that pass, naming it: FN = 0. P = R = 1, as BioASQ's evaluator scores it.
        let gold = entries(&[&["A", "B"], &["B"]]);
        let s = list_scores("B", &gold);
        assert_eq!((s.precision, s.recall, s.f1), (1.0, 1.0, 1.0));
        // "B, B": both gold entries taken in step 1
        let s = list_scores("B, B", &gold);
        assert_eq!((s.precision, s.recall), (1.0, 1.0));
        // "B, B, B": the third repeat is a false positive, P = 2/3
        close(list_scores("B, B, B", &gold).precision, 2.0 / 3.0);
    }
}
