//! The model runtime: load a GGUF file or a Hugging Face safetensors folder into the burn decoder
//! ([`llama::Llama`]), and decode with a KV cache while capturing what dynamic-RAG controllers read.
//!
//! ```text
//! let lm = Lm::load(Path::new("checkpoints/smollm2-135m-instruct-q4_1.gguf"), DeviceKind::Cpu, None)?;
//! let mut s = lm.session();
//! s.prefill(&lm.tokenizer.encode("The capital of France is", true)?)?;
//! let step = s.step(&mut Sampler::greedy())?;   // TokenStep: id, text, entropy, prob, attn, hidden states
//! s.truncate(3);                                 // rewind: keep positions 0..3, no recomputation
//! ```

pub mod attention;
pub(crate) mod autodiff_ops;
pub mod config;
pub mod dtype;
pub mod engine;
pub mod exp;
pub mod gguf;
pub mod llama;
pub mod params;
pub mod peft;
pub mod quant;
pub mod quantize;
pub mod reduce;
pub mod rope;
pub mod safetensors;
pub mod sampling;
pub mod simd;
pub mod swiglu;
pub mod tokenizer;
pub mod weights;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use burn::module::Param;
use burn::prelude::Backend;
use burn::tensor::{Tensor, TensorData};

use crate::device::DeviceKind;
use crate::step::TokenStep;
pub use config::{Arch, ModelConfig};
use engine::{Cache, ChunkOut, Engine, SeqIn, Want};
pub use engine::{ContextOverflow, EngineKind, Precision, Resolved};
use llama::{Attention, Block, Linear, Llama, Mlp, RmsNorm, Rope};
pub use sampling::Sampler;
pub use tokenizer::{Message, Tokenizer};
pub use weights::{random_weights, MemoryWeights};
use weights::{HostTensor, WeightSource};

fn tensor1<B: Backend>(t: HostTensor, device: &B::Device) -> Tensor<B, 1> {
    let n = t.data.len();
    Tensor::from_data(TensorData::new(t.data, [n]), device)
}

/// `[out, in]` (Hugging Face) -> `[in, out]`.
fn transposed<B: Backend>(t: HostTensor, device: &B::Device) -> Tensor<B, 2> {
    let (rows, cols) = (t.shape[0], t.shape[1]);
    let mut out = vec![0f32; rows * cols];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = t.data[r * cols + c];
        }
    }
    Tensor::from_data(TensorData::new(out, [cols, rows]), device)
}

/// Builds the decoder from Hugging Face-named weights, checking every shape against the config.
pub fn build_llama<B: Backend>(src: &dyn WeightSource, cfg: &ModelConfig, device: &B::Device) -> Result<Llama<B>> {
    let d = cfg.hidden_size;
    let lin = |prefix: &str, spec: &params::BlockLinear| -> Result<Linear<B>> {
        let name = format!("{prefix}.{}", spec.path);
        let [out, inp] = (spec.shape)(cfg);
        let w = src.require(&format!("{name}.weight"), &[out, inp])?;
        let b = if spec.has_bias(cfg) {
            Some(Param::from_tensor(tensor1(src.require(&format!("{name}.bias"), &[out])?, device)))
        } else {
            None
        };
        Ok(Linear { weight: Param::from_tensor(transposed(w, device)), bias: b, lora: None })
    };
    let norm = |name: &str| -> Result<RmsNorm<B>> {
        Ok(RmsNorm {
            weight: Param::from_tensor(tensor1(src.require(name, &[d])?, device)),
            eps: cfg.rms_norm_eps as f64,
        })
    };
    let embed = src.require(params::EMBED, &[cfg.vocab_size, d])?;
    let embed_tokens = Param::from_tensor(Tensor::from_data(TensorData::new(embed.data, [cfg.vocab_size, d]), device));
    let mut layers = Vec::with_capacity(cfg.num_layers);
    for l in 0..cfg.num_layers {
        let p = params::block_prefix(l);
        let [input_norm, post_norm] = params::BLOCK_NORMS.map(|(n, _)| norm(&format!("{p}.{n}.weight")));
        let [q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj] =
            params::BLOCK_LINEARS.map(|spec| lin(&p, &spec));
        layers.push(Block {
            input_layernorm: input_norm?,
            self_attn: Attention {
                q_proj: q_proj?,
                k_proj: k_proj?,
                v_proj: v_proj?,
                o_proj: o_proj?,
                num_heads: cfg.num_heads,
                num_kv_heads: cfg.num_kv_heads,
                head_dim: cfg.head_dim,
            },
            post_attention_layernorm: post_norm?,
            mlp: Mlp { gate_proj: gate_proj?, up_proj: up_proj?, down_proj: down_proj? },
        });
    }
    let lm_head = if cfg.tie_word_embeddings {
        None
    } else {
        Some(Param::from_tensor(transposed(src.require(params::LM_HEAD, &[cfg.vocab_size, d])?, device)))
    };
    Ok(Llama { embed_tokens, layers, norm: norm(params::FINAL_NORM)?, lm_head })
}

