//! Auto-RAG's prompts (the paper's appendix C, `../shared/data/fewshot/autorag/`) and the text layout of a
//! dialogue's turns.
//!
//! # The prompt files
//!
//! The files are transcribed from the paper's PDF and hard-wrapped as printed. [`unwrap`] re-joins them: a line
//! that starts with a field label (`Question:`, `Analysis:`, `Initial Query:`, `Retrieved Document_3:`,
//! `Intermediate Answer_3:`, `Refined Query:`, `Final Answer:`, `Model Analysis:`, `Query:`, `Origin Question:`,
//! `Document:`), a `###` separator or a blank line starts a new line; any other line continues the previous one
//! (joined by a space, or by nothing when it starts with `,` `.` `;` `:` `?` `!` `)`, as in "Indian\n, while" and
//! "(Film\n) died", artefacts of the PDF). The NQ reasoning file's misspelt placeholder `<retrived_document_1>` is
//! read as `<retrieved_document_1>`.
//!
//! - `reasoning_{2wikimultihopqa,nq}.txt`: an instruction paragraph, then exemplar dialogues separated by `###`.
//!   [`AutoRagPrompts::fewshot_messages`] turns each exemplar into chat turns of the layout below; the retrieved
//!   documents of the exemplars are not printed in the paper, so their turns keep the placeholder
//!   (`Retrieved Document_1: <retrieved_document_1>`).
//! - `few_shot_query_rewriting_*.txt` (exemplars `Question / Model Analysis / Query`, `###`-separated) and
//!   `zero_shot_query_rewriting.txt` (`{}` for the question and the analysis): [`AutoRagPrompts::rewrite_prompt`].
//! - `parametric_knowledge.txt` (`{}` for the question and the query): [`AutoRagPrompts::parametric_prompt`].
//!
//! # Turn layout (as the authors' inference code, ictnlp/Auto-RAG `autorag.py`)
//!
//! ```text
//! system     SYSTEM_PROMPT
//! user       Question: <question>                                            x_0
//! assistant  Analysis: <plan>\n\nInitial Query: <query>                      y_0
//! user       Retrieved Document_1: (Title: <t>) <text> (Title: <t>) <text>   x_1
//! assistant  Intermediate Answer_1: <extraction, planning>\n\nRefined Query: <query>      y_1
//! ...
//! assistant  Intermediate Answer_t: <...>\n\nFinal Answer: <answer>          y_t (last)
//! ```
//!
//! Deviation: the authors' code puts only the passage text in a document turn; here each passage is prefixed
//! with `(Title: ...)` (the titles of the HotpotQA/2Wiki corpora carry the entity names).
//! [`dialogue_messages`] renders a [`Dialogue`](super::dialogue::Dialogue)'s turns into these chat messages, so
//! synthesis, training and inference agree on one layout.

use std::path::Path;

use anyhow::{bail, Context, Result};
use regex::Regex;

use super::dialogue::Turn;
use crate::model::tokenizer::Message;
use crate::retrieval::Passage;

/// The system prompt of every Auto-RAG dialogue (the authors' inference code).
pub const SYSTEM_PROMPT: &str = "Answer the question by retrieving external knowledge. Extract useful information from each retrieved document. If the information is insufficient or irrelevant, refine your query and search again until you are able to answer the question.";

/// Labels that start a logical line in the prompt files.
const LABELS: [&str; 11] = [
    "Question:",
    "Analysis:",
    "Initial Query:",
    "Refined Query:",
    "Final Answer:",
    "Model Analysis:",
    "Query:",
    "Origin Question:",
    "Document:",
    "Demonstrations:",
    "Your task",
];

fn starts_field(line: &str) -> bool {
    static RE: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    let re = RE.get_or_init(|| Regex::new(r"^(Retrieved Document|Intermediate Answer)_\d+:").unwrap());
    line == "###" || LABELS.iter().any(|l| line.starts_with(l)) || re.is_match(line)
}

