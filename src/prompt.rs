//! Prompts in DRAGIN's layout, and answer extraction.
//!
//! DRAGIN (oneal2000/DRAGIN src/generate.py) builds every prompt as
//!
//! ```text
//! <exemplar 1>\n<exemplar 2>\n ... <exemplar k>\n        each "Question: ...\nAnswer: ... So the answer is X."
//! Context:\n[1] <doc>\n[2] <doc>\n[3] <doc>\n             only when documents were retrieved
//! Answer in the same format as before.\n
//! Question: <question>\nAnswer: <answer so far>
//! ```
//!
//! [`PromptBuilder::build`] produces exactly this, so the exemplars are a prefix shared by every prompt of a
//! dataset ([`PromptBuilder::shared_prefix`]): the decode loop can keep its KV cache.
//!
//! Deviations, stated: a document is written `title: text` (DRAGIN's BM25 returns the bare text; the title helps
//! and the shared corpus has one); set [`PromptBuilder::with_titles`] to `false` for DRAGIN's form. When no answer
//! has been generated yet the prompt ends in `Answer:` without DRAGIN's trailing space (a trailing space is a token
//! of its own for BPE tokenizers and derails generation); otherwise `Answer: <answer so far>`.
//!
//! Exemplar files: DRAGIN's (`Question:`/`Answer:` pairs separated by blank lines) and IRCoT's (`# METADATA`
//! lines, optional `Wikipedia Title:` paragraphs, `Q:`/`A:` pairs) are both read into [`Exemplar`]s and rendered
//! in DRAGIN's form; IRCoT's "So the answer is: X." keeps its colon, which [`extract_answer`] accepts.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::qa::Doc;
use crate::retrieval::Passage;

/// The phrase that introduces the final answer.
pub const ANSWER_PATTERN: &str = "So the answer is";

/// Strings after which DRAGIN's evaluation cuts a generation (the model starting a new exemplar, notes).
pub const STOP_STRINGS: [&str; 4] = ["\nQuestion:", "#10000000", "Note:", ". Question:"];

/// One few-shot exemplar.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exemplar {
    pub question: String,
    /// The reasoning and the final "So the answer is ..." sentence.
    pub answer: String,
    /// Paragraphs shown with the exemplar (IRCoT's "with context" files); empty otherwise.
    pub contexts: Vec<Doc>,
}

/// Reads an exemplar file (DRAGIN's or IRCoT's layout, see the module doc).
pub fn read_exemplars(path: &Path) -> Result<Vec<Exemplar>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("{}: cannot read exemplar file", path.display()))?;
    parse_exemplars(&text).with_context(|| format!("{}: malformed exemplar file", path.display()))
}

/// Parses exemplars from text: blocks separated by blank lines; a block starting `Wikipedia Title: T` is a context
/// paragraph (its remaining lines the text); `Question:`/`Q:` starts a question; `Answer:`/`A:` gives its answer
/// (running to the end of the block); `# METADATA` lines are skipped.
pub fn parse_exemplars(text: &str) -> Result<Vec<Exemplar>> {
    let mut out = Vec::new();
    let mut contexts: Vec<Doc> = Vec::new();
    let mut question: Option<String> = None;
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim_end();
        let lineno = i + 1;
        i += 1;
        if line.trim().is_empty() || line.starts_with("# METADATA") {
            continue;
        }
        if let Some(title) = line.strip_prefix("Wikipedia Title:") {
            let mut body = Vec::new();
            while i < lines.len() && !lines[i].trim().is_empty() {
                body.push(lines[i].trim());
                i += 1;
            }
            contexts.push(Doc { title: title.trim().to_string(), text: body.join(" ") });
        } else if let Some(q) = line.strip_prefix("Question:").or_else(|| line.strip_prefix("Q:")) {
            if question.is_some() {
                bail!("line {lineno}: a question follows a question that has no answer");
            }
            question = Some(q.trim().to_string());
        } else if let Some(a) = line.strip_prefix("Answer:").or_else(|| line.strip_prefix("A:")) {
            let Some(q) = question.take() else { bail!("line {lineno}: an answer without a question") };
            let mut answer = vec![a.trim().to_string()];
            while i < lines.len() && !lines[i].trim().is_empty() {
                answer.push(lines[i].trim().to_string());
                i += 1;
            }
            out.push(Exemplar { question: q, answer: answer.join(" "), contexts: std::mem::take(&mut contexts) });
        } else {
            bail!("line {lineno}: expected 'Question:', 'Q:', 'Answer:', 'A:', 'Wikipedia Title:' or '# METADATA', found {line:?}");
        }
    }
    if question.is_some() {
        bail!("the last question has no answer");
    }
    if out.is_empty() {
        bail!("no exemplars");
    }
    Ok(out)
}

