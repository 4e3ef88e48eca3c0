//! Detector ensembles (`train detector --members N`): N networks of the same shape trained on the same rows and
//! splits with seeds `seed, seed + 1, ...`, kept together as one [`Detector`] whose margin is the mean of their
//! margins.
//!
//! Why: one network's scores on generated tokens depend on its seed and on the epoch that validation picks, and
//! the picks are decided on small differences (Qwen's detector on 5,404 labels kept epoch 1 or epoch 8 on
//! validation ROC-AUC 0.866 against 0.868, and the threshold that gave two retrievals per question moved
//! 30,000-fold in `1 - t` between them). A deep ensemble (Lakshminarayanan et al., 2017) averages that out.
//! Deviation: they average the members' probabilities; ragtime averages their log-odds (the normalised
//! geometric mean of the odds), so that the threshold rule keeps its resolution where the probabilities round
//! to 1.0 in f32, and a network confident far out counts by its margin, not by a probability pinned at 1.
//! Every network reads the same standardised input (the train split's moments do not depend on the seed).

use std::collections::BTreeMap;

use anyhow::{ensure, Result};
use serde::{Deserialize, Serialize};

use super::metrics::Metrics;
use super::train::{Split, TrainConfig, TrainReport};
use super::Detector;

/// How an ensemble was made, in `detector.json` beside the first network's report (`training`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnsembleReport {
    /// The training reports of the networks after the first, in order.
    pub rest: Vec<TrainReport>,
    /// The ensemble's metrics per split (its scores: the sigmoid of the mean margin).
    pub best: BTreeMap<Split, Metrics>,
}

/// The training config of the `k`-th network (0-based): `cfg` with the seed `cfg.seed + k` (wrapping).
pub fn member_config(cfg: &TrainConfig, k: usize) -> TrainConfig {
    TrainConfig { seed: cfg.seed.wrapping_add(k as u64), ..cfg.clone() }
}

