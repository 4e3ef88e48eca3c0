//! The decoder: the one reference forward pass for Llama-family and Qwen2 models, in burn's tensor ops. Training
//! runs it under autodiff (no cache); the reference inference engine ([`super::engine::reference`]) runs it with a
//! KV cache and captured internals, and the other engines are tested against it. Written like nanoGPT: shapes in
//! comments.
//!
//! Matches Hugging Face transformers' `LlamaForCausalLM` / `Qwen2ForCausalLM` in float32:
//! RMSNorm `x * rsqrt(mean(x^2) + eps) * w`, rotate-half RoPE with `inv_freq = theta^(-2i/d)` (scaled as the
//! checkpoint says: [`super::rope`]), grouped-query attention with softmax in f32, SwiGLU MLP
//! `down(silu(gate(x)) * up(x))`, optional tied `lm_head`.

use burn::module::{Module, ModuleMapper, Param};
use burn::prelude::Backend;
use burn::tensor::{Bool, DType, Int, Tensor, TensorData};

use super::attention::{self, Mask};
use super::config::ModelConfig;
pub use super::dtype::to_dtype;
use super::reduce;
use super::swiglu::swiglu;

/// `y = x W + b` with `W` stored `[in, out]` (the transpose of Hugging Face's `[out, in]`), plus an optional
/// low-rank adapter `scale * (x A) B` during LoRA fine-tuning (`None` for inference: no cost).
#[derive(Module, Debug)]
pub struct Linear<B: Backend> {
    pub weight: Param<Tensor<B, 2>>,
    pub bias: Option<Param<Tensor<B, 1>>>,
    pub lora: Option<LoraAdapter<B>>,
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

impl<B: Backend> Linear<B> {
    /// The weight `[in, out]` with the LoRA adapter, if any, folded in: `W + scale * A B`.
    pub fn merged_weight(&self) -> Tensor<B, 2> {
        match &self.lora {
            None => self.weight.val(),
            Some(l) => self.weight.val() + l.a.val().matmul(l.b.val()).mul_scalar(l.scale),
        }
    }

    pub fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        // x: [b, t, in] -> [b, t, out]
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
        // x: [b, t, d]; a bf16/f16 x is normalised in f32 and cast back before the weight, as transformers does
        let dtype = x.dtype();
        let x = x.cast(DType::F32); // no-op on f32
        let var = reduce::mean_of_squares(x.clone()); // [b, t, 1], summed in stages (reduce.rs)
        (x * var.add_scalar(self.eps).sqrt().recip()).cast(dtype) * self.weight.val().unsqueeze::<3>()
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
        self.down_proj.forward(swiglu(self.gate_proj.forward(x.clone()), self.up_proj.forward(x)))
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
}

/// Casts every float parameter of a module that is not in one dtype to it ([`to_dtype`]).
struct CastParams(DType);

impl<B: Backend> ModuleMapper<B> for CastParams {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        Param::from_mapped_value(id, to_dtype(tensor, self.0), mapper)
    }
}

/// `module` computing in `dtype`: every float parameter in another dtype cast to it, the others left as they are.
/// Under autodiff the cast is an operation of the graph, so a model cast to bf16 computes in bf16 while the
/// gradients reach the f32 parameters it was cast from (mixed precision with f32 master weights); an f32 model
/// asked for f32 keeps its own tensors, with no cast in the graph.
pub fn in_dtype<B: Backend, M: Module<B>>(module: M, dtype: DType) -> M {
    module.map(&mut CastParams(dtype))
}

/// Precomputed RoPE tables, `[max_pos, head_dim]` each (frequencies repeated over both halves, as transformers).
#[derive(Debug, Clone)]
pub struct Rope<B: Backend> {
    pub cos: Tensor<B, 2>,
    pub sin: Tensor<B, 2>,
}

pub use super::rope::rope_tables;

impl<B: Backend> Rope<B> {
    pub fn new(cfg: &ModelConfig, max_pos: usize, device: &B::Device) -> Self {
        let hd = cfg.head_dim;
        let (cos, sin) = rope_tables(cfg, max_pos);
        Rope {
            cos: Tensor::from_data(TensorData::new(cos, [max_pos, hd]), device),
            sin: Tensor::from_data(TensorData::new(sin, [max_pos, hd]), device),
        }
    }

    pub fn max_pos(&self) -> usize {
        self.cos.dims()[0]
    }

    /// The tables in `dtype`, for a model computing in it.
    pub fn cast(&self, dtype: DType) -> Self {
        Rope { cos: to_dtype(self.cos.clone(), dtype), sin: to_dtype(self.sin.clone(), dtype) }
    }