/// The decoder's weights back in Hugging Face names and layout (for saving safetensors).
pub fn export_llama<B: Backend>(m: &Llama<B>) -> Vec<(String, HostTensor)> {
    let host2 = |t: Tensor<B, 2>| -> HostTensor {
        let [r, c] = t.dims();
        HostTensor { data: t.into_data().convert::<f32>().to_vec::<f32>().unwrap(), shape: vec![r, c] }
    };
    let host1 = |t: Tensor<B, 1>| -> HostTensor {
        let n = t.dims()[0];
        HostTensor { data: t.into_data().convert::<f32>().to_vec::<f32>().unwrap(), shape: vec![n] }
    };
    let lin = |out: &mut Vec<(String, HostTensor)>, name: String, l: &Linear<B>| {
        assert!(l.lora.is_none(), "{name}: merge the LoRA adapters (ragtime::sft::lora::merge) before exporting");
        out.push((format!("{name}.weight"), host2(l.weight.val().transpose())));
        if let Some(b) = &l.bias {
            out.push((format!("{name}.bias"), host1(b.val())));
        }
    };
    let mut out = vec![(params::EMBED.to_string(), host2(m.embed_tokens.val()))];
    for (l, b) in m.layers.iter().enumerate() {
        let p = params::block_prefix(l);
        let [(n0, _), (n1, _)] = params::BLOCK_NORMS;
        out.push((format!("{p}.{n0}.weight"), host1(b.input_layernorm.weight.val())));
        out.push((format!("{p}.{n1}.weight"), host1(b.post_attention_layernorm.weight.val())));
        for (spec, l) in params::BLOCK_LINEARS.iter().zip(b.linears()) {
            lin(&mut out, format!("{p}.{}", spec.path), l);
        }
    }
    out.push((params::FINAL_NORM.into(), host1(m.norm.weight.val())));
    if let Some(w) = &m.lm_head {
        out.push((params::LM_HEAD.into(), host2(w.val().transpose())));
    }
    out
}

/// A burn decoder's engine: the reference engine, or the batched one.
fn burn_engine<B: Backend>(
    reference: bool,
    model: Llama<B>,
    rope: Rope<B>,
    cfg: ModelConfig,
    device: B::Device,
) -> Box<dyn Engine>
where
    Llama<B>: Send + Sync,
    Rope<B>: Send + Sync,
    Tensor<B, 4>: Send,
    llama::KvCache<B>: Send,
{
    if reference {
        Box::new(engine::reference::ReferenceEngine { model, rope, cfg, device })
    } else {
        Box::new(engine::batched::BatchedEngine::new(model, rope, cfg, device))
    }
}

/// A loaded language model: decoder + tokenizer.
pub struct Lm {
    engine: Box<dyn Engine>,
    pub tokenizer: Tokenizer,
    pub config: ModelConfig,
    /// Short identifier (file or folder name), recorded in datasets and checkpoints trained on this model.
    pub name: String,
    pub device: DeviceKind,
    /// Bytes of integer weights (4- or 8-bit, see [`quant`]) that CPU decoding multiplies (0: decoding multiplies
    /// f32 weights).
    pub int8_decode_bytes: usize,
    /// Wall time of [`Lm::feed_many`]'s engine passes and of the sessions' scoring of their rows.
    phases: engine::Phases,
}