/// Re-joins the hard-wrapped lines of a prompt file (see the module doc). Blank lines are kept (runs of them
/// collapse to one); trailing spaces are dropped.
pub fn unwrap(text: &str) -> String {
    let mut lines: Vec<String> = Vec::new();
    let mut open = false; // whether the last logical line may be continued
    for raw in text.lines() {
        let line = raw.trim();
        if line.is_empty() {
            if lines.last().is_some_and(|l| !l.is_empty()) {
                lines.push(String::new());
            }
            open = false;
            continue;
        }
        if open && !starts_field(line) {
            let last = lines.last_mut().unwrap();
            if !line.starts_with([',', '.', ';', ':', '?', '!', ')']) {
                last.push(' ');
            }
            last.push_str(line);
        } else {
            lines.push(line.to_string());
        }
        open = line != "###";
    }
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    let out = lines.join("\n");
    let re = Regex::new(r"<retri?e?ved_document_(\d+)>").unwrap();
    re.replace_all(&out, "<retrieved_document_$1>").into_owned()
}

/// One `Label: value` field of an exemplar.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub label: String,
    pub value: String,
}

/// Splits unwrapped text into `###`-separated blocks of fields; text before the first block that has a
/// `Question:` field is the instruction.
pub fn parse_blocks(unwrapped: &str) -> (String, Vec<Vec<Field>>) {
    let label_re = Regex::new(r"^((?:Retrieved Document|Intermediate Answer)_\d+|[A-Z][A-Za-z ]*?):\s*(.*)$").unwrap();
    let mut instruction = String::new();
    let mut blocks = Vec::new();
    for block in unwrapped.split("\n###") {
        let block = block.trim().trim_start_matches("###").trim();
        if block.is_empty() {
            continue;
        }
        let mut fields: Vec<Field> = Vec::new();
        for line in block.lines().filter(|l| !l.trim().is_empty()) {
            match label_re.captures(line) {
                Some(c) => fields.push(Field { label: c[1].to_string(), value: c[2].trim().to_string() }),
                None => match fields.last_mut() {
                    Some(f) => {
                        f.value.push(' ');
                        f.value.push_str(line.trim());
                    }
                    None => {
                        if !instruction.is_empty() {
                            instruction.push(' ');
                        }
                        instruction.push_str(line.trim());
                    }
                },
            }
        }
        if fields.iter().any(|f| f.label.ends_with("Question")) {
            blocks.push(fields);
        } else if !fields.is_empty() {
            // a header made of label-like lines ("Demonstrations:"): keep as instruction text
            for f in fields {
                if !instruction.is_empty() {
                    instruction.push(' ');
                }
                instruction.push_str(format!("{}: {}", f.label, f.value).trim_end());
            }
        }
    }
    (instruction, blocks)
}

/// The prompts for one exemplar set (`2wikimultihopqa` or `nq`).
#[derive(Debug, Clone)]
pub struct AutoRagPrompts {
    /// Which reasoning file: `2wikimultihopqa` or `nq`.
    pub kind: String,
    /// The instruction paragraph of the reasoning file.
    pub instruction: String,
    /// The reasoning exemplars as chat turns (user/assistant alternating, starting with the user).
    pub exemplars: Vec<Vec<Message>>,
    /// Unwrapped few-shot query-rewriting exemplars (ending with `###`), when the file exists.
    pub rewrite_fewshot: Option<String>,
    /// Unwrapped zero-shot query-rewriting prompt, two `{}`.
    pub rewrite_zero_shot: String,
    /// Unwrapped parametric-knowledge prompt, two `{}`.
    pub parametric: String,
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("{}: cannot read Auto-RAG prompt file", path.display()))
}

impl AutoRagPrompts {
    /// Default folder: `fewshot/autorag` in the data folders ([`crate::data::resolve`]).
    pub fn default_dir() -> std::path::PathBuf {
        crate::data::resolve(Path::new("fewshot/autorag"))
    }