/// A prompt for a chat model: plain strings; the caller applies the model's chat template.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatPrompt {
    /// Instruction and exemplars: identical for every question of a dataset (cacheable).
    pub system: String,
    /// Retrieved context (if any) and the question.
    pub user: String,
    /// The start of the assistant's turn: the answer generated so far (may be empty).
    pub assistant_prefix: String,
}

/// Builds prompts for one dataset.
#[derive(Debug, Clone)]
pub struct PromptBuilder {
    pub exemplars: Vec<Exemplar>,
    /// Write retrieved documents as `title: text` (default) or the bare text (DRAGIN).
    pub with_titles: bool,
    /// Show an exemplar's context paragraphs (IRCoT's "with context" files) before it.
    pub exemplar_contexts: bool,
    /// Text put before "Question:" of the test question (DRAGIN's StrategyQA uses "Following the examples
    /// above, answer the question by reasoning step-by-step.\n\n"); empty by default.
    pub question_prefix: String,
    prefix: String,
}

impl PromptBuilder {
    /// A builder over `exemplars` (all of them; truncate the vector first to use fewer).
    pub fn new(exemplars: Vec<Exemplar>) -> Self {
        let mut b = PromptBuilder {
            exemplars,
            with_titles: true,
            exemplar_contexts: false,
            question_prefix: String::new(),
            prefix: String::new(),
        };
        b.refresh();
        b
    }

    /// Reads the exemplar file; `fewshot` keeps the first n exemplars.
    pub fn from_file(path: &Path, fewshot: Option<usize>) -> Result<Self> {
        let mut ex = read_exemplars(path)?;
        if let Some(n) = fewshot {
            if n > ex.len() {
                bail!("{}: {n} exemplars asked for, the file has {}", path.display(), ex.len());
            }
            ex.truncate(n);
        }
        Ok(Self::new(ex))
    }

    /// Zero-shot builder (no exemplars).
    pub fn zero_shot() -> Self {
        Self::new(Vec::new())
    }

    /// Shows each exemplar's context paragraphs before it.
    pub fn exemplar_contexts(mut self, on: bool) -> Self {
        self.exemplar_contexts = on;
        self.refresh();
        self
    }

    pub fn with_titles(mut self, on: bool) -> Self {
        self.with_titles = on;
        self
    }

    pub fn question_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.question_prefix = prefix.into();
        self
    }

    fn refresh(&mut self) {
        let mut s = String::new();
        for e in &self.exemplars {
            if self.exemplar_contexts && !e.contexts.is_empty() {
                s.push_str(&context_block(e.contexts.iter().map(|d| (d.title.as_str(), d.text.as_str())), true));
            }
            s.push_str(&format!("Question: {}\nAnswer: {}\n", e.question, e.answer));
        }
        self.prefix = s;
    }

    /// The part of every prompt that depends neither on the question nor on the documents: the exemplars.
    /// `build(..)` always starts with it.
    pub fn shared_prefix(&self) -> &str {
        &self.prefix
    }

    /// The full prompt (see the module doc for the layout). `docs` empty: no context block.
    pub fn build(&self, question: &str, docs: &[Passage], answer_so_far: &str) -> String {
        let mut s = self.prefix.clone();
        s.push_str(&self.context_and_question(question, docs));
        s.push_str("Answer:");
        let a = answer_so_far.trim_start();
        if !a.is_empty() {
            s.push(' ');
            s.push_str(a);
        }
        s
    }

    fn context_and_question(&self, question: &str, docs: &[Passage]) -> String {
        let mut s = String::new();
        if !docs.is_empty() {
            s.push_str(&context_block(docs.iter().map(|d| (d.title.as_str(), d.text.as_str())), self.with_titles));
            s.push_str("Answer in the same format as before.\n");
        }
        s.push_str(&self.question_prefix);
        s.push_str(&format!("Question: {question}\n"));
        s
    }

    /// The chat form: system = instruction + exemplars, user = context + question, assistant = answer so far.
    pub fn build_chat(&self, question: &str, docs: &[Passage], answer_so_far: &str) -> ChatPrompt {
        let mut system = String::from(
            "Answer the question by reasoning step by step, then end with \"So the answer is <answer>.\" giving a short answer.\n",
        );
        if !self.exemplars.is_empty() {
            system.push_str("Examples:\n\n");
            system.push_str(&self.prefix);
        }
        let mut user = self.context_and_question(question, docs);
        if user.ends_with('\n') {
            user.pop();
        }
        ChatPrompt { system, user, assistant_prefix: answer_so_far.trim_start().to_string() }
    }
}

