//! Retrieval: the [`Retriever`] trait the decode loop knows, and its BM25 implementation over tantivy.

pub mod bm25;
pub mod index;
pub mod truncate;

use std::collections::HashSet;

use anyhow::Result;

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