/// The model layer's error: a model file or folder that cannot be used, naming the file and, for a bad value
/// in its metadata, the file's own key (`qwen2.block_count`, `num_attention_heads`).
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("{}: model not found (run scripts/setup.sh to fetch the default model)", .path.display())]
    NotFound { path: PathBuf },
    /// A metadata value that would divide by zero, allocate without bound or make no model.
    #[error("{file}: {key} = {value}: {detail}")]
    BadValue { file: String, key: String, value: String, detail: String },
    /// An architecture or option ragtime does not implement.
    #[error("{file}: {what} is not supported ({supported})")]
    Unsupported { file: String, what: String, supported: String },
}

impl ModelError {
    /// [`ModelError::Unsupported`]: `what` in `file` is not implemented; `supported` says what is.
    pub fn unsupported(file: impl std::fmt::Display, what: impl Into<String>, supported: impl Into<String>) -> Self {
        ModelError::Unsupported { file: file.to_string(), what: what.into(), supported: supported.into() }
    }
}

/// The model at `path` must be there: [`ModelError::NotFound`] when nothing is, the OS's reason when it refuses
/// the path (permission denied, a path through a file).
pub fn require_model(path: &Path) -> Result<()> {
    if !crate::io::exists(path)? {
        return Err(ModelError::NotFound { path: path.to_path_buf() }.into());
    }
    Ok(())
}

/// Maximum RoPE table length (positions) we precompute.
const MAX_POSITIONS: usize = 32768;

impl Lm {
    /// Loads a `.gguf` file, a Hugging Face folder (config.json + safetensors + tokenizer.json) or a PEFT LoRA
    /// adapter folder on its base model ([`peft`]) onto the device's inference engine. `tokenizer` overrides the
    /// tokenizer (a tokenizer.json).
    pub fn load(path: &Path, device: DeviceKind, tokenizer: Option<&Path>) -> Result<Lm> {
        Self::load_on(path, device, EngineKind::Auto, tokenizer)
    }

    /// [`Lm::load`] onto the engine `engine` picks (see [`engine`]).
    pub fn load_on(path: &Path, device: DeviceKind, engine: EngineKind, tokenizer: Option<&Path>) -> Result<Lm> {
        Self::load_with(path, device, engine, tokenizer, None)
    }