fn context_block<'a>(docs: impl Iterator<Item = (&'a str, &'a str)>, titles: bool) -> String {
    let mut s = String::from("Context:\n");
    for (i, (title, text)) in docs.enumerate() {
        if titles && !title.is_empty() {
            s.push_str(&format!("[{}] {}: {}\n", i + 1, title, text));
        } else {
            s.push_str(&format!("[{}] {}\n", i + 1, text));
        }
    }
    s
}

/// Cuts a generation at the first stop string (the model starting another exemplar, ...).
pub fn truncate_at_stop(text: &str) -> &str {
    let cut = STOP_STRINGS.iter().filter_map(|s| text.find(s)).min().unwrap_or(text.len());
    &text[..cut]
}

/// Whether the generation still lacks the answer pattern, so the loop should append [`ANSWER_SUFFIX`] and
/// generate a few more tokens (DRAGIN's evaluation generates 20 more). Case-insensitive on "the answer is".
pub fn needs_answer_suffix(text: &str) -> bool {
    needs_answer_suffix_with(text, ANSWER_PATTERN)
}

/// [`needs_answer_suffix`] for another answer pattern (see [`pattern_key`]).
pub fn needs_answer_suffix_with(text: &str, pattern: &str) -> bool {
    !truncate_at_stop(text).to_ascii_lowercase().contains(&pattern_key(pattern))
}

/// The part of an answer pattern that is searched for, lower-cased: a leading "so " is dropped, so "So the answer
/// is" matches "Thus, the answer is" too (DRAGIN searches for "the answer is").
pub fn pattern_key(pattern: &str) -> String {
    let p = pattern.trim().to_lowercase();
    p.strip_prefix("so ").map(str::to_string).unwrap_or(p)
}

/// What DRAGIN appends when the answer pattern is missing (after a space-trimmed generation).
pub const ANSWER_SUFFIX: &str = " So the answer is";

/// How many tokens DRAGIN's evaluation generates after [`ANSWER_SUFFIX`].
pub const ANSWER_SUFFIX_TOKENS: usize = 20;

/// The final answer of a generation: the text after the first "the answer is" (case-insensitive, an optional
/// ':' skipped) up to the end of its sentence, without the final period. With no pattern, the whole (stop-cut)
/// generation, trimmed, as DRAGIN does for 2Wiki/HotpotQA.
///
/// Sentence end: a newline, or ". " / "." at the end, where the word before the period is not a single letter
/// or a common abbreviation ("F. W. Murnau", "Dr. No" stay whole); "15,140." keeps its comma.
pub fn extract_answer(text: &str) -> String {
    extract_answer_with(text, ANSWER_PATTERN)
}

