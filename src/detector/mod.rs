//! Learned hallucination detector (MIND's MLP over an LLM's hidden states), trained on [`crate::synth`] data
//! by [`train`], used during decoding by [`crate::trigger::mlp`].
//!
//! # Checkpoint directory
//!
//! - `detector.json` ([`DetectorInfo`]): the model the features come from (id and hidden size), the feature
//!   columns in concatenation order with their widths, the network shape, whether inputs are standardised,
//!   and the training report (config, split sizes, class weights, metrics per split and per epoch, best epoch).
//! - `model.safetensors` (little-endian f32):
//!   - `mlp.{i}.weight`: `[d_in, d_out]` of layer `i` (input side first), `y = x W + b` (burn's layout,
//!     the transpose of PyTorch's);
//!   - `mlp.{i}.bias`: `[d_out]`;
//!   - `member{k}.mlp.{i}.weight`, `member{k}.mlp.{i}.bias`: the same for the `k`-th network of an ensemble,
//!     `k = 1 .. members - 1` (the first network is `mlp.*`, so a single network's file is unchanged);
//!   - `norm.mean`, `norm.std`: `[input]`, present when standardised (`x' = (x - mean) / std`), shared by all
//!     networks.
//!
//! # Ensembles
//!
//! A detector may hold several networks of the same shape trained on the same rows with different seeds
//! (`train detector --members N`, [`ensemble`]). Its margin is the mean of theirs — the log of the normalised
//! geometric mean of their odds — so one seed's initialisation, batch order and kept epoch weigh `1/N`.
//!
//! A detector is tied to the model whose states it was trained on: [`Detector::load_for`] refuses another
//! model id or hidden size.
//!
//! # Features at decode time
//!
//! The training rows hold states at the last prompt token (`*_last`) and averaged over the generated
//! entity's tokens (`*_entity`). During decoding, [`Detector::features_from_step`] builds the same columns
//! from one generated token's [`TokenStep`]: `hidden_final_*` is the token's `hidden_final`, `hidden_mean_*`
//! its `hidden_mean` (an entity of one token), and `entropy_*` the token's `entropy` (the entropy of the
//! distribution it was drawn from). For `entropy_entity_mean` and the `*_entity` states this is exactly the
//! training definition restricted to one token; for the `*_last` states the token plays the role of the last
//! prompt token; `entropy_last` is the one shifted quantity: in training it is the entropy of the
//! distribution that *follows* the state, at decode time that of the distribution that *produced* the
//! token (the following one is not known until the next token is decoded).

pub mod ensemble;
pub mod metrics;
pub mod mlp;
pub mod stream;
pub mod train;

use std::collections::HashMap;
use std::fs;
use std::path::Path;

use anyhow::{bail, ensure, Context, Result};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use serde::{Deserialize, Serialize};

use crate::step::TokenStep;
use mlp::{LinearWeights, MlpConfig, MlpWeights};

/// Value of [`DetectorInfo::format`].
pub const FORMAT: &str = "ragtime-detector";
pub const INFO_FILE: &str = "detector.json";
pub const WEIGHTS_FILE: &str = "model.safetensors";

/// `detector.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DetectorInfo {
    pub format: String,
    /// Model whose states the detector reads.
    pub model_id: String,
    /// Its hidden size.
    pub hidden: usize,
    /// Feature columns in concatenation order, with their widths.
    pub columns: Vec<(String, usize)>,
    /// Network shape (`mlp.input` is the sum of the column widths).
    pub mlp: MlpConfig,
    /// Whether `norm.mean`/`norm.std` standardise the input.
    pub standardized: bool,
    /// How it was trained (absent for hand-made detectors); of an ensemble, its first network.
    pub training: Option<train::TrainReport>,
    /// Networks whose margins are averaged (absent in the file: 1).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub members: usize,
    /// How an ensemble was made (absent for a single network).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ensemble: Option<ensemble::EnsembleReport>,
}

fn one() -> usize {
    1
}

fn is_one(n: &usize) -> bool {
    *n == 1
}

