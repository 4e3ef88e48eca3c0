//! Paired bootstrap of a metric's difference between two runs on the same questions (Efron & Tibshirani 1993,
//! ch. 16; as used for significance in NLP by Koehn 2004 and Berg-Kirkpatrick et al. 2012).
//!
//! Given per-question scores `a_i` and `b_i` of two controllers on the same `n` questions, the differences
//! `d_i = a_i - b_i` are resampled `R` times with replacement (each resample draws `n` question indices); the
//! 95% interval is the 2.5th and 97.5th percentiles of the `R` resampled means (the percentile method), and
//! the two-sided p-value is twice the smaller share of resampled means on either side of zero (capped at 1).
//! Pairing matters: both runs are resampled with the *same* indices, so the variation between questions, which
//! both share, cancels out of the difference.
//!
//! The random numbers come from SplitMix64 (Steele et al. 2014) seeded by the caller, not from `rand`, so an
//! interval printed in a report is reproduced by any later build of ragtime with the same seed.

/// The result of [`paired_bootstrap`].
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct PairedDiff {
    /// Questions paired.
    pub n: usize,
    /// Mean of `a - b` over the questions (the observed difference).
    pub mean: f64,
    /// 2.5th percentile of the resampled means.
    pub lo: f64,
    /// 97.5th percentile of the resampled means.
    pub hi: f64,
    /// Two-sided p-value: 2 min(P(mean* <= 0), P(mean* >= 0)), capped at 1.
    pub p: f64,
    /// Resamples the interval is read from.
    pub resamples: usize,
}

/// SplitMix64: a 64-bit state advanced by a constant, mixed by two multiply-xorshift rounds.
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform index below `n` (`n > 0`), by the multiply-shift map (bias below 2^-32 for `n < 2^32`).
    pub fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() as u128 * n as u128) >> 64) as usize
    }
}

/// The `q`-quantile (0..=1) of sorted values: the value at rank `round(q (len - 1))`.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted[((q * (sorted.len() - 1) as f64).round() as usize).min(sorted.len() - 1)]
}

/// Paired bootstrap of `mean(a - b)`; `a` and `b` are per-question scores in the same question order.
/// `resamples` = 0 or empty inputs give the observed difference with a zero-width interval and p = 1.
///
/// # Panics
/// If `a` and `b` differ in length (the caller pairs them by question id).
pub fn paired_bootstrap(a: &[f64], b: &[f64], resamples: usize, seed: u64) -> PairedDiff {
    assert_eq!(a.len(), b.len(), "paired scores must be of the same questions");
    let n = a.len();
    let d: Vec<f64> = a.iter().zip(b).map(|(x, y)| x - y).collect();
    let mean = if n == 0 { 0.0 } else { d.iter().sum::<f64>() / n as f64 };
    let means = resampled(n, resamples, seed, |idx| Some(idx.iter().fold(0.0, |s, &i| s + d[i]) / n as f64));
    interval(n, mean, &means)
}

/// Draws `resamples` resamples of `n` questions with replacement (each `n` indices below `n`, from SplitMix64
/// seeded with `seed`) and hands each one's indices to `each`, in order. No resample is drawn when `n` is 0.
pub fn for_each_resample(n: usize, resamples: usize, seed: u64, mut each: impl FnMut(&[usize])) {
    if n == 0 {
        return;
    }
    let mut rng = SplitMix64::new(seed);
    let mut idx = vec![0usize; n];
    for _ in 0..resamples {
        for i in idx.iter_mut() {
            *i = rng.below(n);
        }
        each(&idx);
    }
}

/// [`for_each_resample`]'s resamples evaluated by `stat`: the values it gives, sorted. `stat` returns `None`
/// where the statistic is undefined on a resample, which is then left out.
pub fn resampled(n: usize, resamples: usize, seed: u64, mut stat: impl FnMut(&[usize]) -> Option<f64>) -> Vec<f64> {
    let mut values = Vec::new();
    for_each_resample(n, resamples, seed, |idx| values.extend(stat(idx)));
    values.sort_by(f64::total_cmp);
    values
}

