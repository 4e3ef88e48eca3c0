//! The CPU engine: the decoder's forward pass ([`crate::model::llama`], the same operations in the same order)
//! on plain f32 buffers, with ragtime's kernels ([`super::kernels`]) and, for decoding, the GGUF file's own
//! integer blocks ([`QMatrix`]).
//!
//! - Prefill chunks (more than [`DECODE_ROWS`] rows) multiply the f32 weights, one column-split gemm per sequence.
//! - Decoding rows (up to [`DECODE_ROWS`] per sequence) of *all* sequences of a call go through one
//!   [`QMatrix::matvec`] per weight matrix: each weight block is read and de-quantized once for two rows, and
//!   every row is computed with the same FMAs in the same order as alone, so a sequence gets bit for bit what
//!   a call of its own gives it.
//! - RoPE, the cache append and attention run per sequence, on its cache: `[layers][kv heads, capacity, hd]`,
//!   written in place, doubled when a sequence outgrows it; a rewind only moves its length.
//! - Only what a sequence asked for is computed past the last layer: the final norm and output projection for
//!   the rows whose logits it wants, the attention rows and hidden states for the rows it captures.
//! - The whole pass runs on a thread of the rayon pool (`rayon::scope`), so the products it splits over the
//!   pool find the other workers awake rather than waking them about 200 times per token.

use std::sync::Arc;

use anyhow::{bail, Result};

use super::dist::NextDist;
use super::kernels::{self, Strided};
use super::{check_positions, Cache, ChunkOut, Engine, SeqIn};
use crate::model::config::ModelConfig;
use crate::model::params;
use crate::model::quant::QMatrix;
use crate::model::weights::WeightSource;

/// Rows of one sequence up to which a product uses the integer weights instead of the f32 gemm: decoding feeds
/// one token at a time, and a rewind re-feeds a few.
pub const DECODE_ROWS: usize = 4;

/// `y = x W + b`, with `W` stored `[in, out]` in f32 and, from a quantized GGUF, also as integer blocks
/// (`[out, in]`).
struct Dense {
    /// `[in, out]`
    w: Vec<f32>,
    inp: usize,
    out: usize,
    bias: Option<Vec<f32>>,
    q: Option<Arc<QMatrix>>,
}

struct Block {
    input_norm: Vec<f32>,
    post_norm: Vec<f32>,
    /// q, k, v, o, gate, up, down ([`params::BLOCK_LINEARS`] order)
    lin: [Dense; 7],
}

const Q: usize = 0;
const K: usize = 1;
const V: usize = 2;
const O: usize = 3;
const GATE: usize = 4;
const UP: usize = 5;
const DOWN: usize = 6;

/// The decoder's weights on the host.
pub struct CpuEngine {
    cfg: ModelConfig,
    /// `[vocab, d]`
    embed: Vec<f32>,
    layers: Vec<Block>,
    /// `[d]`
    norm: Vec<f32>,
    /// `[d, vocab]`; `None` when tied to `embed` (read transposed, without a copy).
    lm_head: Option<Vec<f32>>,
    /// The output projection as integer blocks `[vocab, d]`.
    lm_head_q: Option<Arc<QMatrix>>,
    /// `[max_pos, hd]` each (see [`crate::model::llama::rope_tables`]).
    cos: Vec<f32>,
    sin: Vec<f32>,
    max_pos: usize,
    /// Decoding products in integer arithmetic on inputs quantized to int8 ([`QMatrix::matvec_int8`],
    /// `--int8-dot`).
    int8_dot: bool,
}

/// `[out, in]` (Hugging Face) -> `[in, out]`.
fn transpose(data: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0f32; rows * cols];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = data[r * cols + c];
        }
    }
    out
}

