//! `_manifest.json`: what a dataset directory holds (model, counts, label balance, and the shards with the
//! articles each holds). Renaming it into place commits a shard (see the [`super`] doc).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{ensure, Context, Result};
use serde::{Deserialize, Serialize};

use super::{FORMAT, MANIFEST, SCHEMA_VERSION};

/// One shard as the manifest records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardInfo {
    /// File name inside the dataset directory.
    pub file: String,
    pub rows: usize,
    pub hallucinated: usize,
    /// Ids of the articles whose examples (possibly none) this shard holds.
    pub articles: Vec<String>,
}

/// `_manifest.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub schema_version: u32,
    /// Model the features come from (e.g. its GGUF file name).
    pub model_id: String,
    /// Its hidden size: the length of every `hidden_*` vector.
    pub hidden: usize,
    /// Prompt templates used, in order of first appearance.
    pub templates: Vec<String>,
    /// Finished articles (with or without examples).
    pub articles: usize,
    pub examples: usize,
    /// Label balance: `hallucinated + faithful == examples`.
    pub hallucinated: usize,
    pub faithful: usize,
    /// `hallucinated / examples` (0 when empty).
    pub hallucinated_rate: f64,
    /// Examples per comparison rule.
    pub rules: BTreeMap<String, usize>,
    pub shards: Vec<ShardInfo>,
}

impl Manifest {
    pub(super) fn new(model_id: &str, hidden: usize) -> Self {
        Manifest {
            format: FORMAT.to_string(),
            schema_version: SCHEMA_VERSION,
            model_id: model_id.to_string(),
            hidden,
            templates: Vec::new(),
            articles: 0,
            examples: 0,
            hallucinated: 0,
            faithful: 0,
            hallucinated_rate: 0.0,
            rules: BTreeMap::new(),
            shards: Vec::new(),
        }
    }
}

/// Reads and checks `dir/_manifest.json`.
pub fn load_manifest(dir: &Path) -> Result<Manifest> {
    let path = dir.join(MANIFEST);
    let text = std::fs::read_to_string(&path).with_context(|| format!("{}: cannot read manifest", path.display()))?;
    let m: Manifest = serde_json::from_str(&text).with_context(|| format!("{}: malformed manifest", path.display()))?;
    ensure!(m.format == FORMAT, "{}: format is {:?}, expected {FORMAT:?}", path.display(), m.format);
    ensure!(
        m.schema_version == SCHEMA_VERSION,
        "{}: schema version {} is not the supported {SCHEMA_VERSION}",
        path.display(),
        m.schema_version
    );
    Ok(m)
}