    /// x: [b, h, t, hd] at absolute positions start..start+t in every row, or at each packed row's own positions.
    fn apply(&self, x: Tensor<B, 4>, at: &At<B>) -> Tensor<B, 4> {
        let [_, _, t, hd] = x.dims();
        let (cos, sin) = match at {
            At::Start(start) => (
                self.cos.clone().slice([*start..start + t, 0..hd]).unsqueeze::<4>(), // [1, 1, t, hd]
                self.sin.clone().slice([*start..start + t, 0..hd]).unsqueeze::<4>(),
            ),
            At::Packed(p) => (p.cos.clone(), p.sin.clone()), // [b, 1, t, hd]
        };
        let x1 = x.clone().narrow(3, 0, hd / 2);
        let x2 = x.clone().narrow(3, hd / 2, hd / 2);
        let rotated = Tensor::cat(vec![x2.neg(), x1], 3);
        x * cos + rotated * sin
    }
}

/// Where a pass's tokens sit, and so their RoPE positions and which keys each sees.
#[derive(Debug, Clone)]
pub enum At<B: Backend> {
    /// Every row holds one sequence at positions `start..start + t` (after `start` cached ones): causal attention.
    Start(usize),
    /// Packed rows: each row holds several sequences one after another ([`Packed`]).
    Packed(Packed<B>),
}

/// Rows that each hold several sequences one after another (training packs short dialogues into long rows so
/// that few positions are padding): every sequence starts again at position 0 and sees only its own tokens up to
/// itself, so each one's outputs are those it gets alone in a row (up to float rounding: the products run over
/// another shape).
#[derive(Debug, Clone)]
pub struct Packed<B: Backend> {
    /// The RoPE tables at each cell's position in its sequence, `[b, 1, t, hd]` each.
    cos: Tensor<B, 4>,
    sin: Tensor<B, 4>,
    /// `[b, 1, t, t]`: true where query `i` must not see key `j` (`j > i`, or another sequence's).
    hide: Tensor<B, 4, Bool>,
}

impl<B: Backend> Packed<B> {
    /// `seq[r * t + j]` names the sequence cell `j` of row `r` belongs to (any numbering in which a row's
    /// sequences have numbers of their own and each one's cells are consecutive). Positions count from 0 at each
    /// sequence's first cell.
    pub fn new(rope: &Rope<B>, seq: &[u32], b: usize, t: usize) -> Self {
        assert_eq!(seq.len(), b * t, "one sequence number per cell");
        let mut pos = Vec::with_capacity(b * t);
        for row in seq.chunks(t) {
            let mut first = 0; // the first cell of the current sequence
            for (i, &s) in row.iter().enumerate() {
                if i > 0 && s != row[i - 1] {
                    first = i;
                }
                pos.push((i - first) as i32);
            }
        }
        let device = rope.cos.device();
        let hd = rope.cos.dims()[1];
        let idx = Tensor::<B, 1, Int>::from_data(TensorData::new(pos, [b * t]), &device);
        let table = |tab: &Tensor<B, 2>| tab.clone().select(0, idx.clone()).reshape([b, 1, t, hd]);
        // the mask on the device from the b * t numbers: query i hides key j if j > i or j is another sequence's
        let ids: Vec<i32> = seq.iter().map(|&s| s as i32).collect();
        let ids = Tensor::<B, 2, Int>::from_data(TensorData::new(ids, [b, t]), &device);
        let other =
            ids.clone().reshape([b, t, 1]).expand([b, t, t]).not_equal(ids.reshape([b, 1, t]).expand([b, t, t]));
        let later = attention::causal_hide::<B>(0, t, t, &device).unsqueeze::<3>().expand([b, t, t]);
        Packed { cos: table(&rope.cos), sin: table(&rope.sin), hide: other.bool_or(later).reshape([b, 1, t, t]) }
    }
}

