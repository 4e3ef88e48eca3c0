//! Binary classification metrics for the detector: accuracy, F1, ROC-AUC and PR-AUC.
//!
//! Labels are `1` = hallucinated (the positive class); scores are the detector's probability of class 1.
//! Accuracy and F1 use the decision `score >= 0.5` (the argmax of a 2-way softmax). ROC-AUC and PR-AUC are
//! threshold-free and `NaN` when a class is missing (they are undefined then).

use serde::{Deserialize, Serialize};

/// Fraction of examples where `(score >= 0.5) == (label == 1)`.
pub fn accuracy(labels: &[u8], scores: &[f32]) -> f64 {
    assert_eq!(labels.len(), scores.len());
    if labels.is_empty() {
        return f64::NAN;
    }
    let right = labels.iter().zip(scores).filter(|(&y, &s)| (s >= 0.5) == (y == 1)).count();
    right as f64 / labels.len() as f64
}

/// F1 of the positive class at threshold 0.5: `2 TP / (2 TP + FP + FN)` (0 when there is no positive at all,
/// neither predicted nor true).
pub fn f1(labels: &[u8], scores: &[f32]) -> f64 {
    assert_eq!(labels.len(), scores.len());
    let (mut tp, mut fp, mut fn_) = (0usize, 0usize, 0usize);
    for (&y, &s) in labels.iter().zip(scores) {
        match (s >= 0.5, y == 1) {
            (true, true) => tp += 1,
            (true, false) => fp += 1,
            (false, true) => fn_ += 1,
            (false, false) => {}
        }
    }
    let den = 2 * tp + fp + fn_;
    if den == 0 {
        0.0
    } else {
        2.0 * tp as f64 / den as f64
    }
}

/// ROC-AUC as the Mann-Whitney statistic: the probability that a random positive scores above a random
/// negative, ties counting one half. Computed from mid-ranks: `(R+ - P(P+1)/2) / (P N)` where `R+` is the sum
/// of the positives' ranks (ties get the average of the ranks they span).
pub fn roc_auc(labels: &[u8], scores: &[f32]) -> f64 {
    assert_eq!(labels.len(), scores.len());
    let n_pos = labels.iter().filter(|&&y| y == 1).count();
    let n_neg = labels.len() - n_pos;
    if n_pos == 0 || n_neg == 0 {
        return f64::NAN;
    }
    let mut idx: Vec<usize> = (0..scores.len()).collect();
    idx.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
    let mut rank_sum_pos = 0.0f64;
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && scores[idx[j + 1]] == scores[idx[i]] {
            j += 1;
        }
        // ranks i+1 ..= j+1 (1-based) share their mean
        let mid = (i + j + 2) as f64 / 2.0;
        rank_sum_pos += mid * idx[i..=j].iter().filter(|&&k| labels[k] == 1).count() as f64;
        i = j + 1;
    }
    let p = n_pos as f64;
    (rank_sum_pos - p * (p + 1.0) / 2.0) / (p * n_neg as f64)
}

/// PR-AUC as average precision: `sum_k (R_k - R_{k-1}) P_k` over the distinct score thresholds from the
/// highest down (tied scores enter together), as scikit-learn's `average_precision_score`.
pub fn pr_auc(labels: &[u8], scores: &[f32]) -> f64 {
    assert_eq!(labels.len(), scores.len());
    let n_pos = labels.iter().filter(|&&y| y == 1).count();
    if n_pos == 0 {
        return f64::NAN;
    }
    let mut idx: Vec<usize> = (0..scores.len()).collect();
    idx.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    let (mut tp, mut fp, mut prev_recall, mut ap) = (0usize, 0usize, 0.0f64, 0.0f64);
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && scores[idx[j + 1]] == scores[idx[i]] {
            j += 1;
        }
        for &k in &idx[i..=j] {
            if labels[k] == 1 {
                tp += 1
            } else {
                fp += 1
            }
        }
        let recall = tp as f64 / n_pos as f64;
        let precision = tp as f64 / (tp + fp) as f64;
        ap += (recall - prev_recall) * precision;
        prev_recall = recall;
        i = j + 1;
    }
    ap
}

/// Bins of [`ece`].
pub const ECE_BINS: usize = 10;

/// Expected calibration error of the scores as probabilities of label 1 (Naeini et al. 2015; Guo et al. 2017):
/// the scores are put in [`ECE_BINS`] equal-width bins over [0, 1] (a score of exactly 1 in the last), and
/// ECE = sum over bins of (bin size / n) * |share of label 1 in the bin - mean score in the bin|. NaN for no
/// examples.
pub fn ece(labels: &[u8], scores: &[f32]) -> f64 {
    if labels.is_empty() {
        return f64::NAN;
    }
    let mut n = [0usize; ECE_BINS];
    let mut pos = [0usize; ECE_BINS];
    let mut conf = [0f64; ECE_BINS];
    for (&y, &p) in labels.iter().zip(scores) {
        let p = (p as f64).clamp(0.0, 1.0);
        let b = ((p * ECE_BINS as f64) as usize).min(ECE_BINS - 1);
        n[b] += 1;
        pos[b] += (y == 1) as usize;
        conf[b] += p;
    }
    let total = labels.len() as f64;
    (0..ECE_BINS)
        .filter(|&b| n[b] > 0)
        .map(|b| n[b] as f64 / total * (pos[b] as f64 / n[b] as f64 - conf[b] / n[b] as f64).abs())
        .sum()
}

