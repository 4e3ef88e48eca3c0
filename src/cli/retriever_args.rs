//! Flags shared by every command that retrieves: which retriever, and how the dense side searches.

use std::path::Path;

use anyhow::Result;
use clap::Args;

use ragtime::device::DeviceKind;
use ragtime::retrieval::dense::DenseOpen;
use ragtime::retrieval::vectors::DenseKind;
use ragtime::retrieval::{open_retriever, Retriever, RetrieverKind};

#[derive(Args, Debug, Clone)]
pub struct RetrieverArgs {
    /// bm25, dense or hybrid (BM25 and dense fused by reciprocal rank, k = 60). Dense and hybrid need an index
    /// built with `ragtime index --encoder MODEL_DIR`.
    #[arg(long, default_value = "bm25")]
    pub retriever: RetrieverKind,
    /// Search the dense vectors flat (exact) or with the HNSW graph (default: as the index was built).
    #[arg(long)]
    pub dense_kind: Option<DenseKind>,
    /// HNSW search width (default: as the index was built).
    #[arg(long, value_parser = super::ranges::int::<1, 100_000>)]
    pub ef_search: Option<usize>,
    /// Where the query encoder runs: cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    pub encoder_device: DeviceKind,
    /// Hybrid: passages taken from each ranking before fusing.
    #[arg(long, default_value_t = 100, value_parser = super::ranges::int::<1, 10_000>)]
    pub rrf_depth: usize,
}

impl RetrieverArgs {
    pub fn open(&self, index: &Path) -> Result<Box<dyn Retriever>> {
        let dense =
            DenseOpen { kind: self.dense_kind, ef_search: self.ef_search, encoder: None, device: self.encoder_device };
        open_retriever(self.retriever, index, &dense, self.rrf_depth)
    }

    /// What a run records about its retriever.
    pub fn describe(&self) -> String {
        match self.retriever {
            RetrieverKind::Bm25 => "bm25".into(),
            RetrieverKind::Dense => format!(
                "dense ({})",
                self.dense_kind.map(|k| format!("{k:?}").to_lowercase()).unwrap_or_else(|| "as built".into())
            ),
            RetrieverKind::Hybrid => format!("hybrid (rrf k 60, depth {})", self.rrf_depth),
        }
    }
}
