//! Dense retrieval: the query embedded by the same sentence encoder as the passages (with the encoder's query
//! prefix, e.g. e5's "query: "), nearest passages by inner product in the dense index ([`super::vectors`]), titles
//! and texts read from the BM25 index beside it. Scores are inner products (cosines for normalised encoders).

use std::path::Path;

use anyhow::{bail, Result};
use rayon::prelude::*;

use super::bm25::Bm25Index;
use super::vectors::{DenseIndex, DenseKind};
use super::{Passage, Retriever};
use crate::device::DeviceKind;
use crate::encoder::{SentenceEncoder, TextKind};

pub struct DenseRetriever {
    pub index: DenseIndex,
    pub encoder: SentenceEncoder,
    pub store: Bm25Index,
    /// Queries per encoder batch in [`Retriever::search_batch`].
    pub batch: usize,
}

/// How to open a dense index.
#[derive(Debug, Clone, Default)]
pub struct DenseOpen {
    /// Override the index kind it was built with (flat always works).
    pub kind: Option<DenseKind>,
    /// HNSW search width (default: the one it was built with).
    pub ef_search: Option<usize>,
    /// Encoder folder (default: the one recorded in the index; it must embed the same way).
    pub encoder: Option<std::path::PathBuf>,
    pub device: DeviceKind,
}

impl DenseRetriever {
    /// Opens `index_dir` (BM25 index + `dense/`) and loads the encoder it was built with.
    pub fn open(index_dir: &Path, o: &DenseOpen) -> Result<Self> {
        let store = Bm25Index::open(index_dir)?;
        let index = DenseIndex::open(index_dir, o.kind, o.ef_search)?;
        let enc_dir = o.encoder.clone().unwrap_or_else(|| index.manifest.encoder.clone());
        // Queries must be embedded with the passages' prefixes, whatever the folder says now.
        let encoder = SentenceEncoder::load(&enc_dir, o.device, Some(index.manifest.prefixes.clone()))?;
        if encoder.dim() != index.manifest.dim {
            bail!(
                "{}: embeds into {} dimensions, the dense index in {} holds {}-dimensional vectors",
                enc_dir.display(),
                encoder.dim(),
                index.dir.display(),
                index.manifest.dim
            );
        }
        Ok(Self { index, encoder, store, batch: 32 })
    }

    /// Top `k` for an already embedded query.
    pub fn search_vector(&self, q: &[f32], k: usize) -> Result<Vec<Passage>> {
        let hits = self.index.search.search(q, k)?;
        hits.into_iter()
            .map(|(row, score)| {
                let id = self
                    .index
                    .ids
                    .get(row as usize)
                    .ok_or_else(|| anyhow::anyhow!("{}: row {row} has no id", self.index.dir.display()))?;
                let mut p = self.store.passage(id)?.ok_or_else(|| {
                    anyhow::anyhow!(
                        "{}: passage {id:?} of the dense index is not in the BM25 index (built from another corpus?)",
                        self.store.dir().display()
                    )
                })?;
                p.score = score;
                Ok(p)
            })
            .collect()
    }
}

impl Retriever for DenseRetriever {
    fn search(&self, query: &str, k: usize) -> Result<Vec<Passage>> {
        let q = self.encoder.encode(&[query], TextKind::Query, 1)?.remove(0);
        self.search_vector(&q, k)
    }

    /// Queries embedded in batches, then searched in parallel on rayon's current pool.
    fn search_batch(&self, queries: &[String], k: usize) -> Result<Vec<Vec<Passage>>> {
        let refs: Vec<&str> = queries.iter().map(String::as_str).collect();
        let vecs = self.encoder.encode(&refs, TextKind::Query, self.batch)?;
        vecs.par_iter().map(|q| self.search_vector(q, k)).collect()
    }
}
