//! Retrieval: the [`Retriever`] trait the decode loop knows, and its implementations: BM25 over tantivy
//! ([`bm25`]), dense over sentence embeddings ([`dense`]: exact [`flat`] or [`hnsw`] search over the vectors of
//! [`vectors`]) and their reciprocal-rank fusion ([`hybrid`]).

pub mod bm25;
pub mod dense;
pub mod flat;
pub mod gold;
pub mod hnsw;
pub mod hybrid;
pub mod index;
pub mod matrix;
pub mod truncate;
pub mod vectors;

use std::collections::HashSet;
use std::path::PathBuf;

use anyhow::Result;

/// The retrieval layer's error: an index that cannot be searched, naming its directory and how to make a good one.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// Nothing at the path.
    #[error("{}: no such index directory (build one with `ragtime index --corpus PATH --out DIR`)", .dir.display())]
    NotFound { dir: PathBuf },
    /// A directory without a finished index (its manifest is written last, so a build that was killed has none).
    #[error("{}: not a complete ragtime {kind} index: {manifest} is missing ({hint})", .dir.display())]
    Incomplete { dir: PathBuf, kind: &'static str, manifest: String, hint: String },
    /// An index whose files do not read (flipped bytes, a truncated segment, a tantivy panic caught at the boundary).
    #[error("{}: damaged index ({detail}); rebuild it with `ragtime index --corpus CORPUS --out {}` into a new or empty \
             directory", .dir.display(), .dir.display())]
    Damaged { dir: PathBuf, detail: String },
}

/// A retrieved passage.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Passage {
    pub id: String,
    pub title: String,
    pub text: String,
    pub score: f32,
}

/// Finds passages for a query.
pub trait Retriever: Send + Sync {
    /// Top-`k` passages, best first.
    fn search(&self, query: &str, k: usize) -> Result<Vec<Passage>>;

    /// Top-`k` passages whose ids are not in `exclude`.
    fn search_excluding(&self, query: &str, k: usize, exclude: &HashSet<String>) -> Result<Vec<Passage>> {
        let mut hits = self.search(query, k + exclude.len())?;
        hits.retain(|p| !exclude.contains(&p.id));
        hits.truncate(k);
        Ok(hits)
    }

    /// One result list per query.
    fn search_batch(&self, queries: &[String], k: usize) -> Result<Vec<Vec<Passage>>> {
        queries.iter().map(|q| self.search(q, k)).collect()
    }
}

/// Which retriever a command uses (`--retriever`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RetrieverKind {
    /// BM25 over the tantivy index.
    #[default]
    Bm25,
    /// Sentence-embedding nearest neighbours (the index's `dense/` part).
    Dense,
    /// BM25 and dense fused by reciprocal rank.
    Hybrid,
}

impl std::str::FromStr for RetrieverKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "bm25" => Ok(Self::Bm25),
            "dense" => Ok(Self::Dense),
            "hybrid" => Ok(Self::Hybrid),
            _ => Err(format!("unknown retriever {s:?} (expected bm25, dense or hybrid)")),
        }
    }
}

impl std::fmt::Display for RetrieverKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Bm25 => "bm25",
            Self::Dense => "dense",
            Self::Hybrid => "hybrid",
        })
    }
}

/// Opens the retriever of kind `kind` over the index directory `dir` (built by `ragtime index`; dense and hybrid
/// need it built with `--encoder`). `depth`: passages per ranking before hybrid fusion.
pub fn open_retriever(
    kind: RetrieverKind,
    dir: &std::path::Path,
    dense: &dense::DenseOpen,
    depth: usize,
) -> Result<Box<dyn Retriever>> {
    Ok(match kind {
        RetrieverKind::Bm25 => Box::new(bm25::Bm25Index::open(dir)?),
        RetrieverKind::Dense => Box::new(dense::DenseRetriever::open(dir, dense)?),
        RetrieverKind::Hybrid => {
            let mut h = hybrid::HybridRetriever::new(dense::DenseRetriever::open(dir, dense)?);
            h.depth = depth.max(1);
            Box::new(h)
        }
    })
}