    /// Loads `reasoning_<kind>.txt`, `few_shot_query_rewriting_<kind>.txt` (optional),
    /// `zero_shot_query_rewriting.txt` and `parametric_knowledge.txt` from `dir`.
    pub fn load(dir: &Path, kind: &str) -> Result<Self> {
        let rpath = dir.join(format!("reasoning_{kind}.txt"));
        if !crate::io::exists(&rpath)? {
            bail!("{}: no Auto-RAG reasoning prompt for '{kind}' (known: 2wikimultihopqa, nq)", rpath.display());
        }
        let (instruction, blocks) = parse_blocks(&unwrap(&read(&rpath)?));
        let exemplars = blocks
            .iter()
            .enumerate()
            .map(|(i, b)| exemplar_messages(b).with_context(|| format!("{}: exemplar {}", rpath.display(), i + 1)))
            .collect::<Result<Vec<_>>>()?;
        if exemplars.is_empty() {
            bail!("{}: no exemplar (blocks separated by ### starting with 'Question:')", rpath.display());
        }
        let fpath = dir.join(format!("few_shot_query_rewriting_{kind}.txt"));
        let rewrite_fewshot = if crate::io::exists(&fpath)? { Some(unwrap(&read(&fpath)?)) } else { None };
        let zpath = dir.join("zero_shot_query_rewriting.txt");
        let rewrite_zero_shot = unwrap(&read(&zpath)?);
        if rewrite_zero_shot.matches("{}").count() != 2 {
            bail!("{}: expected two {{}} placeholders (question, analysis)", zpath.display());
        }
        let ppath = dir.join("parametric_knowledge.txt");
        let parametric = unwrap(&read(&ppath)?);
        if parametric.matches("{}").count() != 2 {
            bail!("{}: expected two {{}} placeholders (question, query)", ppath.display());
        }
        Ok(AutoRagPrompts {
            kind: kind.to_string(),
            instruction,
            exemplars,
            rewrite_fewshot,
            rewrite_zero_shot,
            parametric,
        })
    }

    /// The exemplar dialogues as chat turns, in order (for the few-shot, "w/o training" setting).
    pub fn fewshot_messages(&self) -> Vec<Message> {
        self.exemplars.iter().flatten().cloned().collect()
    }

    /// The query-rewriting prompt for `question` given the model's latest analysis: the few-shot exemplars
    /// followed by `Question / Model Analysis / Query:`, or the zero-shot prompt (also when there is no
    /// few-shot file).
    pub fn rewrite_prompt(&self, question: &str, analysis: &str, few_shot: bool) -> String {
        match (&self.rewrite_fewshot, few_shot) {
            (Some(ex), true) => format!("{ex}\nQuestion: {question}\nModel Analysis: {analysis}\nQuery:"),
            _ => fill(&self.rewrite_zero_shot, &[question, analysis]),
        }
    }

    /// The parametric-knowledge prompt: write a pseudo-document for `query`.
    pub fn parametric_prompt(&self, question: &str, query: &str) -> String {
        fill(&self.parametric, &[question, query])
    }
}

/// Replaces the `{}` placeholders in order.
pub fn fill(template: &str, values: &[&str]) -> String {
    let mut out = String::new();
    let mut rest = template;
    for v in values {
        match rest.find("{}") {
            Some(i) => {
                out.push_str(&rest[..i]);
                out.push_str(v);
                rest = &rest[i + 2..];
            }
            None => break,
        }
    }
    out.push_str(rest);
    out
}

/// One reasoning exemplar as chat turns: `Question` and `Retrieved Document_k` fields are user turns, the other
/// fields are joined (blank line between) into the assistant turns between them.
fn exemplar_messages(fields: &[Field]) -> Result<Vec<Message>> {
    let mut msgs: Vec<Message> = Vec::new();
    for f in fields {
        let text = format!("{}: {}", f.label, f.value);
        let user = f.label == "Question" || f.label.starts_with("Retrieved Document_");
        if user {
            if msgs.last().is_some_and(|m| m.role == "user") {
                bail!("two user fields in a row ('{}')", f.label);
            }
            msgs.push(Message::new("user", text));
        } else {
            match msgs.last_mut() {
                Some(m) if m.role == "assistant" => {
                    m.content.push_str("\n\n");
                    m.content.push_str(&text);
                }
                Some(_) => msgs.push(Message::new("assistant", text)),
                None => bail!("starts with '{}' instead of 'Question'", f.label),
            }
        }
    }
    if !msgs.last().is_some_and(|m| m.role == "assistant" && m.content.contains("Final Answer:")) {
        bail!("does not end with a 'Final Answer:'");
    }
    Ok(msgs)
}

