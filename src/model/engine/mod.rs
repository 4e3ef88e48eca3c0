//! Inference engines: what runs a decoder's forward pass for [`super::Lm`] and its sessions.
//!
//! The burn decoder ([`super::llama::Llama`]) is the one reference forward pass: training runs it under autodiff,
//! and [`reference::ReferenceEngine`] runs it for inference on any burn backend (the ground truth the other
//! engines are tested against, and the CUDA engine for now). An inference engine may instead use its own kernels:
//! [`cpu::CpuEngine`] runs the same pass on plain f32 buffers with ragtime's CPU kernels ([`kernels`]) and
//! decodes on the GGUF file's integer blocks ([`super::quant`]).
//!
//! [`batched::BatchedEngine`] runs the burn decoder's layers over fixed-shape lane buffers, so that many sequences
//! decode in one pass of one shape (the GPU engine).
//!
//! The engine is chosen from the device and [`EngineKind`] ([`super::Lm::load`]), never from the environment:
//! `cpu` gets the CPU engine, `cuda[:N]` the batched engine on burn's CUDA backend, `--engine reference` the
//! reference engine and `--engine batched` the batched engine on either device.
//!
//! What every engine promises ([`Engine::forward`]): several sequences, each with its own cache and at its own
//! positions, go through one call, and each gets what a call of its own would give it: exactly (bit for bit) on
//! the CPU and reference engines, within f32 rounding on the batched engine (its passes run other shapes).

pub mod batched;
pub mod cpu;
pub mod dist;
pub mod kernels;
pub mod reference;

use anyhow::Result;

/// Which engine runs a model's forward pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EngineKind {
    /// The device's inference engine: the CPU engine on `cpu`, the batched engine on `cuda`.
    #[default]
    Auto,
    /// burn's tensor ops (the training forward pass) on the chosen device: slower; the ground truth.
    Reference,
    /// The burn decoder over fixed-shape lane buffers: many sequences per pass (the GPU's engine).
    Batched,
}

impl std::str::FromStr for EngineKind {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(EngineKind::Auto),
            "reference" => Ok(EngineKind::Reference),
            "batched" => Ok(EngineKind::Batched),
            _ => anyhow::bail!("unknown engine '{s}' (expected auto, reference or batched)"),
        }
    }
}

impl std::fmt::Display for EngineKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EngineKind::Auto => "auto",
            EngineKind::Reference => "reference",
            EngineKind::Batched => "batched",
        })
    }
}

/// The engine a run gets: [`EngineKind`] resolved on a device ([`EngineKind::resolve`]), the one place that
/// decides what `auto` means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolved {
    /// [`cpu::CpuEngine`]: ragtime's CPU kernels, decoding on a GGUF's integer blocks.
    Cpu,
    /// [`reference::ReferenceEngine`]: the burn decoder, one sequence at a time.
    Reference,
    /// [`batched::BatchedEngine`]: the burn decoder over fixed-shape lane buffers.
    Batched,
}

impl EngineKind {
    /// The engine this kind names on `device`: `auto` is the CPU engine on `cpu` and the batched engine on
    /// `cuda[:N]`.
    pub fn resolve(self, device: crate::device::DeviceKind) -> Resolved {
        match (self, device) {
            (EngineKind::Auto, crate::device::DeviceKind::Cpu) => Resolved::Cpu,
            (EngineKind::Auto, _) | (EngineKind::Batched, _) => Resolved::Batched,
            (EngineKind::Reference, _) => Resolved::Reference,
        }
    }
}

impl Resolved {
    /// Whether this engine computes in `precision`: only the batched engine casts to bf16 or f16
    /// ([`Engine::set_precision`]).
    pub fn computes_in(self, precision: Precision) -> bool {
        precision == Precision::F32 || self == Resolved::Batched
    }
}

impl std::fmt::Display for Resolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Resolved::Cpu => "cpu",
            Resolved::Reference => "reference",
            Resolved::Batched => "batched",
        })
    }
}

/// The floating-point type of an engine's weights and activations (`--dtype`). Reductions (RMS norms, the
/// attention softmax, the mean over layers) and the logits handed back are f32 whatever it is, as transformers
/// computes a bf16 model's norms and softmax.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    #[default]
    F32,
    Bf16,
    F16,
}

impl Precision {
    pub fn dtype(self) -> burn::tensor::DType {
        match self {
            Precision::F32 => burn::tensor::DType::F32,
            Precision::Bf16 => burn::tensor::DType::BF16,
            Precision::F16 => burn::tensor::DType::F16,
        }
    }
}

