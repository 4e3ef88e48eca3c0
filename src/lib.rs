//! ragtime: train and evaluate retrieval controllers for dynamic retrieval-augmented generation.
//!
//! Module map (one file per method where the papers vary):
//! - [`model`]: the decoder runtime (GGUF/safetensors loading, burn forward pass, KV-cached sessions).
//! - [`device`]: cpu / cuda selection.
//! - [`encoder`]: sentence encoders (BERT from a sentence-transformers folder) for dense retrieval.
//! - [`corpus`]: readers for text collections (WikiExtractor dumps, ...).
//! - [`step`]: what the decoder hands a controller for every generated token.
//! - [`synth`] (hallucination labels), [`labels`] (their Parquet store), [`detector`] (the MLP trained on them).
//! - [`trigger`] (when to retrieve), [`query`] (what to ask), [`retrieval`] (where from).
//! - [`progress`]: rate and time left of a long job, for its progress lines.
//! - [`shard`]: the shard contract of the long jobs (which items a shard takes, markers, the scan before a merge).

// Unit tests look at paths directly; the code they test asks `io::probe` instead (clippy.toml).
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod autorag;
pub mod config;
pub mod corpus;
pub mod data;
pub mod detector;
pub mod device;
pub mod encoder;
pub mod entities;
pub mod eval;
pub mod io;
pub mod labels;
pub mod model;
pub mod progress;
pub mod prompt;
pub mod qa;
pub mod query;
pub mod rag;
pub mod retrieval;
pub mod sft;
pub mod shard;
pub mod step;
pub mod synth;
pub mod testing;
pub mod text;
pub mod trigger;
pub mod usage;

/// Path of the shared data folder (`../shared/data` beside the repository, or `$RAGTIME_DATA`). Data-relative
/// paths are best resolved with [`data::resolve`], which also looks in the fetched data (`datasets/data`).
pub fn shared_data_dir() -> std::path::PathBuf {
    data::shared_dir()
}