/// x_0: `Question: <question>`.
pub fn question_input(question: &str) -> String {
    format!("Question: {}", question.trim())
}

/// x_t: `Retrieved Document_t: (Title: A) text (Title: B) text` (`(no document)` when nothing new was found).
pub fn documents_input(t: usize, docs: &[Passage]) -> String {
    let body: Vec<String> = docs.iter().map(|p| format!("(Title: {}) {}", p.title.trim(), p.text.trim())).collect();
    let body = if body.is_empty() { "(no document)".to_string() } else { body.join(" ") };
    format!("Retrieved Document_{t}: {body}")
}

/// x_t for a parametric pseudo-document (the authors feed it as a retrieved document).
pub fn pseudo_document_input(t: usize, text: &str) -> String {
    format!("Retrieved Document_{t}: {}", text.trim())
}

/// What ends a model turn.
#[derive(Debug, Clone, PartialEq)]
pub enum Next<'a> {
    /// The next query (`Initial Query:` at t = 0, `Refined Query:` after).
    Query(&'a str),
    /// The final answer.
    Answer(&'a str),
}

/// y_t: the reasoning `r` (labelled `Analysis:` at t = 0 and `Intermediate Answer_t:` after, the label added
/// when the model left it out) followed by the query or the final answer.
pub fn model_output(t: usize, r: &str, next: Next<'_>) -> String {
    let label = if t == 0 { "Analysis:".to_string() } else { format!("Intermediate Answer_{t}:") };
    let r = r.trim();
    let r = if r.starts_with(&label) { r.to_string() } else { format!("{label} {r}") };
    match next {
        Next::Query(q) => {
            let kind = if t == 0 { "Initial Query" } else { "Refined Query" };
            format!("{r}\n\n{kind}: {}", q.trim())
        }
        Next::Answer(a) => format!("{r}\n\nFinal Answer: {}", a.trim()),
    }
}

/// The queries a dialogue issued, in order: of each model turn whose last line holds a query label (`Initial Query:
/// q` / `Refined Query: q`, as synthesis writes it, [`model_output`]; any `...Query:`), the query [`parse_turn`]
/// reads from that line.
pub fn dialogue_queries(turns: &[Turn]) -> Vec<String> {
    let query = |out: &str| parse_turn(out.trim_end().lines().last()?).query;
    turns.iter().filter_map(|t| query(&t.output)).collect()
}

/// The chat messages of a dialogue (system prompt, then x_0, y_0, x_1, ...): how synthesis, training and
/// inference render it. `prefix` (few-shot exemplar turns) goes between the system prompt and x_0.
pub fn dialogue_messages(system: Option<&str>, prefix: &[Message], turns: &[Turn]) -> Vec<Message> {
    let mut m = Vec::with_capacity(1 + prefix.len() + 2 * turns.len());
    if let Some(s) = system {
        m.push(Message::new("system", s));
    }
    m.extend(prefix.iter().cloned());
    for t in turns {
        m.push(Message::new("user", t.input.clone()));
        if !t.output.is_empty() {
            m.push(Message::new("assistant", t.output.clone()));
        }
    }
    m
}

/// A model turn split into its parts.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ParsedTurn {
    /// Everything before the first query or final-answer label (the reasoning R_t), trimmed.
    pub reasoning: String,
    /// The text after the first `Query:` label (`Initial Query:`, `Refined Query:`, ...), to the end of its line.
    pub query: Option<String>,
    /// The text after `Final Answer:`, to the end of its line, without a final period.
    pub answer: Option<String>,
}

fn query_re() -> &'static Regex {
    static RE: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| Regex::new(r"(?i)(?:initial |refined )?query:").unwrap())
}

fn answer_re() -> &'static Regex {
    static RE: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| Regex::new(r"(?i)final answer:").unwrap())
}

fn line_after(text: &str, from: usize) -> String {
    let rest = text[from..].trim_start();
    rest.lines().next().unwrap_or("").trim().to_string()
}

