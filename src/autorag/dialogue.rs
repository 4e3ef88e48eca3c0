//! One synthesized Auto-RAG dialogue in the paper's multi-turn form (Section 3, Eq. 3):
//!
//! ```text
//! x_0 = the question                 y_0 = R_0 (analysis / plan) + the first query
//! x_t = the documents retrieved      y_t = R_t (information extraction + planning) + the next query,
//!       for the query of y_{t-1}           or, in the last turn, the final answer
//! ```
//!
//! Training puts the loss on the `y_t` (the model's turns) only. The record is written one JSON object per line
//! (`dialogues.jsonl`), the layout below, so `ragtime train autorag` and Python readers agree.

use serde::{Deserialize, Serialize};

/// One exchange: what the model is shown (`input`, x_t) and what it should write (`output`, y_t).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Turn {
    /// x_t: the question (t = 0) or the retrieved documents (t >= 1), as the model sees them.
    pub input: String,
    /// y_t: the model's turn: reasoning and the next query, or the final answer.
    pub output: String,
}

/// A kept dialogue: every turn, plus where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dialogue {
    /// Id of the source question.
    pub id: String,
    /// Dataset name (`hotpotqa`, `2wikimultihopqa`, `nq`, ...).
    pub dataset: String,
    pub question: String,
    /// Gold answers (aliases) of the source question.
    pub answers: Vec<String>,
    /// The turns in order; `turns[0].input` is the question.
    pub turns: Vec<Turn>,
    /// Retrieval iterations the dialogue took (number of queries issued).
    pub iterations: usize,
    /// The final answer the model gave (the text after "Final Answer:").
    pub final_answer: String,
}

/// What makes two dialogues of one question the same: their queries, SQuAD-normalised, in order (rejection
/// sampling's `duplicate_dialogue` within a synthesis run, `sft::distinct_dialogues` across runs).
pub fn query_key<S: AsRef<str>>(queries: &[S]) -> Vec<String> {
    queries.iter().map(|q| crate::eval::metrics::normalize_answer(q.as_ref())).collect()
}
