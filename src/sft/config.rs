//! The fine-tuning hyper-parameters (`configs/autorag-train.toml`) and their checks.

use anyhow::{ensure, Result};
use serde::{Deserialize, Serialize};

use super::data::Shapes;
use super::lora::LoraConfig;
use super::optim::AdamWConfig;
use crate::model::Precision;

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
    /// Sequences per micro-batch (rows of packed dialogues with [`Self::pack`]).
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
    /// Pad every batch to a fixed shape (rows, length and target count rounded up to powers of two, the rows
    /// capped at `batch_size` and the length at `max_len`: [`super::data::Batch::padded`]) so that CUDA compiles
    /// each kernel once. The losses and gradients are those of the tight batches up to float rounding, so it is not part of
    /// the run's fingerprint: a run may resume with the other setting.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub static_shapes: bool,
    /// Pack each update's dialogues into rows of up to `max_len` tokens, several dialogues one after another in a
    /// row, each at its own positions from 0 and attending only to itself ([`super::data::make_packed_batch`]);
    /// a micro-batch is then `batch_size` such rows. An update covers the same dialogues as without packing, so
    /// its loss and gradient are the same up to float rounding: not part of the fingerprint. Pays where padding
    /// does not: fixed shapes ([`Self::static_shapes`]) waste less on pads.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub pack: bool,
    /// Keep only each decoder layer's input during the forward pass and recompute the layer in the backward
    /// pass ([`super::gradient_checkpointing`]): memory of one layer's activations instead of all layers', for
    /// one more forward pass. The same losses and gradients up to float rounding, so not part of the fingerprint.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub gradient_checkpointing: bool,
    /// What the forward and backward passes compute in (`--dtype`): `bf16` casts the f32 parameters to bf16 for
    /// each micro-batch, so products run in bf16 while the gradients, the optimizer state and the updates stay in
    /// f32 (master weights); RMS norms, the attention softmax and the loss compute in f32. Part of the
    /// fingerprint (the losses differ); left out of the saved settings when f32.
    #[serde(skip_serializing_if = "is_f32")]
    pub dtype: Precision,
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
            static_shapes: false,
            pack: false,
            gradient_checkpointing: false,
            dtype: Precision::F32,
            stop_after: None,
        }
    }
}

fn is_f32(p: &Precision) -> bool {
    *p == Precision::F32
}

impl SftConfig {
    pub fn validate(&self) -> Result<()> {
        ensure!(
            self.epochs > 0 && self.batch_size > 0 && self.grad_accum > 0,
            "epochs, batch size and accumulation must be positive"
        );
        ensure!(self.max_len >= 8, "max_len {} is too short", self.max_len);
        ensure!(self.lr > 0.0, "learning rate must be positive");
        ensure!((0.0..1.0).contains(&self.warmup_ratio), "warmup_ratio must be in [0, 1)");
        ensure!((0.0..1.0).contains(&self.valid_fraction), "valid_fraction must be in [0, 1)");
        if let Some(l) = &self.lora {
            l.validate()?;
        }
        ensure!(
            self.dtype != Precision::F16,
            "dtype f16 (--dtype, [train] dtype) needs loss scaling, which training does not do: use bf16 (the range of f32) or f32"
        );
        Ok(())
    }

    /// How batches are shaped under these settings.
    pub fn shapes(&self) -> Shapes {
        if self.static_shapes {
            Shapes::Static { rows: self.batch_size, max_len: self.max_len }
        } else {
            Shapes::Tight
        }
    }

    pub(super) fn adamw(&self) -> AdamWConfig {
        AdamWConfig {
            beta1: self.beta1,
            beta2: self.beta2,
            eps: self.eps,
            weight_decay: self.weight_decay,
            clip_norm: (self.clip_norm > 0.0).then_some(self.clip_norm),
        }
    }
}
