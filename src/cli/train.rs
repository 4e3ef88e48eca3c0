//! `ragtime train ...`: training subcommands (`detector` now; more learned controllers later).

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};

use ragtime::detector::ensemble::{self, member_config};
use ragtime::detector::stream::train_stream;
use ragtime::detector::train::{train, Split, TrainConfig};
use ragtime::detector::Detector;
use ragtime::device::{train_on, DeviceKind, TrainJob};
use ragtime::labels::{feature_columns, load_manifest, read_features_many, FeatureStream, FeatureTable};

#[derive(Args, Debug)]
pub struct TrainArgs {
    #[command(subcommand)]
    pub what: TrainCommand,
}

/// Parsed once per run: the size difference of the variants costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub enum TrainCommand {
    /// Train MIND's hallucination detector (MLP over hidden states) on a `synth` dataset.
    Detector(DetectorArgs),
    /// Fine-tune the decoder on Auto-RAG dialogues (loss on the model's turns only), full or LoRA.
    Autorag(super::train_autorag::Args),
}

/// Defaults are MIND's (see `ragtime::detector::train`).
#[derive(Args, Debug)]
pub struct DetectorArgs {
    /// Dataset directory written by `ragtime synth hallucination` (_manifest.json + part-*.parquet), or several,
    /// comma-separated (e.g. the parts of a `--shard i/n` synthesis, or `ragtime merge`'s output for all of them).
    #[arg(long, value_delimiter = ',', default_value = "datasets/hallucination")]
    pub data: Vec<PathBuf>,
    /// Checkpoint directory to write (detector.json + model.safetensors).
    #[arg(long, default_value = "checkpoints/detector")]
    pub out: PathBuf,
    /// Feature columns to concatenate: hidden_final_last, hidden_mean_last, hidden_final_entity,
    /// hidden_mean_entity, entropy_last, entropy_entity_mean.
    #[arg(long, value_delimiter = ',', default_value = "hidden_mean_last", value_parser = feature_name)]
    pub features: Vec<String>,
    #[arg(long, default_value_t = 20, value_parser = super::ranges::int::<1, 100_000>)]
    pub epochs: usize,
    #[arg(long, default_value_t = 32, value_parser = super::ranges::int::<1, 1_048_576>)]
    pub batch_size: usize,
    #[arg(long, default_value_t = 5e-4, value_parser = super::ranges::positive)]
    pub lr: f64,
    /// L2 penalty added to the gradient (PyTorch Adam's weight_decay).
    #[arg(long, default_value_t = 1e-5, value_parser = super::ranges::non_negative_f32)]
    pub weight_decay: f32,
    /// Hidden layer widths, input side first.
    #[arg(long, value_delimiter = ',', default_value = "256,128,64", value_parser = super::ranges::int_list_item::<1, 65_536>)]
    pub hidden_layers: Vec<usize>,
    /// Dropout probability on the input.
    #[arg(long, default_value_t = 0.2, value_parser = super::ranges::fraction)]
    pub dropout: f64,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Train N networks on the same rows and splits, with seeds SEED, SEED+1, ..., and keep them all as one
    /// detector whose log-odds is the mean of theirs (an ensemble: less tied to one seed and one kept epoch).
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = super::ranges::int::<1, 64>)]
    pub members: usize,
    /// Standardise every feature with the train split's mean and std (stored in the checkpoint).
    #[arg(long)]
    pub standardize: bool,
    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    pub device: DeviceKind,
    /// Read the rows shard by shard from disk instead of all into memory (memory: one shard and the shuffle
    /// buffer, whatever the size of the label store). Batches are drawn through a shuffle buffer, so the
    /// network differs from an in-memory run's.
    #[arg(long)]
    pub stream: bool,
    /// Score the trained detector DIR on --data instead of training one (nothing is written): its metrics on
    /// each split of the store and on all rows, e.g. a detector trained on MIND's labels scored on QA labels.
    #[arg(long, value_name = "DIR", conflicts_with = "stream")]
    pub evaluate: Option<PathBuf>,
    /// Rows the shuffle buffer of --stream holds.
    #[arg(long, default_value_t = 16_384, requires = "stream", value_parser = super::ranges::int::<1, 16_777_216>)]
    pub shuffle_buffer: usize,
}

