//! Query formers decide *what* to retrieve once a trigger fired.

use crate::trigger::GenView;

/// Builds the retrieval query.
pub trait QueryFormer: Send {
    /// Short name used in configs and reports (`qfs`, `last-sentence`, ...).
    fn name(&self) -> &str;
    /// Query for a retrieval triggered at `view.tokens[at]`, with `view.tokens[..keep]` kept.
    fn form(&self, view: &GenView, at: usize, keep: usize) -> anyhow::Result<String>;
    /// Query for the retrieval before generation (default: the question).
    fn initial(&self, question: &str) -> String {
        question.to_string()
    }
}

/// A query from the words a former picked: the question alone when it picked none, else the words, behind the
/// question when `with_question`.
fn with_question(question: &str, picked: String, with_question: bool) -> String {
    match (picked.is_empty(), with_question) {
        (true, _) => question.to_string(),
        (false, true) => format!("{question} {picked}"),
        (false, false) => picked,
    }
}

pub mod flare_masked;
pub mod last_sentence;
pub mod last_tokens;
pub mod qfs;
pub mod question;
pub mod radio;

/// Query former names [`build`] knows.
pub const NAMES: &[&str] = &["question", "last-tokens", "last-sentence", "flare-masked", "qfs", "radio"];

/// Builds the query former `name` from its config table (the `[query]` section of a `configs/*.toml`;
/// the `name` key in it is allowed and ignored). Unknown keys are errors.
pub fn build(name: &str, config: &toml::Value) -> anyhow::Result<Box<dyn QueryFormer>> {
    Ok(match name {
        "question" => {
            crate::trigger::params::Params::new("question", config)?.finish()?;
            Box::new(question::Question)
        }
        "last-tokens" => Box::new(last_tokens::LastTokens::from_config(config)?),
        "last-sentence" => Box::new(last_sentence::LastSentence::from_config(config)?),
        "flare-masked" => Box::new(flare_masked::FlareMasked::from_config(config)?),
        "qfs" => Box::new(qfs::Qfs::from_config(config)?),
        "radio" => Box::new(radio::Radio::from_config(config)?),
        other => anyhow::bail!("unknown query former '{other}' (known: {})", NAMES.join(", ")),
    })
}

/// Builds from a whole config file (after [`crate::config::MethodConfig`]): its `[query]` table, whose
/// `name` key picks the method.
pub fn build_section(root: &toml::Value) -> anyhow::Result<Box<dyn QueryFormer>> {
    let section = root.get("query").ok_or_else(|| anyhow::anyhow!("config: missing [query] table"))?;
    let name = section
        .get("name")
        .and_then(|v| v.as_str())
        .ok_or_else(|| anyhow::anyhow!("config: [query] needs a string 'name' (one of: {})", NAMES.join(", ")))?;
    build(name, section)
}
