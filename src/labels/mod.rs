//! The hallucination-label store: resumable Parquet shards of labelled examples with the model's internal states
//! (MIND's pseudo-training data), which `synth hallucination` and `synth qa-labels` write ([`crate::synth`]) and the
//! detector trains on ([`crate::detector`]). It depends on neither, so the learned trigger that loads a detector
//! does not reach back into the synthesis pipeline.
//!
//! # Layout of a dataset directory
//!
//! ```text
//! datasets/hallucination/
//!   _manifest.json       model, templates, counts, label balance, and the shards with the articles each holds
//!   part-00000.parquet   one shard: all examples of a group of finished articles (snappy-compressed)
//!   part-00001.parquet
//!   ...
//! ```
//!
//! # Parquet schema (one row per example; every column non-null)
//!
//! | column                | type            | meaning |
//! |-----------------------|-----------------|---------|
//! | `article_id`          | utf8            | id of the Wikipedia article |
//! | `title`               | utf8            | its title |
//! | `template`            | utf8            | prompt template the continuation was generated with |
//! | `trunc_offset`        | uint32          | char offset into the article text where it was truncated (the original entity starts there) |
//! | `entity_label`        | utf8            | entity type of the original entity (`PERSON`, `DATE`, ...) |
//! | `original_entity`     | utf8            | the entity the article has at the truncation point |
//! | `generated_entity`    | utf8            | the entity the model generated in its place |
//! | `continuation`        | utf8            | the generated continuation text |
//! | `label`               | uint8           | 1 = hallucinated (generated entity differs), 0 = faithful |
//! | `rule`                | utf8            | the comparison rule that decided the label (`exact`, `overlap`, ...) |
//! | `entropy_last`        | float32         | entropy (nats) of the next-token distribution at the last prompt token |
//! | `entropy_entity_mean` | float32         | mean over the generated entity's tokens of the entropy of the distribution each was drawn from |
//! | `hidden_final_last`   | list\<float32\> | last-layer hidden state (after final norm) at the last prompt token, `hidden` values |
//! | `hidden_mean_last`    | list\<float32\> | mean over decoder layers of the layer outputs at the last prompt token |
//! | `hidden_final_entity` | list\<float32\> | `hidden_final` averaged over the generated entity's tokens |
//! | `hidden_mean_entity`  | list\<float32\> | `hidden_mean` averaged over the generated entity's tokens |
//!
//! The list columns use Arrow's standard `List<item: Float32>` layout, so `pandas.read_parquet(dir)` gives
//! numpy arrays per cell and `polars.read_parquet(dir + "/*.parquet")` gives `List(Float32)` columns
//! (checked with pandas 2 / pyarrow and polars). The manifest is named `_manifest.json` and temporary files
//! start with `.` so that directory readers (pyarrow skips `_*` and `.*`) see only shards. Only the shards
//! listed in the manifest belong to the dataset (see below); readers of the directory should run after the
//! writer finished or was re-opened.
//!
//! # Resumability
//!
//! The unit of work is an article. [`HalluStore::add_article`] buffers the examples of a *finished* article;
//! every `flush_every` articles the buffer becomes one shard, written to `.part-NNNNN.parquet.tmp`, synced, and
//! renamed into place; then `_manifest.json` (also via tmp + rename) records the shard with the ids of all
//! its articles (including articles that produced no example). The manifest is the commit point:
//!
//! - a process killed before the manifest rename leaves at most a `.tmp` file or a shard the manifest does
//!   not list; [`HalluStore::open`] deletes both, and the articles in them are not "done", so a re-run
//!   redoes them: no row is ever half-written, duplicated, or dropped;
//! - the buffer of a killed process is lost by design (those articles are redone);
//! - a re-run asks [`HalluStore::is_done`] and skips finished articles.
//!
//! A directory belongs to one model: [`HalluStore::open`] refuses a directory whose manifest names another
//! model id or hidden size.
//!
//! # Files
//!
//! [`manifest`] (`_manifest.json`, the commit point), [`schema`](fn@schema) (the Arrow schema and rows to
//! columns), [`writer`] ([`HalluStore`], shards and resumption), [`reader`] (examples and feature tables back).

