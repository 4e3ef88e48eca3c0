//! The CPU engine: the decoder's forward pass ([`crate::model::llama`], the same operations in the same order)
//! on plain f32 buffers, with ragtime's kernels ([`super::kernels`]) and, for decoding, the GGUF file's own
//! integer blocks ([`QMatrix`]).
//!
//! - A quantized GGUF's weights are held only as its integer blocks ([`QMatrix`], 0.75 to 1.5 bytes per weight
//!   instead of f32's 4); a weight with no integer form (f32, f16, bf16 files) is held in f32.
//! - Prefill chunks (more than [`int_rows`] rows) multiply in f32, one gemm per sequence: the integer blocks
//!   de-quantized a tile of output columns at a time, once for all the sequences of the call
//!   ([`kernels::matmul_filled_into`]; bit for bit the product with the whole f32 matrix), f32 weights split by
//!   columns over the pool ([`kernels::matmul`]).
//! - Decoding rows and short chunks (up to [`int_rows`] per sequence) of *all* sequences of a call go through one
//!   [`QMatrix::matvec`] per weight matrix: each weight block is read and de-quantized once for two rows, and
//!   every row is computed with the same FMAs in the same order as alone, so a sequence gets bit for bit what
//!   a call of its own gives it.
//!   With `--int8-dot` on AMX, AMD's AVX-512 VNNI or AVX2's superblock copies ([`QMatrix::int8_many_rows`]),
//!   prefill chunks multiply in integers too, each on its own (`ALONE_ROWS`).
//! - The products write into buffers the layer before is done with (`Spare`), not into fresh memory the system
//!   has to fault in page by page.
//! - RoPE, the cache append and attention run per sequence, on its cache: `[layers][kv heads, capacity, hd]`,
//!   written in place, doubled when a sequence outgrows it; a rewind only moves its length.
//! - Only what a sequence asked for is computed past the last layer: the final norm and output projection for
//!   the rows whose logits it wants, the attention rows and hidden states for the rows it captures. Each logits
//!   row comes with its softmax statistics ([`NextDist::host_scored`]), the rows of all sequences worked out
//!   over the pool.
//! - The whole pass runs on a thread of the rayon pool (`rayon::scope`), so the products it splits over the
//!   pool find the other workers awake rather than waking them about 200 times per token.

use std::sync::Arc;

use anyhow::{bail, Result};
use rayon::prelude::*;

use super::dist::NextDist;
use super::kernels::{self, Strided};
use super::{check_positions, Cache, ChunkOut, Engine, SeqIn};
use crate::model::config::ModelConfig;
use crate::model::params;
use crate::model::quant::QMatrix;
use crate::model::weights::WeightSource;

/// Rows of one sequence up to which its products use the integer blocks ([`QMatrix::matvec`]) rather than an f32
/// gemm, where the CPU has a several-vector kernel (AVX2 or AVX-512). Decoding feeds one token at a time, a rewind
/// re-feeds a few, and for a short chunk, reading the 0.75-1.5 bytes per weight once per 2 or 8 rows costs less
/// than de-quantizing every weight for gemm: Qwen2.5-Coder-0.5B on 2 AVX2 cores prefilled 7 rows in 0.15 s against
/// gemm's 0.41 s, 31 rows in 0.40 s against 0.50 s, and 63 rows in 1.20 s against 0.71 s.
const INT_ROWS: usize = 32;

/// Rows of one sequence up to which products use the integer weights on this CPU: 32 (`INT_ROWS`), or 4 where
/// [`QMatrix::matvec`] takes one vector per pass (no AVX2).
pub fn int_rows() -> usize {
    if QMatrix::vectors_per_pass() > 1 {
        INT_ROWS
    } else {
        4
    }
}

/// Rows from which a segment's integer products run on their own ([`int_products`]) rather than gathered with
/// the other segments' rows: a pass over the weights serves 256 rows of one segment on AMX
/// (`QMatrix::matvec_int8`) and at most 8 elsewhere, so a long segment loses nothing alone, and gathering eight
/// lanes' prompts of 1,784 rows copied 2 GB per layer into fresh memory and back out (a third of a prefill's
/// time in page faults and copies).
const ALONE_ROWS: usize = 64;

