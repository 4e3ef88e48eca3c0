//! The training loop: token-weighted masked NLL (Eq. 3), gradient accumulation, AdamW with warm-up + cosine,
//! periodic validation, checkpoints every N updates and exact resume.
//!
//! **Schedule of data.** Update `u` (0-based) belongs to epoch `u / S` (`S` = updates per epoch) and uses the
//! micro-batches `[k A, (k+1) A)` of that epoch's batch list (`k = u % S`, `A` = accumulation), and an epoch's
//! batch list depends only on `(seed, epoch)` ([`super::data::epoch_batches`]). So the update count alone fixes
//! where training is: a checkpoint stores the trainable weights, the AdamW moments and that count, and nothing
//! else is random (no dropout). The loss of one update is `sum NLL / (target tokens of its micro-batches)`,
//! so accumulation gives the same gradient as one big batch.
//!
//! **Checkpoints** (`CKPT/`): `state.json` (update count, fingerprint, logs), `optimizer.safetensors`, and the
//! trainable weights: a full Hugging Face folder (`config.json` + `model.safetensors`) for full fine-tuning,
//! PEFT's `adapter_model.safetensors` + `adapter_config.json` for LoRA. Written to `CKPT.tmp/` and renamed
//! into place (the previous one kept as `CKPT.old/` until the rename is done), so a kill at any moment leaves
//! a complete checkpoint. A run with the same settings and data resumes from it; different settings are an
//! error (the fingerprint), not a silent mix.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};
use burn::module::AutodiffModule;
use burn::prelude::Backend;
use burn::tensor::activation::log_softmax;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Int, Tensor, TensorData};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::data::{epoch_batches, eval_batches, make_batch, render, split_valid, Batch, Example};
use super::export::{read_tensors, write_tensors};
use super::lora::{self, LoraConfig};
use super::optim::{AdamW, AdamWConfig, GradAccum, Schedule};
use crate::autorag::dialogue::Dialogue;
use crate::model::llama::{Capture, Llama, Rope};
use crate::model::weights::WeightSource;
use crate::model::{build_llama, export_llama, ModelConfig, Tokenizer};

/// Hyper-parameters (defaults: `configs/autorag-train.toml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SftConfig {
    pub epochs: usize,
    /// Peak learning rate.
    pub lr: f64,
    /// Final learning rate as a fraction of the peak (cosine floor).
    pub min_lr_ratio: f64,
    /// Warm-up length as a fraction of all updates.
    pub warmup_ratio: f64,
    /// Sequences per micro-batch.
    pub batch_size: usize,
    /// Micro-batches per update.
    pub grad_accum: usize,
    /// Tokens per sequence; longer dialogues are cut at the end.
    pub max_len: usize,
    /// Global gradient-norm bound; 0 = no clipping.
    pub clip_norm: f64,
    pub weight_decay: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    /// Validation every N updates (0: only before and after training).
    pub eval_every: usize,
    /// Checkpoint every N updates (0: only at the end).
    pub save_every: usize,
    /// Progress line every N updates.
    pub log_every: usize,
    /// Fraction of dialogues held out for validation (by hash of the id).
    pub valid_fraction: f64,
    pub seed: u64,
    /// Stop after this many updates in all (the schedule spans them); `None`: all epochs.
    pub max_steps: Option<usize>,
    /// LoRA instead of full fine-tuning.
    pub lora: Option<LoraConfig>,
    /// Halt (after checkpointing) once this many updates are done, as if killed: for tests and time-boxed
    /// runs; not part of the fingerprint.
    #[serde(skip)]
    pub stop_after: Option<usize>,
}

impl Default for SftConfig {
    fn default() -> Self {
        SftConfig {
            epochs: 5,
            lr: 1e-5,
            min_lr_ratio: 0.0,
            warmup_ratio: 0.03,
            batch_size: 1,
            grad_accum: 8,
            max_len: 1024,
            clip_norm: 1.0,
            weight_decay: 0.0,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            eval_every: 50,
            save_every: 50,
            log_every: 1,
            valid_fraction: 0.05,
            seed: 42,
            max_steps: None,
            lora: None,
            stop_after: None,
        }
    }
}

