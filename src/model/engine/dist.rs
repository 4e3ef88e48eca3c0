//! The distribution over the next token after one row of a forward pass, as an engine hands it back.
//!
//! The reference engine hands back the logits row; the CPU engine the row and its softmax statistics, worked out
//! on its threads, many rows at once, rather than one row at a time by the decode loop. The batched engine scores
//! its rows where they were computed (on the GPU: entropy, the normaliser, the greedy token, the logit of the
//! chunk's next token) and reads back only those few numbers; the row itself stays on the device and is copied to
//! the host the first time someone asks for it (a sampler that is not greedy, `Session::logits`, the probability
//! of a token that is neither the greedy one nor the chunk's next). A greedy decode with its entropies and
//! probabilities then never moves a `[vocab]` row per lane and step.
//!
//! The price is device memory: a session keeps the `[rows, vocab]` tensor its last row came from (shared with
//! the other sessions of that pass) until its next feed or rewind frees it, so sessions that stop being fed
//! without a rewind hold one pass's logits each.

use std::sync::{Arc, OnceLock};

use crate::model::sampling::{self, SoftmaxStats};

/// Where a scored row's logits can be fetched from (a `[rows, vocab]` tensor left on the device).
pub trait RowSource: Send + Sync {
    /// Logits row `i`, as f32.
    fn row(&self, i: usize) -> Vec<f32>;
}

/// What an engine computed about a row where the row lives.
#[derive(Clone)]
pub struct Scored {
    /// Entropy in nats of softmax(logits).
    pub entropy: f32,
    /// `log sum exp(logits)`: `p(id) = exp(logit[id] - lse)`.
    pub lse: f32,
    /// The greedy token (the largest logit; between exactly equal logits, the backend's argmax chooses, where
    /// [`sampling::argmax`] takes the first) and its logit.
    pub argmax: u32,
    pub max: f32,
    /// The token that follows this row inside its chunk, and its logit (`None` for a chunk's last row).
    pub next: Option<(u32, f32)>,
    /// The row itself, left where it was computed.
    pub source: Arc<dyn RowSource>,
    pub row: usize,
}

/// The next-token distribution after one row: its logits (on the host, or fetched once on first use) and, from a
/// scoring engine, the statistics controllers read.
#[derive(Clone, Default)]
pub struct NextDist {
    logits: OnceLock<Vec<f32>>,
    scored: Option<Box<Scored>>,
    /// A host row's softmax statistics, where its engine worked them out.
    stats: Option<SoftmaxStats>,
}

impl std::fmt::Debug for NextDist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.scored {
            None => write!(f, "NextDist(logits: {} values)", self.logits.get().map_or(0, Vec::len)),
            Some(s) => write!(
                f,
                "NextDist(entropy {}, argmax {}, fetched {})",
                s.entropy,
                s.argmax,
                self.logits.get().is_some()
            ),
        }
    }
}

impl NextDist {
    /// A logits row on the host.
    pub fn host(logits: Vec<f32>) -> Self {
        NextDist { logits: OnceLock::from(logits), scored: None, stats: None }
    }

    /// A logits row on the host with its softmax statistics ([`SoftmaxStats::of`] the row): entropies and
    /// probabilities are read from them, bit for bit what [`NextDist::host`] works out from the row.
    pub fn host_scored(logits: Vec<f32>) -> Self {
        let stats = SoftmaxStats::of(&logits);
        NextDist { logits: OnceLock::from(logits), scored: None, stats: Some(stats) }
    }

    /// A row scored where it was computed; its logits are fetched from `s.source` when first asked for.
    pub fn scored(s: Scored) -> Self {
        NextDist { logits: OnceLock::new(), scored: Some(Box::new(s)), stats: None }
    }

    /// The logits row (fetched from the device the first time, for a scored row).
    pub fn logits(&self) -> &[f32] {
        self.logits.get_or_init(|| {
            let s = self.scored.as_ref().expect("a row without logits is a scored row");
            s.source.row(s.row)
        })
    }

    /// Whether the logits row is on the host (for tests: a greedy decode should not need it).
    pub fn fetched(&self) -> bool {
        self.logits.get().is_some()
    }

    /// The greedy token: the largest logit (see [`Scored::argmax`] for ties).
    pub fn greedy(&self) -> u32 {
        match &self.scored {
            Some(s) => s.argmax,
            None => sampling::argmax(self.logits()),
        }
    }