/// The percentile interval and two-sided p-value of a statistic observed as `observed` on `n` questions, from
/// its resampled values (sorted, as [`resampled`] gives them); no values give a zero-width interval and p = 1.
pub fn interval(n: usize, observed: f64, sorted: &[f64]) -> PairedDiff {
    if sorted.is_empty() {
        return PairedDiff { n, mean: observed, lo: observed, hi: observed, p: 1.0, resamples: 0 };
    }
    let k = sorted.len() as f64;
    let le = sorted.iter().filter(|&&m| m <= 0.0).count() as f64 / k;
    let ge = sorted.iter().filter(|&&m| m >= 0.0).count() as f64 / k;
    PairedDiff {
        n,
        mean: observed,
        lo: quantile(sorted, 0.025),
        hi: quantile(sorted, 0.975),
        p: (2.0 * le.min(ge)).min(1.0),
        resamples: sorted.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SplitMix64's published first outputs for seed 0 (the reference implementation's test vector).
    #[test]
    fn splitmix_matches_the_reference_sequence() {
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(r.next_u64(), 0x06C4_5D18_8009_454F);
    }

    /// Hand-worked: two questions, a scores (1, 0), b scores (0, 0), so d = (1, 0). A resample of two indices
    /// has mean 0 (both pick d=0: probability 1/4), 1/2 (one of each: 1/2) or 1 (both d=1: 1/4). So the
    /// observed difference is 0.5; the 2.5th percentile is 0 and the 97.5th is 1; P(mean* <= 0) = 1/4 and
    /// P(mean* >= 0) = 1, so p = 2 * 1/4 = 0.5.
    #[test]
    fn two_questions_by_hand() {
        let r = paired_bootstrap(&[1.0, 0.0], &[0.0, 0.0], 10_000, 7);
        assert_eq!(r.n, 2);
        assert_eq!(r.mean, 0.5);
        assert_eq!((r.lo, r.hi), (0.0, 1.0));
        assert!((r.p - 0.5).abs() < 0.03, "p = {}", r.p);
    }

    /// Hand-worked: three questions with d = (0.3, 0.3, 0.3): every resample has mean 0.3, so the interval
    /// collapses to the point and no resample is at or below zero (p = 0).
    #[test]
    fn constant_differences_give_a_point_interval() {
        let r = paired_bootstrap(&[0.5, 0.8, 0.3], &[0.2, 0.5, 0.0], 1000, 1);
        assert!((r.mean - 0.3).abs() < 1e-12);
        assert!((r.lo - 0.3).abs() < 1e-12 && (r.hi - 0.3).abs() < 1e-12);
        assert_eq!(r.p, 0.0);
    }

    /// Pairing: two runs that differ by a constant on every question are significantly different however large
    /// the spread between questions, which an unpaired comparison of the two means would not see.
    #[test]
    fn pairing_cancels_the_spread_between_questions() {
        let a: Vec<f64> = (0..50).map(|i| (i % 10) as f64 / 10.0 + 0.05).collect();
        let b: Vec<f64> = (0..50).map(|i| (i % 10) as f64 / 10.0).collect();
        let r = paired_bootstrap(&a, &b, 2000, 3);
        assert!(r.lo > 0.049 && r.hi < 0.051, "{r:?}");
        assert_eq!(r.p, 0.0);
    }

    #[test]
    fn same_seed_same_interval_other_seed_close() {
        let a: Vec<f64> = (0..40).map(|i| ((i * 7) % 11) as f64 / 11.0).collect();
        let b: Vec<f64> = (0..40).map(|i| ((i * 5) % 13) as f64 / 13.0).collect();
        assert_eq!(paired_bootstrap(&a, &b, 10_000, 42), paired_bootstrap(&a, &b, 10_000, 42));
        let (x, y) = (paired_bootstrap(&a, &b, 10_000, 42), paired_bootstrap(&a, &b, 10_000, 43));
        assert!((x.lo - y.lo).abs() < 0.02 && (x.hi - y.hi).abs() < 0.02);
        // the normal approximation: mean +- 1.96 sd/sqrt(n), which the percentile interval approaches
        let d: Vec<f64> = a.iter().zip(&b).map(|(p, q)| p - q).collect();
        let m = d.iter().sum::<f64>() / 40.0;
        let sd = (d.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / 40.0).sqrt();
        let half = 1.96 * sd / 40f64.sqrt();
        assert!((x.lo - (m - half)).abs() < 0.03 && (x.hi - (m + half)).abs() < 0.03, "{x:?} vs {m} +- {half}");
    }

    #[test]
    fn empty_and_zero_resamples() {
        let r = paired_bootstrap(&[], &[], 100, 0);
        assert_eq!((r.n, r.mean, r.p), (0, 0.0, 1.0));
        let r = paired_bootstrap(&[1.0], &[0.0], 0, 0);
        assert_eq!((r.lo, r.hi, r.resamples), (1.0, 1.0, 0));
    }
}