/// A weight matrix `W [out, in]` (Hugging Face layout) as the engine holds it.
enum Weight {
    /// The GGUF file's integer blocks, `[out, in]`.
    Int(Arc<QMatrix>),
    /// f32, stored transposed: `[in, out]` (a weight with no integer form, or `--f32-decode`).
    F32(Vec<f32>),
}

impl Weight {
    /// From the source's integer blocks when it has them, else in f32.
    fn load(src: &dyn WeightSource, name: &str, dims: [usize; 2]) -> Result<Weight> {
        Ok(match load_int(src, name, dims)? {
            Some(q) => Weight::Int(q),
            None => Weight::F32(transpose(&src.require(name, &dims)?.data, dims[0], dims[1])),
        })
    }

    fn int(&self) -> Option<&QMatrix> {
        match self {
            Weight::Int(q) => Some(q),
            Weight::F32(_) => None,
        }
    }

    /// Holds the weight in f32 from now on (`[in, out]`, de-quantized from the blocks).
    fn make_f32(&mut self) {
        if let Weight::Int(q) = self {
            *self = Weight::F32(transpose(&q.dequantize(), q.rows, q.cols));
        }
    }

    /// `x_i [rows_i, in] W^T (+ bias)` -> `[rows_i, out]` for each `x_i`, in f32 arithmetic, the outputs taken
    /// from `spare`.
    fn matmul_many(&self, xs: &[&[f32]], inp: usize, out: usize, bias: Option<&[f32]>, spare: &Spare) -> Vec<Vec<f32>> {
        match self {
            Weight::Int(q) => int_matmul_f32(q, xs, bias, spare),
            Weight::F32(w) => {
                let mut ys: Vec<Vec<f32>> = xs.iter().map(|x| spare.take(x.len() / inp * out)).collect();
                for (x, y) in xs.iter().zip(&mut ys) {
                    kernels::matmul_into(x, x.len() / inp, inp, Strided::rows(w, out), out, bias, y);
                }
                ys
            }
        }
    }
}

/// The source's integer blocks of tensor `name`, when it has them, their shape checked against `dims`.
fn load_int(src: &dyn WeightSource, name: &str, dims: [usize; 2]) -> Result<Option<Arc<QMatrix>>> {
    let Some(q) = src.quantized(name)? else { return Ok(None) };
    if [q.rows, q.cols] != dims {
        bail!(
            "{}: tensor '{name}' is {}x{} as blocks but the config says {}x{}",
            src.describe(),
            q.rows,
            q.cols,
            dims[0],
            dims[1]
        );
    }
    Ok(Some(Arc::new(q)))
}

/// `x_i W^T (+ bias)` for each `x_i` in f32 arithmetic, `W` de-quantized from `q` a tile at a time, the outputs
/// taken from `spare`.
fn int_matmul_f32(q: &QMatrix, xs: &[&[f32]], bias: Option<&[f32]>, spare: &Spare) -> Vec<Vec<f32>> {
    let mut ys: Vec<Vec<f32>> = xs.iter().map(|x| spare.take(x.len() / q.cols * q.rows)).collect();
    kernels::matmul_filled_into(xs, q.cols, q.rows, bias, &|j0, tile| q.dequantize_rows(j0, tile), &mut ys);
    ys
}

/// `y = x W^T + b` for a linear layer's `W [out, in]`.
struct Dense {
    w: Weight,
    inp: usize,
    out: usize,
    bias: Option<Vec<f32>>,
}

/// The token embedding `[vocab, d]`.
enum Embedding {
    Int(Arc<QMatrix>),
    /// row-major `[vocab, d]`
    F32(Vec<f32>),
}

impl Embedding {
    /// Appends token `id`'s row to `out`.
    fn push_row(&self, id: usize, d: usize, out: &mut Vec<f32>) {
        match self {
            Embedding::Int(q) => {
                let at = out.len();
                out.resize(at + d, 0.0);
                q.dequantize_rows(id, &mut out[at..]);
            }
            Embedding::F32(e) => out.extend_from_slice(&e[id * d..(id + 1) * d]),
        }
    }
}