impl CpuEngine {
    /// Loads every weight of `cfg` from `src` (shapes checked), with the integer copies of the quantized ones.
    pub fn load(src: &dyn WeightSource, cfg: &ModelConfig, max_pos: usize) -> Result<CpuEngine> {
        let d = cfg.hidden_size;
        let quant = |name: &str, dims: [usize; 2]| -> Result<Option<Arc<QMatrix>>> {
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
            Ok(Some(Arc::new(q)))
        };
        let dense = |prefix: &str, spec: &params::BlockLinear| -> Result<Dense> {
            let name = format!("{prefix}.{}", spec.path);
            let [out, inp] = (spec.shape)(cfg);
            let w = src.require(&format!("{name}.weight"), &[out, inp])?;
            let bias = if spec.has_bias(cfg) { Some(src.require(&format!("{name}.bias"), &[out])?.data) } else { None };
            let q = quant(&format!("{name}.weight"), [out, inp])?;
            Ok(Dense { w: transpose(&w.data, out, inp), inp, out, bias, q })
        };
        let mut layers = Vec::with_capacity(cfg.num_layers);
        for l in 0..cfg.num_layers {
            let p = params::block_prefix(l);
            let [input_norm, post_norm] =
                params::BLOCK_NORMS.map(|(n, _)| src.require(&format!("{p}.{n}.weight"), &[d]));
            let [q, k, v, o, gate, up, down] = params::BLOCK_LINEARS.map(|spec| dense(&p, &spec));
            layers.push(Block {
                input_norm: input_norm?.data,
                post_norm: post_norm?.data,
                lin: [q?, k?, v?, o?, gate?, up?, down?],
            });
        }
        let embed = src.require(params::EMBED, &[cfg.vocab_size, d])?.data;
        let lm_head = if cfg.tie_word_embeddings {
            None
        } else {
            Some(transpose(&src.require(params::LM_HEAD, &[cfg.vocab_size, d])?.data, cfg.vocab_size, d))
        };
        let head_name = if cfg.tie_word_embeddings { params::EMBED } else { params::LM_HEAD };
        let lm_head_q = quant(head_name, [cfg.vocab_size, d])?;
        let (cos, sin) = crate::model::llama::rope_tables(cfg, max_pos);
        Ok(CpuEngine {
            cfg: cfg.clone(),
            embed,
            layers,
            norm: src.require(params::FINAL_NORM, &[d])?.data,
            lm_head,
            lm_head_q,
            cos,
            sin,
            max_pos,
            int8_dot: false,
        })
    }

    /// Each segment's `x [t_i, in]` times `lin`: the decoding segments' rows in one integer product (when `lin`
    /// has integer blocks), each other segment in a gemm of its own.
    fn dense_many(&self, lin: &Dense, xs: &[Vec<f32>]) -> Vec<Vec<f32>> {
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); xs.len()];
        if let Some(q) = &lin.q {
            int_products(q, lin.bias.as_deref(), xs, &mut out, self.int8_dot);
        }
        for (o, x) in out.iter_mut().zip(xs) {
            if o.is_empty() && !x.is_empty() {
                let rows = x.len() / lin.inp;
                *o = kernels::matmul(x, rows, lin.inp, Strided::rows(&lin.w, lin.out), lin.out, lin.bias.as_deref());
            }
        }
        out
    }

    /// Logits `[rows, vocab]` of each segment's final hidden rows `h [rows, d]` (segments with no rows get none).
    fn logits_many(&self, hs: &[Vec<f32>]) -> Vec<Vec<f32>> {
        let (d, vocab) = (self.cfg.hidden_size, self.cfg.vocab_size);
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); hs.len()];
        if let Some(q) = &self.lm_head_q {
            int_products(q, None, hs, &mut out, self.int8_dot);
        }
        for (o, h) in out.iter_mut().zip(hs) {
            if o.is_empty() && !h.is_empty() {
                let w = match &self.lm_head {
                    Some(w) => Strided::rows(w, vocab),
                    None => Strided::transposed(&self.embed, d),
                };
                *o = kernels::matmul(h, h.len() / d, d, w, vocab, None);
            }
        }
        out
    }
}