impl SftConfig {
    pub fn validate(&self) -> Result<()> {
        ensure!(self.epochs > 0 && self.batch_size > 0 && self.grad_accum > 0, "epochs, batch size and accumulation must be positive");
        ensure!(self.max_len >= 8, "max_len {} is too short", self.max_len);
        ensure!(self.lr > 0.0, "learning rate must be positive");
        ensure!((0.0..1.0).contains(&self.warmup_ratio), "warmup_ratio must be in [0, 1)");
        ensure!((0.0..1.0).contains(&self.valid_fraction), "valid_fraction must be in [0, 1)");
        if let Some(l) = &self.lora {
            l.validate()?;
        }
        Ok(())
    }

    fn adamw(&self) -> AdamWConfig {
        AdamWConfig {
            beta1: self.beta1,
            beta2: self.beta2,
            eps: self.eps,
            weight_decay: self.weight_decay,
            clip_norm: (self.clip_norm > 0.0).then_some(self.clip_norm),
        }
    }
}

/// Tokenized dialogues, split.
#[derive(Debug, Clone)]
pub struct SftData {
    pub train: Vec<Example>,
    pub valid: Vec<Example>,
    pub pad_id: u32,
    /// Dialogues cut at `max_len`.
    pub truncated: usize,
    /// Dialogues dropped because no model token was left within `max_len`.
    pub dropped: usize,
}

impl SftData {
    /// Renders, truncates and splits the dialogues.
    pub fn prepare(dialogues: &[Dialogue], tok: &Tokenizer, max_len: usize, valid_fraction: f64) -> Result<SftData> {
        let ids: Vec<&str> = dialogues.iter().map(|d| d.id.as_str()).collect();
        let (train_idx, valid_idx) = split_valid(&ids, valid_fraction);
        let (mut truncated, mut dropped) = (0, 0);
        let mut conv = |idx: &[usize]| -> Result<Vec<Example>> {
            let mut out = Vec::new();
            for &i in idx {
                let mut ex = render(tok, &dialogues[i])?;
                if ex.len() > max_len {
                    ex.truncate(max_len);
                    truncated += 1;
                }
                if ex.targets() == 0 {
                    dropped += 1;
                } else {
                    out.push(ex);
                }
            }
            Ok(out)
        };
        let train = conv(&train_idx)?;
        let valid = conv(&valid_idx)?;
        ensure!(!train.is_empty(), "no training dialogue left (all {} too long for max_len {max_len}?)", dialogues.len());
        let pad_id = tok.token_id("<|endoftext|>").or_else(|| tok.stop_ids.first().copied()).unwrap_or(0);
        Ok(SftData { train, valid, pad_id, truncated, dropped })
    }

    fn digest(&self) -> String {
        let mut h = Sha256::new();
        for (name, set) in [("train", &self.train), ("valid", &self.valid)] {
            h.update(name.as_bytes());
            for e in set {
                h.update(e.id.as_bytes());
                for (&i, &l) in e.ids.iter().zip(&e.loss) {
                    h.update(i.to_le_bytes());
                    h.update([l as u8]);
                }
            }
        }
        format!("{:x}", h.finalize())
    }
}

/// Sum over the batch's targets of `-log p(target | prefix)`: `[1]`.
pub fn nll_sum<B: Backend>(model: &Llama<B>, rope: &Rope<B>, batch: &Batch, device: &B::Device) -> Tensor<B, 1> {
    let (b, t, n) = (batch.b, batch.t, batch.positions.len());
    let ids = Tensor::<B, 2, Int>::from_data(TensorData::new(batch.ids.clone(), [b, t]), device);
    let hidden = model.forward(ids, rope, 0, None, Capture::default()).hidden; // [b, t, d]
    let d = hidden.dims()[2];
    let pos = Tensor::<B, 1, Int>::from_data(TensorData::new(batch.positions.clone(), [n]), device);
    // Only the positions that predict a model token go through the LM head: [1, n, d] -> [1, n, vocab]
    let h = hidden.reshape([b * t, d]).select(0, pos).unsqueeze::<3>();
    let logp = log_softmax(model.logits(h), 2);
    let tgt = Tensor::<B, 3, Int>::from_data(TensorData::new(batch.targets.clone(), [1, n, 1]), device);
    logp.gather(2, tgt).sum().neg()
}

