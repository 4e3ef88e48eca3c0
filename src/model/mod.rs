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

pub mod config;
pub mod flex;
pub mod gguf;
pub mod llama;
pub mod params;
pub mod quant;
pub mod safetensors;
pub mod sampling;
pub mod tokenizer;
pub mod weights;

use std::path::Path;

use anyhow::{bail, Context, Result};
use burn::module::Param;
use burn::prelude::Backend;
use burn::tensor::{Int, Tensor, TensorData};

use crate::device::DeviceKind;
use crate::step::TokenStep;
pub use config::{Arch, ModelConfig};
use llama::{Attention, Block, Capture, KvCache, Linear, Llama, Mlp, RmsNorm, Rope, Segment};
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
        Ok(Linear { weight: Param::from_tensor(transposed(w, device)), bias: b, lora: None, quant: None })
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
    Ok(Llama { embed_tokens, layers, norm: norm(params::FINAL_NORM)?, lm_head, lm_head_quant: None })
}

/// Gives each linear layer (and the output projection) whose weight the source stores in a quantized block
/// format its integer copy ([`quant::QMatrix`]) for CPU decoding. Returns the bytes attached.
pub fn attach_quantized<B: Backend>(m: &mut Llama<B>, src: &dyn WeightSource, cfg: &ModelConfig) -> Result<usize> {
    let mut bytes = 0;
    let mut get = |name: &str, dims: [usize; 2]| -> Result<Option<std::sync::Arc<quant::QMatrix>>> {
        let Some(q) = src.quantized(name)? else { return Ok(None) };
        if [q.rows, q.cols] != dims {
            bail!(
                "{}: tensor '{name}' is {}x{} as blocks but {}x{} de-quantized",
                src.describe(),
                q.rows,
                q.cols,
                dims[0],
                dims[1]
            );
        }
        bytes += q.bytes();
        Ok(Some(std::sync::Arc::new(q)))
    };
    let out_in = |l: &Linear<B>| -> [usize; 2] {
        let [i, o] = l.weight.dims();
        [o, i]
    };
    for (l, b) in m.layers.iter_mut().enumerate() {
        let p = params::block_prefix(l);
        for (spec, lin) in params::BLOCK_LINEARS.iter().zip(b.linears_mut()) {
            lin.quant = get(&format!("{p}.{}.weight", spec.path), out_in(lin))?;
        }
    }
    let name = if cfg.tie_word_embeddings { params::EMBED } else { params::LM_HEAD };
    m.lm_head_quant = get(name, [cfg.vocab_size, cfg.hidden_size])?;
    Ok(bytes)
}