/// Per-feature standardisation `x' = (x - mean) / std`.
#[derive(Debug, Clone, PartialEq)]
pub struct Norm {
    pub mean: Vec<f32>,
    pub std: Vec<f32>,
}

impl Norm {
    /// `(x - mean) / std`, feature by feature.
    pub fn apply<'a>(&'a self, x: &'a [f32]) -> impl Iterator<Item = f32> + 'a {
        x.iter().zip(self.mean.iter().zip(&self.std)).map(|(&v, (&m, &s))| (v - m) / s)
    }
}

/// A trained detector ready for inference (plain f32 math, eval mode).
#[derive(Debug, Clone, PartialEq)]
pub struct Detector {
    info: DetectorInfo,
    /// One network, or an ensemble's (`info.members` of them).
    members: Vec<MlpWeights>,
    norm: Option<Norm>,
}

impl Detector {
    /// Assembles a detector of one network; checks that the shapes fit together.
    pub fn new(info: DetectorInfo, weights: MlpWeights, norm: Option<Norm>) -> Result<Self> {
        Self::with_members(info, vec![weights], norm)
    }

    /// Assembles a detector of `info.members` networks of the same shape (an ensemble when more than one).
    pub fn with_members(info: DetectorInfo, members: Vec<MlpWeights>, norm: Option<Norm>) -> Result<Self> {
        ensure!(!members.is_empty(), "a detector needs at least one network");
        ensure!(members.len() == info.members, "{} networks, the config says {}", members.len(), info.members);
        let input = info
            .columns
            .iter()
            .try_fold(0usize, |n, c| n.checked_add(c.1))
            .context("feature widths overflow when summed")?;
        ensure!(input == info.mlp.input, "feature widths sum to {input} but the network takes {}", info.mlp.input);
        let widths = info.mlp.widths();
        for (k, weights) in members.iter().enumerate() {
            let net = if members.len() > 1 { format!("network {k}: ") } else { String::new() };
            ensure!(
                weights.layers.len() + 1 == widths.len(),
                "{net}network has {} layers, config says {}",
                weights.layers.len(),
                widths.len() - 1
            );
            for (i, l) in weights.layers.iter().enumerate() {
                ensure!(
                    l.d_in == widths[i]
                        && l.d_out == widths[i + 1]
                        && l.weight.len() == l.d_in * l.d_out
                        && l.bias.len() == l.d_out,
                    "{net}layer {i} is {}x{} ({} weights, {} biases), config says {}x{}",
                    l.d_in,
                    l.d_out,
                    l.weight.len(),
                    l.bias.len(),
                    widths[i],
                    widths[i + 1]
                );
            }
        }
        ensure!(info.standardized == norm.is_some(), "standardized flag and normalisation disagree");
        if let Some(n) = &norm {
            ensure!(n.mean.len() == input && n.std.len() == input, "normalisation has the wrong width");
        }
        for (name, width) in &info.columns {
            ensure!(crate::labels::FEATURE_COLUMNS.iter().any(|(n, _)| n == name), "unknown feature column {name:?}");
            let expect = if name.starts_with("hidden_") { info.hidden } else { 1 };
            ensure!(*width == expect, "feature {name:?} has width {width}, expected {expect}");
        }
        Ok(Detector { info, members, norm })
    }

    pub fn info(&self) -> &DetectorInfo {
        &self.info
    }

    /// The first network's weights (the only one's, unless an ensemble).
    pub fn weights(&self) -> &MlpWeights {
        &self.members[0]
    }

    /// Every network's weights, the first first.
    pub fn members(&self) -> &[MlpWeights] {
        &self.members
    }

    pub fn norm(&self) -> Option<&Norm> {
        self.norm.as_ref()
    }

    /// Width of the feature vector [`Detector::score`] takes.
    pub fn input_dim(&self) -> usize {
        self.info.mlp.input
    }

    /// Probability that the example is hallucinated, from the concatenated raw (unstandardised) features.
    pub fn score(&self, features: &[f32]) -> f32 {
        mlp::sigmoid(self.margin(features))
    }

