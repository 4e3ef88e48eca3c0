//! The decoder: one forward pass for Llama-family and Qwen2 models, used for inference (with a KV cache and
//! captured internals) and for training (autodiff backend, no cache). Written like nanoGPT: shapes in comments.
//!
//! Matches Hugging Face transformers' `LlamaForCausalLM` / `Qwen2ForCausalLM` in float32:
//! RMSNorm `x * rsqrt(mean(x^2) + eps) * w`, rotate-half RoPE with `inv_freq = theta^(-2i/d)`, grouped-query
//! attention with softmax in f32, SwiGLU MLP `down(silu(gate(x)) * up(x))`, optional tied `lm_head`.

use burn::module::{Module, Param};
use burn::prelude::Backend;
use burn::tensor::activation::{silu, softmax};
use burn::tensor::{Bool, Int, Tensor, TensorData};

use std::sync::Arc;

use super::config::ModelConfig;
use super::flex;
use super::quant::QMatrix;

/// `y = x W + b` with `W` stored `[in, out]` (the transpose of Hugging Face's `[out, in]`), plus an optional
/// low-rank adapter `scale * (x A) B` during LoRA fine-tuning (`None` for inference: no cost).
#[derive(Module, Debug)]
pub struct Linear<B: Backend> {
    pub weight: Param<Tensor<B, 2>>,
    pub bias: Option<Param<Tensor<B, 1>>>,
    pub lora: Option<LoraAdapter<B>>,
    /// The same weight as 4- or 8-bit integer blocks ([`QMatrix`], `[out, in]`) for CPU decoding, set only on
    /// inference models loaded from a quantized GGUF (`model::attach_quantized`). Not a parameter: training, which
    /// builds its model with `model::build_llama`, never sees it.
    pub quant: Option<Arc<QMatrix>>,
}

/// LoRA (Hu et al., 2021): `delta W = scale * A B`, `scale = alpha / r`. Stored `[in, r]` and `[r, out]`, the
/// transposes of PEFT's `lora_A.weight [r, in]` and `lora_B.weight [out, r]`. `B` starts at zero, so a fresh
/// adapter leaves the model unchanged.
#[derive(Module, Debug)]
pub struct LoraAdapter<B: Backend> {
    /// `[in, r]`
    pub a: Param<Tensor<B, 2>>,
    /// `[r, out]`
    pub b: Param<Tensor<B, 2>>,
    /// alpha / r
    pub scale: f64,
}

/// Rows (tokens) up to which a product with a [`QMatrix`] copy uses it instead of the f32 matmul: decoding
/// feeds one token at a time, and a rewind feeds a few.
const QUANT_MAX_ROWS: usize = 4;

impl<B: Backend> Linear<B> {
    pub fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        // x: [b, t, in] -> [b, t, out]
        let [b, t, _] = x.dims();
        if let (Some(q), None) = (&self.quant, &self.lora) {
            if b * t <= QUANT_MAX_ROWS {
                let device = x.device();
                let xs = x.into_data().convert::<f32>().to_vec::<f32>().unwrap();
                let mut y = vec![0f32; b * t * q.rows];
                q.matvec(&xs, &mut y);
                let y = Tensor::<B, 3>::from_data(TensorData::new(y, [b, t, q.rows]), &device);
                return match &self.bias {
                    Some(bias) => y + bias.val().unsqueeze::<3>(),
                    None => y,
                };
            }
        }
        if self.lora.is_none() {
            if let (Some(xf), Some(wf)) = (flex::as_flex(&x), flex::as_flex(&self.weight.val())) {
                // CPU inference on flex: column-split gemm on the raw buffers (see `flex::matmul`).
                let [k, n] = self.weight.dims();
                let bias = self.bias.as_ref().and_then(|b| flex::as_flex(&b.val()));
                let bias = bias.as_ref().map(flex::contiguous);
                let y = flex::matmul(&flex::contiguous(&xf), b * t, k, &wf, n, bias.as_deref());
                return Tensor::from_data(TensorData::new(y, [b, t, n]), &x.device());
            }
        }
        let y = match &self.lora {
            None => x.matmul(self.weight.val().unsqueeze::<3>()),
            Some(l) => {
                let low = x.clone().matmul(l.a.val().unsqueeze::<3>()); // [b, t, r]
                let delta = low.matmul(l.b.val().unsqueeze::<3>()).mul_scalar(l.scale); // [b, t, out]
                x.matmul(self.weight.val().unsqueeze::<3>()) + delta
            }
        };
        match &self.bias {
            Some(b) => y + b.val().unsqueeze::<3>(),
            None => y,
        }
    }
}