/// Keys and values of every layer for positions `0..len`, preallocated to `capacity` positions and written in
/// place; truncating only moves `len` (dynamic RAG rewinds without recomputing the prefix).
#[derive(Debug, Clone)]
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
    fn append(
        &mut self,
        layer: usize,
        start: usize,
        k_new: Tensor<B, 4>,
        v_new: Tensor<B, 4>,
    ) -> (Tensor<B, 4>, Tensor<B, 4>) {
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
    /// x: [b, t, d] placed by `at` -> ([b, t, d], probs [b, h, t, keys] if asked)
    fn forward(
        &self,
        x: Tensor<B, 3>,
        rope: &Rope<B>,
        at: &At<B>,
        cache: Option<(&mut KvCache<B>, usize)>,
        keep_probs: bool,
    ) -> (Tensor<B, 3>, Option<Tensor<B, 4>>) {
        let [b, t, _] = x.dims();
        let (h, kvh, hd) = (self.num_heads, self.num_kv_heads, self.head_dim);
        let rep = h / kvh;
        let q = self.q_proj.forward(x.clone()).reshape([b, t, h, hd]).swap_dims(1, 2); // [b, h, t, hd]
        let k = self.k_proj.forward(x.clone()).reshape([b, t, kvh, hd]).swap_dims(1, 2); // [b, kv, t, hd]
        let v = self.v_proj.forward(x).reshape([b, t, kvh, hd]).swap_dims(1, 2); // [b, kv, t, hd]
        let q = rope.apply(q, at);
        let k = rope.apply(k, at);
        let (mask, (k, v)) = match (at, cache) {
            (&At::Start(start), Some((c, layer))) => (Mask::Causal { start }, c.append(layer, start, k, v)), // [b, kv, keys, hd]
            (&At::Start(start), None) => (Mask::Causal { start }, (k, v)),
            (At::Packed(p), None) => (Mask::Hide(p.hide.clone()), (k, v)),
            (At::Packed(_), Some(_)) => panic!("packed rows are a training layout: they take no cache"),
        };
        // Group the query heads that share a key/value head: [b, kv, rep * t, hd]
        let q = q.reshape([b, kvh, rep * t, hd]);
        let (out, kept) = if keep_probs {
            let probs = attention::probs(q, k, &mask, t); // [b, h, t, keys]
            (attention::apply(probs.clone(), v), Some(probs))
        } else {
            (attention::causal(q, k, v, mask, t), None)
        }; // [b, kv, rep*t, hd]
        let out = out.reshape([b, h, t, hd]).swap_dims(1, 2).reshape([b, t, h * hd]);
        (self.o_proj.forward(out), kept)
    }
}

/// One sequence of a batched forward ([`Llama::forward_many`]): its tokens, their first position, its cache.
pub struct Segment<'a, B: Backend> {
    /// `[b, t]`
    pub ids: Tensor<B, 2, Int>,
    /// Position of the first token.
    pub start: usize,
    /// Keys/values of positions `0..start`; this segment's are appended.
    pub cache: Option<&'a mut KvCache<B>>,
    pub capture: Capture,
}

impl<B: Backend> Block<B> {
    /// One decoder layer. x: [b, t, d] placed by `at` -> ([b, t, d], attention probabilities [b, h, t, keys] if
    /// `keep_probs`). With a cache (only at `At::Start`), this layer's keys/values are appended to it.
    pub fn forward(
        &self,
        x: Tensor<B, 3>,
        rope: &Rope<B>,
        at: &At<B>,
        cache: Option<(&mut KvCache<B>, usize)>,
        keep_probs: bool,
    ) -> (Tensor<B, 3>, Option<Tensor<B, 4>>) {
        let (a, probs) = self.self_attn.forward(self.input_layernorm.forward(x.clone()), rope, at, cache, keep_probs);
        let h = x + a;
        let m = self.mlp.forward(self.post_attention_layernorm.forward(h.clone()));
        (h + m, probs)
    }
}

