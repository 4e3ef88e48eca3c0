//! Training MIND's detector on a [`crate::synth::store`] dataset.
//!
//! Faithful to MIND by default ([`TrainConfig::default`]): the MLP of [`super::mlp`] (dropout 0.2, 256 -> 128
//! -> 64 -> 2, ReLU), class-weighted cross-entropy, Adam with learning rate 5e-4 and L2 weight decay 1e-5
//! (PyTorch's `Adam(weight_decay=...)`, i.e. the decay is added to the gradient, not AdamW; epsilon 1e-8 as
//! PyTorch), batch 32, 20 epochs.
//!
//! - **Class weights**: `w_c = n / (2 n_c)` over the train split (scikit-learn's "balanced"); the loss is
//!   the weighted mean `sum_i w_{y_i} CE_i / sum_i w_{y_i}` (PyTorch's `CrossEntropyLoss(weight=...)`).
//! - **Split by article** ([`split_of`]): the first 8 bytes of SHA-256 of the article id, read as a big-endian
//!   integer, modulo 10: 0..=7 train, 8 valid, 9 test (about 80/10/10). Deterministic, independent of the
//!   seed and of the dataset's order, and no article is in two splits.
//! - **Model selection**: after every epoch the eval-mode network scores all three splits; the epoch with the
//!   best valid ROC-AUC (earliest on ties) is kept. Test metrics are reported, never used to choose.
//! - **Standardisation** (off by default, MIND has none): per-feature mean and standard deviation of the
//!   train split (a std below 1e-6 counts as 1), stored in the checkpoint and applied by
//!   [`super::Detector::score`].
//! - **Seed**: initialisation and dropout via `B::seed`, batch order via a `StdRng`; one seed fixes both.
//!   (Bit-identical runs need a deterministic backend; Flex on CPU is.)

use std::collections::{BTreeMap, HashSet};

use anyhow::{ensure, Result};
use burn::module::AutodiffModule;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::decay::WeightDecayConfig;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::activation::softmax;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Int, Tensor, TensorData};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::metrics::Metrics;
use super::mlp::{Mlp, MlpConfig};
use super::{Detector, DetectorInfo, Norm, FORMAT};
use crate::synth::store::FeatureTable;

/// Hyper-parameters; the defaults are MIND's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    /// Feature columns to concatenate (names from [`crate::synth::store::FEATURE_COLUMNS`]).
    pub features: Vec<String>,
    pub hidden_layers: Vec<usize>,
    pub dropout: f64,
    pub epochs: usize,
    pub batch_size: usize,
    pub lr: f64,
    pub weight_decay: f32,
    pub seed: u64,
    pub standardize: bool,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            features: vec!["hidden_mean_last".into()],
            hidden_layers: vec![256, 128, 64],
            dropout: 0.2,
            epochs: 20,
            batch_size: 32,
            lr: 5e-4,
            weight_decay: 1e-5,
            seed: 42,
            standardize: false,
        }
    }
}

/// Which split an article belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    Train,
    Valid,
    Test,
}

impl Split {
    pub const ALL: [Split; 3] = [Split::Train, Split::Valid, Split::Test];
    pub fn name(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Valid => "valid",
            Split::Test => "test",
        }
    }
}

/// The split of an article (see the module doc).
pub fn split_of(article_id: &str) -> Split {
    let h = Sha256::digest(article_id.as_bytes());
    let v = u64::from_be_bytes([h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]]);
    match v % 10 {
        0..=7 => Split::Train,
        8 => Split::Valid,
        _ => Split::Test,
    }
}

/// Size of one split.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SplitSize {
    pub articles: usize,
    pub examples: usize,
    pub hallucinated: usize,
}

/// One row of the per-epoch table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpochLog {
    pub epoch: usize,
    /// Mean training loss over the epoch's batches.
    pub loss: f64,
    pub metrics: BTreeMap<Split, Metrics>,
}

/// What training did, stored in `detector.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainReport {
    pub config: TrainConfig,
    pub splits: BTreeMap<Split, SplitSize>,
    /// `[faithful, hallucinated]`.
    pub class_weights: [f32; 2],
    /// 1-based epoch whose weights were kept.
    pub best_epoch: usize,
    /// Metrics of the kept epoch per split.
    pub best: BTreeMap<Split, Metrics>,
    pub history: Vec<EpochLog>,
}