    /// [`Lm::load_on`] with the weights rounded to `quantize` at load, when given ([`quantize`]).
    pub fn load_with(
        path: &Path,
        device: DeviceKind,
        engine: EngineKind,
        tokenizer: Option<&Path>,
        quantize: Option<quantize::Quantize>,
    ) -> Result<Lm> {
        require_model(path)?;
        let (mut src, cfg, mut tok) = Self::open_weights(path, tokenizer)?;
        if let Some(q) = quantize {
            src = Box::new(quantize::Quantized::new(src, &cfg, q));
        }
        let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into());
        if tok.bos_id.is_none() {
            tok.bos_id = cfg.bos_token_id;
        }
        Self::from_source_on(src.as_ref(), cfg, tok, name, device, engine)
    }

    /// The weights, config and tokenizer of a model path ([`Lm::load`]), checked against each other.
    fn open_weights(path: &Path, tokenizer: Option<&Path>) -> Result<(Box<dyn WeightSource>, ModelConfig, Tokenizer)> {
        if peft::is_adapter_dir(path)? {
            let acfg = peft::AdapterConfig::read(path)?;
            // the adapter folder's own tokenizer.json, if it has one, else the base's
            let own = path.join("tokenizer.json");
            let tok_path = match tokenizer {
                Some(t) => Some(t.to_path_buf()),
                None => crate::io::is_file(&own)?.then_some(own),
            };
            let (base, cfg, tok) = Self::open_weights(&acfg.base, tok_path.as_deref())
                .with_context(|| format!("{}: base model {}", path.display(), acfg.base.display()))?;
            let merged = peft::LoraMerged::open(path, &acfg, base, &cfg)?;
            return Ok((Box::new(merged), cfg, tok));
        }
        let (src, cfg, tok): (Box<dyn WeightSource>, ModelConfig, Tokenizer) = if crate::io::is_dir(path)? {
            let st = safetensors::SafetensorsDir::open(path)?;
            let cfg = st.config().clone();
            let tok_path = tokenizer.map(Path::to_path_buf).unwrap_or_else(|| path.join("tokenizer.json"));
            let tok = Tokenizer::from_file(&tok_path)?;
            (Box::new(st), cfg, tok)
        } else {
            let g = gguf::GgufFile::open(path)?;
            let cfg = g.config().clone();
            let tok = match tokenizer {
                Some(p) => Tokenizer::from_file(p)?,
                None => Tokenizer::from_gguf(&g)?,
            };
            (Box::new(g), cfg, tok)
        };
        if tok.vocab_size() > cfg.vocab_size {
            bail!(
                "tokenizer {} has {} tokens but the model {} has an embedding for {}: wrong tokenizer for this model?",
                tok.source,
                tok.vocab_size(),
                path.display(),
                cfg.vocab_size
            );
        }
        Ok((src, cfg, tok))
    }

    /// Builds from any weight source onto the device's inference engine (used by tests with random weights).
    pub fn from_source(
        src: &dyn WeightSource,
        cfg: ModelConfig,
        tokenizer: Tokenizer,
        name: String,
        device: DeviceKind,
    ) -> Result<Lm> {
        Self::from_source_on(src, cfg, tokenizer, name, device, EngineKind::Auto)
    }

    /// Builds from any weight source onto the engine `kind` names on `device` ([`EngineKind::resolve`]).
    pub fn from_source_on(
        src: &dyn WeightSource,
        cfg: ModelConfig,
        tokenizer: Tokenizer,
        name: String,
        device: DeviceKind,
        kind: EngineKind,
    ) -> Result<Lm> {
        let max_pos = cfg.max_position_embeddings.min(MAX_POSITIONS);
        let engine: Box<dyn Engine> = match (device, kind.resolve(device)) {
            // the CPU engine: ragtime's kernels, decoding on the file's 4- or 8-bit integer blocks
            (_, engine::Resolved::Cpu) => Box::new(engine::cpu::CpuEngine::load(src, &cfg, max_pos)?),
            (DeviceKind::Cpu, kind) => {
                let dev = burn::backend::flex::FlexDevice;
                let model = build_llama::<burn::backend::Flex>(src, &cfg, &dev)?;
                let rope = Rope::new(&cfg, max_pos, &dev);
                burn_engine(kind == engine::Resolved::Reference, model, rope, cfg.clone(), dev)
            }
            (DeviceKind::Cuda(n), kind) => {
                crate::device::check_cuda(n)?;
                #[cfg(feature = "cuda")]
                {
                    let dev = burn::backend::cuda::CudaDevice::new(n);
                    let model = build_llama::<burn::backend::Cuda>(src, &cfg, &dev)?;
                    let rope = crate::device::guard("CUDA initialisation failed", || Rope::new(&cfg, max_pos, &dev))?;
                    burn_engine(kind == engine::Resolved::Reference, model, rope, cfg.clone(), dev)
                }
                #[cfg(not(feature = "cuda"))]
                unreachable!()
            }
        };
        let int8_decode_bytes = engine.int_decode_bytes();
        let phases = engine::Phases::new(&["forward", "scoring"]);
        Ok(Lm { engine, tokenizer, config: cfg, name, device, int8_decode_bytes, phases })
    }

    /// Holds and multiplies f32 weights, de-quantized from a quantized GGUF's integer blocks (`--f32-decode`;
    /// about 4x the memory). Numbers agree with the integer path up to the order of f32 additions.
    pub fn f32_decode(&mut self) {
        self.engine.drop_int_weights();
        self.int8_decode_bytes = self.engine.int_decode_bytes();
    }

    /// Decodes with integer dot products on inputs quantized to int8 (`--int8-dot`, the CPU engine; llama.cpp's
    /// arithmetic: faster, numbers no longer those of the f32 weights up to rounding). Fails on an engine or model
    /// with no integer copies to multiply.
    pub fn int8_dot(&mut self) -> Result<()> {
        anyhow::ensure!(
            self.engine.int8_dot(),
            "--int8-dot: the {} engine has no integer weight copies to multiply (the CPU engine on a quantized GGUF \
             has them; not with --f32-decode)",
            self.engine.describe()
        );
        Ok(())
    }

    /// Computes in `precision` (`--dtype`): the batched engine casts its weights; the others accept only f32.
    /// Call before the first session.
    pub fn set_precision(&mut self, precision: Precision) -> Result<()> {
        self.engine.set_precision(precision)
    }

    /// The engine running this model, in words (`cpu (integer decode)`, `reference (Flex)`, ...).
    pub fn engine(&self) -> String {
        self.engine.describe()
    }

    /// [`Lm::feed_many`]'s wall time so far: its engine passes (`forward`), each phase of them the engine tells
    /// apart (`forward/launch`, ...), and the sessions' scoring of their rows (`scoring`).
    pub fn time_spent(&self) -> Vec<(String, std::time::Duration)> {
        let t = self.phases.totals();
        let mut out = vec![(t[0].0.to_string(), t[0].1)];
        out.extend(self.engine.phases().into_iter().map(|(n, d)| (format!("{}/{n}", t[0].0), d)));
        out.push((t[1].0.to_string(), t[1].1));
        out
    }

    /// A fresh decoding session (empty KV cache).
    pub fn session(&self) -> Session<'_> {
        Session {
            lm: self,
            cache: self.engine.new_cache(512),
            ids: Vec::new(),
            last: None,
            stream: tokenizer::TextStream::default(),
            forward_tokens: 0,
        }
    }
}