#[derive(Module, Debug)]
pub struct RmsNorm<B: Backend> {
    pub weight: Param<Tensor<B, 1>>,
    pub eps: f64,
}

impl<B: Backend> RmsNorm<B> {
    pub fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        // x: [b, t, d]
        if let (Some(xf), Some(wf)) = (flex::as_flex(&x), flex::as_flex(&self.weight.val())) {
            let dims = x.dims();
            let y = flex::rms_norm(&flex::contiguous(&xf), dims[2], &flex::contiguous(&wf), self.eps);
            return Tensor::from_data(TensorData::new(y, dims), &x.device());
        }
        let var = x.clone().powi_scalar(2).mean_dim(2); // [b, t, 1]
        x * var.add_scalar(self.eps).sqrt().recip() * self.weight.val().unsqueeze::<3>()
    }
}

#[derive(Module, Debug)]
pub struct Attention<B: Backend> {
    pub q_proj: Linear<B>,
    pub k_proj: Linear<B>,
    pub v_proj: Linear<B>,
    pub o_proj: Linear<B>,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
}

#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    pub gate_proj: Linear<B>,
    pub up_proj: Linear<B>,
    pub down_proj: Linear<B>,
}

impl<B: Backend> Mlp<B> {
    pub fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        if flex::is_flex::<B>() && self.gate_proj.lora.is_none() && self.up_proj.lora.is_none() {
            let g = self.gate_proj.forward(x.clone()); // [b, t, ff]
            let u = self.up_proj.forward(x);
            let dims = g.dims();
            let (Some(gf), Some(uf)) = (flex::as_flex(&g), flex::as_flex(&u)) else { unreachable!("flex tensors") };
            let mut h = flex::contiguous(&gf).into_owned();
            flex::silu_mul(&mut h, &flex::contiguous(&uf));
            return self.down_proj.forward(Tensor::from_data(TensorData::new(h, dims), &g.device()));
        }
        self.down_proj.forward(silu(self.gate_proj.forward(x.clone())) * self.up_proj.forward(x))
    }
}

#[derive(Module, Debug)]
pub struct Block<B: Backend> {
    pub input_layernorm: RmsNorm<B>,
    pub self_attn: Attention<B>,
    pub post_attention_layernorm: RmsNorm<B>,
    pub mlp: Mlp<B>,
}

#[derive(Module, Debug)]
pub struct Llama<B: Backend> {
    /// `[vocab, d]`
    pub embed_tokens: Param<Tensor<B, 2>>,
    pub layers: Vec<Block<B>>,
    pub norm: RmsNorm<B>,
    /// `[d, vocab]`; `None` when tied to `embed_tokens`.
    pub lm_head: Option<Param<Tensor<B, 2>>>,
    /// The output projection (`lm_head`, or the tied embedding) as integer blocks `[vocab, d]` for CPU decoding.
    pub lm_head_quant: Option<Arc<QMatrix>>,
}

/// Precomputed RoPE tables, `[max_pos, head_dim]` each (frequencies repeated over both halves, as transformers).
#[derive(Debug, Clone)]
pub struct Rope<B: Backend> {
    pub cos: Tensor<B, 2>,
    pub sin: Tensor<B, 2>,
}

impl<B: Backend> Rope<B> {
    pub fn new(cfg: &ModelConfig, max_pos: usize, device: &B::Device) -> Self {
        let hd = cfg.head_dim;
        let half = hd / 2;
        let mut cos = vec![0f32; max_pos * hd];
        let mut sin = vec![0f32; max_pos * hd];
        for i in 0..half {
            // transformers: inv_freq = 1 / theta ** (arange(0, d, 2) / d), computed in float32
            let inv_freq = 1.0f32 / (cfg.rope_theta as f32).powf((2 * i) as f32 / hd as f32);
            for p in 0..max_pos {
                let angle = p as f32 * inv_freq;
                let (s, c) = angle.sin_cos();
                cos[p * hd + i] = c;
                cos[p * hd + i + half] = c;
                sin[p * hd + i] = s;
                sin[p * hd + i + half] = s;
            }
        }
        Rope {
            cos: Tensor::from_data(TensorData::new(cos, [max_pos, hd]), device),
            sin: Tensor::from_data(TensorData::new(sin, [max_pos, hd]), device),
        }
    }

