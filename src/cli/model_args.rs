//! Flags shared by every command that loads a model.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use ragtime::device::DeviceKind;
use ragtime::model::Lm;

/// Default model, as installed by `scripts/setup.sh`.
pub const DEFAULT_MODEL: &str = "checkpoints/smollm2-135m-instruct-q4_1.gguf";

#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// Model: a .gguf file or a Hugging Face folder (config.json, *.safetensors, tokenizer.json).
    #[arg(long, default_value = DEFAULT_MODEL)]
    pub model: PathBuf,
    /// tokenizer.json to use instead of the model's own.
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    pub device: DeviceKind,
}

impl ModelArgs {
    pub fn load(&self) -> Result<Lm> {
        Lm::load(&self.model, self.device, self.tokenizer.as_deref())
    }
}