impl Lm {
    /// Feeds several sessions of this model in one forward pass: `sessions[i]` gets `ids[i]` and returns the
    /// steps of `ids[i][steps_from[i]..]`, exactly what [`Session::feed`] on it alone returns (bit for bit: on
    /// the CPU the sessions share only the integer weight products of their decoding rows, computed row by row
    /// as a single session's are). This is how several questions are answered at once (`ragtime eval --batch`).
    pub fn feed_many(
        &self,
        sessions: &mut [&mut Session<'_>],
        ids: &[&[u32]],
        steps_from: &[usize],
    ) -> Result<Vec<Vec<TokenStep>>> {
        assert!(
            sessions.len() == ids.len() && ids.len() == steps_from.len(),
            "feed_many: one ids slice and one steps_from per session"
        );
        let mut wants = Vec::with_capacity(sessions.len());
        for ((s, ids), &from) in sessions.iter().zip(ids).zip(steps_from) {
            anyhow::ensure!(std::ptr::eq(s.lm, self), "feed_many: a session of another model");
            wants.push(if ids.is_empty() { None } else { Some(s.want(ids, from)?) });
        }
        let mut seqs: Vec<SeqIn<'_>> = sessions
            .iter_mut()
            .zip(ids)
            .zip(&wants)
            .filter_map(|((s, ids), w)| w.map(|want| SeqIn { cache: s.cache.as_mut(), ids, want }))
            .collect();
        let mut since = std::time::Instant::now();
        let outs = if seqs.is_empty() {
            vec![]
        } else {
            crate::device::guard("model forward failed", || self.engine.forward(&mut seqs))??
        };
        drop(seqs);
        self.phases.lap(0, &mut since);
        // each session scores its rows (a host row: entropy over the whole vocabulary per token; a row the engine
        // scored: its numbers) on its own thread, as many lanes of a pass would otherwise wait on one core; each
        // session's arithmetic is unchanged
        let mut outs = outs.into_iter();
        let jobs: Vec<_> = sessions
            .iter_mut()
            .zip(ids)
            .zip(steps_from.iter().zip(&wants))
            .map(|((s, ids), (&from, w))| (s, *ids, from, w.map(|_| outs.next().expect("one output per fed session"))))
            .collect();
        use rayon::prelude::*;
        let steps = jobs
            .into_par_iter()
            .map(|(s, ids, from, out)| match out {
                Some(out) => s.absorb(ids, from, out),
                None => vec![],
            })
            .collect();
        self.phases.lap(1, &mut since);
        Ok(steps)
    }
}

/// The distribution a session chooses its next token from ([`Session::picker`]).
pub struct Picker<'s>(&'s engine::dist::NextDist);