    /// The log-odds that the example is hallucinated (`score = sigmoid(margin)`), which keeps its resolution where
    /// the probability rounds to 1.0 in f32 (margins above about 17). Of an ensemble, the mean of its networks'
    /// margins (summed in f64; one network's margin is returned as it is).
    pub fn margin(&self, features: &[f32]) -> f32 {
        assert_eq!(features.len(), self.input_dim(), "detector takes {} features", self.input_dim());
        let normed: Vec<f32>;
        let x = match &self.norm {
            Some(n) => {
                normed = n.apply(features).collect();
                &normed
            }
            None => features,
        };
        match self.members.as_slice() {
            [one] => one.margin(x),
            all => (all.iter().map(|w| w.margin(x) as f64).sum::<f64>() / all.len() as f64) as f32,
        }
    }

    /// The feature vector for one generated token (see the module doc for the mapping).
    pub fn features_from_step(&self, step: &TokenStep) -> Result<Vec<f32>> {
        let mut x = Vec::with_capacity(self.input_dim());
        for (name, width) in &self.info.columns {
            let part: &[f32] = match name.as_str() {
                "hidden_final_last" | "hidden_final_entity" => &step.hidden_final,
                "hidden_mean_last" | "hidden_mean_entity" => &step.hidden_mean,
                "entropy_last" | "entropy_entity_mean" => std::slice::from_ref(&step.entropy),
                other => bail!("unknown feature column {other:?}"),
            };
            ensure!(
                part.len() == *width,
                "token {} ({:?}) has {} values for {name}, the detector needs {width} (was the hidden state captured?)",
                step.pos,
                step.text,
                part.len()
            );
            x.extend_from_slice(part);
        }
        Ok(x)
    }

    /// The detector's metrics on the rows of a label store (`train detector --evaluate`): one line per split of
    /// [`train::split_of`] — the split training draws, so on its own store `test` is the unseen articles — and
    /// one over all rows (on a store of another label source every row is unseen). Refuses a store of another
    /// model or with other feature columns.
    pub fn evaluate(&self, t: &crate::labels::FeatureTable) -> Result<Vec<(&'static str, metrics::Metrics)>> {
        self.check_rows(&t.model_id, t.hidden, &t.columns)?;
        let mut scored = Scored::default();
        for i in 0..t.len() {
            scored.add(&t.article_ids[i], t.labels[i], self.score(t.row(i)));
        }
        Ok(scored.metrics())
    }

    /// [`Detector::evaluate`] on rows read shard by shard from disk: memory is one shard and a label and a score
    /// per row.
    pub fn evaluate_stream(&self, s: &crate::labels::FeatureStream) -> Result<Vec<(&'static str, metrics::Metrics)>> {
        self.check_rows(&s.model_id, s.hidden, &s.columns)?;
        let mut scored = Scored::default();
        s.for_each(&s.in_order(), |b| {
            for ((row, &label), a) in b.x.chunks(s.dim).zip(&b.labels).zip(&b.article_ids) {
                scored.add(a, label, self.score(row));
            }
            Ok(())
        })?;
        Ok(scored.metrics())
    }

    /// Errors unless rows of `model_id` / `hidden` with `columns` are what the detector reads.
    fn check_rows(&self, model_id: &str, hidden: usize, columns: &[(String, usize)]) -> Result<()> {
        self.check_model(model_id, hidden)?;
        let want: Vec<&str> = self.info.columns.iter().map(|(n, _)| n.as_str()).collect();
        let have: Vec<&str> = columns.iter().map(|(n, _)| n.as_str()).collect();
        ensure!(want == have, "the detector reads the columns {want:?}, the rows hold {have:?}");
        Ok(())
    }

    /// [`Detector::score`] of [`Detector::features_from_step`].
    pub fn score_step(&self, step: &TokenStep) -> Result<f32> {
        Ok(self.score(&self.features_from_step(step)?))
    }