/// The kept network (eval mode, on the inner backend) and the same as a ready-to-save [`Detector`].
pub struct Trained<B: Backend> {
    pub model: Mlp<B>,
    pub detector: Detector,
}

fn batch_tensor<B: Backend>(x: &[f32], dim: usize, rows: &[usize], device: &B::Device) -> Tensor<B, 2> {
    let mut v = Vec::with_capacity(rows.len() * dim);
    for &r in rows {
        v.extend_from_slice(&x[r * dim..(r + 1) * dim]);
    }
    Tensor::from_data(TensorData::new(v, [rows.len(), dim]), device)
}

/// Probability of class 1 for `rows` (eval mode).
pub fn predict<B: Backend>(model: &Mlp<B>, x: &[f32], dim: usize, rows: &[usize], device: &B::Device) -> Vec<f32> {
    let mut out = Vec::with_capacity(rows.len());
    for chunk in rows.chunks(2048) {
        let logits = model.forward(batch_tensor::<B>(x, dim, chunk, device));
        let p = softmax(logits, 1).narrow(1, 1, 1);
        out.extend(p.into_data().convert::<f32>().to_vec::<f32>().expect("f32 probabilities"));
    }
    out
}

/// Trains on `table` and returns the best epoch's network. `log` receives the per-epoch table, line by line.
pub fn train<B: AutodiffBackend>(
    table: &FeatureTable,
    cfg: &TrainConfig,
    device: &B::Device,
    log: &mut dyn FnMut(&str),
) -> Result<Trained<B::InnerBackend>> {
    ensure!(cfg.epochs > 0 && cfg.batch_size > 0, "epochs and batch size must be positive");
    ensure!((0.0..1.0).contains(&cfg.dropout), "dropout must be in [0, 1), got {}", cfg.dropout);
    let asked: Vec<&str> = table.columns.iter().map(|c| c.0.as_str()).collect();
    ensure!(
        asked == cfg.features.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
        "table columns {asked:?} are not the configured features {:?}",
        cfg.features
    );
    let dim = table.dim;

    // Split by article.
    let mut rows: BTreeMap<Split, Vec<usize>> = Split::ALL.iter().map(|&s| (s, Vec::new())).collect();
    let mut articles: BTreeMap<Split, HashSet<&str>> = BTreeMap::new();
    for (i, a) in table.article_ids.iter().enumerate() {
        let s = split_of(a);
        rows.get_mut(&s).unwrap().push(i);
        articles.entry(s).or_default().insert(a);
    }
    let mut sizes = BTreeMap::new();
    for s in Split::ALL {
        let r = &rows[&s];
        let hallucinated = r.iter().filter(|&&i| table.labels[i] == 1).count();
        sizes.insert(
            s,
            SplitSize { articles: articles.get(&s).map_or(0, |a| a.len()), examples: r.len(), hallucinated },
        );
    }
    for s in [Split::Train, Split::Valid] {
        let z = sizes[&s];
        ensure!(
            z.hallucinated > 0 && z.hallucinated < z.examples,
            "the {} split has {} examples from {} articles, {} hallucinated: it needs both classes \
             (more articles are needed)",
            s.name(),
            z.examples,
            z.articles,
            z.hallucinated
        );
    }
    if sizes[&Split::Test].examples == 0 {
        log("warning: the test split is empty");
    }

    // Standardisation on train statistics.
    let train_rows = &rows[&Split::Train];
    let norm = cfg.standardize.then(|| {
        let n = train_rows.len() as f64;
        let mut mean = vec![0f64; dim];
        let mut sq = vec![0f64; dim];
        for &r in train_rows {
            for (j, &v) in table.row(r).iter().enumerate() {
                mean[j] += v as f64;
                sq[j] += (v as f64) * (v as f64);
            }
        }
        let mean: Vec<f64> = mean.iter().map(|m| m / n).collect();
        let std: Vec<f32> = sq
            .iter()
            .zip(&mean)
            .map(|(s, m)| {
                let sd = (s / n - m * m).max(0.0).sqrt();
                if sd < 1e-6 {
                    1.0
                } else {
                    sd as f32
                }
            })
            .collect();
        Norm { mean: mean.iter().map(|&m| m as f32).collect(), std }
    });
    let x: Vec<f32> = match &norm {
        Some(n) => table
            .x
            .chunks(dim)
            .flat_map(|row| row.iter().zip(n.mean.iter().zip(&n.std)).map(|(&v, (&m, &s))| (v - m) / s))
            .collect(),
        None => table.x.clone(),
    };

    // Class weights over train.
    let n = sizes[&Split::Train].examples as f32;
    let pos = sizes[&Split::Train].hallucinated as f32;
    let class_weights = [n / (2.0 * (n - pos)), n / (2.0 * pos)];

    B::seed(device, cfg.seed);
    let mlp_cfg = MlpConfig { input: dim, hidden_layers: cfg.hidden_layers.clone(), dropout: cfg.dropout };
    let mut model: Mlp<B> = mlp_cfg.init(device);
    let mut optim = AdamConfig::new()
        .with_epsilon(1e-8)
        .with_weight_decay(Some(WeightDecayConfig::new(cfg.weight_decay)))
        .init::<B, Mlp<B>>();
    let loss_fn = CrossEntropyLossConfig::new().with_weights(Some(class_weights.to_vec())).init::<B>(device);
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let mut order = train_rows.clone();

    log(&format!(
        "{:>5} {:>8} | {:^27} | {:^27} | {:^27}",
        "epoch", "loss", "train acc  f1   roc   pr", "valid acc  f1   roc   pr", "test acc  f1   roc   pr"
    ));
    let mut history = Vec::new();
    let mut best: Option<(usize, f64, Mlp<B::InnerBackend>)> = None;
    for epoch in 1..=cfg.epochs {
        order.shuffle(&mut rng);
        // Summed on the device and read once per epoch: a read per batch would sync a GPU every step.
        let (mut loss_sum, mut batches): (Option<Tensor<B::InnerBackend, 1>>, usize) = (None, 0);
        for chunk in order.chunks(cfg.batch_size) {
            let xb = batch_tensor::<B>(&x, dim, chunk, device);
            let yb: Vec<i64> = chunk.iter().map(|&i| table.labels[i] as i64).collect();
            let yb = Tensor::<B, 1, Int>::from_data(TensorData::new(yb, [chunk.len()]), device);
            let loss = loss_fn.forward(model.forward(xb), yb);
            let l = loss.clone().inner();
            loss_sum = Some(match loss_sum {
                Some(acc) => acc + l,
                None => l,
            });
            batches += 1;
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optim.step(cfg.lr, model, grads);
        }
        let eval = model.valid();
        let mut metrics = BTreeMap::new();
        for s in Split::ALL {
            let r = &rows[&s];
            let p = predict(&eval, &x, dim, r, device);
            let y: Vec<u8> = r.iter().map(|&i| table.labels[i]).collect();
            metrics.insert(s, Metrics::compute(&y, &p));
        }
        let loss_total =
            loss_sum.expect("a non-empty train split").into_data().convert::<f64>().to_vec::<f64>().expect("loss")[0];
        let loss = loss_total / batches as f64;
        let cell = |m: &Metrics| format!("{:.3} {:.3} {:.3} {:.3}", m.accuracy, m.f1, m.roc_auc, m.pr_auc);
        let valid_auc = metrics[&Split::Valid].roc_auc;
        let improved = best.as_ref().is_none_or(|(_, b, _)| valid_auc > *b);
        log(&format!(
            "{epoch:>5} {loss:>8.4} | {:^27} | {:^27} | {:^27}{}",
            cell(&metrics[&Split::Train]),
            cell(&metrics[&Split::Valid]),
            cell(&metrics[&Split::Test]),
            if improved { " *" } else { "" }
        ));
        if improved {
            best = Some((epoch, valid_auc, eval));
        }
        history.push(EpochLog { epoch, loss, metrics });
    }
    let (best_epoch, _, model) = best.expect("at least one epoch");
    let report = TrainReport {
        config: cfg.clone(),
        splits: sizes,
        class_weights,
        best_epoch,
        best: history[best_epoch - 1].metrics.clone(),
        history,
    };
    let info = DetectorInfo {
        format: FORMAT.to_string(),
        model_id: table.model_id.clone(),
        hidden: table.hidden,
        columns: table.columns.clone(),
        mlp: mlp_cfg,
        standardized: norm.is_some(),
        training: Some(report),
    };
    let detector = Detector::new(info, model.weights(), norm)?;
    Ok(Trained { model, detector })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every shard of a sharded synthesis (`--shard i/n`) holds train, valid and test articles in about the
    /// split's proportions: the shard hash and the split hash must not line up.
    #[test]
    fn every_shard_holds_every_split() {
        for n in [2usize, 4, 8, 10] {
            for i in 0..n {
                let shard = crate::shard::Shard { index: i, count: n };
                let mut count: BTreeMap<Split, usize> = BTreeMap::new();
                let mut total = 0;
                for k in 0..8000 {
                    let id = format!("Article {k}");
                    if shard.owns(&id) {
                        *count.entry(split_of(&id)).or_default() += 1;
                        total += 1;
                    }
                }
                let share = |s: Split| count.get(&s).copied().unwrap_or(0) as f64 / total as f64;
                assert!((share(Split::Test) - 0.1).abs() < 0.05, "shard {i}/{n}: {count:?}");
                assert!((share(Split::Valid) - 0.1).abs() < 0.05, "shard {i}/{n}: {count:?}");
            }
        }
    }
    use crate::synth::store::{read_features, HalluExample, HalluStore};
    use burn::backend::{Autodiff, Flex};
    use rand::Rng;

    #[test]
    fn split_is_deterministic_and_roughly_80_10_10() {
        let mut count = BTreeMap::new();
        for i in 0..2000 {
            let id = format!("{i}");
            assert_eq!(split_of(&id), split_of(&id));
            *count.entry(split_of(&id)).or_insert(0) += 1;
        }
        assert!((1500..1700).contains(&count[&Split::Train]), "{count:?}");
        assert!((140..260).contains(&count[&Split::Valid]), "{count:?}");
        assert!((140..260).contains(&count[&Split::Test]), "{count:?}");
    }

    /// Two Gaussian classes in 16 dims (means -0.5 and +0.5 per dim, unit variance), 6 examples per fake
    /// article, written through the real store and read back as features.
    fn gaussian_dataset(dir: &std::path::Path, articles: usize) {
        let hidden = 16;
        let mut rng = StdRng::seed_from_u64(7);
        let mut store = HalluStore::open(dir, "toy-model", hidden).unwrap().with_flush_every(50);
        for a in 0..articles {
            let id = format!("article-{a}");
            let ex = (0..6)
                .map(|k| {
                    let label = ((a + k) % 3 == 0) as u8; // one third hallucinated
                    let mu = if label == 1 { 0.5 } else { -0.5 };
                    let v: Vec<f32> = (0..hidden)
                        .map(|_| {
                            // Box-Muller
                            let (u1, u2): (f32, f32) = (rng.random::<f32>().max(1e-7), rng.random());
                            mu + (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
                        })
                        .collect();
                    HalluExample {
                        article_id: id.clone(),
                        label,
                        entropy_last: 1.0 + label as f32,
                        hidden_final_last: vec![0.0; hidden],
                        hidden_mean_last: v,
                        hidden_final_entity: vec![0.0; hidden],
                        hidden_mean_entity: vec![0.0; hidden],
                        ..Default::default()
                    }
                })
                .collect();
            store.add_article(&id, ex).unwrap();
        }
        store.finish().unwrap();
    }

    #[test]
    fn learns_gaussians_and_checkpoint_reloads() {
        let data = tempfile::tempdir().unwrap();
        gaussian_dataset(data.path(), 150);
        let cfg = TrainConfig {
            features: vec!["hidden_mean_last".into()],
            hidden_layers: vec![32, 16],
            epochs: 6,
            standardize: true,
            ..Default::default()
        };
        let table = read_features(data.path(), &["hidden_mean_last"]).unwrap();
        let device = Default::default();
        let mut lines = Vec::new();
        let trained = train::<Autodiff<Flex>>(&table, &cfg, &device, &mut |l| lines.push(l.to_string())).unwrap();
        eprintln!("{}", lines.join("\n"));
        assert_eq!(lines.len(), 1 + cfg.epochs, "{lines:#?}");
        let report = trained.detector.info().training.clone().unwrap();
        // No article in two splits.
        let mut seen = std::collections::HashMap::new();
        for a in &table.article_ids {
            assert_eq!(*seen.entry(a.clone()).or_insert(split_of(a)), split_of(a));
        }
        assert_eq!(report.splits.values().map(|s| s.articles).sum::<usize>(), 150);
        // Balanced weights: n / (2 n_c) with one third positive -> 0.75 and 1.5 (up to the split's rounding).
        assert!((report.class_weights[1] / report.class_weights[0] - 2.0).abs() < 0.3, "{:?}", report.class_weights);
        // The Bayes ROC-AUC of two unit Gaussians 4 units apart (distance sqrt(16)) is ~0.998.
        let test_auc = report.best[&Split::Test].roc_auc;
        assert!(test_auc > 0.9, "test ROC-AUC {test_auc}\n{}", lines.join("\n"));
        let best_valid = report.history.iter().map(|e| e.metrics[&Split::Valid].roc_auc).fold(f64::MIN, f64::max);
        assert_eq!(report.best[&Split::Valid].roc_auc, best_valid);

        // The plain-f32 detector equals the kept network's eval-mode output (on standardised inputs).
        let norm = trained.detector.norm().unwrap().clone();
        let rows: Vec<usize> = (0..40).collect();
        let xs: Vec<f32> = table.x[..40 * 16]
            .chunks(16)
            .flat_map(|r| r.iter().zip(norm.mean.iter().zip(&norm.std)).map(|(&v, (&m, &s))| (v - m) / s))
            .collect();
        let burn_p = predict(&trained.model, &xs, 16, &rows, &device);
        for &r in &rows {
            let p = trained.detector.score(table.row(r));
            assert!((p - burn_p[r]).abs() < 1e-5, "row {r}: {p} vs {}", burn_p[r]);
        }

        // Save, reload, same scores; a wrong hidden size is refused.
        let out = tempfile::tempdir().unwrap();
        trained.detector.save(out.path()).unwrap();
        let back = Detector::load_for(out.path(), "toy-model", 16).unwrap();
        assert_eq!(back.weights(), trained.detector.weights());
        for r in 0..table.len() {
            assert_eq!(back.score(table.row(r)), trained.detector.score(table.row(r)));
        }
        assert_eq!(back.info().training.as_ref().unwrap().best_epoch, report.best_epoch);
        let err = format!("{:#}", Detector::load_for(out.path(), "toy-model", 32).unwrap_err());
        assert!(err.contains("hidden size 16"), "{err}");
    }

    /// Writes the Gaussian toy dataset to `$RAGTIME_TOY_HALLU` for trying the CLI by hand:
    /// `RAGTIME_TOY_HALLU=/tmp/toy cargo test --release --lib write_toy_dataset -- --ignored`.
    #[test]
    #[ignore]
    fn write_toy_dataset() {
        let dir = std::env::var("RAGTIME_TOY_HALLU").expect("set RAGTIME_TOY_HALLU");
        gaussian_dataset(std::path::Path::new(&dir), 300);
    }

    #[test]
    fn refuses_a_split_without_both_classes() {
        let data = tempfile::tempdir().unwrap();
        let mut store = HalluStore::open(data.path(), "m", 2).unwrap();
        for a in 0..30 {
            let id = format!("{a}");
            let ex = HalluExample {
                article_id: id.clone(),
                label: 0,
                hidden_final_last: vec![0.0; 2],
                hidden_mean_last: vec![0.0; 2],
                hidden_final_entity: vec![0.0; 2],
                hidden_mean_entity: vec![0.0; 2],
                ..Default::default()
            };
            store.add_article(&id, vec![ex]).unwrap();
        }
        store.finish().unwrap();
        let table = read_features(data.path(), &["hidden_mean_last"]).unwrap();
        let r = train::<Autodiff<Flex>>(&table, &TrainConfig::default(), &Default::default(), &mut |_| {});
        assert!(format!("{:#}", r.err().unwrap()).contains("needs both classes"));
    }
}
