//! Helpers shared by the integration tests.

use std::sync::Mutex;

use anyhow::Result;
use ragtime::retrieval::{Passage, Retriever};

/// Word-overlap retrieval over a few passages: a passage scores the number of its words that are in the query.
/// Records the queries it saw.
pub struct Tiny(pub Vec<Passage>, pub Mutex<Vec<String>>);

impl Retriever for Tiny {
    fn search(&self, query: &str, k: usize) -> Result<Vec<Passage>> {
        self.1.lock().unwrap().push(query.to_string());
        let q: Vec<String> = query.split_whitespace().map(|w| w.to_lowercase()).collect();
        let mut hits: Vec<Passage> = self
            .0
            .iter()
            .map(|p| {
                let s = p.text.split_whitespace().filter(|w| q.contains(&w.to_lowercase())).count() as f32;
                Passage { score: s, ..p.clone() }
            })
            .collect();
        hits.sort_by(|a, b| b.score.total_cmp(&a.score));
        hits.truncate(k);
        Ok(hits)
    }
}