    /// [`Detector::margin`] of [`Detector::features_from_step`].
    pub fn margin_step(&self, step: &TokenStep) -> Result<f32> {
        Ok(self.margin(&self.features_from_step(step)?))
    }

    /// Errors unless the detector was trained on states of `model_id` with hidden size `hidden`.
    pub fn check_model(&self, model_id: &str, hidden: usize) -> Result<()> {
        ensure!(
            self.info.hidden == hidden,
            "detector was trained on hidden size {} (model {:?}), this model has hidden size {hidden}",
            self.info.hidden,
            self.info.model_id
        );
        ensure!(
            self.info.model_id == model_id,
            "detector was trained on model {:?}, not {model_id:?} (same hidden size {hidden}, but other states)",
            self.info.model_id
        );
        Ok(())
    }

    /// Loads a checkpoint directory for use with `model_id` / `hidden` (refuses another model).
    pub fn load_for(dir: impl AsRef<Path>, model_id: &str, hidden: usize) -> Result<Self> {
        let dir = dir.as_ref();
        let d = Self::load(dir)?;
        d.check_model(model_id, hidden).with_context(|| format!("{}: wrong detector for this model", dir.display()))?;
        Ok(d)
    }

    /// Loads a checkpoint directory without checking which model it belongs to.
    pub fn load(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let info_path = dir.join(INFO_FILE);
        let text = fs::read_to_string(&info_path).with_context(|| format!("{}: cannot read", info_path.display()))?;
        let info: DetectorInfo = serde_json::from_str(&text)
            .with_context(|| format!("{}: malformed detector config", info_path.display()))?;
        ensure!(info.format == FORMAT, "{}: format is {:?}, expected {FORMAT:?}", info_path.display(), info.format);
        let w_path = dir.join(WEIGHTS_FILE);
        let bytes = fs::read(&w_path).with_context(|| format!("{}: cannot read", w_path.display()))?;
        let st = SafeTensors::deserialize(&bytes)
            .with_context(|| format!("{}: not a safetensors file", w_path.display()))?;
        let get = |name: &str, shape: &[usize]| -> Result<Vec<f32>> {
            let t = st.tensor(name).with_context(|| format!("{}: no tensor {name:?}", w_path.display()))?;
            ensure!(t.dtype() == Dtype::F32, "{}: {name} is {:?}, expected F32", w_path.display(), t.dtype());
            ensure!(t.shape() == shape, "{}: {name} has shape {:?}, expected {shape:?}", w_path.display(), t.shape());
            Ok(t.data().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
        };
        let widths = info.mlp.widths();
        ensure!(info.members >= 1, "{}: members is 0, a detector needs at least one network", info_path.display());
        // no capacity from `members`: a damaged count fails at the first missing tensor, not in an allocation
        let mut members = Vec::new();
        for k in 0..info.members {
            let mut layers = Vec::new();
            for i in 0..widths.len() - 1 {
                let (d_in, d_out) = (widths[i], widths[i + 1]);
                layers.push(LinearWeights {
                    d_in,
                    d_out,
                    weight: get(&format!("{}mlp.{i}.weight", member_prefix(k)), &[d_in, d_out])?,
                    bias: get(&format!("{}mlp.{i}.bias", member_prefix(k)), &[d_out])?,
                });
            }
            members.push(MlpWeights { layers });
        }
        let norm = if info.standardized {
            Some(Norm { mean: get("norm.mean", &[info.mlp.input])?, std: get("norm.std", &[info.mlp.input])? })
        } else {
            None
        };
        Detector::with_members(info, members, norm)
            .with_context(|| format!("{}: inconsistent checkpoint", dir.display()))
    }

    /// Writes `detector.json` and `model.safetensors` into `dir` (created if needed).
    pub fn save(&self, dir: impl AsRef<Path>) -> Result<()> {
        let dir = dir.as_ref();
        let _lock = crate::io::claim_output_dir(dir, "detector directory", "detector", INFO_FILE)?;
        let bytes = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
        let mut blobs: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
        for (k, w) in self.members.iter().enumerate() {
            for (i, l) in w.layers.iter().enumerate() {
                let p = member_prefix(k);
                blobs.push((format!("{p}mlp.{i}.weight"), vec![l.d_in, l.d_out], bytes(&l.weight)));
                blobs.push((format!("{p}mlp.{i}.bias"), vec![l.d_out], bytes(&l.bias)));
            }
        }
        if let Some(n) = &self.norm {
            blobs.push(("norm.mean".into(), vec![n.mean.len()], bytes(&n.mean)));
            blobs.push(("norm.std".into(), vec![n.std.len()], bytes(&n.std)));
        }
        let views: Vec<(String, TensorView)> = blobs
            .iter()
            .map(|(name, shape, data)| Ok((name.clone(), TensorView::new(Dtype::F32, shape.clone(), data)?)))
            .collect::<Result<_>>()?;
        // One metadata entry: the safetensors header lists metadata in hash-map order, so two entries would make
        // the bytes of equal detectors differ from run to run (the model id is in detector.json).
        let meta = HashMap::from([("format".to_string(), FORMAT.to_string())]);
        let st = safetensors::serialize(views, Some(meta))?;
        // detector.json is the commit point: an earlier one goes first, so that a kill between the two writes
        // leaves weights without a config (an error naming the missing file), never new weights under an old one.
        let info_path = dir.join(INFO_FILE);
        match fs::remove_file(&info_path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("{}: cannot replace", info_path.display()))
            }
            _ => {}
        }
        let w_path = dir.join(WEIGHTS_FILE);
        crate::io::write_atomic(&w_path, &st)?;
        crate::io::write_atomic(&info_path, serde_json::to_string_pretty(&self.info)?.as_bytes())
    }
}