/// Splits a model turn: the reasoning, then the query or the final answer, whichever label comes first.
pub fn parse_turn(text: &str) -> ParsedTurn {
    let q = query_re().find(text);
    let a = answer_re().find(text);
    let first = match (q, a) {
        (Some(q), Some(a)) => Some(if q.start() < a.start() { q } else { a }),
        (x, y) => x.or(y),
    };
    let Some(m) = first else {
        return ParsedTurn { reasoning: text.trim().to_string(), ..Default::default() };
    };
    let reasoning = text[..m.start()].trim().to_string();
    let value = line_after(text, m.end());
    if a.is_some_and(|a| a.start() == m.start()) {
        let ans = value.trim_end_matches('.').trim().to_string();
        ParsedTurn { reasoning, query: None, answer: Some(ans) }
    } else {
        let v = value.trim_matches('"').trim().to_string();
        ParsedTurn { reasoning, query: (!v.is_empty()).then_some(v), answer: None }
    }
}

/// Whether a model turn being generated is complete: a query or final-answer line has ended (a newline after
/// non-empty text following the label), or the model started writing the next user turn itself
/// (`Retrieved Document_`, `Question:` on a new line). Returns the length of the text to keep.
pub fn turn_end(text: &str) -> Option<usize> {
    let mut end: Option<usize> = None;
    let mut take = |i: usize| end = Some(end.map_or(i, |e: usize| e.min(i)));
    for re in [query_re(), answer_re()] {
        if let Some(m) = re.find(text) {
            let rest = &text[m.end()..];
            let lead = rest.len() - rest.trim_start_matches([' ', '\t']).len();
            let body = &rest[lead..];
            if let Some(nl) = body.find('\n') {
                if !body[..nl].trim().is_empty() {
                    take(m.end() + lead + nl);
                }
            }
        }
    }
    for stop in ["\nRetrieved Document", "\nQuestion:", "<retrieved_document"] {
        if let Some(i) = text.find(stop) {
            take(i);
        }
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unwrap_joins_hard_wrapped_lines_and_fixes_placeholders() {
        let t = "Intermediate Answer_6: Karl Freund was\na German. David Dhawan is Indian\n, while Karl\n\nFinal Answer: No.\n###\nQuestion: Q\nAnalysis: A\nInitial Query: x\nRetrieved Document_1: <retrived_document_1>\n";
        let u = unwrap(t);
        assert_eq!(
            u,
            "Intermediate Answer_6: Karl Freund was a German. David Dhawan is Indian, while Karl\n\nFinal Answer: No.\n###\nQuestion: Q\nAnalysis: A\nInitial Query: x\nRetrieved Document_1: <retrieved_document_1>"
        );
    }

    #[test]
    fn shared_files_parse_into_chat_exemplars() {
        let dir = crate::require_data!("fewshot/autorag");
        let p = AutoRagPrompts::load(&dir, "2wikimultihopqa").unwrap();
        assert!(p.instruction.starts_with("Answer the following questions by retrieving external knowledge."));
        assert_eq!(p.exemplars.len(), 2);
        let e = &p.exemplars[0];
        // Question, (Analysis+Initial Query), 6 x (Document, Intermediate (+Refined Query | Final Answer))
        assert_eq!(e.len(), 2 + 2 * 6);
        assert_eq!(e[0].content, "Question: Do director of film Coolie No. 1 (1995 Film) and director of film The Sensational Trial have the same nationality?");
        assert_eq!(e[1].role, "assistant");
        assert!(e[1].content.ends_with("\n\nInitial Query: Coolie No. 1 (1995 Film)"), "{}", e[1].content);
        assert_eq!(e[2].content, "Retrieved Document_1: <retrieved_document_1>");
        assert!(e[13].content.contains("David Dhawan is Indian, while Karl Freund"));
        assert!(e[13].content.ends_with("\n\nFinal Answer: No."));
        assert!(p.exemplars[1][5].content.contains("Hypocrite (Film) died on 19 June 2013"));
        let nq = AutoRagPrompts::load(&dir, "nq").unwrap();
        assert_eq!(nq.exemplars.len(), 2);
        assert_eq!(nq.exemplars[0][2].content, "Retrieved Document_1: <retrieved_document_1>");
        // parametric prompt: joined paragraphs, two placeholders at the end
        let pk = p.parametric_prompt("Who?", "the who");
        assert!(pk.starts_with("Your task is to generate one corresponding wikipedia document based on the given query to help the LLM answer questions."));
        assert!(pk.ends_with("Origin Question: Who?\n\nQuery: the who\n\nDocument:"), "{pk}");
        let z = p.rewrite_prompt("Q?", "need X", false);
        assert!(z.ends_with("Question: Q?\n\nModel Analysis: need X\n\nQuery:"));
        let f = p.rewrite_prompt("Q?", "need X", true);
        assert!(f.starts_with("Question: When did the director of film Hypocrite (Film) die?\nModel Analysis: To answer this question, I would need to know the name of the director"));
        assert!(f.contains("located in the same country?\nModel Analysis"));
        assert!(f.ends_with("###\nQuestion: Q?\nModel Analysis: need X\nQuery:"));
    }

    #[test]
    fn missing_file_is_named() {
        let e = AutoRagPrompts::load(Path::new("/nonexistent"), "nq").unwrap_err();
        assert!(format!("{e:#}").contains("/nonexistent/reasoning_nq.txt"));
    }

    #[test]
    fn dialogue_formatting() {
        assert_eq!(
            model_output(0, "To answer, I need X.", Next::Query("X")),
            "Analysis: To answer, I need X.\n\nInitial Query: X"
        );
        assert_eq!(
            model_output(2, "Intermediate Answer_2: Based on it, Y.", Next::Answer("Y")),
            "Intermediate Answer_2: Based on it, Y.\n\nFinal Answer: Y"
        );
        assert_eq!(
            model_output(1, "No info.", Next::Query("Z z")),
            "Intermediate Answer_1: No info.\n\nRefined Query: Z z"
        );
        let p = vec![
            Passage { id: "1".into(), title: "Paris ".into(), text: " Capital.".into(), score: 1.0 },
            Passage { id: "2".into(), title: "B".into(), text: "b".into(), score: 0.5 },
        ];
        assert_eq!(documents_input(3, &p), "Retrieved Document_3: (Title: Paris) Capital. (Title: B) b");
        assert_eq!(documents_input(1, &[]), "Retrieved Document_1: (no document)");
        let turns = vec![
            Turn { input: question_input(" Q? "), output: "y0".into() },
            Turn { input: "x1".into(), output: String::new() },
        ];
        let m = dialogue_messages(Some("sys"), &[Message::new("user", "ex")], &turns);
        let roles: Vec<&str> = m.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "user", "assistant", "user"]);
        assert_eq!(m[2].content, "Question: Q?");
    }

    #[test]
    fn parse_and_end_of_turn() {
        let t = "Analysis: I need the director.\n\nInitial Query: Director of film Hypocrite\n";
        let p = parse_turn(t);
        assert_eq!(p.reasoning, "Analysis: I need the director.");
        assert_eq!(p.query.as_deref(), Some("Director of film Hypocrite"));
        assert_eq!(p.answer, None);
        let p = parse_turn("Intermediate Answer_2: X died in 2013.\nFinal Answer: 19 June 2013.\nRefined Query: junk");
        assert_eq!(p.answer.as_deref(), Some("19 June 2013"));
        assert_eq!(p.query, None);
        assert_eq!(parse_turn("just text").reasoning, "just text");
        assert_eq!(parse_turn("Query:   ").query, None);
        // end of turn: after the query line's newline, not before
        assert_eq!(turn_end("Analysis: a\n\nInitial Query: foo"), None);
        assert_eq!(turn_end("Analysis: a\n\nInitial Query: foo\nRetrieved"), Some(31));
        assert_eq!(turn_end("Analysis: a\n\nInitial Query:\n"), None);
        assert_eq!(turn_end("Intermediate Answer_1: x\nFinal Answer: No.\n"), Some(42));
        assert_eq!(turn_end("Analysis: a\nRetrieved Document_1: z"), Some(11));
    }
}
