//! Hybrid retrieval: BM25 and dense rankings fused by reciprocal-rank fusion (Cormack, Clarke & Büttcher, 2009,
//! "Reciprocal rank fusion outperforms Condorcet and individual rank learning methods", SIGIR):
//!
//! `score(d) = sum over rankings r of 1 / (k + rank_r(d))`, ranks from 1, `k = 60`,
//!
//! a passage missing from a ranking adds nothing for it. Each ranking is cut at `depth` (default 100) before
//! fusing. RRF needs no score calibration between BM25 (unbounded) and cosine scores; it rewards passages both
//! retrievers rank well. Ties go to the passage with the better single rank, then to the BM25 side.

use std::collections::HashMap;

use anyhow::Result;

use super::bm25::Bm25Index;
use super::dense::DenseRetriever;
use super::{Passage, Retriever};

/// RRF's constant, as in the paper.
pub const RRF_K: f32 = 60.0;

/// A passage being fused: (fused score, best rank, first (ranking, position) seen, passage).
type Fused<'a> = (f32, usize, (usize, usize), &'a Passage);

/// Fuses `rankings` (each best first) by reciprocal rank; returns the top `top`, `score` = the fused score.
pub fn reciprocal_rank_fusion(rankings: &[Vec<Passage>], k: f32, top: usize) -> Vec<Passage> {
    // id -> (fused score, best rank, first (ranking, position) seen, passage)
    let mut fused: HashMap<&str, Fused> = HashMap::new();
    for (r, ranking) in rankings.iter().enumerate() {
        for (i, p) in ranking.iter().enumerate() {
            let rank = i + 1;
            let add = 1.0 / (k + rank as f32);
            fused
                .entry(p.id.as_str())
                .and_modify(|e| {
                    e.0 += add;
                    e.1 = e.1.min(rank);
                })
                .or_insert((add, rank, (r, i), p));
        }
    }
    let mut all: Vec<_> = fused.into_values().collect();
    all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    all.into_iter().take(top).map(|(s, _, _, p)| Passage { score: s, ..p.clone() }).collect()
}

pub struct HybridRetriever {
    pub dense: DenseRetriever,
    /// Passages taken from each ranking before fusing.
    pub depth: usize,
    pub k: f32,
}

impl HybridRetriever {
    pub fn new(dense: DenseRetriever) -> Self {
        Self { dense, depth: 100, k: RRF_K }
    }

    fn bm25(&self) -> &Bm25Index {
        &self.dense.store
    }
}

impl Retriever for HybridRetriever {
    fn search(&self, query: &str, k: usize) -> Result<Vec<Passage>> {
        let depth = self.depth.max(k);
        let sparse = self.bm25().search(query, depth)?;
        let dense = self.dense.search(query, depth)?;
        Ok(reciprocal_rank_fusion(&[sparse, dense], self.k, k))
    }

    fn search_batch(&self, queries: &[String], k: usize) -> Result<Vec<Vec<Passage>>> {
        let depth = self.depth.max(k);
        let sparse = self.bm25().search_batch(queries, depth)?;
        let dense = self.dense.search_batch(queries, depth)?;
        Ok(sparse.into_iter().zip(dense).map(|(s, d)| reciprocal_rank_fusion(&[s, d], self.k, k)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranking(ids: &[&str]) -> Vec<Passage> {
        ids.iter()
            .map(|id| Passage { id: id.to_string(), title: format!("T{id}"), text: format!("text {id}"), score: 9.0 })
            .collect()
    }

    /// BM25: a b c; dense: c a d. With k = 60:
    /// a: 1/61 + 1/62 = 0.0163934 + 0.0161290 = 0.0325224
    /// c: 1/63 + 1/61 = 0.0158730 + 0.0163934 = 0.0322664
    /// b: 1/62 = 0.0161290; d: 1/63 = 0.0158730
    /// -> a, c, b, d.
    #[test]
    fn rrf_hand_worked_example() {
        let fused = reciprocal_rank_fusion(&[ranking(&["a", "b", "c"]), ranking(&["c", "a", "d"])], 60.0, 10);
        let ids: Vec<&str> = fused.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(ids, vec!["a", "c", "b", "d"]);
        let want = [0.0325224, 0.0322664, 0.0161290, 0.0158730];
        for (p, w) in fused.iter().zip(want) {
            assert!((p.score - w).abs() < 1e-6, "{} {} vs {w}", p.id, p.score);
        }
        assert_eq!((fused[1].title.as_str(), fused[1].text.as_str()), ("Tc", "text c"));
        // top cuts; a tie (b at rank 1 of one list, e at rank 1 of the other) goes to the first ranking's passage.
        assert_eq!(reciprocal_rank_fusion(&[ranking(&["a", "b", "c"]), ranking(&["c", "a", "d"])], 60.0, 2).len(), 2);
        let tie = reciprocal_rank_fusion(&[ranking(&["b"]), ranking(&["e"])], 60.0, 2);
        assert_eq!(tie.iter().map(|p| p.id.as_str()).collect::<Vec<_>>(), vec!["b", "e"]);
        assert!(reciprocal_rank_fusion(&[vec![], vec![]], 60.0, 5).is_empty());
    }
}