impl Picker<'_> {
    /// Fetches the logits row to the host if `sampler` will read it (not for a greedy pick, which a scored row
    /// answers without its logits), so that [`Picker::pick`] then only computes.
    fn prepare(&self, sampler: &Sampler) {
        if !matches!(sampler, Sampler::Greedy) {
            self.0.logits();
        }
    }

    /// The next token, as [`Session::pick`] chooses it.
    pub fn pick(&self, sampler: &mut Sampler) -> u32 {
        match sampler {
            Sampler::Greedy => self.0.greedy(), // a scored row answers without its logits
            sampler => sampler.pick(self.0.logits()),
        }
    }
}

/// The next token of several sessions, each chosen with its own sampler as [`Session::pick`] chooses it, the
/// picks spread over the rayon pool: a pick reads the whole vocabulary (an `exp` per token to sample, a pass to
/// find the largest), and one lane after another on one thread they kept the pool idle between forward passes.
/// Rows left on the device are fetched first, on this thread.
pub fn pick_many(picks: Vec<(Picker<'_>, &mut Sampler)>) -> Vec<u32> {
    use rayon::prelude::*;
    for (p, sampler) in &picks {
        p.prepare(sampler);
    }
    picks.into_par_iter().map(|(p, sampler)| p.pick(sampler)).collect()
}

/// One sequence being decoded: its KV cache, ids, and the distribution for the next position.
pub struct Session<'a> {
    pub lm: &'a Lm,
    cache: Box<dyn Cache>,
    ids: Vec<u32>,
    /// The distribution for the next position (after the last fed token).
    last: Option<engine::dist::NextDist>,
    stream: tokenizer::TextStream,
    /// Tokens pushed through the model so far (prefill + decode), for efficiency accounting.
    pub forward_tokens: usize,
}