    /// Entropy (nats) of the distribution and the probability of `id` under it ([`sampling::entropy_and_prob`]
    /// for a host row, from its statistics where the engine worked them out; from the scores for a scored one,
    /// fetching the row only for a token that is neither the greedy one nor the chunk's next).
    pub fn entropy_and_prob(&self, id: u32) -> (f32, f32) {
        let Some(s) = &self.scored else {
            let logits = self.logits();
            return self.stats.unwrap_or_else(|| SoftmaxStats::of(logits)).entropy_and_prob(logits, id);
        };
        let logit = if id == s.argmax {
            s.max
        } else if let Some((_, l)) = s.next.filter(|&(n, _)| n == id) {
            l
        } else {
            self.logits().get(id as usize).copied().unwrap_or(f32::NEG_INFINITY)
        };
        (s.entropy, (logit - s.lse).exp())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// One row held "on the device", counting fetches.
    struct Rows(Vec<f32>, AtomicUsize);

    impl RowSource for Rows {
        fn row(&self, _i: usize) -> Vec<f32> {
            self.1.fetch_add(1, Ordering::Relaxed);
            self.0.clone()
        }
    }

    #[test]
    fn scored_rows_answer_from_their_scores_and_fetch_only_for_other_tokens() {
        // logits [ln 6, ln 3, 0]: softmax (6, 3, 1) / 10; lse = ln 10
        // H = -(0.6 ln 0.6 + 0.3 ln 0.3 + 0.1 ln 0.1) = 0.897946
        let logits = vec![6f32.ln(), 3f32.ln(), 0.0];
        let (h, p0) = sampling::entropy_and_prob(&logits, 0);
        assert!((h - 0.897946).abs() < 1e-5 && (p0 - 0.6).abs() < 1e-6);
        let src = Arc::new(Rows(logits.clone(), AtomicUsize::new(0)));
        let s = Scored {
            entropy: 0.897946,
            lse: 10f32.ln(),
            argmax: 0,
            max: 6f32.ln(),
            next: Some((1, 3f32.ln())),
            source: src.clone(),
            row: 0,
        };
        let d = NextDist::scored(s);
        assert_eq!(d.greedy(), 0);
        let (h, p) = d.entropy_and_prob(0);
        assert!((h - 0.897946).abs() < 1e-6 && (p - 0.6).abs() < 1e-6, "{h} {p}");
        let (_, p) = d.entropy_and_prob(1); // the chunk's next token
        assert!((p - 0.3).abs() < 1e-6, "{p}");
        assert_eq!(src.1.load(Ordering::Relaxed), 0, "greedy and next tokens need no fetch");
        assert!(!d.fetched());
        let (_, p) = d.entropy_and_prob(2); // another token: the row is fetched, once
        assert!((p - 0.1).abs() < 1e-6, "{p}");
        assert_eq!(d.logits(), &logits[..]);
        assert_eq!(src.1.load(Ordering::Relaxed), 1);
        // a host row answers as sampling does
        let host = NextDist::host(logits.clone());
        assert_eq!(host.entropy_and_prob(2), sampling::entropy_and_prob(&logits, 2));
        assert_eq!(host.greedy(), 0);
    }

    /// A host row with its statistics worked out by the engine answers bit for bit as the row alone does: every
    /// token, one outside the vocabulary, rows with ties, a peaked row and one with a -inf logit.
    #[test]
    fn host_rows_scored_by_the_engine_answer_as_the_row_alone() {
        let mut rows: Vec<Vec<f32>> = (0..4u32)
            .map(|r| (0..1000u32).map(|i| ((i * 7919 + r * 104_729) % 1013) as f32 / 37.0 - 13.0).collect())
            .collect();
        rows.push(vec![30.0, 0.0, -5.0, 0.0]);
        rows.push(vec![1.0, f32::NEG_INFINITY, 2.0]);
        for row in rows {
            let (alone, scored) = (NextDist::host(row.clone()), NextDist::host_scored(row.clone()));
            for id in 0..=row.len() as u32 {
                let bits = |(h, p): (f32, f32)| (h.to_bits(), p.to_bits());
                let a = bits(alone.entropy_and_prob(id));
                assert_eq!(a, bits(scored.entropy_and_prob(id)), "token {id}");
                assert_eq!(a, bits(sampling::entropy_and_prob(&row, id)), "token {id}");
            }
            assert_eq!(scored.greedy(), sampling::argmax(&row));
        }
    }
}