impl DetectorArgs {
    pub fn config(&self) -> TrainConfig {
        TrainConfig {
            features: self.features.clone(),
            hidden_layers: self.hidden_layers.clone(),
            dropout: self.dropout,
            epochs: self.epochs,
            batch_size: self.batch_size,
            lr: self.lr,
            weight_decay: self.weight_decay,
            seed: self.seed,
            standardize: self.standardize,
        }
    }
}

/// A `--features` name: one of the label store's feature columns.
fn feature_name(s: &str) -> std::result::Result<String, String> {
    feature_columns(&[s]).map(|_| s.to_string()).map_err(|e| e.to_string())
}

pub fn run(args: TrainArgs) -> Result<()> {
    match args.what {
        TrainCommand::Detector(a) => run_detector(&a),
        TrainCommand::Autorag(a) => super::train_autorag::run(a),
    }
}

fn run_detector(a: &DetectorArgs) -> Result<()> {
    if let Some(dir) = &a.evaluate {
        return evaluate_detector(dir, &a.data);
    }
    // the names (each checked by clap) once each, before --out is made; `cfg.features` are the same names
    let names: Vec<&str> = a.features.iter().map(String::as_str).collect();
    if let Err(e) = feature_columns(&names) {
        ragtime::usage_bail!("--features: {e}");
    }
    let cfg = a.config();
    // every input and the output before any work: a wrong --data or --out fails now, not after training, and
    // a wrong --data leaves no output directory behind
    let (mut articles, mut examples, mut hallucinated) = (0, 0, 0);
    for d in &a.data {
        let m = load_manifest(d)?;
        articles += m.articles;
        examples += m.examples;
        hallucinated += m.hallucinated;
    }
    let _lock = ragtime::io::claim_output_dir(&a.out, "--out", "detector", ragtime::detector::INFO_FILE)?;
    let shown = a.data.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(",");
    let rows = if a.stream {
        Rows::Stream(FeatureStream::open(&a.data, &names).with_context(|| format!("{shown}: cannot read features"))?)
    } else {
        Rows::Table(read_features_many(&a.data, &names).with_context(|| format!("{shown}: cannot read features"))?)
    };
    let (examples, model_id, hidden, dim) = match &rows {
        Rows::Table(t) => (t.len(), &t.model_id, t.hidden, t.dim),
        Rows::Stream(s) => (examples, &s.model_id, s.hidden, s.dim),
    };
    eprintln!(
        "{}: {} examples from {} articles ({} hallucinated, {:.1}%), model {} (hidden {}), {} features{}",
        shown,
        examples,
        articles,
        hallucinated,
        100.0 * hallucinated as f64 / examples.max(1) as f64,
        model_id,
        hidden,
        dim,
        if a.stream { format!(", streamed (shuffle buffer {} rows)", a.shuffle_buffer) } else { String::new() }
    );
    let job = DetectorJob { rows: &rows, buffer: a.shuffle_buffer, cfg: &cfg, members: a.members };
    let detector = train_on(a.device, job)?;
    detector.save(&a.out)?;
    let report = detector.info().training.as_ref().expect("trained detector has a report");
    let best = match &detector.info().ensemble {
        None => {
            eprintln!("kept epoch {} (best valid ROC-AUC)", report.best_epoch);
            &report.best
        }
        Some(e) => {
            for (k, r) in std::iter::once(report).chain(&e.rest).enumerate() {
                eprintln!(
                    "network {k} (seed {}): kept epoch {:>3} (best valid ROC-AUC {:.4}), test ROC-AUC {:.4}, ECE {:.4}",
                    r.config.seed,
                    r.best_epoch,
                    r.best[&Split::Valid].roc_auc,
                    r.best[&Split::Test].roc_auc,
                    r.best[&Split::Test].ece
                );
            }
            eprintln!("the ensemble of the {} networks (mean log-odds):", detector.info().members);
            &e.best
        }
    };
    for s in Split::ALL {
        let m = best[&s];
        let z = report.splits[&s];
        println!(
            "{:<5} articles {:>6} examples {:>7} hallucinated {:>6}  acc {:.4}  F1 {:.4}  ROC-AUC {:.4}  PR-AUC {:.4}  ECE {:.4}",
            s.name(),
            z.articles,
            z.examples,
            z.hallucinated,
            m.accuracy,
            m.f1,
            m.roc_auc,
            m.pr_auc,
            m.ece
        );
    }
    eprintln!("wrote {}", a.out.display());
    Ok(())
}