/// `x W^T (+ bias)` from the integer blocks for every segment of 1 to [`DECODE_ROWS`] rows, all their rows in
/// one [`QMatrix::matvec`] (or [`QMatrix::matvec_int8`] with `int8`; either way each row bit for bit what it is
/// alone), written to `out[i]`; other segments are left empty.
fn int_products(q: &QMatrix, bias: Option<&[f32]>, xs: &[Vec<f32>], out: &mut [Vec<f32>], int8: bool) {
    let rows = |x: &Vec<f32>| x.len() / q.cols;
    let small: Vec<usize> = (0..xs.len()).filter(|&i| (1..=DECODE_ROWS).contains(&rows(&xs[i]))).collect();
    if small.is_empty() {
        return;
    }
    let host: Vec<f32> = small.iter().flat_map(|&i| xs[i].iter().copied()).collect();
    let mut y = vec![0f32; host.len() / q.cols * q.rows];
    if int8 {
        q.matvec_int8(&host, &mut y);
    } else {
        q.matvec(&host, &mut y);
    }
    let mut at = 0;
    for &i in &small {
        let n = rows(&xs[i]) * q.rows;
        let mut yi = y[at..at + n].to_vec();
        at += n;
        if let Some(b) = bias {
            for row in yi.chunks_mut(q.rows) {
                add_into(row, b);
            }
        }
        out[i] = yi;
    }
}

/// Keys and values of every layer for positions `0..len`, `[kv heads, capacity, hd]` per layer.
pub struct CpuCache {
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    len: usize,
    capacity: usize,
    kvh: usize,
    hd: usize,
}

impl CpuCache {
    fn new(cfg: &ModelConfig, capacity: usize) -> CpuCache {
        let n = cfg.num_kv_heads * capacity * cfg.head_dim;
        CpuCache {
            k: (0..cfg.num_layers).map(|_| vec![0f32; n]).collect(),
            v: (0..cfg.num_layers).map(|_| vec![0f32; n]).collect(),
            len: 0,
            capacity,
            kvh: cfg.num_kv_heads,
            hd: cfg.head_dim,
        }
    }

    /// Room for `end` positions: the capacity doubles (at least) and each head's rows move to their new place.
    fn reserve(&mut self, end: usize) {
        if end <= self.capacity {
            return;
        }
        let (old, new) = (self.capacity, (self.capacity * 2).max(end));
        let hd = self.hd;
        for buf in self.k.iter_mut().chain(self.v.iter_mut()) {
            let mut grown = vec![0f32; self.kvh * new * hd];
            for g in 0..self.kvh {
                grown[g * new * hd..(g * new + old) * hd].copy_from_slice(&buf[g * old * hd..(g + 1) * old * hd]);
            }
            *buf = grown;
        }
        self.capacity = new;
    }

    /// Writes layer `l`'s keys and values `[t, kvh * hd]` at positions `start..start + t`.
    fn write(&mut self, l: usize, start: usize, k: &[f32], v: &[f32]) {
        let (kvh, hd, cap) = (self.kvh, self.hd, self.capacity);
        let t = k.len() / (kvh * hd);
        for i in 0..t {
            for g in 0..kvh {
                let (src, dst) = ((i * kvh + g) * hd, (g * cap + start + i) * hd);
                self.k[l][dst..dst + hd].copy_from_slice(&k[src..src + hd]);
                self.v[l][dst..dst + hd].copy_from_slice(&v[src..src + hd]);
            }
        }
    }
}