fn scalar<B: Backend>(t: Tensor<B, 1>) -> f64 {
    t.into_data().convert::<f64>().to_vec::<f64>().unwrap()[0]
}

/// Mean NLL per target token over `examples` (no gradients).
pub fn evaluate<B: Backend>(model: &Llama<B>, rope: &Rope<B>, examples: &[Example], batch: usize, pad_id: u32, device: &B::Device) -> f64 {
    let lengths: Vec<usize> = examples.iter().map(|e| e.len()).collect();
    let (mut sum, mut n) = (0.0, 0usize);
    for idx in eval_batches(&lengths, batch) {
        let exs: Vec<&Example> = idx.iter().map(|&i| &examples[i]).collect();
        let b = make_batch(&exs, pad_id);
        n += b.targets.len();
        sum += scalar(nll_sum(model, rope, &b, device));
    }
    if n == 0 { f64::NAN } else { sum / n as f64 }
}

/// One progress row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepLog {
    /// Updates done (1-based).
    pub step: usize,
    pub epoch: usize,
    /// Mean NLL per target token of this update's micro-batches.
    pub loss: f64,
    pub lr: f64,
    pub grad_norm: f64,
    /// Real tokens (prompt and model turns, no padding) in the update.
    pub tokens: usize,
    pub target_tokens: usize,
    pub secs: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValidLog {
    pub step: usize,
    pub loss: f64,
}

/// What `state.json` and `train_report.json` hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainState {
    pub format: String,
    pub step: usize,
    pub total_steps: usize,
    pub fingerprint: String,
    pub config: SftConfig,
    pub train_dialogues: usize,
    pub valid_dialogues: usize,
    pub history: Vec<StepLog>,
    pub valid: Vec<ValidLog>,
}

pub const STATE_FORMAT: &str = "ragtime-sft-1";

/// The trained model (LoRA merged) on the inner backend, and the logs.
pub struct Trained<B: Backend> {
    pub model: Llama<B>,
    pub state: TrainState,
    /// False when `stop_after` halted training early.
    pub finished: bool,
    /// PEFT adapter tensors (LoRA runs only), before merging.
    pub adapters: Option<Vec<(String, crate::model::weights::HostTensor)>>,
}

fn fingerprint(cfg: &SftConfig, model_cfg: &ModelConfig, data: &SftData) -> String {
    let mut c = cfg.clone();
    c.eval_every = 0;
    c.save_every = 0;
    c.log_every = 0;
    c.stop_after = None;
    let v = serde_json::json!({"config": c, "model": model_cfg, "data": data.digest()});
    format!("{:x}", Sha256::digest(v.to_string().as_bytes()))
}

/// One optimizer update of a run: its epoch (1-based), learning rate and micro-batches (indices into
/// `SftData::train`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlannedUpdate {
    pub epoch: usize,
    pub lr: f64,
    pub micro: Vec<Vec<usize>>,
}