    pub fn max_pos(&self) -> usize {
        self.cos.dims()[0]
    }

    /// x: [b, h, t, hd] at absolute positions start..start+t.
    fn apply(&self, x: Tensor<B, 4>, start: usize) -> Tensor<B, 4> {
        let [_, _, t, hd] = x.dims();
        let cos = self.cos.clone().slice([start..start + t, 0..hd]).unsqueeze::<4>(); // [1, 1, t, hd]
        let sin = self.sin.clone().slice([start..start + t, 0..hd]).unsqueeze::<4>();
        let x1 = x.clone().narrow(3, 0, hd / 2);
        let x2 = x.clone().narrow(3, hd / 2, hd / 2);
        let rotated = Tensor::cat(vec![x2.neg(), x1], 3);
        x * cos + rotated * sin
    }
}

/// Keys and values of every layer for positions `0..len`, preallocated to `capacity` positions and written in
/// place; truncating only moves `len` (dynamic RAG rewinds without recomputing the prefix).
#[derive(Debug)]
pub struct KvCache<B: Backend> {
    k: Vec<Option<Tensor<B, 4>>>, // [b, kv, capacity, hd]
    v: Vec<Option<Tensor<B, 4>>>,
    pub len: usize,
    capacity: usize,
}

impl<B: Backend> KvCache<B> {
    pub fn new(cfg: &ModelConfig, batch: usize, capacity: usize, device: &B::Device) -> Self {
        let shape = [batch, cfg.num_kv_heads, capacity, cfg.head_dim];
        KvCache {
            k: (0..cfg.num_layers).map(|_| Some(Tensor::zeros(shape, device))).collect(),
            v: (0..cfg.num_layers).map(|_| Some(Tensor::zeros(shape, device))).collect(),
            len: 0,
            capacity,
        }
    }

    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Writes `k_new`/`v_new` ([b, kv, t, hd]) at `start` and returns keys/values for `0..start+t`.
    fn append(&mut self, layer: usize, start: usize, k_new: Tensor<B, 4>, v_new: Tensor<B, 4>) -> (Tensor<B, 4>, Tensor<B, 4>) {
        let [b, kv, t, hd] = k_new.dims();
        let end = start + t;
        if end > self.capacity {
            // grow (rare): double the capacity
            let new_cap = (self.capacity * 2).max(end);
            for slot in [&mut self.k[layer], &mut self.v[layer]] {
                let old = slot.take().unwrap();
                let device = old.device();
                let pad = Tensor::zeros([b, kv, new_cap - self.capacity, hd], &device);
                *slot = Some(Tensor::cat(vec![old, pad], 2));
            }
            if layer + 1 == self.k.len() {
                self.capacity = new_cap;
            }
        }
        let cap_l = self.k[layer].as_ref().unwrap().dims()[2];
        let _ = cap_l;
        let k = self.k[layer].take().unwrap().slice_assign([0..b, 0..kv, start..end, 0..hd], k_new);
        let v = self.v[layer].take().unwrap().slice_assign([0..b, 0..kv, start..end, 0..hd], v_new);
        let k_all = k.clone().slice([0..b, 0..kv, 0..end, 0..hd]);
        let v_all = v.clone().slice([0..b, 0..kv, 0..end, 0..hd]);
        self.k[layer] = Some(k);
        self.v[layer] = Some(v);
        (k_all, v_all)
    }
}

/// What the caller wants captured besides the final hidden state.
#[derive(Debug, Clone, Copy, Default)]
pub struct Capture {
    /// Keep the last layer's attention probabilities for query rows `>= attn_from` (chunk index).
    pub attn_from: Option<usize>,
    /// Sum the decoder-layer outputs (for MIND's mean-over-layers feature).
    pub layer_sum: bool,
}

pub struct ForwardOut<B: Backend> {
    /// After the final norm: [b, t, d].
    pub hidden: Tensor<B, 3>,
    /// Last layer attention probabilities for the captured rows: [b, h, rows, keys].
    pub attn: Option<Tensor<B, 4>>,
    /// Sum over layers of the decoder-layer outputs, the last one taken after the final norm (transformers'
    /// `hidden_states[1:]`): [b, t, d].
    pub layer_sum: Option<Tensor<B, 3>>,
}

