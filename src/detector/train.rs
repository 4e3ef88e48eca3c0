//! Training MIND's detector on a [`crate::labels`] dataset held in memory; [`super::stream`] trains on
//! one read from disk shard by shard, with the same splits, weights, network and selection.
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
use crate::labels::FeatureTable;

/// Hyper-parameters; the defaults are MIND's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    /// Feature columns to concatenate (names from [`crate::labels::FEATURE_COLUMNS`]).
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
    /// Wall time of the epoch: its training steps and the evaluation of its metrics (on a GPU, the first epoch
    /// includes compiling the kernels).
    #[serde(default)]
    pub secs: f64,
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

/// Trains on `table` (all rows in memory; each epoch a full shuffle of the train rows, as MIND's
/// `DataLoader(shuffle=True)`) and returns the best epoch's network. `log` receives the per-epoch table, line by
/// line.
pub fn train<B: AutodiffBackend>(
    table: &FeatureTable,
    cfg: &TrainConfig,
    device: &B::Device,
    log: &mut dyn FnMut(&str),
) -> Result<Trained<B::InnerBackend>> {
    check_config(cfg, &table.columns)?;
    let dim = table.dim;
    let mut index = Index::default();
    index.add(&table.article_ids, &table.labels);
    let sizes = index.sizes(log)?;
    let rows = index.rows();

    // Standardisation on train statistics.
    let norm = cfg.standardize.then(|| {
        let mut m = Moments::new(dim);
        for &r in &rows[&Split::Train] {
            m.add(table.row(r));
        }
        m.norm()
    });
    // standardised rows are a copy; raw ones are read in place
    let x: std::borrow::Cow<[f32]> = match &norm {
        Some(n) => table.x.chunks(dim).flat_map(|row| n.apply(row)).collect::<Vec<f32>>().into(),
        None => table.x.as_slice().into(),
    };

    let mut run = Run::<B>::start(cfg, dim, &sizes, device, log);
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let mut order = rows[&Split::Train].clone();
    for epoch in 1..=cfg.epochs {
        order.shuffle(&mut rng);
        for chunk in order.chunks(cfg.batch_size) {
            let y: Vec<i64> = chunk.iter().map(|&i| table.labels[i] as i64).collect();
            run.step(batch_tensor::<B>(&x, dim, chunk, device), y, device);
        }
        let eval = run.model.valid();
        let mut metrics = BTreeMap::new();
        for s in Split::ALL {
            let r = &rows[&s];
            let p = predict(&eval, &x, dim, r, device);
            let y: Vec<u8> = r.iter().map(|&i| table.labels[i]).collect();
            metrics.insert(s, Metrics::compute(&y, &p));
        }
        run.end_epoch(epoch, metrics, eval, log);
    }
    run.finish(&table.model_id, table.hidden, &table.columns, norm, sizes)
}

pub(super) fn check_config(cfg: &TrainConfig, columns: &[(String, usize)]) -> Result<()> {
    ensure!(cfg.epochs > 0 && cfg.batch_size > 0, "epochs and batch size must be positive");
    ensure!((0.0..1.0).contains(&cfg.dropout), "dropout must be in [0, 1), got {}", cfg.dropout);
    let asked: Vec<&str> = columns.iter().map(|c| c.0.as_str()).collect();
    ensure!(
        asked == cfg.features.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
        "table columns {asked:?} are not the configured features {:?}",
        cfg.features
    );
    Ok(())
}

/// The split and label of every row, in stored order, and the articles of each split.
#[derive(Default)]
pub(super) struct Index {
    splits: Vec<Split>,
    labels: Vec<u8>,
    articles: BTreeMap<Split, HashSet<String>>,
}

impl Index {
    pub(super) fn add(&mut self, article_ids: &[String], labels: &[u8]) {
        for (a, &l) in article_ids.iter().zip(labels) {
            let s = split_of(a);
            self.splits.push(s);
            self.labels.push(l);
            if !self.articles.get(&s).is_some_and(|set| set.contains(a)) {
                self.articles.entry(s).or_default().insert(a.clone());
            }
        }
    }

    /// Row indexes of each split.
    fn rows(&self) -> BTreeMap<Split, Vec<usize>> {
        let mut rows: BTreeMap<Split, Vec<usize>> = Split::ALL.iter().map(|&s| (s, Vec::new())).collect();
        for (i, s) in self.splits.iter().enumerate() {
            rows.get_mut(s).unwrap().push(i);
        }
        rows
    }

