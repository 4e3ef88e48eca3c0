//! Flags shared by every command that loads a model.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use ragtime::device::DeviceKind;
use ragtime::model::simd::CpuKernels;
use ragtime::model::{EngineKind, Lm, Precision};

/// Default model, as installed by `scripts/setup.sh`.
pub const DEFAULT_MODEL: &str = "checkpoints/smollm2-135m-instruct-q4_1.gguf";

#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// Model: a .gguf file, a Hugging Face folder (config.json, *.safetensors, tokenizer.json), or a PEFT LoRA
    /// adapter folder (adapter_config.json + adapter_model.safetensors, e.g. `train autorag --lora`'s OUT/adapter)
    /// on the base its base_model_name_or_path names.
    #[arg(long, default_value = DEFAULT_MODEL)]
    pub model: PathBuf,
    /// tokenizer.json to use instead of the model's own.
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    pub device: DeviceKind,
    /// Inference engine: auto (the device's: ragtime's CPU kernels with integer-weight decoding on cpu, the batched
    /// engine on cuda), batched (burn's tensor ops over fixed-shape lane buffers: many sequences per pass) or
    /// reference (burn's tensor ops one sequence at a time, the training forward pass: slower, the ground truth).
    #[arg(long, default_value = "auto")]
    pub engine: EngineKind,
    /// Hold and multiply f32 weights (de-quantized at load), not a quantized GGUF's integer blocks (CPU engine; for
    /// comparisons: slower decoding, about 4x the memory).
    #[arg(long)]
    pub f32_decode: bool,
    /// Decode in integer arithmetic as llama.cpp does: each decoded row quantized to int8 per 32 values and
    /// multiplied with the GGUF's quantized blocks in integers (CPU engine; faster, numbers no longer those of the
    /// f32 weights: docs/engine.md gives the error).
    #[arg(long, conflicts_with = "f32_decode")]
    pub int8_dot: bool,
    /// Round the model's f32 weight matrices (an f32/f16/bf16 folder: a fine-tune's export, a LoRA adapter's
    /// merged weights) to q8_0 blocks at load, as llama.cpp's quantize does to a file: the CPU engine then
    /// decodes from integers as for a quantized GGUF (faster; numbers no longer those of the f32 weights).
    /// Weights already in blocks stay as they are.
    #[arg(long, value_name = "FORMAT", conflicts_with = "f32_decode")]
    pub quantize: Option<ragtime::model::quantize::Quantize>,
    /// Weights and activations in f32, bf16 or f16 (the batched engine: `--device cuda` or `--engine batched`;
    /// norms, softmax and the returned logits stay f32).
    #[arg(long, default_value = "f32")]
    pub dtype: Precision,
    /// The largest family of SIMD kernels the CPU engine may use: auto (whatever the CPU has), avx2 (as on a CPU
    /// without AVX-512: to reproduce or time its kernels, whose `--int8-dot` numbers differ) or portable (no SIMD
    /// kernels).
    #[arg(long, default_value = "auto")]
    pub cpu_kernels: CpuKernels,
}

/// Lanes (`--batch`) when the flag is not given: 8 on the CPU (the lanes' decoding rows share each pass over the
/// integer weights: `eval --trigger rind` answers Qwen2.5-Coder-0.5B's questions 2.5x and SmolLM2's 1.4x faster than
/// one lane, the same predictions; 16 or 32 lanes gain little more and take more memory), 32 on the CPU with
/// `--int8-dot` where the integer products read row tiles (AVX-512 VNNI, and AMX: a row costs less in a pass of 32
/// than of 8; Qwen's `eval`, `synth hallucination` and `synth autorag` 1.04-1.34x faster than at 8 lanes with AMX,
/// docs/results/bench-lanes-cpu-int8-amx-qwen.md, 1.08-1.10x with VNNI alone,
/// docs/results/bench-lanes-cpu-int8-vnni-qwen.md; on AVX2 without the tiles 32 lanes gain 1.05x for 1.5x the
/// memory, so 8 there: docs/results/bench-lanes-cpu-int8-avx2-qwen.md), 64 on a GPU (the batched engine decodes
/// every lane in one pass of one shape).
pub const DEFAULT_LANES_CPU: usize = 8;
pub const DEFAULT_LANES_CPU_TILES: usize = 32;
pub const DEFAULT_LANES_GPU: usize = 64;