/// The metrics of one split.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    pub n: usize,
    pub positives: usize,
    #[serde(with = "nan_as_null")]
    pub accuracy: f64,
    #[serde(with = "nan_as_null")]
    pub f1: f64,
    #[serde(with = "nan_as_null")]
    pub roc_auc: f64,
    #[serde(with = "nan_as_null")]
    pub pr_auc: f64,
    /// Expected calibration error ([`ece`]); NaN in reports written before it was measured.
    #[serde(with = "nan_as_null", default = "nan")]
    pub ece: f64,
}

fn nan() -> f64 {
    f64::NAN
}

/// JSON has no NaN: undefined metrics are written as `null` and read back as NaN.
mod nan_as_null {
    use serde::{Deserialize, Deserializer, Serializer};
    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        if v.is_finite() {
            s.serialize_f64(*v)
        } else {
            s.serialize_none()
        }
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
    }
}

impl Metrics {
    pub fn compute(labels: &[u8], scores: &[f32]) -> Self {
        Metrics {
            n: labels.len(),
            positives: labels.iter().filter(|&&y| y == 1).count(),
            accuracy: accuracy(labels, scores),
            f1: f1(labels, scores),
            roc_auc: roc_auc(labels, scores),
            pr_auc: pr_auc(labels, scores),
            ece: ece(labels, scores),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    /// Hand-worked: scores 0.05, 0.15 (label 0, 1) in bins 0 and 1; 0.92, 0.98, 1.0 (labels 1, 1, 0) in bin 9.
    /// Bin 0: |0 - 0.05| = 0.05, weight 1/5; bin 1: |1 - 0.15| = 0.85, weight 1/5; bin 9: |2/3 - 0.9667| = 0.3,
    /// weight 3/5. ECE = 0.01 + 0.17 + 0.18 = 0.36.
    #[test]
    fn ece_by_hand() {
        let e = ece(&[0, 1, 1, 1, 0], &[0.05, 0.15, 0.92, 0.98, 1.0]);
        assert!((e - 0.36).abs() < 1e-6, "{e}");
        // a calibrated bin: a quarter of the examples scored 0.25 are positive
        assert!(ece(&[1, 0, 0, 0], &[0.25, 0.25, 0.25, 0.25]).abs() < 1e-7);
        assert!(ece(&[], &[]).is_nan());
    }

    #[test]
    fn hand_worked_no_ties() {
        let y = [0, 0, 1, 1];
        let s = [0.1, 0.4, 0.35, 0.8];
        // positive/negative pairs: (0.35>0.1) (0.35<0.4) (0.8>0.1) (0.8>0.4) -> 3 of 4
        assert!(close(roc_auc(&y, &s), 0.75));
        // by score: 0.8(+) P=1 R=1/2; 0.4(-); 0.35(+) P=2/3 R=1; AP = 1/2*1 + 1/2*2/3 = 5/6
        assert!(close(pr_auc(&y, &s), 5.0 / 6.0));
        // predictions at 0.5: 0 0 0 1 -> 3 right; TP=1 FP=0 FN=1 -> F1 = 2/3
        assert!(close(accuracy(&y, &s), 0.75));
        assert!(close(f1(&y, &s), 2.0 / 3.0));
    }

    #[test]
    fn hand_worked_ties() {
        let y = [1, 0, 1, 0];
        let s = [0.5, 0.5, 0.9, 0.1];
        // pairs: (0.5 vs 0.5) = 1/2, (0.5>0.1) = 1, (0.9>0.5) = 1, (0.9>0.1) = 1 -> 3.5/4
        assert!(close(roc_auc(&y, &s), 0.875));
        // 0.9(+): P=1 R=1/2; {0.5(+),0.5(-)} together: P=2/3 R=1 -> 1/2 + 1/2*2/3
        assert!(close(pr_auc(&y, &s), 5.0 / 6.0));
        // predictions: 1 1 1 0 -> right: 1,0(wrong),1,1 -> 3/4; TP=2 FP=1 FN=0 -> 4/5
        assert!(close(accuracy(&y, &s), 0.75));
        assert!(close(f1(&y, &s), 0.8));
    }

    #[test]
    fn degenerate() {
        assert!(roc_auc(&[1, 1], &[0.2, 0.3]).is_nan());
        assert!(pr_auc(&[0, 0], &[0.2, 0.3]).is_nan());
        assert!(close(roc_auc(&[0, 1], &[0.2, 0.3]), 1.0));
        assert!(close(roc_auc(&[1, 0], &[0.2, 0.3]), 0.0));
        assert!(close(roc_auc(&[1, 0, 1, 0], &[0.4; 4]), 0.5));
        // all tied: a single threshold, precision = base rate 1/2
        assert!(close(pr_auc(&[1, 0, 1, 0], &[0.4; 4]), 0.5));
        assert!(close(f1(&[0, 0], &[0.1, 0.2]), 0.0));
    }

    #[test]
    fn undefined_metrics_survive_json() {
        let m = Metrics::compute(&[1, 1], &[0.2, 0.7]);
        let back: Metrics = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        assert!(back.roc_auc.is_nan() && m.roc_auc.is_nan());
        assert_eq!((back.n, back.positives, back.accuracy, back.f1), (2, 2, 0.5, m.f1));
    }
}