impl<B: Backend> Attention<B> {
    /// x: [b, t, d] at positions start..start+t -> ([b, t, d], probs [b, h, t, keys] if asked)
    fn forward(
        &self,
        x: Tensor<B, 3>,
        rope: &Rope<B>,
        start: usize,
        cache: Option<(&mut KvCache<B>, usize)>,
        keep_probs: bool,
    ) -> (Tensor<B, 3>, Option<Tensor<B, 4>>) {
        let [b, t, _] = x.dims();
        let (h, kvh, hd) = (self.num_heads, self.num_kv_heads, self.head_dim);
        if b == 1 && flex::is_flex::<B>() {
            return self.forward_flex(x, rope, start, cache, keep_probs);
        }
        let rep = h / kvh;
        let q = self.q_proj.forward(x.clone()).reshape([b, t, h, hd]).swap_dims(1, 2); // [b, h, t, hd]
        let k = self.k_proj.forward(x.clone()).reshape([b, t, kvh, hd]).swap_dims(1, 2); // [b, kv, t, hd]
        let v = self.v_proj.forward(x).reshape([b, t, kvh, hd]).swap_dims(1, 2); // [b, kv, t, hd]
        let q = rope.apply(q, start);
        let k = rope.apply(k, start);
        let (k, v) = match cache {
            Some((c, layer)) => c.append(layer, start, k, v), // [b, kv, keys, hd]
            None => (k, v),
        };
        let keys = k.dims()[2];
        // Group the query heads that share a key/value head: [b, kv, rep * t, hd]
        let q = q.reshape([b, kvh, rep * t, hd]);
        let scores = q.matmul(k.swap_dims(2, 3)).mul_scalar(1.0 / (hd as f64).sqrt()); // [b, kv, rep*t, keys]
        let mut scores = scores.reshape([b, h, t, keys]);
        if t > 1 {
            // causal: query i (position start+i) sees keys 0..=start+i
            let mask: Vec<bool> = (0..t).flat_map(|i| (0..keys).map(move |j| j > start + i)).collect();
            let mask = Tensor::<B, 2, Bool>::from_data(TensorData::new(mask, [t, keys]), &scores.device());
            scores = scores.mask_fill(mask.unsqueeze::<4>(), f32::NEG_INFINITY);
        }
        let probs = softmax(scores, 3); // [b, h, t, keys]
        let kept = keep_probs.then(|| probs.clone());
        let out = probs.reshape([b, kvh, rep * t, keys]).matmul(v); // [b, kv, rep*t, hd]
        let out = out.reshape([b, h, t, hd]).swap_dims(1, 2).reshape([b, t, h * hd]);
        (self.o_proj.forward(out), kept)
    }

    /// [`Attention::forward`] on the flex backend, batch 1: the same steps on the raw buffers (`flex`), with the
    /// cache appended through burn as above.
    fn forward_flex(
        &self,
        x: Tensor<B, 3>,
        rope: &Rope<B>,
        start: usize,
        cache: Option<(&mut KvCache<B>, usize)>,
        keep_probs: bool,
    ) -> (Tensor<B, 3>, Option<Tensor<B, 4>>) {
        let [_, t, _] = x.dims();
        let (h, kvh, hd) = (self.num_heads, self.num_kv_heads, self.head_dim);
        let device = x.device();
        let raw = |y: Tensor<B, 3>| flex::contiguous(&flex::as_flex(&y).expect("flex tensor")).into_owned();
        let mut q = raw(self.q_proj.forward(x.clone())); // [t, h * hd]
        let mut k = raw(self.k_proj.forward(x.clone())); // [t, kv * hd]
        let v = raw(self.v_proj.forward(x)); // [t, kv * hd]
        let (cos, sin) = (flex::as_flex(&rope.cos).expect("flex tensor"), flex::as_flex(&rope.sin).expect("flex tensor"));
        let (cos, sin) = (flex::contiguous(&cos), flex::contiguous(&sin)); // [max_pos, hd], no copy
        flex::rope(&mut q, t, h, hd, start, &cos, &sin);
        flex::rope(&mut k, t, kvh, hd, start, &cos, &sin);
        let k = Tensor::<B, 4>::from_data(TensorData::new(flex::heads_first(&k, t, kvh, hd), [1, kvh, t, hd]), &device);
        let v = Tensor::<B, 4>::from_data(TensorData::new(flex::heads_first(&v, t, kvh, hd), [1, kvh, t, hd]), &device);
        let (k, v) = match cache {
            Some((c, layer)) => c.append(layer, start, k, v), // [1, kv, keys, hd]
            None => (k, v),
        };
        let keys = k.dims()[2];
        let (kf, vf) = (flex::as_flex(&k).expect("flex tensor"), flex::as_flex(&v).expect("flex tensor"));
        let (out, probs) = flex::causal_attention(&q, t, h, kvh, hd, &kf, &vf, keys); // [t, h*hd], [h, t, keys]
        let out = Tensor::<B, 3>::from_data(TensorData::new(out, [1, t, h * hd]), &device);
        let kept = keep_probs.then(|| Tensor::<B, 4>::from_data(TensorData::new(probs, [1, h, t, keys]), &device));
        (self.o_proj.forward(out), kept)
    }
}