/// [`extract_answer`] for another answer pattern (see [`pattern_key`]).
pub fn extract_answer_with(text: &str, pattern: &str) -> String {
    let text = truncate_at_stop(text);
    let key = pattern_key(pattern);
    // Lower-casing can change byte lengths (rare non-ASCII letters); search ASCII-lower-cased text instead.
    let lower = text.to_ascii_lowercase();
    let Some(pos) = lower.find(&key) else {
        return text.trim().trim_end_matches('.').trim().to_string();
    };
    let mut rest = &text[pos + key.len()..];
    rest = rest.trim_start();
    if let Some(r) = rest.strip_prefix(':') {
        rest = r.trim_start();
    }
    if let Some(nl) = rest.find('\n') {
        rest = &rest[..nl];
    }
    let end = sentence_end(rest);
    rest[..end].trim().trim_end_matches('.').trim().to_string()
}

fn sentence_end(s: &str) -> usize {
    const ABBREV: [&str; 10] = ["dr", "mr", "mrs", "ms", "st", "jr", "sr", "vs", "mt", "ft"];
    for (i, _) in s.match_indices('.') {
        let after = &s[i + 1..];
        if !(after.is_empty() || after.starts_with(' ')) {
            continue; // "15.5", "U.S"
        }
        let word = s[..i].rsplit(|c: char| c.is_whitespace()).next().unwrap_or("");
        let short = word.chars().count() == 1 && word.chars().all(char::is_alphabetic);
        let abbrev = ABBREV.contains(&word.to_lowercase().as_str()) || word.contains('.');
        if after.trim().is_empty() || !(short || abbrev) {
            return i;
        }
    }
    s.len()
}