impl std::str::FromStr for Precision {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "f32" => Ok(Precision::F32),
            "bf16" => Ok(Precision::Bf16),
            "f16" => Ok(Precision::F16),
            _ => anyhow::bail!("unknown dtype '{s}' (expected f32, bf16 or f16)"),
        }
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
            Precision::F16 => "f16",
        })
    }
}

/// What one forward call should hand back for a chunk of `t` tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Want {
    /// Logits for chunk rows `>= logits_from`.
    pub logits_from: usize,
    /// Attention rows and hidden states for chunk rows `>= capture_from` (`None`: none).
    pub capture_from: Option<usize>,
}

/// What one forward call hands back for one sequence: only the rows its [`Want`] asked for.
#[derive(Debug, Default, Clone)]
pub struct ChunkOut {
    /// `[rows >= logits_from]`: the next-token distribution after each asked row (its logits, or its scores with
    /// the logits fetched on demand: [`dist`]).
    pub logits: Vec<dist::NextDist>,
    /// `[rows >= capture_from][heads][pos + 1]`: the last layer's attention probabilities of each captured row
    /// over the positions it sees (`pos` is the row's absolute position).
    pub attn: Vec<Vec<Vec<f32>>>,
    /// `[rows >= capture_from][d]`: the last layer's output after the final norm.
    pub hidden_final: Vec<Vec<f32>>,
    /// `[rows >= capture_from][d]`: the mean over layers of the decoder-layer outputs, the last one after the
    /// final norm (transformers' `hidden_states[1:]`).
    pub hidden_mean: Vec<Vec<f32>>,
}

/// A sequence's KV cache as its engine made it, type-erased so that a session need not name the engine.
pub trait Cache: std::any::Any + Send {
    /// Keeps positions `0..len` (a rewind: the kept keys and values are not recomputed).
    fn truncate(&mut self, len: usize);
    /// Positions held.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn as_any(&self) -> &dyn std::any::Any;
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any;
}

/// One sequence of an engine forward: its cache (made by the same engine), the tokens to append, what to return.
pub struct SeqIn<'a> {
    pub cache: &'a mut dyn Cache,
    pub ids: &'a [u32],
    pub want: Want,
}

/// A decoder forward pass with a KV cache per sequence.
pub trait Engine: Send + Sync {
    /// An empty cache with room for `capacity` positions (it grows when a sequence outgrows it).
    fn new_cache(&self, capacity: usize) -> Box<dyn Cache>;
    /// Positions the engine can encode (its RoPE table).
    fn max_positions(&self) -> usize;
    /// Appends each sequence's tokens to its cache in one forward pass and returns what each asked for; every
    /// sequence's results equal (bit for bit) those of a pass of its own. Fails, changing no cache, when a
    /// sequence would exceed [`Engine::max_positions`]. (The batched engine: equal within f32 rounding.)
    fn forward(&self, seqs: &mut [SeqIn<'_>]) -> Result<Vec<ChunkOut>>;
    /// Makes `to` hold the first `len` positions of `from` (both caches made by this engine), their keys and
    /// values copied bit for bit, not recomputed: how a prefix every sequence starts with (the few-shot
    /// exemplars) is encoded once and handed to the other sequences of a batch. What `to` held is dropped.
    fn copy_prefix(&self, from: &dyn Cache, to: &mut dyn Cache, len: usize) -> Result<()>;
    /// Bytes of integer weights that decoding multiplies (0: decoding multiplies f32 weights).
    fn int_decode_bytes(&self) -> usize {
        0
    }
    /// Holds every weight in f32 instead of integer blocks: every product then multiplies f32 weights.
    fn drop_int_weights(&mut self) {}
    /// Decodes with integer dot products on inputs quantized to int8, as llama.cpp does (the CPU engine's
    /// symmetric integer copies, [`crate::model::quant::QMatrix::matvec_int8`]); whether any product now does.
    fn int8_dot(&mut self) -> bool {
        false
    }
    /// Computes in `precision` from now on (casting the weights). Only the batched engine computes in other than
    /// f32; the others refuse.
    fn set_precision(&mut self, precision: Precision) -> Result<()> {
        anyhow::ensure!(
            precision == Precision::F32,
            "--dtype {precision}: the {} engine computes in f32; bf16 and f16 run on the batched engine \
             (--device cuda, or --engine batched)",
            self.describe()
        );
        Ok(())
    }
    /// Short description for logs (`cpu`, `reference (flex)`, ...).
    fn describe(&self) -> String;
    /// Wall time spent so far in the phases of [`Engine::forward`] that the engine tells apart (`--stats`);
    /// empty where it does not.
    fn phases(&self) -> Vec<(&'static str, std::time::Duration)> {
        vec![]
    }
}

/// Wall time summed over calls, per named phase: `Phases::new(&["a", "b"])`, then `lap(0, &mut since)`.
#[derive(Debug)]
pub struct Phases {
    names: &'static [&'static str],
    ns: Vec<std::sync::atomic::AtomicU64>,
}

impl Phases {
    pub fn new(names: &'static [&'static str]) -> Self {
        Phases { names, ns: names.iter().map(|_| Default::default()).collect() }
    }