impl<B: Backend> Llama<B> {
    /// ids: [b, t] -> the token embeddings [b, t, d]
    pub fn embed(&self, ids: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        let ([b, t], [_, d]) = (ids.dims(), self.embed_tokens.dims());
        self.embed_tokens.val().select(0, ids.reshape([b * t])).reshape([b, t, d])
    }

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
        cache: Option<&mut KvCache<B>>,
        capture: Capture,
    ) -> ForwardOut<B> {
        self.forward_many(vec![Segment { ids, start, cache, capture }], rope).pop().expect("one segment")
    }

    /// ids: [b, t], packed rows ([`Packed`]) -> the final hidden states [b, t, d] (after the final norm).
    pub fn forward_packed(&self, ids: Tensor<B, 2, Int>, rope: &Rope<B>, packed: &Packed<B>) -> Tensor<B, 3> {
        let at = At::Packed(packed.clone());
        let mut x = self.embed(ids); // [b, t, d]
        for block in &self.layers {
            x = block.forward(x, rope, &at, None, false).0;
        }
        self.norm.forward(x)
    }

    /// Several sequences in one pass, each at its own positions with its own cache (dynamic RAG answering
    /// several questions at once). Each segment's results are bit for bit those of [`Llama::forward`] on it
    /// alone: each goes through the layers on its own (burn's ops; the CPU engine shares the decoding rows' products).
    pub fn forward_many(&self, mut segs: Vec<Segment<'_, B>>, rope: &Rope<B>) -> Vec<ForwardOut<B>> {
        let ns = segs.len();
        // x_i: [b_i, t_i, d]
        let mut xs: Vec<Tensor<B, 3>> = segs.iter().map(|s| self.embed(s.ids.clone())).collect();
        let lens: Vec<usize> = segs.iter().map(|s| s.ids.dims()[1]).collect();
        let mut layer_sum: Vec<Option<Tensor<B, 3>>> = vec![None; ns];
        let mut attn: Vec<Option<Tensor<B, 4>>> = vec![None; ns];
        let n = self.layers.len();
        for (l, block) in self.layers.iter().enumerate() {
            let last = l + 1 == n;
            let keep: Vec<bool> =
                segs.iter().zip(&lens).map(|(s, &t)| last && s.capture.attn_from.is_some_and(|f| f < t)).collect();
            let (next, probs): (Vec<_>, Vec<_>) = xs
                .into_iter()
                .zip(segs.iter_mut())
                .zip(&keep)
                .map(|((x, s), &k)| {
                    block.forward(x, rope, &At::Start(s.start), s.cache.as_deref_mut().map(|c| (c, l)), k)
                })
                .unzip();
            xs = next;
            for (i, p) in probs.into_iter().enumerate() {
                if let Some(p) = p {
                    let from = segs[i].capture.attn_from.unwrap();
                    let [pb, ph, pt, pk] = p.dims();
                    attn[i] = Some(if from == 0 { p } else { p.slice([0..pb, 0..ph, from..pt, 0..pk]) });
                }
            }
            for (i, s) in segs.iter().enumerate() {
                if s.capture.layer_sum && !last {
                    layer_sum[i] = Some(match layer_sum[i].take() {
                        Some(acc) => acc + xs[i].clone(),
                        None => xs[i].clone(),
                    });
                }
            }
        }
        let mut outs = Vec::with_capacity(ns);
        for (((s, x), sum), attn) in segs.into_iter().zip(xs).zip(layer_sum).zip(attn) {
            if let Some(c) = s.cache {
                c.len = s.start + x.dims()[1];
            }
            let hidden = self.norm.forward(x); // [b, t, d]
            let layer_sum = s.capture.layer_sum.then(|| match sum {
                Some(acc) => acc + hidden.clone(),
                None => hidden.clone(),
            });
            outs.push(ForwardOut { hidden, attn, layer_sum });
        }
        outs
    }

    /// hidden: [b, t, d] -> logits [b, t, vocab]
    pub fn logits(&self, hidden: Tensor<B, 3>) -> Tensor<B, 3> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;

    /// Two rows: row 0 holds sequences 7 (2 cells) and 3 (3 cells) and a pad; row 1 one sequence of 4 and two pads.
    /// Positions start again at each sequence; a query sees its own sequence's keys up to itself.
    #[test]
    fn packed_rows_restart_positions_and_hide_other_sequences() {
        let dev = Default::default();
        let cfg = crate::model::config::ModelConfig::tiny(crate::model::config::Arch::Llama, 16);
        let rope = Rope::<Flex>::new(&cfg, 8, &dev);
        let pad = u32::MAX;
        let p = Packed::new(&rope, &[7, 7, 3, 3, 3, pad, 0, 0, 0, 0, pad, pad], 2, 6);
        let hd = cfg.head_dim;
        let rows = |t: Tensor<Flex, 4>| t.into_data().to_vec::<f32>().unwrap();
        let table = rows(rope.cos.clone().unsqueeze::<4>());
        let want: Vec<f32> =
            [0, 1, 0, 1, 2, 0, 0, 1, 2, 3, 0, 1].iter().flat_map(|&q| table[q * hd..(q + 1) * hd].to_vec()).collect();
        assert_eq!(rows(p.cos.clone()), want);
        let hide: Vec<bool> = p.hide.clone().into_data().to_vec::<bool>().unwrap();
        #[rustfmt::skip]
        let want = [
            // row 0: keys 0..6 per query
            0, 1, 1, 1, 1, 1,
            0, 0, 1, 1, 1, 1,
            1, 1, 0, 1, 1, 1,
            1, 1, 0, 0, 1, 1,
            1, 1, 0, 0, 0, 1,
            1, 1, 1, 1, 1, 0,
            // row 1
            0, 1, 1, 1, 1, 1,
            0, 0, 1, 1, 1, 1,
            0, 0, 0, 1, 1, 1,
            0, 0, 0, 0, 1, 1,
            1, 1, 1, 1, 0, 1,
            1, 1, 1, 1, 0, 0,
        ];
        assert_eq!(hide, want.iter().map(|&x| x == 1).collect::<Vec<_>>());
    }
}