impl Cache for CpuCache {
    fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    fn len(&self) -> usize {
        self.len
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

/// `a += b`, element by element.
fn add_into(a: &mut [f32], b: &[f32]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x += y;
    }
}

impl CpuEngine {
    /// [`Engine::forward`], run on a thread of the rayon pool, so the matrix products it splits over the pool
    /// hand half their rows to the other workers without waking the pool from outside each time.
    fn forward_in_pool(&self, seqs: &mut [SeqIn<'_>]) -> Result<Vec<ChunkOut>> {
        check_positions(seqs, self.max_pos)?;
        let cfg = &self.cfg;
        let (d, h, kvh, hd, eps) =
            (cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.rms_norm_eps as f64);
        let n_layers = self.layers.len();
        let ns = seqs.len();
        let ids: Vec<&[u32]> = seqs.iter().map(|s| s.ids).collect();
        let wants: Vec<super::Want> = seqs.iter().map(|s| s.want).collect();
        let mut caches: Vec<&mut CpuCache> = seqs
            .iter_mut()
            .map(|s| s.cache.as_any_mut().downcast_mut::<CpuCache>().expect("a cache made by this engine"))
            .collect();
        let starts: Vec<usize> = caches.iter().map(|c| c.len).collect();
        let ts: Vec<usize> = ids.iter().map(|i| i.len()).collect();
        for (c, (&start, &t)) in caches.iter_mut().zip(starts.iter().zip(&ts)) {
            c.reserve(start + t);
        }
        // captured rows of sequence i: chunk rows >= cap_from[i] (t: none)
        let cap_from: Vec<usize> = wants.iter().zip(&ts).map(|(w, &t)| w.capture_from.unwrap_or(t).min(t)).collect();

        // x_i: [t_i, d]
        let mut xs: Vec<Vec<f32>> = ids
            .iter()
            .map(|ids| {
                ids.iter().flat_map(|&id| self.embed[id as usize * d..(id as usize + 1) * d].iter().copied()).collect()
            })
            .collect();
        let mut layer_sum: Vec<Option<Vec<f32>>> = vec![None; ns];
        let mut probs: Vec<Option<Vec<f32>>> = vec![None; ns];
        for (l, block) in self.layers.iter().enumerate() {
            let last = l + 1 == n_layers;
            // attention: h = x + o_proj(attn(rope(q), rope(k), v))
            let normed: Vec<Vec<f32>> = xs.iter().map(|x| kernels::rms_norm(x, d, &block.input_norm, eps)).collect();
            let mut q = self.dense_many(&block.lin[Q], &normed); // [t_i, h * hd]
            let mut k = self.dense_many(&block.lin[K], &normed); // [t_i, kvh * hd]
            let v = self.dense_many(&block.lin[V], &normed); // [t_i, kvh * hd]
            let mut att = Vec::with_capacity(ns);
            for i in 0..ns {
                let (start, t) = (starts[i], ts[i]);
                if t == 0 {
                    att.push(Vec::new());
                    continue;
                }
                kernels::rope(&mut q[i], t, h, hd, start, &self.cos, &self.sin);
                kernels::rope(&mut k[i], t, kvh, hd, start, &self.cos, &self.sin);
                let c = &mut caches[i];
                c.write(l, start, &k[i], &v[i]);
                let (o, p) =
                    kernels::causal_attention(&q[i], t, h, kvh, hd, &c.k[l], &c.v[l], c.capacity * hd, start + t);
                if last && cap_from[i] < t {
                    probs[i] = Some(p); // [h, t, keys]
                }
                att.push(o); // [t, h * hd]
            }
            let a = self.dense_many(&block.lin[O], &att);
            for (x, a) in xs.iter_mut().zip(&a) {
                add_into(x, a);
            }
            // MLP: x = h + down(silu(gate(norm(h))) * up(norm(h)))
            let normed: Vec<Vec<f32>> = xs.iter().map(|x| kernels::rms_norm(x, d, &block.post_norm, eps)).collect();
            let mut g = self.dense_many(&block.lin[GATE], &normed); // [t_i, ff]
            let u = self.dense_many(&block.lin[UP], &normed);
            for (g, u) in g.iter_mut().zip(&u) {
                kernels::silu_mul(g, u);
            }
            let m = self.dense_many(&block.lin[DOWN], &g);
            for (x, m) in xs.iter_mut().zip(&m) {
                add_into(x, m);
            }
            if !last {
                for i in 0..ns {
                    if cap_from[i] < ts[i] {
                        let rows = &xs[i][cap_from[i] * d..];
                        match &mut layer_sum[i] {
                            Some(acc) => add_into(acc, rows),
                            None => layer_sum[i] = Some(rows.to_vec()),
                        }
                    }
                }
            }
        }
        for (c, (&start, &t)) in caches.iter_mut().zip(starts.iter().zip(&ts)) {
            c.len = start + t;
        }

        // after the last layer: only the rows asked for
        let first: Vec<usize> =
            wants.iter().zip(&ts).zip(&cap_from).map(|((w, &t), &c)| w.logits_from.min(t).min(c)).collect();
        let hidden: Vec<Vec<f32>> = xs
            .iter()
            .zip(&first)
            .map(|(x, &f)| kernels::rms_norm(&x[f * d..], d, &self.norm, eps)) // [t_i - first_i, d]
            .collect();
        let asked: Vec<Vec<f32>> = (0..ns)
            .map(|i| {
                let from = wants[i].logits_from;
                if from < ts[i] {
                    hidden[i][(from - first[i]) * d..].to_vec()
                } else {
                    Vec::new()
                }
            })
            .collect();
        let logits = self.logits_many(&asked);
        let vocab = cfg.vocab_size;
        let n = n_layers as f32;
        let mut res = Vec::with_capacity(ns);
        for i in 0..ns {
            let mut r = ChunkOut {
                logits: logits[i].chunks(vocab).map(|r| NextDist::host(r.to_vec())).collect(),
                ..Default::default()
            };
            let (t, from) = (ts[i], cap_from[i]);
            if from < t {
                let hid = &hidden[i][(from - first[i]) * d..];
                r.hidden_final = hid.chunks(d).map(<[f32]>::to_vec).collect();
                let mut mean = match layer_sum[i].take() {
                    Some(mut acc) => {
                        add_into(&mut acc, hid);
                        acc
                    }
                    None => hid.to_vec(),
                };
                for m in mean.iter_mut() {
                    *m /= n;
                }
                r.hidden_mean = mean.chunks(d).map(<[f32]>::to_vec).collect();
                let p = probs[i].take().expect("the last layer keeps the probabilities of captured rows");
                let keys = starts[i] + t;
                for row in from..t {
                    let pos = starts[i] + row;
                    r.attn.push(
                        (0..h).map(|hh| p[(hh * t + row) * keys..(hh * t + row) * keys + pos + 1].to_vec()).collect(),
                    );
                }
            }
            res.push(r);
        }
        Ok(res)
    }
}

impl Engine for CpuEngine {
    fn new_cache(&self, capacity: usize) -> Box<dyn Cache> {
        Box::new(CpuCache::new(&self.cfg, capacity.max(1)))
    }

    fn max_positions(&self) -> usize {
        self.max_pos
    }

    fn describe(&self) -> String {
        if self.int_decode_bytes() > 0 && self.int8_dot {
            "cpu (integer decode, int8 dot products)".into()
        } else if self.int_decode_bytes() > 0 {
            "cpu (integer decode)".into()
        } else {
            "cpu".into()
        }
    }

    fn int_decode_bytes(&self) -> usize {
        let lin: usize =
            self.layers.iter().flat_map(|b| b.lin.iter()).filter_map(|l| l.q.as_ref()).map(|q| q.bytes()).sum();
        lin + self.lm_head_q.as_ref().map_or(0, |q| q.bytes())
    }

    fn int8_dot(&mut self) -> bool {
        self.int8_dot = true;
        self.int_decode_bytes() > 0
    }

    fn drop_int_weights(&mut self) {
        for b in &mut self.layers {
            for l in &mut b.lin {
                l.q = None;
            }
        }
        self.lm_head_q = None;
    }

    fn forward(&self, seqs: &mut [SeqIn<'_>]) -> Result<Vec<ChunkOut>> {
        rayon::scope(|_| self.forward_in_pool(seqs))
    }
}