    /// Adds the time since `*since` to phase `i` and moves `*since` to now.
    pub fn lap(&self, i: usize, since: &mut std::time::Instant) {
        let now = std::time::Instant::now();
        self.ns[i].fetch_add((now - *since).as_nanos() as u64, std::sync::atomic::Ordering::Relaxed);
        *since = now;
    }

    pub fn totals(&self) -> Vec<(&'static str, std::time::Duration)> {
        let ns = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        self.names.iter().zip(&self.ns).map(|(&n, a)| (n, std::time::Duration::from_nanos(ns(a)))).collect()
    }
}

/// A sequence would outgrow the positions the model can encode. Callers that can go on without it (an eval run
/// skipping one over-long question) find it with `anyhow::Error::downcast_ref`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("sequence of {needed} tokens exceeds the model's {max} positions")]
pub struct ContextOverflow {
    pub needed: usize,
    pub max: usize,
}

/// A `[n, w]` tensor read back to the host as `n` rows of f32 (cast first: the batched engine may hold bf16/f16).
pub(crate) fn host_rows<B: burn::prelude::Backend>(x: burn::tensor::Tensor<B, 2>) -> Vec<Vec<f32>> {
    let [n, w] = x.dims();
    let v = x.cast(burn::tensor::DType::F32).into_data().to_vec::<f32>().expect("f32 after the cast");
    v.chunks(w.max(1)).take(n).map(<[f32]>::to_vec).collect()
}

/// `from` and `to` as the caches `C` of one engine, and `len` checked against what `from` holds.
pub(crate) fn cache_pair<'a, C: 'static>(
    from: &'a dyn Cache,
    to: &'a mut dyn Cache,
    len: usize,
) -> Result<(&'a C, &'a mut C)> {
    anyhow::ensure!(len <= from.len(), "copy_prefix: {len} positions asked of a cache holding {}", from.len());
    let from = from.as_any().downcast_ref::<C>().ok_or_else(|| anyhow::anyhow!("a cache made by another engine"))?;
    let to = to.as_any_mut().downcast_mut::<C>().ok_or_else(|| anyhow::anyhow!("a cache made by another engine"))?;
    Ok((from, to))
}

/// Checks, before any cache changes, that every sequence fits in `max_pos` positions.
pub(crate) fn check_positions(seqs: &[SeqIn<'_>], max_pos: usize) -> Result<()> {
    for s in seqs {
        let end = s.cache.len() + s.ids.len();
        if end > max_pos {
            return Err(ContextOverflow { needed: end, max: max_pos }.into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::DeviceKind;

    #[test]
    fn auto_is_the_cpu_engine_on_cpu_and_the_batched_engine_on_cuda() {
        assert_eq!(EngineKind::Auto.resolve(DeviceKind::Cpu), Resolved::Cpu);
        assert_eq!(EngineKind::Auto.resolve(DeviceKind::Cuda(1)), Resolved::Batched);
        for device in [DeviceKind::Cpu, DeviceKind::Cuda(0)] {
            assert_eq!(EngineKind::Reference.resolve(device), Resolved::Reference);
            assert_eq!(EngineKind::Batched.resolve(device), Resolved::Batched);
        }
    }

    #[test]
    fn phases_sum_the_laps_of_each_phase() {
        let p = Phases::new(&["a", "b"]);
        let t0 = std::time::Instant::now();
        let mut since = t0;
        std::thread::sleep(std::time::Duration::from_millis(2));
        p.lap(0, &mut since);
        p.lap(1, &mut since);
        std::thread::sleep(std::time::Duration::from_millis(2));
        p.lap(0, &mut since);
        let t = p.totals();
        assert_eq!((t[0].0, t[1].0), ("a", "b"));
        assert!(t[0].1 >= std::time::Duration::from_millis(4));
        assert!(t[0].1 + t[1].1 <= t0.elapsed()); // laps never overlap
    }

    #[test]
    fn only_the_batched_engine_computes_below_f32() {
        for engine in [Resolved::Cpu, Resolved::Reference, Resolved::Batched] {
            assert!(engine.computes_in(Precision::F32));
            assert_eq!(engine.computes_in(Precision::Bf16), engine == Resolved::Batched);
            assert_eq!(engine.computes_in(Precision::F16), engine == Resolved::Batched);
        }
    }
}