    /// Each split's size; train and valid must hold both classes.
    pub(super) fn sizes(&self, log: &mut dyn FnMut(&str)) -> Result<BTreeMap<Split, SplitSize>> {
        let mut sizes: BTreeMap<Split, SplitSize> = Split::ALL
            .iter()
            .map(|&s| {
                let articles = self.articles.get(&s).map_or(0, |a| a.len());
                (s, SplitSize { articles, examples: 0, hallucinated: 0 })
            })
            .collect();
        for (s, &l) in self.splits.iter().zip(&self.labels) {
            let z = sizes.get_mut(s).unwrap();
            z.examples += 1;
            z.hallucinated += usize::from(l == 1);
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
        Ok(sizes)
    }
}

/// Per-feature sums for the train split's mean and standard deviation.
pub(super) struct Moments {
    n: f64,
    sum: Vec<f64>,
    sq: Vec<f64>,
}

impl Moments {
    pub(super) fn new(dim: usize) -> Self {
        Moments { n: 0.0, sum: vec![0.0; dim], sq: vec![0.0; dim] }
    }

    pub(super) fn add(&mut self, row: &[f32]) {
        self.n += 1.0;
        for (j, &v) in row.iter().enumerate() {
            self.sum[j] += v as f64;
            self.sq[j] += (v as f64) * (v as f64);
        }
    }

    /// Mean and standard deviation (a std below 1e-6 counts as 1).
    pub(super) fn norm(&self) -> Norm {
        let mean: Vec<f64> = self.sum.iter().map(|m| m / self.n).collect();
        let std: Vec<f32> = self
            .sq
            .iter()
            .zip(&mean)
            .map(|(s, m)| {
                let sd = (s / self.n - m * m).max(0.0).sqrt();
                if sd < 1e-6 {
                    1.0
                } else {
                    sd as f32
                }
            })
            .collect();
        Norm { mean: mean.iter().map(|&m| m as f32).collect(), std }
    }
}

/// One training run: the network, its optimizer and loss, and the per-epoch selection of the best network.
pub(super) struct Run<B: AutodiffBackend> {
    cfg: TrainConfig,
    mlp: MlpConfig,
    class_weights: [f32; 2],
    pub(super) model: Mlp<B>,
    optim: burn::optim::adaptor::OptimizerAdaptor<burn::optim::Adam, Mlp<B>, B>,
    loss_fn: burn::nn::loss::CrossEntropyLoss<B>,
    /// The epoch's training loss, summed on the device and read once per epoch: a read per batch would sync a
    /// GPU every step.
    loss_sum: Option<Tensor<B::InnerBackend, 1>>,
    batches: usize,
    history: Vec<EpochLog>,
    best: Option<(usize, f64, Mlp<B::InnerBackend>)>,
    /// When the current epoch began.
    epoch_start: std::time::Instant,
    /// Held from the seed to the end of the run (see [`crate::device::autodiff_exclusive`]).
    _exclusive: crate::device::AutodiffGuard,
}

impl<B: AutodiffBackend> Run<B> {
    /// Seeds the backend, builds the network and prints the table's header.
    pub(super) fn start(
        cfg: &TrainConfig,
        dim: usize,
        sizes: &BTreeMap<Split, SplitSize>,
        device: &B::Device,
        log: &mut dyn FnMut(&str),
    ) -> Self {
        // Class weights over train.
        let n = sizes[&Split::Train].examples as f32;
        let pos = sizes[&Split::Train].hallucinated as f32;
        let class_weights = [n / (2.0 * (n - pos)), n / (2.0 * pos)];
        let exclusive = crate::device::autodiff_exclusive();
        B::seed(device, cfg.seed);
        let mlp = MlpConfig { input: dim, hidden_layers: cfg.hidden_layers.clone(), dropout: cfg.dropout };
        let model: Mlp<B> = mlp.init(device);
        let optim = AdamConfig::new()
            .with_epsilon(1e-8)
            .with_weight_decay(Some(WeightDecayConfig::new(cfg.weight_decay)))
            .init::<B, Mlp<B>>();
        let loss_fn = CrossEntropyLossConfig::new().with_weights(Some(class_weights.to_vec())).init::<B>(device);
        log(&format!(
            "{:>5} {:>8} | {:^27} | {:^27} | {:^27} | {:>7} {:>7}",
            "epoch",
            "loss",
            "train acc  f1   roc   pr",
            "valid acc  f1   roc   pr",
            "test acc  f1   roc   pr",
            "secs",
            "left"
        ));
        Run {
            cfg: cfg.clone(),
            mlp,
            class_weights,
            model,
            optim,
            loss_fn,
            loss_sum: None,
            batches: 0,
            history: Vec::new(),
            best: None,
            epoch_start: std::time::Instant::now(),
            _exclusive: exclusive,
        }
    }