/// Removes the integer copies: every product then uses the f32 weights.
pub fn detach_quantized<B: Backend>(m: &mut Llama<B>) {
    for b in &mut m.layers {
        for lin in b.linears_mut() {
            lin.quant = None;
        }
    }
    m.lm_head_quant = None;
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

/// What one forward call should hand back, for a chunk of `t` tokens.
#[derive(Debug, Clone, Copy)]
struct Want {
    /// Logits for chunk rows `>= logits_from`.
    logits_from: usize,
    /// Attention rows and hidden states for chunk rows `>= capture_from` (`None`: none).
    capture_from: Option<usize>,
}

#[derive(Debug, Default)]
struct ChunkOut {
    logits: Vec<Vec<f32>>,
    attn: Vec<Vec<Vec<f32>>>,
    hidden_final: Vec<Vec<f32>>,
    hidden_mean: Vec<Vec<f32>>,
}

/// A sequence's KV cache as its engine made it, type-erased so that [`Session`] need not name the backend.
trait Cache: std::any::Any {
    fn truncate(&mut self, len: usize);
    fn len(&self) -> usize;
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any;
}

impl<B: Backend> Cache for KvCache<B> {
    fn truncate(&mut self, len: usize) {
        KvCache::truncate(self, len);
    }

    fn len(&self) -> usize {
        self.len
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

/// One sequence of an engine forward: its cache (made by the same engine), the tokens to append, what to return.
struct SeqIn<'a> {
    cache: &'a mut dyn Cache,
    ids: &'a [u32],
    want: Want,
}

trait Engine: Send + Sync {
    fn new_cache(&self, capacity: usize) -> Box<dyn Cache>;
    /// Feeds each sequence its tokens in one forward pass and returns what each asked for; every sequence's
    /// results equal those of a pass of its own.
    fn forward(&self, seqs: &mut [SeqIn<'_>]) -> Result<Vec<ChunkOut>>;
    /// Drops the integer decode weights (see [`Lm::f32_decode`]).
    fn detach_quantized(&mut self);
}

/// The burn decoder on one backend.
pub struct BurnEngine<B: Backend> {
    pub model: Llama<B>,
    pub rope: Rope<B>,
    pub cfg: ModelConfig,
    pub device: B::Device,
}

fn rows<B: Backend>(t: Tensor<B, 3>) -> Vec<Vec<f32>> {
    let [_, n, d] = t.dims();
    let v = t.into_data().convert::<f32>().to_vec::<f32>().unwrap();
    (0..n).map(|i| v[i * d..(i + 1) * d].to_vec()).collect()
}

impl<B: Backend> Engine for BurnEngine<B>
where
    Llama<B>: Send + Sync,
    Rope<B>: Send + Sync,
{
    fn new_cache(&self, capacity: usize) -> Box<dyn Cache> {
        Box::new(KvCache::<B>::new(&self.cfg, 1, capacity, &self.device))
    }

    fn forward(&self, seqs: &mut [SeqIn<'_>]) -> Result<Vec<ChunkOut>> {
        let d = self.cfg.hidden_size;
        let meta: Vec<(usize, usize, Want)> = seqs.iter().map(|s| (s.cache.len(), s.ids.len(), s.want)).collect();
        let mut segs = Vec::with_capacity(seqs.len());
        for s in seqs.iter_mut() {
            let (start, t) = (s.cache.len(), s.ids.len());
            if start + t > self.rope.max_pos() {
                bail!("sequence of {} tokens exceeds the model's {} positions", start + t, self.rope.max_pos());
            }
            let data: Vec<i32> = s.ids.iter().map(|&i| i as i32).collect();
            let ids = Tensor::<B, 2, Int>::from_data(TensorData::new(data, [1, t]), &self.device);
            let capture = Capture { attn_from: s.want.capture_from, layer_sum: s.want.capture_from.is_some() };
            let cache = s.cache.as_any_mut().downcast_mut::<KvCache<B>>().expect("a cache made by this engine");
            segs.push(Segment { ids, start, cache: Some(cache), capture });
        }
        let outs = self.model.forward_many(segs, &self.rope);
        // logits of the asked rows, all sequences together (the decoding ones share the output projection)
        let asked: Vec<Tensor<B, 3>> = outs
            .iter()
            .zip(&meta)
            .filter(|(_, (_, t, w))| w.logits_from < *t)
            .map(|(o, (_, t, w))| o.hidden.clone().slice([0..1, w.logits_from..*t, 0..d]))
            .collect();
        let mut logits = self.model.logits_many(asked).into_iter();
        let mut res = Vec::with_capacity(outs.len());
        for (out, (start, t, want)) in outs.into_iter().zip(meta) {
            let mut r = ChunkOut::default();
            if want.logits_from < t {
                r.logits = rows(logits.next().expect("one logits tensor per asking sequence"));
            }
            if let Some(from) = want.capture_from.filter(|&f| f < t) {
                r.hidden_final = rows(out.hidden.slice([0..1, from..t, 0..d]));
                let n = self.cfg.num_layers as f64;
                r.hidden_mean = rows(out.layer_sum.unwrap().slice([0..1, from..t, 0..d]).div_scalar(n));
                let a = out.attn.unwrap(); // [1, h, rows, keys]
                let [_, nh, nr, nk] = a.dims();
                let v = a.into_data().convert::<f32>().to_vec::<f32>().unwrap();
                for row in 0..nr {
                    let pos = start + from + row;
                    r.attn.push(
                        (0..nh).map(|hh| v[(hh * nr + row) * nk..(hh * nr + row) * nk + pos + 1].to_vec()).collect(),
                    );
                }
            }
            res.push(r);
        }
        Ok(res)
    }

    fn detach_quantized(&mut self) {
        detach_quantized(&mut self.model);
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
    /// Bytes of integer weight copies (4- or 8-bit, see [`quant`]) used for CPU decoding (0: decoding multiplies the f32 weights).
    pub int8_decode_bytes: usize,
}

/// Maximum RoPE table length (positions) we precompute.
const MAX_POSITIONS: usize = 32768;

impl Lm {
    /// Loads a `.gguf` file or a Hugging Face folder (config.json + safetensors + tokenizer.json).
    /// `tokenizer` overrides the tokenizer (a tokenizer.json).
    pub fn load(path: &Path, device: DeviceKind, tokenizer: Option<&Path>) -> Result<Lm> {
        if !path.exists() {
            bail!("{}: model not found (run scripts/setup.sh to fetch the default model)", path.display());
        }
        let (src, cfg, tok): (Box<dyn WeightSource>, ModelConfig, Tokenizer) = if path.is_dir() {
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
        let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into());
        let mut tok = tok;
        if tok.bos_id.is_none() {
            tok.bos_id = cfg.bos_token_id;
        }
        Self::from_source(src.as_ref(), cfg, tok, name, device)
    }

    /// Builds from any weight source (used by [`Lm::load`] and by tests with random weights).
    pub fn from_source(
        src: &dyn WeightSource,
        cfg: ModelConfig,
        tokenizer: Tokenizer,
        name: String,
        device: DeviceKind,
    ) -> Result<Lm> {
        let max_pos = cfg.max_position_embeddings.min(MAX_POSITIONS);
        let mut int8_decode_bytes = 0;
        let engine: Box<dyn Engine> = match device {
            DeviceKind::Cpu => {
                let dev = burn::backend::flex::FlexDevice;
                let mut model = build_llama::<burn::backend::Flex>(src, &cfg, &dev)?;
                // decode on the file's quantized blocks (4- or 8-bit integers in memory) unless asked not to
                if std::env::var_os("RAGTIME_F32_DECODE").is_none() {
                    int8_decode_bytes = attach_quantized(&mut model, src, &cfg)?;
                }
                let rope = Rope::new(&cfg, max_pos, &dev);
                Box::new(BurnEngine { model, rope, cfg: cfg.clone(), device: dev })
            }
            DeviceKind::Cuda(n) => {
                crate::device::check_cuda(n)?;
                #[cfg(feature = "cuda")]
                {
                    let dev = burn::backend::cuda::CudaDevice::new(n);
                    let model = build_llama::<burn::backend::Cuda>(src, &cfg, &dev)?;
                    let rope = crate::device::guard("CUDA initialisation failed", || Rope::new(&cfg, max_pos, &dev))?;
                    Box::new(BurnEngine { model, rope, cfg: cfg.clone(), device: dev })
                }
                #[cfg(not(feature = "cuda"))]
                unreachable!()
            }
        };
        Ok(Lm { engine, tokenizer, config: cfg, name, device, int8_decode_bytes })
    }

    /// Decodes with the f32 weights only, dropping the integer copies of a quantized GGUF (as `RAGTIME_F32_DECODE=1`
    /// does at load time). Numbers agree with the integer path up to the order of f32 additions.
    pub fn f32_decode(&mut self) {
        self.engine.detach_quantized();
        self.int8_decode_bytes = 0;
    }

    /// A fresh decoding session (empty KV cache).
    pub fn session(&self) -> Session<'_> {
        Session {
            lm: self,
            cache: self.engine.new_cache(512),
            ids: Vec::new(),
            last_logits: None,
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
        let outs = if seqs.is_empty() {
            vec![]
        } else {
            crate::device::guard("model forward failed", || self.engine.forward(&mut seqs))??
        };
        drop(seqs);
        let mut outs = outs.into_iter();
        let mut res = Vec::with_capacity(sessions.len());
        for ((s, ids), (&from, w)) in sessions.iter_mut().zip(ids).zip(steps_from.iter().zip(&wants)) {
            res.push(match w {
                Some(_) => s.absorb(ids, from, outs.next().expect("one output per fed session")),
                None => vec![],
            });
        }
        Ok(res)
    }
}

/// One sequence being decoded: its KV cache, ids, and the distribution for the next position.
pub struct Session<'a> {
    pub lm: &'a Lm,
    cache: Box<dyn Cache>,
    ids: Vec<u32>,
    last_logits: Option<Vec<f32>>,
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
        self.last_logits.as_deref()
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
            let prev: Option<&[f32]> =
                if i == 0 { self.last_logits.as_deref() } else { Some(&out.logits[i - 1 - logits_from]) };
            let (entropy, prob) = match prev {
                Some(l) => sampling::entropy_and_prob(l, id),
                None => (f32::NAN, f32::NAN),
            };
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
        self.last_logits = out.logits.into_iter().last();
        steps
    }

    /// Chooses the next token from the current distribution (without feeding it).
    pub fn pick(&self, sampler: &mut Sampler) -> Result<u32> {
        let logits = self.last_logits.as_deref().context("nothing fed yet: prefill a prompt first")?;
        Ok(sampler.pick(logits))
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

    /// Rewinds to the first `len` positions, keeping their cached keys/values. The next-token distribution is
    /// unknown until something is fed again.
    pub fn truncate(&mut self, len: usize) {
        if len < self.len() {
            self.cache.truncate(len);
            self.ids.truncate(len);
            self.last_logits = None;
            self.stream.clear();
        }
    }
}
