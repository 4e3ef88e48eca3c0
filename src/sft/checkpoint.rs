//! Training checkpoints: what `state.json` holds, and writing and reading a checkpoint directory.
//!
//! **Checkpoints** (`CKPT/`): `state.json` (update count, fingerprint, logs), `optimizer.safetensors`, and the
//! trainable weights: a full Hugging Face folder (`config.json` + `model.safetensors`) for full fine-tuning,
//! PEFT's `adapter_model.safetensors` + `adapter_config.json` for LoRA. Written to `CKPT.tmp/` and renamed
//! into place (the previous one kept as `CKPT.old/` until the rename is done), so a kill at any moment leaves
//! a complete checkpoint. A run with the same settings and data resumes from it; different settings are an
//! error (the fingerprint), not a silent mix.

use std::path::{Path, PathBuf};

use anyhow::{ensure, Context, Result};
use burn::module::AutodiffModule;
use burn::tensor::backend::AutodiffBackend;
use serde::{Deserialize, Serialize};

use super::config::SftConfig;
use super::export::{read_tensors, write_tensors};
use super::lora::{self, LoraConfig};
use super::optim::AdamW;
use crate::model::llama::Llama;
use crate::model::weights::WeightSource;
use crate::model::{build_llama, export_llama, ModelConfig};

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
    /// On CUDA: the most bytes burn's pool held in live tensors during the update (sampled after each forward,
    /// backward and the optimizer step), in MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_in_use_mib: Option<f64>,
    /// On CUDA: the bytes burn's pool had reserved from the driver at the end of the update, in MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_reserved_mib: Option<f64>,
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

fn old_dir(dir: &Path) -> PathBuf {
    dir.with_extension("old")
}

fn tmp_dir(dir: &Path) -> PathBuf {
    dir.with_extension("tmp")
}

/// The complete checkpoint to resume from: `dir`, or `dir.old` when a kill interrupted the swap.
pub fn existing_checkpoint(dir: &Path) -> Option<PathBuf> {
    [dir.to_path_buf(), old_dir(dir)].into_iter().find(|d| crate::io::present_or_refused(&d.join("state.json")))
}

/// Deletes a checkpoint (for `--restart`).
pub fn remove_checkpoint(dir: &Path) -> Result<()> {
    for d in [dir.to_path_buf(), old_dir(dir), tmp_dir(dir)] {
        if crate::io::exists(&d)? {
            std::fs::remove_dir_all(&d).with_context(|| format!("{}: cannot remove", d.display()))?;
        }
    }
    Ok(())
}

pub(super) fn save_checkpoint<AB: AutodiffBackend>(
    dir: &Path,
    model: &Llama<AB>,
    opt: &AdamW<AB::InnerBackend>,
    state: &TrainState,
    model_cfg: &ModelConfig,
    lora_cfg: Option<&LoraConfig>,
) -> Result<()> {
    let tmp = tmp_dir(dir);
    if crate::io::exists(&tmp)? {
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
            std::fs::write(tmp.join("config.json"), serde_json::to_string_pretty(&model_cfg.to_hf_config()?)?)?;
        }
    }
    write_tensors(&tmp.join("optimizer.safetensors"), &opt.state_tensors())?;
    std::fs::write(tmp.join("state.json"), serde_json::to_string_pretty(state)?)?;
    let old = old_dir(dir);
    if crate::io::exists(&old)? {
        std::fs::remove_dir_all(&old)?;
    }
    if crate::io::exists(dir)? {
        std::fs::rename(dir, &old).with_context(|| format!("{}: cannot move aside", dir.display()))?;
    }
    std::fs::rename(&tmp, dir).with_context(|| format!("{}: cannot rename into place", tmp.display()))?;
    if crate::io::exists(&old)? {
        std::fs::remove_dir_all(&old)?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
pub(super) fn load_checkpoint<AB: AutodiffBackend>(
    dir: &Path,
    fresh: Llama<AB>,
    opt: &mut AdamW<AB::InnerBackend>,
    src: &dyn WeightSource,
    model_cfg: &ModelConfig,
    cfg: &SftConfig,
    device: &AB::Device,
) -> Result<(Llama<AB>, TrainState)> {
    let text = std::fs::read_to_string(dir.join("state.json"))
        .with_context(|| format!("{}: cannot read state.json", dir.display()))?;
    let mut state: TrainState =
        serde_json::from_str(&text).with_context(|| format!("{}/state.json: not a training state", dir.display()))?;
    ensure!(
        state.format == STATE_FORMAT,
        "{}: checkpoint format '{}' (expected {STATE_FORMAT})",
        dir.display(),
        state.format
    );
    // `stop_after` is not serialized; the caller's applies.
    state.config.stop_after = cfg.stop_after;
    let model = match &cfg.lora {
        Some(_) => {
            let t = crate::model::MemoryWeights(
                read_tensors(&dir.join("adapter_model.safetensors"))?.into_iter().collect(),
            );
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