/// Where the `k`-th network's tensors are named in `model.safetensors`: `mlp.*` for the first, `member{k}.mlp.*`
/// for the others.
fn member_prefix(k: usize) -> String {
    if k == 0 {
        String::new()
    } else {
        format!("member{k}.")
    }
}

/// Labels and scores of rows by split ([`train::split_of`], each row hashed once) and over all rows, in the
/// order [`Detector::evaluate`] reports them.
#[derive(Default)]
struct Scored {
    by_split: [(Vec<u8>, Vec<f32>); 3],
    all: (Vec<u8>, Vec<f32>),
}

impl Scored {
    fn add(&mut self, article_id: &str, label: u8, score: f32) {
        let (labels, scores) = &mut self.by_split[train::split_of(article_id) as usize]; // Split::ALL's order
        labels.push(label);
        scores.push(score);
        self.all.0.push(label);
        self.all.1.push(score);
    }

    fn metrics(&self) -> Vec<(&'static str, metrics::Metrics)> {
        let mut out: Vec<(&'static str, metrics::Metrics)> = train::Split::ALL
            .iter()
            .zip(&self.by_split)
            .map(|(s, (labels, sc))| (s.name(), metrics::Metrics::compute(labels, sc)))
            .collect();
        out.push(("all", metrics::Metrics::compute(&self.all.0, &self.all.1)));
        out
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A hand-set detector over `entropy_last` alone (hidden size 3, no standardisation) whose probability is
    /// `sigmoid(relu(e) * 2 - 1) = 1 / (1 + exp(1 - 2e))` for entropy `e >= 0`.
    /// Layers: 1 -> 1 (w = 1, b = 0, ReLU) -> 2 (w = [0, 2], b = [0.5, -0.5]); logits `[0.5, 2e - 0.5]`.
    pub(crate) fn entropy_detector() -> Detector {
        let info = DetectorInfo {
            format: FORMAT.into(),
            model_id: "toy".into(),
            hidden: 3,
            columns: vec![("entropy_last".into(), 1)],
            mlp: MlpConfig { input: 1, hidden_layers: vec![1], dropout: 0.0 },
            standardized: false,
            training: None,
            members: 1,
            ensemble: None,
        };
        let weights = MlpWeights {
            layers: vec![
                LinearWeights { d_in: 1, d_out: 1, weight: vec![1.0], bias: vec![0.0] },
                LinearWeights { d_in: 1, d_out: 2, weight: vec![0.0, 2.0], bias: vec![0.5, -0.5] },
            ],
        };
        Detector::new(info, weights, None).unwrap()
    }

    #[test]
    fn hand_set_detector_scores_and_roundtrips() {
        let d = entropy_detector();
        // e = 0.5: logits [0.5, 0.5] -> 0.5; e = 1: [0.5, 1.5] -> 1/(1+e^-1)
        assert!((d.score(&[0.5]) - 0.5).abs() < 1e-7);
        assert!((d.score(&[1.0]) - 1.0 / (1.0 + (-1f32).exp())).abs() < 1e-6);
        let step = TokenStep { entropy: 1.0, ..Default::default() };
        assert_eq!(d.score_step(&step).unwrap(), d.score(&[1.0]));
        // margin 2e - 1: 1 at e = 1; 19 at e = 10, where the probability is 1.0 in f32
        assert_eq!((d.margin_step(&step).unwrap(), d.margin(&[10.0]), d.score(&[10.0])), (1.0, 19.0, 1.0));

        let dir = tempfile::tempdir().unwrap();
        d.save(dir.path()).unwrap();
        let back = Detector::load_for(dir.path(), "toy", 3).unwrap();
        assert_eq!(back, d);
        let err = format!("{:#}", Detector::load_for(dir.path(), "toy", 4).unwrap_err());
        assert!(err.contains("hidden size 3"), "{err}");
        assert!(Detector::load_for(dir.path(), "other", 3).is_err());
    }

    /// Entropies 0.1, 0.9, 0.3, 0.7 with labels 0, 1, 1, 0: the score rises with the entropy, so of the four
    /// positive/negative pairs three are ordered right (0.3 < 0.7 is not): ROC-AUC 3/4 over all rows.
    #[test]
    fn evaluate_scores_every_row_and_each_split() {
        let d = entropy_detector();
        let ids: Vec<String> = (0..4).map(|i| format!("q{i}")).collect();
        let mut t = crate::labels::FeatureTable {
            model_id: "toy".into(),
            hidden: 3,
            columns: vec![("entropy_last".into(), 1)],
            dim: 1,
            article_ids: ids.clone(),
            labels: vec![0, 1, 1, 0],
            x: vec![0.1, 0.9, 0.3, 0.7],
        };
        let m = d.evaluate(&t).unwrap();
        let names: Vec<&str> = m.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["train", "valid", "test", "all"]);
        let all = &m[3].1;
        assert_eq!((all.n, all.positives), (4, 2));
        assert!((all.roc_auc - 0.75).abs() < 1e-12, "{all:?}");
        assert_eq!(m[..3].iter().map(|(_, x)| x.n).sum::<usize>(), 4, "each row in one split");
        for (k, s) in train::Split::ALL.iter().enumerate() {
            let n = ids.iter().filter(|id| train::split_of(id) == *s).count();
            assert_eq!(m[k].1.n, n, "{}", s.name());
        }
        t.model_id = "other".into();
        assert!(d.evaluate(&t).is_err(), "another model's states");
        t.model_id = "toy".into();
        t.columns = vec![("entropy_entity_mean".into(), 1)];
        let err = format!("{:#}", d.evaluate(&t).unwrap_err());
        assert!(err.contains("entropy_entity_mean"), "{err}");
    }

    #[test]
    fn features_from_step_need_hidden_states() {
        let mut d = entropy_detector();
        d.info.columns = vec![("hidden_mean_last".into(), 3), ("entropy_last".into(), 1)];
        d.info.mlp.input = 4;
        let step = TokenStep { entropy: 0.25, hidden_mean: vec![1.0, 2.0, 3.0], ..Default::default() };
        assert_eq!(d.features_from_step(&step).unwrap(), vec![1.0, 2.0, 3.0, 0.25]);
        let bare = TokenStep { entropy: 0.25, ..Default::default() };
        assert!(d.features_from_step(&bare).is_err());
    }
}