/// `train detector --evaluate DIR`: the detector's metrics on the rows of `data`.
fn evaluate_detector(dir: &std::path::Path, data: &[PathBuf]) -> Result<()> {
    let detector = Detector::load(dir).with_context(|| format!("--evaluate {}", dir.display()))?;
    let shown = data.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(",");
    let names: Vec<&str> = detector.info().columns.iter().map(|(n, _)| n.as_str()).collect();
    let t = read_features_many(data, &names).with_context(|| format!("{shown}: cannot read features"))?;
    let m = detector.evaluate(&t).with_context(|| format!("--evaluate {} on {shown}", dir.display()))?;
    eprintln!("{}: {} examples scored by the detector {}", shown, t.len(), dir.display());
    for (split, m) in &m {
        println!(
            "{:<5} examples {:>7} hallucinated {:>6}  acc {:.4}  F1 {:.4}  ROC-AUC {:.4}  PR-AUC {:.4}  ECE {:.4}",
            split, m.n, m.positives, m.accuracy, m.f1, m.roc_auc, m.pr_auc, m.ece
        );
    }
    Ok(())
}

/// The rows `train detector` reads: all in memory, or streamed (`--stream`).
enum Rows {
    Table(FeatureTable),
    Stream(FeatureStream),
}

/// `train detector` on whichever backend `--device` names: `members` networks, one after the other.
struct DetectorJob<'a> {
    rows: &'a Rows,
    buffer: usize,
    cfg: &'a TrainConfig,
    members: usize,
}

impl TrainJob for DetectorJob<'_> {
    type Output = Detector;
    fn run<B: burn::tensor::backend::AutodiffBackend>(self, device: &B::Device) -> Result<Detector> {
        let mut log = |line: &str| eprintln!("{line}");
        let mut nets = Vec::with_capacity(self.members);
        for k in 0..self.members {
            let cfg = member_config(self.cfg, k);
            if self.members > 1 {
                eprintln!("network {k} of {} (seed {})", self.members, cfg.seed);
            }
            let trained = match self.rows {
                Rows::Table(t) => train::<B>(t, &cfg, device, &mut log)?,
                Rows::Stream(s) => train_stream::<B>(s, self.buffer, &cfg, device, &mut log)?,
            };
            nets.push(trained.detector);
        }
        ensemble::join(nets, |d| match self.rows {
            Rows::Table(t) => d.evaluate(t),
            Rows::Stream(s) => d.evaluate_stream(s),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(subcommand)]
        c: TrainCommand,
    }

    #[test]
    fn cli_defaults_are_minds() {
        let TrainCommand::Detector(a) = T::parse_from(["t", "detector"]).c else { panic!("detector") };
        assert_eq!(a.config(), TrainConfig::default());
        let TrainCommand::Detector(a) =
            T::parse_from(["t", "detector", "--features", "hidden_mean_last,entropy_last", "--hidden-layers", "8,4"]).c
        else {
            panic!("detector")
        };
        assert_eq!(a.features, vec!["hidden_mean_last", "entropy_last"]);
        assert_eq!(a.hidden_layers, vec![8, 4]);
        assert_eq!(a.device, DeviceKind::Cpu);
        assert_eq!(a.members, 1, "one network, as MIND");
        let TrainCommand::Detector(a) = T::parse_from(["t", "detector", "--device", "cuda:1"]).c else {
            panic!("detector")
        };
        assert_eq!(a.device, DeviceKind::Cuda(1));
        // a feature name is checked as the flag is read: clap's usage error, naming the flag and the known names
        let e = T::try_parse_from(["t", "detector", "--features", "hidden_mean_last,hiden_final_last"]).err().unwrap();
        assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
        let e = e.to_string();
        assert!(e.contains("'hiden_final_last' for '--features") && e.contains("known: hidden_final_last,"), "{e}");
    }
}