/// The output projection.
enum Head {
    /// Tied to the token embedding.
    Tied,
    Own(Weight),
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
    embed: Embedding,
    layers: Vec<Block>,
    /// `[d]`
    norm: Vec<f32>,
    lm_head: Head,
    /// `[max_pos, hd]` each (see [`crate::model::rope::rope_tables`]).
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
    /// Loads every weight of `cfg` from `src` (shapes checked): the integer blocks of the quantized ones, the
    /// others in f32.
    pub fn load(src: &dyn WeightSource, cfg: &ModelConfig, max_pos: usize) -> Result<CpuEngine> {
        let d = cfg.hidden_size;
        let dense = |prefix: &str, spec: &params::BlockLinear| -> Result<Dense> {
            let name = format!("{prefix}.{}", spec.path);
            let [out, inp] = (spec.shape)(cfg);
            let w = Weight::load(src, &format!("{name}.weight"), [out, inp])?;
            let bias = if spec.has_bias(cfg) { Some(src.require(&format!("{name}.bias"), &[out])?.data) } else { None };
            Ok(Dense { w, inp, out, bias })
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
        let embed = match load_int(src, params::EMBED, [cfg.vocab_size, d])? {
            Some(q) => Embedding::Int(q),
            None => Embedding::F32(src.require(params::EMBED, &[cfg.vocab_size, d])?.data),
        };
        let lm_head = if cfg.tie_word_embeddings {
            Head::Tied
        } else {
            Head::Own(Weight::load(src, params::LM_HEAD, [cfg.vocab_size, d])?)
        };
        let (cos, sin) = crate::model::rope::rope_tables(cfg, max_pos);
        Ok(CpuEngine {
            cfg: cfg.clone(),
            embed,
            layers,
            norm: src.require(params::FINAL_NORM, &[d])?.data,
            lm_head,
            cos,
            sin,
            max_pos,
            int8_dot: false,
        })
    }

    /// Each segment's `x [t_i, in]` times `lin`: the rows of the segments of up to [`int_rows`] rows in one
    /// integer product (when `lin` has integer blocks), the other segments in f32 gemms (sharing each tile
    /// de-quantized from the blocks).
    fn dense_many(&self, lin: &Dense, xs: &[Vec<f32>], spare: &Spare) -> Vec<Vec<f32>> {
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); xs.len()];
        if let Some(q) = lin.w.int() {
            int_products(q, lin.bias.as_deref(), xs, &mut out, self.int8_dot, spare);
        }
        fill_the_rest(&mut out, xs, |xr| lin.w.matmul_many(xr, lin.inp, lin.out, lin.bias.as_deref(), spare));
        out
    }

    /// The output projection's integer blocks `[vocab, d]`, if it has them.
    fn head_int(&self) -> Option<&QMatrix> {
        match (&self.lm_head, &self.embed) {
            (Head::Own(w), _) => w.int(),
            (Head::Tied, Embedding::Int(q)) => Some(q),
            (Head::Tied, Embedding::F32(_)) => None,
        }
    }

    /// Logits `[rows, vocab]` of each segment's final hidden rows `h [rows, d]` (segments with no rows get none).
    fn logits_many(&self, hs: &[Vec<f32>], spare: &Spare) -> Vec<Vec<f32>> {
        let (d, vocab) = (self.cfg.hidden_size, self.cfg.vocab_size);
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); hs.len()];
        if let Some(q) = self.head_int() {
            int_products(q, None, hs, &mut out, self.int8_dot, spare);
        }
        fill_the_rest(&mut out, hs, |hr| match (&self.lm_head, &self.embed) {
            (Head::Own(w), _) => w.matmul_many(hr, d, vocab, None, spare),
            (Head::Tied, Embedding::Int(q)) => int_matmul_f32(q, hr, None, spare),
            (Head::Tied, Embedding::F32(e)) => {
                hr.iter().map(|h| kernels::matmul(h, h.len() / d, d, Strided::transposed(e, d), vocab, None)).collect()
            }
        });
        out
    }
}