    /// One optimizer step on a batch.
    pub(super) fn step(&mut self, x: Tensor<B, 2>, y: Vec<i64>, device: &B::Device) {
        let n = y.len();
        let y = Tensor::<B, 1, Int>::from_data(TensorData::new(y, [n]), device);
        let loss = self.loss_fn.forward(self.model.forward(x), y);
        let l = loss.clone().inner();
        self.loss_sum = Some(match self.loss_sum.take() {
            Some(acc) => acc + l,
            None => l,
        });
        self.batches += 1;
        let grads = GradientsParams::from_grads(loss.backward(), &self.model);
        self.model = self.optim.step(self.cfg.lr, self.model.clone(), grads);
    }

    /// Logs the epoch's row and keeps `eval` if its valid ROC-AUC is the best so far (the earliest on ties).
    pub(super) fn end_epoch(
        &mut self,
        epoch: usize,
        metrics: BTreeMap<Split, Metrics>,
        eval: Mlp<B::InnerBackend>,
        log: &mut dyn FnMut(&str),
    ) {
        let loss_total = self
            .loss_sum
            .take()
            .expect("a non-empty train split")
            .into_data()
            .convert::<f64>()
            .to_vec::<f64>()
            .expect("loss")[0];
        let loss = loss_total / self.batches as f64;
        self.batches = 0;
        let cell = |m: &Metrics| format!("{:.3} {:.3} {:.3} {:.3}", m.accuracy, m.f1, m.roc_auc, m.pr_auc);
        let valid_auc = metrics[&Split::Valid].roc_auc;
        let improved = self.best.as_ref().is_none_or(|(_, b, _)| valid_auc > *b);
        let secs = self.epoch_start.elapsed().as_secs_f64();
        self.epoch_start = std::time::Instant::now();
        // the time left at the mean epoch so far
        let spent = self.history.iter().map(|h| h.secs).sum::<f64>() + secs;
        let (_, left) = crate::progress::rate_at(spent, epoch, self.cfg.epochs.saturating_sub(epoch));
        log(&format!(
            "{epoch:>5} {loss:>8.4} | {:^27} | {:^27} | {:^27} | {secs:>7.2} {:>7}{}",
            cell(&metrics[&Split::Train]),
            cell(&metrics[&Split::Valid]),
            cell(&metrics[&Split::Test]),
            crate::progress::hms(left),
            if improved { " *" } else { "" }
        ));
        if improved {
            self.best = Some((epoch, valid_auc, eval));
        }
        self.history.push(EpochLog { epoch, loss, metrics, secs });
    }

    /// The kept network and its detector, with the report of the run.
    pub(super) fn finish(
        self,
        model_id: &str,
        hidden: usize,
        columns: &[(String, usize)],
        norm: Option<Norm>,
        sizes: BTreeMap<Split, SplitSize>,
    ) -> Result<Trained<B::InnerBackend>> {
        let (best_epoch, _, model) = self.best.expect("at least one epoch");
        let report = TrainReport {
            config: self.cfg,
            splits: sizes,
            class_weights: self.class_weights,
            best_epoch,
            best: self.history[best_epoch - 1].metrics.clone(),
            history: self.history,
        };
        let info = DetectorInfo {
            format: FORMAT.to_string(),
            model_id: model_id.to_string(),
            hidden,
            columns: columns.to_vec(),
            mlp: self.mlp,
            standardized: norm.is_some(),
            training: Some(report),
            members: 1,
            ensemble: None,
        };
        let detector = Detector::new(info, model.weights(), norm)?;
        Ok(Trained { model, detector })
    }
}

#[cfg(test)]
pub(super) mod tests {
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
    use crate::labels::{read_features, HalluExample, HalluStore};
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

    /// The Gaussian toy dataset of 150 articles in a temporary folder, and a small standardised network for it.
    pub(crate) fn gaussian_setup() -> (tempfile::TempDir, TrainConfig) {
        let data = tempfile::tempdir().unwrap();
        gaussian_dataset(data.path(), 150);
        let cfg = TrainConfig {
            features: vec!["hidden_mean_last".into()],
            hidden_layers: vec![32, 16],
            epochs: 6,
            standardize: true,
            ..Default::default()
        };
        (data, cfg)
    }

    #[test]
    fn learns_gaussians_and_checkpoint_reloads() {
        let (data, cfg) = gaussian_setup();
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