impl<'a> Session<'a> {
    /// Number of positions in the cache.
    pub fn len(&self) -> usize {
        self.cache.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// Logits for the next position (after the last fed token).
    pub fn logits(&self) -> Option<&[f32]> {
        self.last.as_ref().map(|d| d.logits())
    }

    /// The distribution for the next position: its logits, or (from the batched engine) its scores with the
    /// logits left on the device until asked for.
    pub fn next_dist(&self) -> Option<&engine::dist::NextDist> {
        self.last.as_ref()
    }

    /// Feeds tokens without capturing internals (prompt prefill); only the last position's logits are kept.
    pub fn prefill(&mut self, ids: &[u32]) -> Result<()> {
        self.feed(ids, ids.len()).map(|_| ())
    }

    /// Feeds `ids` and returns a [`TokenStep`] for each of `ids[steps_from..]`: its entropy and probability
    /// under the distribution it was drawn from (the previous position's logits), and the attention row and
    /// hidden states computed as it passed through the model.
    pub fn feed(&mut self, ids: &[u32], steps_from: usize) -> Result<Vec<TokenStep>> {
        let lm = self.lm;
        Ok(lm.feed_many(&mut [self], &[ids], &[steps_from])?.pop().expect("one result per session"))
    }

    /// What to ask the engine for when feeding `ids` (checked against the vocabulary).
    fn want(&self, ids: &[u32], steps_from: usize) -> Result<Want> {
        if let Some(&bad) = ids.iter().find(|&&i| i as usize >= self.lm.config.vocab_size) {
            bail!("token id {bad} is outside the model's vocabulary of {}", self.lm.config.vocab_size);
        }
        let t = ids.len();
        let logits_from = if steps_from < t { steps_from.saturating_sub(1) } else { t - 1 };
        Ok(Want { logits_from, capture_from: (steps_from < t).then_some(steps_from) })
    }

    /// Takes in the engine's output for `ids` (already appended to the cache): ids, text stream, next-token
    /// logits, and the steps of `ids[steps_from..]`.
    fn absorb(&mut self, ids: &[u32], steps_from: usize, out: ChunkOut) -> Vec<TokenStep> {
        let t = ids.len();
        let start = self.ids.len();
        let logits_from = if steps_from < t { steps_from.saturating_sub(1) } else { t - 1 };
        self.forward_tokens += t;
        let mut steps = Vec::with_capacity(t.saturating_sub(steps_from));
        for (i, &id) in ids.iter().enumerate() {
            let text = self.stream.push(self.lm.tokenizer.token_bytes(id));
            if i < steps_from {
                continue;
            }
            // distribution this token was drawn from: logits at the previous position
            let prev = if i == 0 { self.last.as_ref() } else { Some(&out.logits[i - 1 - logits_from]) };
            let (entropy, prob) = prev.map_or((f32::NAN, f32::NAN), |d| d.entropy_and_prob(id));
            let r = i - steps_from;
            steps.push(TokenStep {
                pos: start + i,
                id,
                text,
                entropy,
                prob,
                attn: out.attn[r].clone(),
                hidden_final: out.hidden_final[r].clone(),
                hidden_mean: out.hidden_mean[r].clone(),
            });
        }
        self.ids.extend_from_slice(ids);
        self.last = out.logits.into_iter().last();
        steps
    }

    /// Chooses the next token from the current distribution (without feeding it).
    pub fn pick(&self, sampler: &mut Sampler) -> Result<u32> {
        Ok(self.picker()?.pick(sampler))
    }

    /// What [`Session::pick`] reads, to choose the next token elsewhere (on another thread): the distribution for
    /// the next position, its logits on the host where a sampler needs them.
    pub fn picker(&self) -> Result<Picker<'_>> {
        let next = self.last.as_ref().context("nothing fed yet: prefill a prompt first")?;
        Ok(Picker(next))
    }

    /// Chooses the next token from the current distribution, feeds it, and returns its step.
    pub fn step(&mut self, sampler: &mut Sampler) -> Result<TokenStep> {
        let id = self.pick(sampler)?;
        Ok(self.feed(&[id], 0)?.pop().unwrap())
    }

    /// Generates up to `max_new` tokens, stopping after a stop token (included in the result).
    pub fn generate(&mut self, max_new: usize, sampler: &mut Sampler) -> Result<Vec<TokenStep>> {
        let mut out = Vec::new();
        for _ in 0..max_new {
            let s = self.step(sampler)?;
            let stop = self.lm.tokenizer.is_stop(s.id);
            out.push(s);
            if stop {
                break;
            }
        }
        Ok(out)
    }

    /// Makes this session hold the first `len` positions of `src` (a session of the same model), their keys and
    /// values copied from its cache, not recomputed ([`Engine::copy_prefix`]): afterwards it is as `src` would be
    /// after `truncate(len)`. Its count of forward tokens does not change.
    pub fn copy_prefix_from(&mut self, src: &Session<'_>, len: usize) -> Result<()> {
        anyhow::ensure!(std::ptr::eq(self.lm, src.lm), "copy_prefix_from: a session of another model");
        self.lm.engine.copy_prefix(src.cache.as_ref(), self.cache.as_mut(), len)?;
        self.ids = src.ids[..len].to_vec();
        self.last = None;
        self.stream.clear();
        Ok(())
    }

    /// Rewinds to the first `len` positions, keeping their cached keys/values. The next-token distribution is
    /// unknown until something is fed again.
    pub fn truncate(&mut self, len: usize) {
        if len < self.len() {
            self.cache.truncate(len);
            self.ids.truncate(len);
            self.last = None;
            self.stream.clear();
        }
    }
}