/// `x W^T (+ bias)` from the integer blocks for every segment of 1 to [`int_rows`] rows (with `int8`, of any
/// number of rows where [`QMatrix::int8_many_rows`]), written to `out[i]`; other segments are left empty. The
/// short segments (decoding rows, a rewind's few) go through one [`QMatrix::matvec`] (or
/// [`QMatrix::matvec_int8`] with `int8`) together, so that each pass over the weights serves all their rows; a
/// segment of [`ALONE_ROWS`] rows or more (a prefill chunk) is multiplied where it is, its product kept whole.
/// Either way each row is bit for bit what it is alone.
fn int_products(q: &QMatrix, bias: Option<&[f32]>, xs: &[Vec<f32>], out: &mut [Vec<f32>], int8: bool, spare: &Spare) {
    let rows = |x: &Vec<f32>| x.len() / q.cols;
    let most = if int8 && q.int8_many_rows() { usize::MAX } else { int_rows() };
    let product = |x: &[f32]| {
        let mut y = spare.take(x.len() / q.cols * q.rows);
        if int8 {
            q.matvec_int8(x, &mut y);
        } else {
            q.matvec(x, &mut y);
        }
        if let Some(b) = bias {
            for row in y.chunks_mut(q.rows) {
                add_into(row, b);
            }
        }
        y
    };
    let mut together = Vec::new();
    for (i, x) in xs.iter().enumerate() {
        match rows(x) {
            0 => {}
            r if r > most => {}
            r if r >= ALONE_ROWS => out[i] = product(x),
            _ => together.push(i),
        }
    }
    match together[..] {
        [] => {}
        [i] => out[i] = product(&xs[i]),
        _ => {
            let mut all = Vec::with_capacity(together.iter().map(|&i| xs[i].len()).sum());
            for &i in &together {
                all.extend_from_slice(&xs[i]);
            }
            let y = product(&all);
            let mut at = 0;
            for &i in &together {
                let n = rows(&xs[i]) * q.rows;
                let mut yi = spare.take(n);
                yi.copy_from_slice(&y[at..at + n]);
                out[i] = yi;
                at += n;
            }
            spare.give([y]);
        }
    }
}

/// The products' outputs a forward call's layers are done with, handed out again for the next layer's products
/// of the same sizes. A prefill's products (35 MB per lane for Qwen2.5-Coder-0.5B's gate and up at 1,784 rows)
/// otherwise came fresh from the system every layer and were faulted in page by page as the products wrote them:
/// with eight lanes' prompts, about a tenth of the prefill. Only buffers it handed out are handed back, so it
/// holds at most one layer's products.
#[derive(Default)]
struct Spare(std::sync::Mutex<Vec<Vec<f32>>>);

impl Spare {
    /// Buffers shorter than this (4 KiB) go back to the allocator, which reuses small blocks without the system.
    const MIN_LEN: usize = 1 << 10;

    /// `len` values to be overwritten: the smallest spare buffer that holds them (its old values, zeros past
    /// them), else a new one.
    fn take(&self, len: usize) -> Vec<f32> {
        if len < Self::MIN_LEN {
            return vec![0f32; len];
        }
        let mut free = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let fit = (0..free.len()).filter(|&i| free[i].capacity() >= len).min_by_key(|&i| free[i].capacity());
        match fit {
            Some(i) => {
                let mut v = free.swap_remove(i);
                v.resize(len, 0.0);
                v
            }
            None => vec![0f32; len],
        }
    }

    /// Keeps the large ones of `bufs` for [`Spare::take`].
    fn give(&self, bufs: impl IntoIterator<Item = Vec<f32>>) {
        let mut free = self.0.lock().unwrap_or_else(|e| e.into_inner());
        free.extend(bufs.into_iter().filter(|v| v.capacity() >= Self::MIN_LEN));
    }
}

