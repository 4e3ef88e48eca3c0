//! Triggers decide *when* to retrieve. The decode loop ([`crate::rag`]) knows only this trait.
//!
//! Protocol, per question:
//! 1. [`Trigger::reset`], then [`Trigger::before_generation`]: `true` retrieves with the question first
//!    (single-round RAG, FL-RAG/FS-RAG's initial retrieval).
//! 2. The loop decodes a block of new tokens whose size [`Trigger::lookahead`] chooses (one sentence, or `n` tokens)
//!    and calls [`Trigger::judge`] with a [`GenView`] whose `new_from` marks the first token of that block.
//! 3. On [`Decision::Retrieve`] the loop keeps `view.tokens[..keep]`, asks the [`crate::query::QueryFormer`] for a
//!    query, retrieves, rebuilds the prompt, and continues; it calls [`Trigger::on_retrieval`] first.
//!
//! Attention rows index *sequence* positions: `tokens[j].attn[h][k]` is what answer token `j` (at sequence
//! position `tokens[j].pos`) pays to sequence position `k`. Answer tokens are contiguous: `tokens[j].pos ==
//! tokens[0].pos + j`. After a retrieval the loop re-feeds the kept answer tokens behind the new prompt, so every
//! `TokenStep` in a view was computed under the current context.

pub mod mlp;

use crate::step::TokenStep;

/// What a controller sees when it judges a block.
#[derive(Debug, Clone, Copy)]
pub struct GenView<'a> {
    /// The question being answered.
    pub question: &'a str,
    /// The answer generated so far (kept tokens and the new block), with their internals.
    pub tokens: &'a [TokenStep],
    /// Index in `tokens` of the first token of the block being judged (tokens before it were judged already).
    pub new_from: usize,
}

impl<'a> GenView<'a> {
    /// Text of `tokens[from..to]`.
    pub fn text(&self, from: usize, to: usize) -> String {
        self.tokens[from..to].iter().map(|t| t.text.as_str()).collect()
    }
}

/// How much text the loop generates before asking the trigger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookahead {
    /// Up to the end of the next sentence (or `max_tokens`, whichever comes first).
    Sentence { max_tokens: usize },
    /// Exactly `n` tokens (fewer at the end of the generation).
    Tokens(usize),
}

/// A trigger's verdict on a block.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Keep the block and go on.
    Continue,
    /// Retrieve. Keep `tokens[..keep]` (drop the rest), and `at` is the index of the token that triggered
    /// (the query former builds the query around it). `keep <= at + 1` is not required: FL-RAG keeps everything.
    Retrieve { keep: usize, at: usize },
}

/// The verdict with the per-token scores the trigger computed for the block (for reports; `NaN` where the
/// method gives a token no score). `scores.len() == view.tokens.len() - view.new_from`.
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    pub decision: Decision,
    pub scores: Vec<f32>,
}

impl Judgement {
    pub fn new(decision: Decision, scores: Vec<f32>) -> Self {
        Judgement { decision, scores }
    }
}

/// Decides when to retrieve.
pub trait Trigger: Send {
    /// Short name used in configs and reports (`rind`, `etc`, `flare`, ...).
    fn name(&self) -> &str;
    /// Block size the loop generates between two calls of [`Trigger::judge`].
    fn lookahead(&self) -> Lookahead;
    /// Forget everything about the previous question.
    fn reset(&mut self) {}
    /// Retrieve with the question before generating anything?
    fn before_generation(&mut self, _question: &str) -> bool {
        false
    }
    /// Judge the block `view.tokens[view.new_from..]`.
    fn judge(&mut self, view: &GenView) -> anyhow::Result<Judgement>;
    /// Called after the loop retrieved on this trigger's decision.
    fn on_retrieval(&mut self) {}
    /// Errors when the trigger was fitted to another model (a learned detector reads that model's hidden
    /// states). Called once after the model is loaded.
    fn check_model(&self, _model_id: &str, _hidden: usize) -> anyhow::Result<()> {
        Ok(())
    }
}

pub mod etc;
pub mod fixed_length;
pub mod fixed_sentence;
pub mod flare;
pub mod none;
pub mod params;
#[cfg(test)]
mod protocol_tests;
pub mod rind;
pub mod single;

pub use params::Truncate;

/// Trigger names [`build`] knows.
pub const NAMES: &[&str] = &["none", "single", "fixed-length", "fixed-sentence", "flare", "rind", "etc", "mlp"];

/// Builds the trigger `name` from its config table (the `[trigger]` section of a `configs/*.toml`, after
/// [`crate::config::resolve_dataset`]; the `name` key in it is allowed and ignored). Unknown keys are errors.
pub fn build(name: &str, config: &toml::Value) -> anyhow::Result<Box<dyn Trigger>> {
    Ok(match name {
        "none" => Box::new(none::NoRetrieval::from_config(config)?),
        "single" => Box::new(single::SingleRound::from_config(config)?),
        "fixed-length" => Box::new(fixed_length::FixedLength::from_config(config)?),
        "fixed-sentence" => Box::new(fixed_sentence::FixedSentence::from_config(config)?),
        "flare" => Box::new(flare::Flare::from_config(config)?),
        "rind" => Box::new(rind::Rind::from_config(config)?),
        "etc" => Box::new(etc::Etc::from_config(config)?),
        "mlp" => Box::new(mlp::MlpTrigger::from_config(config)?),
        other => anyhow::bail!("unknown trigger '{other}' (known: {})", NAMES.join(", ")),
    })
}

/// Builds from a whole config file (after [`crate::config::MethodConfig`]): its `[trigger]` table, whose
/// `name` key picks the method.
pub fn build_section(root: &toml::Value) -> anyhow::Result<Box<dyn Trigger>> {
    let section = root.get("trigger").ok_or_else(|| anyhow::anyhow!("config: missing [trigger] table"))?;
    let name = section
        .get("name")
        .and_then(|v| v.as_str())
        .ok_or_else(|| anyhow::anyhow!("config: [trigger] needs a string 'name' (one of: {})", NAMES.join(", ")))?;
    build(name, section)
}