/// Every update of a run, fixed by the data and the settings alone (see "Schedule of data" above): update `u`
/// takes micro-batches `[k A, (k+1) A)` of epoch `u / S`'s batch list, at the warm-up + cosine rate of `u`.
/// [`train`] follows this plan, and `ragtime train autorag --dump-plan` writes it for other trainers.
pub fn plan(data: &SftData, cfg: &SftConfig) -> Result<Vec<PlannedUpdate>> {
    let lengths: Vec<usize> = data.train.iter().map(|e| e.len()).collect();
    let per_epoch = data.train.len().div_ceil(cfg.batch_size).div_ceil(cfg.grad_accum);
    let mut total = cfg.epochs * per_epoch;
    if let Some(m) = cfg.max_steps {
        total = total.min(m);
    }
    ensure!(total > 0, "nothing to train: max_steps is 0");
    let warmup = (cfg.warmup_ratio * total as f64).ceil() as usize;
    let sched = Schedule { peak: cfg.lr, warmup, total, min_ratio: cfg.min_lr_ratio };
    let mut out = Vec::with_capacity(total);
    let mut batches = Vec::new();
    for u in 0..total {
        let (epoch, k) = (u / per_epoch, u % per_epoch);
        if k == 0 {
            batches = epoch_batches(&lengths, cfg.batch_size, cfg.seed, epoch);
        }
        let micro = batches[k * cfg.grad_accum..((k + 1) * cfg.grad_accum).min(batches.len())].to_vec();
        out.push(PlannedUpdate { epoch: epoch + 1, lr: sched.lr(u), micro });
    }
    Ok(out)
}

/// Trains from `src` (the base model's weights), checkpointing into `ckpt` when given and resuming from it
/// when it holds a checkpoint of the same run. `log` receives progress lines.
pub fn train<AB: AutodiffBackend>(
    src: &dyn WeightSource,
    model_cfg: &ModelConfig,
    data: &SftData,
    cfg: &SftConfig,
    ckpt: Option<&Path>,
    device: &AB::Device,
    log: &mut dyn FnMut(&str),
) -> Result<Trained<AB::InnerBackend>> {
    cfg.validate()?;
    let fp = fingerprint(cfg, model_cfg, data);
    let updates = plan(data, cfg)?;
    let total = updates.len();

    let base = build_llama::<AB>(src, model_cfg, device)?;
    let mut model = match &cfg.lora {
        Some(l) => lora::attach(base, l, cfg.seed, device)?,
        None => base,
    };
    let mut opt = AdamW::<AB::InnerBackend>::new(cfg.adamw());
    let mut state = TrainState {
        format: STATE_FORMAT.into(),
        step: 0,
        total_steps: total,
        fingerprint: fp.clone(),
        config: cfg.clone(),
        train_dialogues: data.train.len(),
        valid_dialogues: data.valid.len(),
        history: Vec::new(),
        valid: Vec::new(),
    };
    if let Some(dir) = ckpt.and_then(existing_checkpoint) {
        let (m, s) = load_checkpoint::<AB>(&dir, model, &mut opt, src, model_cfg, cfg, device)?;
        if s.fingerprint != fp {
            bail!(
                "{}: this checkpoint was written with other settings, model or data; pass --restart to start over, or another --out",
                dir.display()
            );
        }
        model = m;
        log(&format!("resuming from {} at update {}/{}", dir.display(), s.step, total));
        state = s;
    }

    let rope = Rope::<AB>::new(model_cfg, cfg.max_len.max(2), device);
    let rope_eval = Rope::<AB::InnerBackend>::new(model_cfg, cfg.max_len.max(2), device);
    let eval_bs = cfg.batch_size.max(1);
    let validate = |model: &Llama<AB>, step: usize, state: &mut TrainState, log: &mut dyn FnMut(&str)| {
        if data.valid.is_empty() || state.valid.iter().any(|v| v.step == step) {
            return;
        }
        let t0 = Instant::now();
        let loss = evaluate(&model.valid(), &rope_eval, &data.valid, eval_bs, data.pad_id, device);
        log(&format!("valid  step {step:>5}  loss {loss:.4}  ({} dialogues, {:.1}s)", data.valid.len(), t0.elapsed().as_secs_f64()));
        state.valid.push(ValidLog { step, loss });
    };
    if state.step == 0 {
        validate(&model, 0, &mut state, log);
    }

    let mut grads = GradAccum::<AB::InnerBackend>::default();
    let mut finished = true;
    while state.step < total {
        if cfg.stop_after.is_some_and(|s| state.step >= s) {
            finished = false;
            break;
        }
        let up = &updates[state.step];
        let (epoch, lr) = (up.epoch, up.lr);
        let micro: Vec<Batch> =
            up.micro.iter().map(|idx| make_batch(&idx.iter().map(|&i| &data.train[i]).collect::<Vec<_>>(), data.pad_id)).collect();
        let n_targets: usize = micro.iter().map(|b| b.targets.len()).sum();
        let tokens: usize = micro.iter().map(|b| b.tokens).sum();
        let t0 = Instant::now();
        let mut loss_sum = 0.0;
        for b in &micro {
            let loss = nll_sum(&model, &rope, b, device).div_scalar(n_targets as f64);
            loss_sum += scalar(loss.clone().inner());
            grads.add::<AB, _>(&model, loss.backward());
        }
        let (m, norm) = opt.step::<AB, _>(model, &mut grads, lr);
        model = m;
        state.step += 1;
        let row = StepLog { step: state.step, epoch, loss: loss_sum, lr, grad_norm: norm, tokens, target_tokens: n_targets, secs: t0.elapsed().as_secs_f64() };
        if cfg.log_every > 0 && (state.step % cfg.log_every == 0 || state.step == total) {
            log(&format!(
                "step {:>5}/{total}  epoch {}  loss {:.4}  lr {:.2e}  |g| {:.3}  {} tok ({} target)  {:.0} tok/s",
                row.step,
                row.epoch,
                row.loss,
                row.lr,
                row.grad_norm,
                row.tokens,
                row.target_tokens,
                row.tokens as f64 / row.secs.max(1e-9)
            ));
        }
        state.history.push(row);
        let last = state.step == total;
        if last || (cfg.eval_every > 0 && state.step % cfg.eval_every == 0) {
            validate(&model, state.step, &mut state, log);
        }
        let halting = cfg.stop_after.is_some_and(|s| state.step >= s);
        if let Some(dir) = ckpt {
            if last || halting || (cfg.save_every > 0 && state.step % cfg.save_every == 0) {
                save_checkpoint(dir, &model, &opt, &state, model_cfg, cfg.lora.as_ref())?;
                log(&format!("checkpoint at update {} -> {}", state.step, dir.display()));
            }
        }
    }
    let inner = model.valid();
    let adapters = cfg.lora.as_ref().map(|_| lora::adapter_tensors(&inner));
    let merged = lora::merge(inner);
    Ok(Trained { model: merged, state, finished, adapters })
}