impl<B: Backend> Llama<B> {
    pub fn config_dims(&self) -> (usize, usize) {
        let [v, d] = self.embed_tokens.dims();
        (v, d)
    }

    /// ids: [b, t] at positions start..start+t. With a cache, keys/values are appended to it.
    pub fn forward(
        &self,
        ids: Tensor<B, 2, Int>,
        rope: &Rope<B>,
        start: usize,
        mut cache: Option<&mut KvCache<B>>,
        capture: Capture,
    ) -> ForwardOut<B> {
        let [b, t] = ids.dims();
        let [_, d] = self.embed_tokens.dims();
        let mut x = self.embed_tokens.val().select(0, ids.reshape([b * t])).reshape([b, t, d]); // [b, t, d]
        let mut layer_sum: Option<Tensor<B, 3>> = None;
        let mut attn = None;
        let n = self.layers.len();
        for (l, block) in self.layers.iter().enumerate() {
            let last = l + 1 == n;
            let keep = last && capture.attn_from.is_some_and(|f| f < t);
            let c = cache.as_deref_mut().map(|c| (c, l));
            let (a, probs) = block.self_attn.forward(block.input_layernorm.forward(x.clone()), rope, start, c, keep);
            let hmid = x + a;
            x = hmid.clone() + block.mlp.forward(block.post_attention_layernorm.forward(hmid));
            if let Some(p) = probs {
                let from = capture.attn_from.unwrap();
                let [pb, ph, pt, pk] = p.dims();
                attn = Some(if from == 0 { p } else { p.slice([0..pb, 0..ph, from..pt, 0..pk]) });
            }
            if capture.layer_sum && !last {
                layer_sum = Some(match layer_sum {
                    Some(s) => s + x.clone(),
                    None => x.clone(),
                });
            }
        }
        if let Some(c) = cache {
            c.len = start + t;
        }
        let hidden = self.norm.forward(x); // [b, t, d]
        let layer_sum = if capture.layer_sum {
            Some(match layer_sum {
                Some(s) => s + hidden.clone(),
                None => hidden.clone(),
            })
        } else {
            None
        };
        ForwardOut { hidden, attn, layer_sum }
    }

    /// hidden: [b, t, d] -> logits [b, t, vocab]
    pub fn logits(&self, hidden: Tensor<B, 3>) -> Tensor<B, 3> {
        let [b, t, _] = hidden.dims();
        if let Some(q) = self.lm_head_quant.as_ref().filter(|_| b * t <= QUANT_MAX_ROWS) {
            let device = hidden.device();
            let xs = hidden.into_data().convert::<f32>().to_vec::<f32>().unwrap();
            let mut y = vec![0f32; b * t * q.rows];
            q.matvec(&xs, &mut y);
            return Tensor::from_data(TensorData::new(y, [b, t, q.rows]), &device);
        }
        match &self.lm_head {
            Some(w) => hidden.matmul(w.val().unsqueeze::<3>()), // [d, vocab]
            None => {
                // tied: embed [vocab, d] @ hidden^T [d, b*t], so the big matrix is never transposed (copied)
                let [b, t, d] = hidden.dims();
                let ht = hidden.reshape([b * t, d]).transpose(); // [d, b*t]
                let l = self.embed_tokens.val().matmul(ht); // [vocab, b*t]
                let v = l.dims()[0];
                l.transpose().reshape([b, t, v])
            }
        }
    }
}