pub mod manifest;
pub mod merge;
pub mod reader;
mod schema;
pub mod writer;

pub use manifest::{load_manifest, Manifest, ShardInfo};
pub use reader::{
    feature_columns, read_all, read_features, read_features_many, template_agreement, FeatureBatch, FeatureStream,
    FeatureTable, TemplateAgreement,
};
pub use schema::schema;
pub use writer::HalluStore;

/// Value of [`Manifest::format`].
pub const FORMAT: &str = "ragtime-hallucination";
/// Version of the Parquet schema documented above.
pub const SCHEMA_VERSION: u32 = 1;
/// Name of the manifest file in a dataset directory.
pub const MANIFEST: &str = "_manifest.json";
/// The kind of output a dataset directory is ([`crate::io::claim_output_dir`]).
pub const OUTPUT_KIND: &str = "hallucination dataset";
/// Default number of articles per shard.
pub const DEFAULT_FLUSH_EVERY: usize = 64;

/// Feature columns a detector can be trained on: `(name, is a hidden-size vector)`.
pub const FEATURE_COLUMNS: [(&str, bool); 6] = [
    ("hidden_final_last", true),
    ("hidden_mean_last", true),
    ("hidden_final_entity", true),
    ("hidden_mean_entity", true),
    ("entropy_last", false),
    ("entropy_entity_mean", false),
];

/// One labelled example: a continuation of a truncated article and the model internals at that point.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HalluExample {
    pub article_id: String,
    pub title: String,
    pub template: String,
    /// Char offset into the article text where it was truncated.
    pub trunc_offset: u32,
    pub entity_label: String,
    pub original_entity: String,
    pub generated_entity: String,
    pub continuation: String,
    /// 1 = hallucinated, 0 = faithful.
    pub label: u8,
    /// Which comparison rule decided the label.
    pub rule: String,
    pub entropy_last: f32,
    pub entropy_entity_mean: f32,
    pub hidden_final_last: Vec<f32>,
    pub hidden_mean_last: Vec<f32>,
    pub hidden_final_entity: Vec<f32>,
    pub hidden_mean_entity: Vec<f32>,
}

#[cfg(test)]
pub(crate) mod fixtures {
    //! Examples for the store's tests.

    use super::HalluExample;

    pub(crate) fn example(article: &str, k: usize, hidden: usize) -> HalluExample {
        let seed = article.bytes().map(|b| b as f32).sum::<f32>() + k as f32;
        let v = |o: f32| (0..hidden).map(|j| seed * 0.01 + o + j as f32).collect::<Vec<f32>>();
        HalluExample {
            article_id: article.to_string(),
            title: format!("Title of {article}"),
            template: "Continue: {text}".to_string(),
            trunc_offset: 10 * k as u32,
            entity_label: "PERSON".to_string(),
            original_entity: format!("Alice {k}"),
            generated_entity: if k.is_multiple_of(2) { format!("Alice {k}") } else { "Bob".to_string() },
            continuation: format!("continuation {k} of {article} — ünïcode"),
            label: (k % 2) as u8,
            rule: if k.is_multiple_of(2) { "exact".to_string() } else { "overlap".to_string() },
            entropy_last: 0.5 + k as f32,
            entropy_entity_mean: 1.5 + k as f32,
            hidden_final_last: v(0.0),
            hidden_mean_last: v(100.0),
            hidden_final_entity: v(200.0),
            hidden_mean_entity: v(300.0),
        }
    }

    /// Articles `a0..a{n}`: article `i` has `i % 3` examples (so some have none).
    pub(crate) fn corpus(n: usize, hidden: usize) -> Vec<(String, Vec<HalluExample>)> {
        (0..n)
            .map(|i| {
                let id = format!("a{i}");
                let ex = (0..i % 3).map(|k| example(&id, k, hidden)).collect();
                (id, ex)
            })
            .collect()
    }
}