fn old_dir(dir: &Path) -> PathBuf {
    dir.with_extension("old")
}

fn tmp_dir(dir: &Path) -> PathBuf {
    dir.with_extension("tmp")
}

/// The complete checkpoint to resume from: `dir`, or `dir.old` when a kill interrupted the swap.
pub fn existing_checkpoint(dir: &Path) -> Option<PathBuf> {
    [dir.to_path_buf(), old_dir(dir)].into_iter().find(|d| d.join("state.json").exists())
}

/// Deletes a checkpoint (for `--restart`).
pub fn remove_checkpoint(dir: &Path) -> Result<()> {
    for d in [dir.to_path_buf(), old_dir(dir), tmp_dir(dir)] {
        if d.exists() {
            std::fs::remove_dir_all(&d).with_context(|| format!("{}: cannot remove", d.display()))?;
        }
    }
    Ok(())
}

fn save_checkpoint<AB: AutodiffBackend>(
    dir: &Path,
    model: &Llama<AB>,
    opt: &AdamW<AB::InnerBackend>,
    state: &TrainState,
    model_cfg: &ModelConfig,
    lora_cfg: Option<&LoraConfig>,
) -> Result<()> {
    let tmp = tmp_dir(dir);
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).with_context(|| format!("{}: cannot remove", tmp.display()))?;
    }
    std::fs::create_dir_all(&tmp).with_context(|| format!("{}: cannot create", tmp.display()))?;
    let inner = model.valid();
    match lora_cfg {
        Some(l) => {
            write_tensors(&tmp.join("adapter_model.safetensors"), &lora::adapter_tensors(&inner))?;
            let j = serde_json::to_string_pretty(&lora::adapter_config_json(l, "base"))?;
            std::fs::write(tmp.join("adapter_config.json"), j)?;
        }
        None => {
            write_tensors(&tmp.join("model.safetensors"), &export_llama(&inner))?;
            std::fs::write(tmp.join("config.json"), serde_json::to_string_pretty(&model_cfg.to_hf_config())?)?;
        }
    }
    write_tensors(&tmp.join("optimizer.safetensors"), &opt.state_tensors())?;
    std::fs::write(tmp.join("state.json"), serde_json::to_string_pretty(state)?)?;
    let old = old_dir(dir);
    if old.exists() {
        std::fs::remove_dir_all(&old)?;
    }
    if dir.exists() {
        std::fs::rename(dir, &old).with_context(|| format!("{}: cannot move aside", dir.display()))?;
    }
    std::fs::rename(&tmp, dir).with_context(|| format!("{}: cannot rename into place", tmp.display()))?;
    if old.exists() {
        std::fs::remove_dir_all(&old)?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn load_checkpoint<AB: AutodiffBackend>(
    dir: &Path,
    fresh: Llama<AB>,
    opt: &mut AdamW<AB::InnerBackend>,
    src: &dyn WeightSource,
    model_cfg: &ModelConfig,
    cfg: &SftConfig,
    device: &AB::Device,
) -> Result<(Llama<AB>, TrainState)> {
    let text = std::fs::read_to_string(dir.join("state.json")).with_context(|| format!("{}: cannot read state.json", dir.display()))?;
    let mut state: TrainState = serde_json::from_str(&text).with_context(|| format!("{}/state.json: not a training state", dir.display()))?;
    ensure!(state.format == STATE_FORMAT, "{}: checkpoint format '{}' (expected {STATE_FORMAT})", dir.display(), state.format);
    // `stop_after` is not serialized; the caller's applies.
    state.config.stop_after = cfg.stop_after;
    let model = match &cfg.lora {
        Some(_) => {
            let t = crate::model::MemoryWeights(read_tensors(&dir.join("adapter_model.safetensors"))?.into_iter().collect());
            let _ = src;
            lora::load_adapters(fresh, &t, device)?
        }
        None => {
            let w = crate::model::safetensors::SafetensorsDir::open(dir)?;
            drop(fresh);
            build_llama::<AB>(&w, model_cfg, device)?
        }
    };
    opt.load_state(state.step as u64, read_tensors(&dir.join("optimizer.safetensors"))?, device)?;
    Ok((model, state))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autorag::dialogue::Turn;
    use crate::model::{random_weights, Arch, MemoryWeights};
    use burn::backend::{Autodiff, Flex};

    type AB = Autodiff<Flex>;

    fn tok() -> Option<Tokenizer> {
        Some(Tokenizer::from_file(&crate::testing::require("models/smollm2-135m-instruct/tokenizer.json")?).unwrap())
    }

    /// Toy dialogues with a learnable pattern: the model must echo a query built from the question.
    pub(crate) fn toy_dialogues(n: usize) -> Vec<Dialogue> {
        let colors = ["red", "blue", "green", "black", "white", "pink"];
        (0..n)
            .map(|i| {
                let c = colors[i % colors.len()];
                Dialogue {
                    id: format!("toy{i}"),
                    dataset: "toy".into(),
                    question: format!("What is the {c} thing number {i}?"),
                    answers: vec![format!("{c} {i}")],
                    turns: vec![
                        Turn { input: format!("What is the {c} thing number {i}?"), output: format!("Retrieval Query: {c} thing {i}") },
                        Turn { input: format!("Retrieved Document_1: The {c} thing {i} is a ball."), output: "Final Answer: a ball".into() },
                    ],
                    iterations: 1,
                    final_answer: "a ball".into(),
                }
            })
            .collect()
    }

    fn setup() -> Option<(ModelConfig, MemoryWeights, SftData)> {
        let mcfg = ModelConfig::tiny(Arch::Llama, 49152);
        let w = MemoryWeights(random_weights(&mcfg, 11).into_iter().collect());
        let data = SftData::prepare(&toy_dialogues(24), &tok()?, 128, 0.2).unwrap();
        Some((mcfg, w, data))
    }

    fn small_cfg(lora: bool) -> SftConfig {
        SftConfig {
            epochs: 2,
            lr: if lora { 5e-3 } else { 2e-3 },
            batch_size: 2,
            grad_accum: 2,
            max_len: 128,
            eval_every: 0,
            save_every: 0,
            log_every: 1,
            valid_fraction: 0.2,
            warmup_ratio: 0.1,
            lora: lora.then(|| LoraConfig { rank: 4, alpha: 8.0, targets: vec!["q_proj".into(), "v_proj".into(), "up_proj".into()] }),
            ..Default::default()
        }
    }

    #[test]
    fn resume_gives_the_same_next_loss() {
        let Some((mcfg, w, data)) = setup() else { return };
        let dev = Default::default();
        for lora in [false, true] {
            let cfg = small_cfg(lora);
            let n = 3;
            // Uninterrupted: n + 1 updates.
            let mut c = cfg.clone();
            c.stop_after = Some(n + 1);
            let full = train::<AB>(&w, &mcfg, &data, &c, None, &dev, &mut |_| {}).unwrap();
            assert_eq!(full.state.history.len(), n + 1);
            // Killed after n updates (checkpoint written), then resumed for one more.
            let dir = tempfile::tempdir().unwrap();
            let ck = dir.path().join("checkpoint");
            let mut c = cfg.clone();
            c.stop_after = Some(n);
            let first = train::<AB>(&w, &mcfg, &data, &c, Some(&ck), &dev, &mut |_| {}).unwrap();
            assert!(!first.finished);
            assert!(ck.join("state.json").exists() && ck.join("optimizer.safetensors").exists());
            let mut lines = Vec::new();
            let mut c = cfg.clone();
            c.stop_after = Some(n + 1);
            let resumed = train::<AB>(&w, &mcfg, &data, &c, Some(&ck), &dev, &mut |l| lines.push(l.to_string())).unwrap();
            assert!(lines[0].starts_with("resuming"), "{lines:?}");
            assert_eq!(resumed.state.history.len(), n + 1);
            let (a, b) = (full.state.history[n].loss, resumed.state.history[n].loss);
            eprintln!("lora={lora}: update {} loss uninterrupted {a:.9}, resumed {b:.9}", n + 1);
            assert!((a - b).abs() < 1e-5, "lora={lora}: next loss after resume {b} vs uninterrupted {a}");
            for k in 0..n {
                // (read back from state.json: equal up to JSON float parsing)
                assert!((full.state.history[k].loss - resumed.state.history[k].loss).abs() < 1e-12);
            }
            // a different setting refuses the checkpoint
            let mut c = cfg.clone();
            c.lr *= 2.0;
            let err = train::<AB>(&w, &mcfg, &data, &c, Some(&ck), &dev, &mut |_| {}).err().unwrap();
            assert!(format!("{err:#}").contains("other settings"), "{err:#}");
        }
    }

    #[test]
    fn loss_falls_on_toy_dialogues() {
        let Some((mcfg, w, data)) = setup() else { return };
        let dev = Default::default();
        for lora in [false, true] {
            let mut cfg = small_cfg(lora);
            cfg.epochs = 6;
            cfg.lr = if lora { 2e-2 } else { 5e-3 };
            let t = train::<AB>(&w, &mcfg, &data, &cfg, None, &dev, &mut |_| {}).unwrap();
            let h = &t.state.history;
            let first: f64 = h[..3].iter().map(|r| r.loss).sum::<f64>() / 3.0;
            let last: f64 = h[h.len() - 3..].iter().map(|r| r.loss).sum::<f64>() / 3.0;
            assert!(last < 0.7 * first, "lora={lora}: train loss {first:.3} -> {last:.3}");
            let v = &t.state.valid;
            assert_eq!(v.first().unwrap().step, 0);
            assert!(v.last().unwrap().loss < v[0].loss, "lora={lora}: valid {:?}", v);
            assert_eq!(t.adapters.is_some(), lora);
        }
    }

    #[test]
    fn plan_covers_each_example_once_per_epoch_on_the_schedule() {
        let Some((_, _, data)) = setup() else { return };
        let cfg = small_cfg(false); // batch 2, accumulation 2, 2 epochs, warm-up 10 %
        let n = data.train.len();
        let per_epoch = n.div_ceil(2).div_ceil(2);
        let p = plan(&data, &cfg).unwrap();
        assert_eq!(p.len(), 2 * per_epoch);
        for epoch in 1..=2 {
            let mut seen: Vec<usize> = p.iter().filter(|u| u.epoch == epoch).flat_map(|u| u.micro.concat()).collect();
            seen.sort();
            assert_eq!(seen, (0..n).collect::<Vec<_>>(), "epoch {epoch}");
        }
        assert!(p.iter().all(|u| !u.micro.is_empty() && u.micro.len() <= 2 && u.micro.iter().all(|b| b.len() <= 2)));
        // Warm-up of ceil(0.1 * total) = 1 update reaches the peak at once; cosine decay to 0 after it.
        let sched = Schedule { peak: cfg.lr, warmup: 1, total: p.len(), min_ratio: 0.0 };
        for (u, up) in p.iter().enumerate() {
            assert_eq!(up.lr, sched.lr(u), "update {u}");
        }
        assert_eq!(p[0].lr, cfg.lr);
        assert!(p.windows(2).all(|w| w[1].lr <= w[0].lr));
        // max_steps cuts the plan, and the schedule spans the cut run.
        let cut = plan(&data, &SftConfig { max_steps: Some(3), ..cfg.clone() }).unwrap();
        assert_eq!(cut.len(), 3);
        assert_eq!(cut[..3].iter().map(|u| &u.micro).collect::<Vec<_>>(), p[..3].iter().map(|u| &u.micro).collect::<Vec<_>>());
        assert!(cut[2].lr < p[2].lr);
    }

    #[test]
    fn nll_counts_only_targets_and_ignores_padding() {
        let Some((mcfg, w, data)) = setup() else { return };
        let dev: burn::backend::flex::FlexDevice = Default::default();
        let m = build_llama::<Flex>(&w, &mcfg, &dev).unwrap();
        let rope = Rope::<Flex>::new(&mcfg, 256, &dev);
        let (a, b) = (&data.train[0], &data.train[1]);
        let alone = scalar(nll_sum(&m, &rope, &make_batch(&[a], data.pad_id), &dev)) + scalar(nll_sum(&m, &rope, &make_batch(&[b], data.pad_id), &dev));
        let together = scalar(nll_sum(&m, &rope, &make_batch(&[a, b], data.pad_id), &dev));
        assert!((alone - together).abs() < 1e-3 * alone.abs(), "{alone} vs {together}");
        // Changing a prompt token changes the loss only through context; changing a target changes it.
        let mut c = a.clone();
        let j = c.loss.iter().rposition(|&l| l).unwrap();
        c.ids[j] = (c.ids[j] + 1) % 49152;
        let changed = scalar(nll_sum(&m, &rope, &make_batch(&[&c], data.pad_id), &dev));
        let orig = scalar(nll_sum(&m, &rope, &make_batch(&[a], data.pad_id), &dev));
        assert!((changed - orig).abs() > 1e-6);
        // All-false mask except one token: the loss is that token's NLL alone.
        let mut one = a.clone();
        one.loss = vec![false; one.len()];
        one.loss[5] = true;
        let b1 = make_batch(&[&one], data.pad_id);
        assert_eq!(b1.targets.len(), 1);
        assert!(scalar(nll_sum(&m, &rope, &b1, &dev)) > 0.0);
    }
}