/// Joins single-network detectors trained on the same rows into one ensemble (one detector is returned as it
/// is). They must read the same model's states through the same columns, network shape and standardisation.
/// `evaluate` scores the ensemble on its rows ([`Detector::evaluate`] or [`Detector::evaluate_stream`]); its
/// train, valid and test lines are stored in the report.
pub fn join(
    detectors: Vec<Detector>,
    evaluate: impl FnOnce(&Detector) -> Result<Vec<(&'static str, Metrics)>>,
) -> Result<Detector> {
    ensure!(!detectors.is_empty(), "an ensemble needs at least one network");
    if detectors.len() == 1 {
        return Ok(detectors.into_iter().next().expect("one"));
    }
    let first = &detectors[0];
    for (k, d) in detectors.iter().enumerate() {
        let (a, b) = (first.info(), d.info());
        ensure!(b.members == 1, "network {k} is already an ensemble of {}", b.members);
        ensure!(
            a.model_id == b.model_id && a.hidden == b.hidden && a.columns == b.columns,
            "network {k} reads {:?} (hidden {}) {:?}, network 0 {:?} (hidden {}) {:?}",
            b.model_id,
            b.hidden,
            b.columns,
            a.model_id,
            a.hidden,
            a.columns
        );
        ensure!(a.mlp == b.mlp, "network {k} has the shape {:?}, network 0 {:?}", b.mlp, a.mlp);
        ensure!(first.norm() == d.norm(), "network {k} standardises its input differently from network 0");
    }
    let mut info = first.info().clone();
    info.members = detectors.len();
    // the others' reports when every network has one (hand-made networks have none)
    let rest = detectors[1..].iter().map(|d| d.info().training.clone()).collect::<Option<Vec<_>>>();
    let norm = first.norm().cloned();
    let members = detectors.into_iter().map(|d| d.weights().clone()).collect();
    let mut joined = Detector::with_members(info, members, norm)?;
    let best = evaluate(&joined)?
        .into_iter()
        .filter_map(|(name, m)| Split::ALL.into_iter().find(|s| s.name() == name).map(|s| (s, m)))
        .collect();
    joined.info.ensemble = Some(EnsembleReport { rest: rest.unwrap_or_default(), best });
    Ok(joined)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detector::mlp::{LinearWeights, MlpWeights};
    use crate::detector::tests::entropy_detector;
    use crate::labels::FeatureTable;

    /// [`entropy_detector`] with its output bias moved by `shift` on the hallucinated logit: margin
    /// `2e - 1 + shift` for entropy `e >= 0`.
    fn shifted(shift: f32) -> Detector {
        let d = entropy_detector();
        let mut w = d.weights().clone();
        w.layers[1].bias[1] += shift;
        Detector::new(d.info().clone(), w, None).unwrap()
    }

    fn table(x: Vec<f32>, labels: Vec<u8>) -> FeatureTable {
        FeatureTable {
            model_id: "toy".into(),
            hidden: 3,
            columns: vec![("entropy_last".into(), 1)],
            dim: 1,
            article_ids: (0..x.len()).map(|i| format!("a{i}")).collect(),
            labels,
            x,
        }
    }

    /// Three networks with margins `2e - 1`, `2e - 1 + 3` and `2e - 1 - 6` at entropy e: the ensemble's margin
    /// is their mean `2e - 1 - 1` — at e = 1: (1 + 4 - 5) / 3 = 0, score 0.5; at e = 10: (19 + 22 + 13) / 3 = 18,
    /// the first network's margin minus one everywhere. A mean of the probabilities would give at e = 1
    /// (0.731 + 0.982 + 0.007) / 3 = 0.573 instead.
    #[test]
    fn the_ensemble_margin_is_the_mean_of_the_members_margins() {
        let rows = table(vec![1.0, 10.0, 0.2, 3.0], vec![0, 1, 0, 1]);
        let d = join(vec![shifted(0.0), shifted(3.0), shifted(-6.0)], |d| d.evaluate(&rows)).unwrap();
        assert_eq!(d.info().members, 3);
        assert_eq!(d.members().len(), 3);
        assert_eq!(d.margin(&[1.0]), 0.0);
        assert_eq!(d.score(&[1.0]), 0.5);
        assert_eq!(d.margin(&[10.0]), 18.0);
        for e in [0.0f32, 0.2, 0.5, 3.0, 7.5] {
            assert!((d.margin(&[e]) - (2.0 * e - 2.0)).abs() < 1e-6, "e = {e}: {}", d.margin(&[e]));
        }
        // its metrics are its own: at e = 0.2 margin -1.6, e = 3 margin 4: both rows right at 0.5, ROC-AUC 1
        let report = d.info().ensemble.as_ref().unwrap();
        let all: usize = report.best.values().map(|m| m.n).sum();
        assert_eq!(all, 4, "every row in one split's line: {report:?}");
        let right: f64 = report.best.values().filter(|m| m.n > 0).map(|m| m.accuracy * m.n as f64).sum();
        assert!((right - 3.0).abs() < 1e-9, "e = 1 scores 0.5 and counts as hallucinated (label 0): {right}");

        // saved and loaded: the same three networks, the single network's tensor names for the first
        let dir = tempfile::tempdir().unwrap();
        d.save(dir.path()).unwrap();
        let back = Detector::load_for(dir.path(), "toy", 3).unwrap();
        // (the report's metrics are compared by count: an empty split's are NaN, and JSON keeps f64 to ~1e-16)
        assert_eq!((back.members(), back.info().members), (d.members(), 3));
        let n = |d: &Detector| d.info().ensemble.as_ref().unwrap().best.values().map(|m| m.n).collect::<Vec<_>>();
        assert_eq!(n(&back), n(&d));
        let bytes = std::fs::read(dir.path().join(crate::detector::WEIGHTS_FILE)).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let mut names = st.names();
        names.sort();
        assert_eq!(names.len(), 12, "{names:?}");
        assert!(names.contains(&"mlp.1.bias") && names.contains(&"member2.mlp.1.bias"));
    }

    #[test]
    fn one_network_is_kept_as_it_is_and_others_must_match() {
        let rows = table(vec![1.0], vec![1]);
        let one = join(vec![shifted(2.0)], |_| unreachable!("one network is not scored again")).unwrap();
        assert_eq!(one, shifted(2.0));
        let json = serde_json::to_string(one.info()).unwrap();
        assert!(!json.contains("members") && !json.contains("ensemble"), "a single network's file as before: {json}");

        let mut other = shifted(0.0);
        other = Detector::new(
            crate::detector::DetectorInfo { model_id: "other".into(), ..other.info().clone() },
            other.weights().clone(),
            None,
        )
        .unwrap();
        let e = join(vec![shifted(0.0), other], |d| d.evaluate(&rows)).unwrap_err();
        assert!(format!("{e:#}").contains("network 1 reads \"other\""), "{e:#}");

        // a two-layer network beside the one-hidden-layer ones
        let d = entropy_detector();
        let mut info = d.info().clone();
        info.mlp.hidden_layers = vec![];
        let flat = Detector::new(
            info,
            MlpWeights {
                layers: vec![LinearWeights { d_in: 1, d_out: 2, weight: vec![0.0, 2.0], bias: vec![0.0; 2] }],
            },
            None,
        )
        .unwrap();
        let e = join(vec![d, flat], |d| d.evaluate(&rows)).unwrap_err();
        assert!(format!("{e:#}").contains("network 1 has the shape"), "{e:#}");
    }

    /// Three networks trained on the Gaussian toy set with seeds 42, 43, 44: different weights, each one's report
    /// kept, the ensemble's margin the mean of the three detectors' own margins, its metrics the same whether the
    /// rows are scored in memory or streamed from the store.
    #[test]
    fn trained_members_differ_and_their_mean_is_the_ensemble() {
        use burn::backend::{Autodiff, Flex};
        let (data, cfg) = crate::detector::train::tests::gaussian_setup();
        let names = ["hidden_mean_last"];
        let t = crate::labels::read_features(data.path(), &names).unwrap();
        let device = Default::default();
        let nets: Vec<Detector> = (0..3)
            .map(|k| {
                let c = member_config(&cfg, k);
                crate::detector::train::train::<Autodiff<Flex>>(&t, &c, &device, &mut |_| {}).unwrap().detector
            })
            .collect();
        assert_ne!(nets[0].weights(), nets[1].weights());
        assert_ne!(nets[1].weights(), nets[2].weights());
        let d = join(nets.clone(), |d| d.evaluate(&t)).unwrap();
        let report = d.info().ensemble.as_ref().unwrap();
        let seeds: Vec<u64> = report.rest.iter().map(|r| r.config.seed).collect();
        assert_eq!((d.info().training.as_ref().unwrap().config.seed, seeds), (42, vec![43, 44]));
        for r in 0..t.len() {
            let mean = nets.iter().map(|n| n.margin(t.row(r)) as f64).sum::<f64>() / 3.0;
            assert!((d.margin(t.row(r)) as f64 - mean).abs() < 1e-5, "row {r}");
        }
        assert!(report.best[&Split::Test].roc_auc > 0.9, "{report:?}");
        let stream = crate::labels::FeatureStream::open(&[data.path().to_path_buf()], &names).unwrap();
        assert_eq!(d.evaluate_stream(&stream).unwrap(), d.evaluate(&t).unwrap());
    }

    #[test]
    fn members_count_from_the_seed() {
        let cfg = TrainConfig { seed: u64::MAX, ..TrainConfig::default() };
        assert_eq!((member_config(&cfg, 0).seed, member_config(&cfg, 2).seed), (u64::MAX, 1));
        assert_eq!(member_config(&cfg, 1), TrainConfig { seed: 0, ..cfg });
    }
}