/// Writes `product(inputs)` to `out[i]` for every segment `i` that has rows but no product in `out` yet, `inputs`
/// their `xs[i]` in order: the segments the integer products left to the f32 ones.
fn fill_the_rest(out: &mut [Vec<f32>], xs: &[Vec<f32>], product: impl FnOnce(&[&[f32]]) -> Vec<Vec<f32>>) {
    let rest: Vec<usize> = (0..xs.len()).filter(|&i| out[i].is_empty() && !xs[i].is_empty()).collect();
    let inputs: Vec<&[f32]> = rest.iter().map(|&i| &xs[i][..]).collect();
    for (i, y) in rest.into_iter().zip(product(&inputs)) {
        out[i] = y;
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

    /// Holds the first `len` positions of `from`, copied (see [`Engine::copy_prefix`]).
    fn copy_prefix_of(&mut self, from: &CpuCache, len: usize) {
        self.reserve(len);
        let (hd, (fc, tc)) = (self.hd, (from.capacity, self.capacity));
        for (dst, src) in self.k.iter_mut().zip(&from.k).chain(self.v.iter_mut().zip(&from.v)) {
            for g in 0..self.kvh {
                dst[g * tc * hd..(g * tc + len) * hd].copy_from_slice(&src[g * fc * hd..(g * fc + len) * hd]);
            }
        }
        self.len = len;
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

    fn as_any(&self) -> &dyn std::any::Any {
        self
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
                let mut x = Vec::with_capacity(ids.len() * d);
                for &id in *ids {
                    self.embed.push_row(id as usize, d, &mut x);
                }
                x
            })
            .collect();
        let mut layer_sum: Vec<Option<Vec<f32>>> = vec![None; ns];
        let mut probs: Vec<Option<Vec<f32>>> = vec![None; ns];
        let spare = Spare::default();
        for (l, block) in self.layers.iter().enumerate() {
            let last = l + 1 == n_layers;
            // attention: h = x + o_proj(attn(rope(q), rope(k), v))
            let normed: Vec<Vec<f32>> = xs.iter().map(|x| kernels::rms_norm(x, d, &block.input_norm, eps)).collect();
            let mut q = self.dense_many(&block.lin[Q], &normed, &spare); // [t_i, h * hd]
            let mut k = self.dense_many(&block.lin[K], &normed, &spare); // [t_i, kvh * hd]
            let v = self.dense_many(&block.lin[V], &normed, &spare); // [t_i, kvh * hd]

            // RoPE, the cache and attention: each sequence on its own cache, the sequences spread over the pool (one
            // decoding row runs its heads on one thread up to 1,024 keys; at 8 lanes over 1,500 positions attention is
            // a tenth of the work, which left the other threads waiting while the sequences took turns)
            let (cos, sin) = (&self.cos, &self.sin);
            let outs: Vec<(Vec<f32>, Option<Vec<f32>>)> = caches
                .par_iter_mut()
                .zip(q.par_iter_mut().zip(k.par_iter_mut()).zip(v.par_iter()))
                .enumerate()
                .map(|(i, (c, ((q, k), v)))| {
                    let (start, t) = (starts[i], ts[i]);
                    if t == 0 {
                        return (Vec::new(), None);
                    }
                    kernels::rope(q, t, h, hd, start, cos, sin);
                    kernels::rope(k, t, kvh, hd, start, cos, sin);
                    c.write(l, start, k, v);
                    let keep = last && cap_from[i] < t;
                    // o: [t, h * hd]; p: [h, t, keys]
                    kernels::causal_attention(q, t, h, kvh, hd, &c.k[l], &c.v[l], c.capacity * hd, start + t, keep)
                })
                .collect();
            let mut att = Vec::with_capacity(ns);
            for (i, (o, p)) in outs.into_iter().enumerate() {
                if p.is_some() {
                    probs[i] = p;
                }
                att.push(o);
            }
            spare.give(q.into_iter().chain(k).chain(v));
            let a = self.dense_many(&block.lin[O], &att, &spare);
            for (x, a) in xs.iter_mut().zip(&a) {
                add_into(x, a);
            }
            spare.give(a);
            // MLP: x = h + down(silu(gate(norm(h))) * up(norm(h)))
            let normed: Vec<Vec<f32>> = xs.iter().map(|x| kernels::rms_norm(x, d, &block.post_norm, eps)).collect();
            let mut g = self.dense_many(&block.lin[GATE], &normed, &spare); // [t_i, ff]
            let u = self.dense_many(&block.lin[UP], &normed, &spare);
            for (g, u) in g.iter_mut().zip(&u) {
                kernels::silu_mul(g, u);
            }
            spare.give(u);
            let m = self.dense_many(&block.lin[DOWN], &g, &spare);
            for (x, m) in xs.iter_mut().zip(&m) {
                add_into(x, m);
            }
            spare.give(g.into_iter().chain(m));
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
        let logits = self.logits_many(&asked, &spare);
        let vocab = cfg.vocab_size;
        // each row's softmax statistics, the rows of all sequences spread over the pool (the decode loop reads an
        // entropy and a probability from every row)
        let rows: Vec<&[f32]> = logits.iter().flat_map(|l| l.chunks(vocab)).collect();
        let mut dists = rows.into_par_iter().map(|r| NextDist::host_scored(r.to_vec())).collect::<Vec<_>>().into_iter();
        let n = n_layers as f32;
        let mut res = Vec::with_capacity(ns);
        for i in 0..ns {
            let mut r =
                ChunkOut { logits: dists.by_ref().take(logits[i].len() / vocab).collect(), ..Default::default() };
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
            self.layers.iter().flat_map(|b| b.lin.iter()).filter_map(|l| l.w.int()).map(|q| q.bytes()).sum();
        lin + self.head_int().map_or(0, |q| q.bytes())
    }

    fn int8_dot(&mut self) -> bool {
        self.int8_dot = true;
        // the integer copies in row tiles where the CPU has their kernels (AVX-512 VNNI; int8 copies without
        // offsets and nibble copies): several lanes' products take fewer instructions per weight (`quant::tiles`);
        // else, with AVX2, the K-quant copies (Q4_K, Q6_K) in their superblocks (`quant::superblocks`: fewer bytes
        // and integer sub-block scales) and the Q8_0 and Q5_0 copies in quartets (`quant::quartets`: one scaling
        // per 4 blocks)
        let tile = |q: &mut Arc<QMatrix>| {
            let q = Arc::make_mut(q);
            if !q.tile_for_int8() && !q.superblocks_for_int8() {
                q.quartets_for_int8();
            }
        };
        for l in self.layers.iter_mut().flat_map(|b| b.lin.iter_mut()) {
            if let Weight::Int(q) = &mut l.w {
                tile(q);
            }
        }
        match (&mut self.lm_head, &mut self.embed) {
            (Head::Own(Weight::Int(q)), _) | (Head::Tied, Embedding::Int(q)) => tile(q),
            _ => {}
        }
        self.int_decode_bytes() > 0
    }

    fn drop_int_weights(&mut self) {
        for b in &mut self.layers {
            for l in &mut b.lin {
                l.w.make_f32();
            }
        }
        if let Embedding::Int(q) = &self.embed {
            self.embed = Embedding::F32(q.dequantize());
        }
        if let Head::Own(w) = &mut self.lm_head {
            w.make_f32();
        }
    }

    fn forward(&self, seqs: &mut [SeqIn<'_>]) -> Result<Vec<ChunkOut>> {
        rayon::scope(|_| self.forward_in_pool(seqs))
    }

    fn copy_prefix(&self, from: &dyn Cache, to: &mut dyn Cache, len: usize) -> Result<()> {
        let (from, to) = super::cache_pair::<CpuCache>(from, to, len)?;
        to.copy_prefix_of(from, len);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Spare;

    /// A buffer handed back goes to the next request it holds (the smallest such), cut or grown to the length
    /// asked for; a request none holds gets a new buffer of zeros, and small buffers are not kept.
    #[test]
    fn spare_hands_out_the_smallest_buffer_that_holds_a_request() {
        let n = Spare::MIN_LEN;
        let spare = Spare::default();
        let (big, mid) = (vec![1f32; 4 * n], vec![2f32; 2 * n]);
        let (big_at, mid_at) = (big.as_ptr(), mid.as_ptr());
        spare.give([big, vec![3f32; n - 1], mid]);
        let a = spare.take(n + 1);
        assert_eq!((a.len(), a.as_ptr()), (n + 1, mid_at));
        let b = spare.take(3 * n);
        assert_eq!((b.len(), b.as_ptr()), (3 * n, big_at));
        let c = spare.take(n);
        assert!(c.len() == n && c.iter().all(|&v| v == 0.0));
        assert!(spare.0.lock().unwrap().is_empty(), "the short buffer was not kept");
        spare.give([a]);
        let d = spare.take(2 * n);
        assert_eq!((d.len(), d.as_ptr(), d[n + 1]), (2 * n, mid_at, 0.0), "grown past its last length with zeros");
    }
}
