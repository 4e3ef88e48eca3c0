//! Query formers decide *what* to retrieve once a trigger fired.

use crate::trigger::GenView;

/// Builds the retrieval query.
pub trait QueryFormer: Send {
    /// Short name used in configs and reports (`qfs`, `last-sentence`, ...).
    fn name(&self) -> &str;
    /// Query for a retrieval triggered at `view.tokens[at]`, with `view.tokens[..keep]` kept.
    fn form(&self, view: &GenView, at: usize, keep: usize) -> String;
    /// Query for the retrieval before generation (default: the question).
    fn initial(&self, question: &str) -> String {
        question.to_string()
    }
}