impl ModelArgs {
    /// `--batch`, or the device's default number of lanes.
    pub fn lanes(&self, batch: Option<usize>) -> usize {
        batch.unwrap_or(match self.device {
            DeviceKind::Cpu if self.int8_dot && ragtime::model::quant::rows_on_tiles() => DEFAULT_LANES_CPU_TILES,
            DeviceKind::Cpu => DEFAULT_LANES_CPU,
            DeviceKind::Cuda(_) => DEFAULT_LANES_GPU,
        })
    }

    /// Flag combinations that cannot work, refused before any work: `--dtype` other than f32 needs the batched
    /// engine, `--int8-dot` the CPU engine.
    pub fn check(&self) -> Result<()> {
        let engine = self.engine.resolve(self.device);
        if self.int8_dot && engine != ragtime::model::Resolved::Cpu {
            ragtime::usage_bail!(
                "--int8-dot: only the CPU engine multiplies in integers (--device cpu, --engine auto); the {engine} \
                 engine on {} multiplies f32 weights",
                self.device
            );
        }
        if !engine.computes_in(self.dtype) {
            ragtime::usage_bail!(
                "--dtype {}: only the batched engine computes in bf16 or f16 (--device cuda, or --engine batched); \
                 the {engine} engine on {} computes in f32",
                self.dtype,
                self.device
            );
        }
        Ok(())
    }

    /// The flags that change a run's numbers on the CPU, as the settings a run records so that it resumes only
    /// with the same ones: `int8_dot` (integer products), `quantize` (weights rounded at load, its format as
    /// written on the command line) and `cpu_kernels` (other than auto). Each only when given, so outputs made
    /// before the flag existed still resume.
    pub fn numeric_settings(&self) -> Vec<(&'static str, serde_json::Value)> {
        use clap::ValueEnum;
        let mut out = Vec::new();
        if self.int8_dot {
            out.push(("int8_dot", serde_json::Value::Bool(true)));
        }
        if let Some(q) = self.quantize.and_then(|q| q.to_possible_value()) {
            out.push(("quantize", serde_json::Value::String(q.get_name().to_string())));
        }
        if let Some(k) = (self.cpu_kernels != CpuKernels::Auto).then(|| self.cpu_kernels.to_possible_value()).flatten()
        {
            out.push(("cpu_kernels", serde_json::Value::String(k.get_name().to_string())));
        }
        out
    }

    pub fn load(&self) -> Result<Lm> {
        self.check()?;
        // before the weights are laid out for the kernels (`--int8-dot`)
        ragtime::model::simd::set_cpu_kernels(self.cpu_kernels);
        let mut lm = Lm::load_with(&self.model, self.device, self.engine, self.tokenizer.as_deref(), self.quantize)?;
        if self.f32_decode {
            lm.f32_decode();
        }
        if self.int8_dot {
            lm.int8_dot()?;
        }
        lm.set_precision(self.dtype)?;
        Ok(lm)
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        model: ModelArgs,
    }

    fn args(flags: &[&str]) -> ModelArgs {
        Cli::parse_from(std::iter::once("ragtime").chain(flags.iter().copied())).model
    }

    #[test]
    fn default_lanes_follow_the_device_and_the_products() {
        assert_eq!(args(&[]).lanes(None), 8);
        let tiles = ragtime::model::quant::rows_on_tiles();
        assert_eq!(args(&["--int8-dot"]).lanes(None), if tiles { 32 } else { 8 });
        assert_eq!(args(&["--device", "cuda"]).lanes(None), 64);
        assert_eq!(args(&["--int8-dot"]).lanes(Some(3)), 3);
        assert_eq!(args(&["--device", "cuda"]).lanes(Some(1)), 1);
    }
}