/// Resolves a path given relative to the data folders ([`crate::data::resolve`]: fetched, then shared;
/// absolute paths are kept).
pub fn shared_path(p: &Path) -> PathBuf {
    crate::data::resolve(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passage(id: &str, title: &str, text: &str) -> Passage {
        Passage { id: id.into(), title: title.into(), text: text.into(), score: 1.0 }
    }

    #[test]
    fn reads_dragin_exemplars() {
        let b = PromptBuilder::from_file(&crate::require_data!("fewshot/dragin/hotpotqa.txt"), None).unwrap();
        assert_eq!(b.exemplars.len(), 8);
        assert_eq!(b.exemplars[0].question, "Jeremy Theobald and Christopher Nolan share what profession?");
        assert!(b.exemplars[0].answer.ends_with("So the answer is producer."));
        for (f, n) in [("2wikimultihopqa", 6), ("strategyqa", 6), ("iirc", 8)] {
            let ex = read_exemplars(&crate::require_data!(&format!("fewshot/dragin/{f}.txt"))).unwrap();
            assert_eq!(ex.len(), n, "{f}");
        }
    }

    #[test]
    fn reads_ircot_exemplars_with_contexts() {
        let ex = read_exemplars(&crate::require_data!(
            "fewshot/ircot/iirc_gold_with_2_distractors_context_cot_qa_codex.txt"
        ))
        .unwrap();
        assert_eq!(ex.len(), 20);
        assert_eq!(ex[0].question, "When was the town Scott was born in founded?");
        assert_eq!(ex[0].contexts.len(), 4);
        assert_eq!(ex[0].contexts[0].title, "Walter Dill Scott");
        assert!(ex[0].answer.ends_with("So the answer is: 1882."));
        assert_eq!(extract_answer(&ex[0].answer), "1882");
        let nc = read_exemplars(&crate::require_data!("fewshot/ircot/hotpotqa_no_context_cot_qa_codex.txt")).unwrap();
        assert_eq!(nc.len(), 29);
        assert!(nc.iter().all(|e| e.contexts.is_empty()));
    }

    #[test]
    fn prompt_layout_matches_dragin() {
        let ex = parse_exemplars(
            "Question: Q1?\nAnswer: R1. So the answer is A1.\n\nQuestion: Q2?\nAnswer: So the answer is A2.\n",
        )
        .unwrap();
        let b = PromptBuilder::new(ex);
        let prefix = "Question: Q1?\nAnswer: R1. So the answer is A1.\nQuestion: Q2?\nAnswer: So the answer is A2.\n";
        assert_eq!(b.shared_prefix(), prefix);
        assert_eq!(b.build("Who?", &[], ""), format!("{prefix}Question: Who?\nAnswer:"));
        let docs = [passage("1", "Shirley Temple", "An actress."), passage("2", "Kiss and Tell", "A film.")];
        let want = format!(
            "{prefix}Context:\n[1] Shirley Temple: An actress.\n[2] Kiss and Tell: A film.\nAnswer in the same format as before.\nQuestion: Who?\nAnswer: She was"
        );
        assert_eq!(b.build("Who?", &docs, " She was"), want);
        let bare = b.clone().with_titles(false).build("Who?", &docs[..1], "");
        assert!(bare.contains("Context:\n[1] An actress.\nAnswer in the same format"));
        let sq = PromptBuilder::new(vec![])
            .question_prefix("Following the examples above, answer the question by reasoning step-by-step.\n\n");
        assert_eq!(
            sq.build("Q?", &[], ""),
            "Following the examples above, answer the question by reasoning step-by-step.\n\nQuestion: Q?\nAnswer:"
        );
    }

    #[test]
    fn chat_prompt() {
        let b = PromptBuilder::new(parse_exemplars("Question: Q1?\nAnswer: So the answer is A1.").unwrap());
        let c = b.build_chat("Who?", &[passage("1", "T", "X.")], "");
        assert!(c.system.ends_with("Question: Q1?\nAnswer: So the answer is A1.\n"));
        assert_eq!(c.user, "Context:\n[1] T: X.\nAnswer in the same format as before.\nQuestion: Who?");
        assert_eq!(c.assistant_prefix, "");
        assert_eq!(b.build_chat("Who?", &[], "").user, "Question: Who?");
    }

    #[test]
    fn exemplar_contexts_rendered_when_asked() {
        let ex = parse_exemplars(
            "# METADATA: {}\nWikipedia Title: T1\nline one\nline two\n\nQ: Q1?\nA: So the answer is: A1.\n",
        )
        .unwrap();
        let b = PromptBuilder::new(ex).exemplar_contexts(true);
        assert_eq!(
            b.shared_prefix(),
            "Context:\n[1] T1: line one line two\nQuestion: Q1?\nAnswer: So the answer is: A1.\n"
        );
    }

    #[test]
    fn malformed_exemplars() {
        assert!(parse_exemplars("Answer: x").unwrap_err().to_string().contains("line 1"));
        assert!(parse_exemplars("Question: a\nQuestion: b\nAnswer: c").unwrap_err().to_string().contains("line 2"));
        assert!(parse_exemplars("hello").unwrap_err().to_string().contains("line 1"));
        assert!(parse_exemplars("Question: a").is_err());
    }

    #[test]
    fn answer_extraction() {
        assert_eq!(extract_answer(" Thus, they share it. So the answer is producer."), "producer");
        assert_eq!(extract_answer("So the answer is The Phantom Hour. Question: next"), "The Phantom Hour");
        assert_eq!(extract_answer("so the answer is 15,140.\nQuestion: x"), "15,140");
        assert_eq!(extract_answer("So the answer is F. W. Murnau. He directed it."), "F. W. Murnau");
        assert_eq!(extract_answer("So the answer is Dr. No."), "Dr. No");
        assert_eq!(extract_answer("So the answer is: Walls and Bridges."), "Walls and Bridges");
        assert_eq!(extract_answer("So the answer is 3.5 million. Because"), "3.5 million");
        assert_eq!(extract_answer("Raoul Walsh."), "Raoul Walsh");
        assert_eq!(extract_answer("So the answer is no. Lonny was founded in 2009."), "no");
    }

    #[test]
    fn suffix_needed_only_without_pattern() {
        assert!(needs_answer_suffix("Jan de Bont was born in 1943."));
        assert!(!needs_answer_suffix("Thus, Raoul. So the answer is Raoul Walsh."));
        // A pattern that only appears after a stop string (inside a new exemplar) does not count.
        assert!(needs_answer_suffix("He was born.\nQuestion: Who? Answer: So the answer is x."));
        assert!(!needs_answer_suffix_with("Final answer: x", "Final answer:"));
        assert_eq!(extract_answer_with("blah. Final answer: Paris.", "Final answer:"), "Paris");
    }
}
