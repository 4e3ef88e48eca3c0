//! The batched engine: the burn decoder's layers ([`Llama`]) over fixed-shape lane buffers, so that many
//! sequences decode in one pass of one shape. Written for the GPU (burn's CUDA backend, `--device cuda`), where
//! one pass costs about the same whether it carries one sequence or a hundred; it runs on any burn backend, and
//! on the CPU (`--engine batched`) it is what the tests hold to the reference engine.
//!
//! Every sequence owns a *lane*: a slot in one key/value buffer per layer, `[slots, 2 kv_heads, capacity,
//! head_dim]` (keys, then values), allocated once and written in place (`scatter_nd`), so a cache is a slot number and a length
//! ([`LaneCache`]); a rewind only moves the length. A forward call runs one pass over at most two
//! grids, whose cells run through every weight product together (one `[cells, in] x [in, out]` product each) and
//! through attention grid by grid:
//! - **decode**: every sequence that appends one token, as rows of a `[slots, 1]` grid over the whole buffer
//!   (lanes that did not ask for a token compute a row that is thrown away and write nothing), attending over
//!   the buffer's first `keys` positions, the longest lane rounded up to a power of two: a few shapes per run (one
//!   per doubling of the longest lane), so each kernel is compiled a few times and a pass costs about the same
//!   whatever the number of lanes in use;
//! - **prefill**: the sequences that append several tokens (a prompt, the prompt after a retrieval), as rows of
//!   a `[rows, T]` grid, `T` the longest chunk rounded up to a power of two, attending over their lanes' keys
//!   gathered from the buffer.
//!
//! Queries see only their own lane's keys up to their own position (a mask), so a sequence's results do not
//! depend on which others share its pass beyond float rounding: they equal the reference engine's within f32
//! rounding (not bit for bit: the products and sums run over other shapes). Buffers grow (doubling) when more
//! lanes are in use or a sequence outgrows the capacity; a run at a steady number of lanes keeps its shapes.
//!
//! A pass issues few kernels, since at small lane counts on a GPU the host's cost of issuing them is the step's
//! cost: each layer runs as a [`FusedBlock`], whose products that read the same input are one product (`q|k|v`,
//! `gate|up`), with the RMS norms' weights and the attention scale folded into them and SwiGLU in four kernels;
//! RoPE runs once over the whole `q|k|v` block (the value heads' tables are cos 1, sin 0), and one `select` and
//! one `scatter_nd` write a layer's keys and values.
//!
//! `--dtype bf16|f16` ([`Precision`]) casts the weights, the RoPE tables and the lane buffers, so products and
//! the key/value cache run in that type; RMS norms and the attention softmax compute in f32 and cast back (as
//! transformers does for a bf16 model), the mean over layers sums in f32, and the logits come back as f32.

use std::sync::{Arc, Mutex, MutexGuard};

use anyhow::{anyhow, Result};
use burn::module::{Module, Param};
use burn::prelude::Backend;
use burn::tensor::{Bool, DType, IndexingUpdateOp, Int, Tensor, TensorData};

use super::dist::{NextDist, RowSource, Scored};
use super::{check_positions, host_rows, Cache, ChunkOut, Engine, Phases, Precision, SeqIn};
use crate::model::config::ModelConfig;
use crate::model::llama::{in_dtype, Linear, Llama, Rope};
use crate::model::reduce;

/// Lanes the buffers start with, and the smallest capacity (positions) they hold.
const MIN_SLOTS: usize = 8;
const MIN_CAPACITY: usize = 1024;
/// Prefill chunks are padded to at least this many positions (then powers of two).
const MIN_CHUNK: usize = 8;
/// A pass attends over at least this many key positions (then powers of two, up to the capacity).
const MIN_KEYS: usize = 64;

/// Which slots are taken: shared by the engine and its caches (a dropped cache frees its slot).
#[derive(Debug, Default)]
struct SlotBook {
    /// Slots handed out so far (the highest slot number + 1).
    issued: usize,
    free: Vec<usize>,
}

/// One decoder layer as the batched engine runs it: the same function as [`crate::model::llama::Block`] with
/// fewer kernels per pass.
/// - `q|k|v` is one product, `x̂ · diag(w₁) [Wq/√hd | Wk | Wv] + [bq/√hd | bk | bv]`, with `x̂` the input
///   normalised without its weight `w₁` (folded into the rows) and the attention scale `1/√hd` folded into the
///   query columns (RoPE is linear, so scaling before it is the same; for `hd = 64` the scale is exact);
/// - `gate|up` likewise, `x̂ · diag(w₂) [-Wg | Wu]`, the gate negated so that SwiGLU takes four kernels:
///   `silu(g) u = g u / (1 + e^-g) = -(n / (1 + e^n)) u` with `n = -g`, the sign folded into the down product's
///   weight (burn's `silu` is `x · sigmoid(x)`, and its `sigmoid` six kernels: `exp(-log(1 + exp(-x)))`);
///   `n / (1 + e^n)` goes to 0, not NaN, where `e^n` overflows;
/// - LoRA adapters are merged into the weights (`W + scale · A B`).
///
/// The results equal the reference layer's within f32 rounding (the tests hold the engine to it).
#[derive(Module, Debug)]
pub struct FusedBlock<B: Backend> {
    /// `[d, (nh + 2 kvh) hd]`
    qkv: Param<Tensor<B, 2>>,
    /// `[(nh + 2 kvh) hd]`, where any of the three has a bias (Qwen2)
    qkv_bias: Option<Param<Tensor<B, 1>>>,
    o_proj: Linear<B>,
    /// `[d, 2 ffn]`, the gate's columns negated
    gate_up: Param<Tensor<B, 2>>,
    /// the down product with its weight negated
    down_proj: Linear<B>,
    eps: f64,
}

/// A linear layer's weight `[in, out]` with its LoRA adapter merged, and its bias.
fn merged<B: Backend>(l: &Linear<B>) -> (Tensor<B, 2>, Option<Tensor<B, 1>>) {
    (l.merged_weight(), l.bias.as_ref().map(Param::val))
}

/// `[out]` zeros on a weight's device, for a product without a bias fused with one that has it.
fn zeros_like_out<B: Backend>(w: &Tensor<B, 2>) -> Tensor<B, 1> {
    Tensor::zeros([w.dims()[1]], &w.device())
}

impl<B: Backend> FusedBlock<B> {
    fn new(block: &crate::model::llama::Block<B>) -> Self {
        let a = &block.self_attn;
        let scale = 1.0 / (a.head_dim as f64).sqrt();
        let w1 = block.input_layernorm.weight.val().unsqueeze_dim::<2>(1); // [d, 1]
        let w2 = block.post_attention_layernorm.weight.val().unsqueeze_dim::<2>(1);
        let (wq, bq) = merged(&a.q_proj);
        let (wk, bk) = merged(&a.k_proj);
        let (wv, bv) = merged(&a.v_proj);
        let qkv_bias = (bq.is_some() || bk.is_some() || bv.is_some()).then(|| {
            let bq = bq.unwrap_or_else(|| zeros_like_out(&wq)).mul_scalar(scale);
            let bk = bk.unwrap_or_else(|| zeros_like_out(&wk));
            let bv = bv.unwrap_or_else(|| zeros_like_out(&wv));
            Param::from_tensor(Tensor::cat(vec![bq, bk, bv], 0))
        });
        let qkv = Tensor::cat(vec![wq.mul_scalar(scale), wk, wv], 1) * w1.clone();
        let (wg, _) = merged(&block.mlp.gate_proj);
        let (wu, _) = merged(&block.mlp.up_proj);
        let plain = |l: &Linear<B>| {
            let (w, b) = merged(l);
            Linear { weight: Param::from_tensor(w), bias: b.map(Param::from_tensor), lora: None }
        };
        FusedBlock {
            qkv: Param::from_tensor(qkv),
            qkv_bias,
            o_proj: plain(&a.o_proj),
            gate_up: Param::from_tensor(Tensor::cat(vec![wg.neg(), wu], 1) * w2),
            down_proj: {
                let mut down = plain(&block.mlp.down_proj);
                down.weight = Param::from_tensor(down.weight.val().neg());
                down
            },
            eps: block.input_layernorm.eps,
        }
    }

    /// x: [1, n, d] -> x normalised by its RMS, without the norm's weight (folded into the next product); a
    /// bf16/f16 x is normalised in f32 and cast back, as [`crate::model::llama::RmsNorm`].
    fn norm(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let dtype = x.dtype();
        let x = x.cast(DType::F32);
        let ms = reduce::mean_of_squares(x.clone()); // [1, n, 1], summed in stages (reduce.rs)
        (x * ms.add_scalar(self.eps).powf_scalar(-0.5)).cast(dtype)
    }

    /// x: [1, n, d] -> the scaled queries, keys and values side by side, [1, n, (nh + 2 kvh) hd]
    fn qkv(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let y = self.norm(x).matmul(self.qkv.val().unsqueeze::<3>());
        match &self.qkv_bias {
            Some(b) => y + b.val().unsqueeze::<3>(),
            None => y,
        }
    }

    /// x: [1, n, d] (after attention) -> the SwiGLU MLP's output [1, n, d]
    fn mlp(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let gu = self.norm(x).matmul(self.gate_up.val().unsqueeze::<3>()); // [1, n, 2 ffn]
        let ffn = gu.dims()[2] / 2;
        // n = -gate; -silu(gate) * up = n / (1 + e^n) * up, and the down product's negated weight restores the sign
        let n = gu.clone().narrow(2, 0, ffn);
        self.down_proj.forward(n.clone().div(n.exp().add_scalar(1.0)) * gu.narrow(2, ffn, ffn))
    }
}

/// A sequence's cache in the batched engine: its lane and how many of the lane's positions are valid.
#[derive(Debug)]
pub struct LaneCache {
    slot: usize,
    len: usize,
    book: Arc<Mutex<SlotBook>>,
}

impl Drop for LaneCache {
    fn drop(&mut self) {
        lock(&self.book).free.push(self.slot);
    }
}

impl Cache for LaneCache {
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The lane buffers: keys and values of every layer, side by side so that a pass writes both with one scatter.
struct Lanes<B: Backend> {
    /// `[layer]`: `[slots, 2 kv_heads, capacity, head_dim]`, keys in heads `0..kv_heads`, values after them;
    /// `None` only while a pass writes it.
    kv: Vec<Option<Tensor<B, 4>>>,
    slots: usize,
    capacity: usize,
}

/// The burn decoder over lane buffers (see the module's documentation).
pub struct BatchedEngine<B: Backend> {
    /// The embeddings, final norm and output head (its `layers` are empty: they run as `layers`).
    model: Llama<B>,
    layers: Vec<FusedBlock<B>>,
    rope: Rope<B>,
    cfg: ModelConfig,
    device: B::Device,
    /// What the weights, activations and lane buffers are stored in.
    precision: Precision,
    book: Arc<Mutex<SlotBook>>,
    lanes: Mutex<Lanes<B>>,
    /// Where a pass's wall time goes: see [`PHASES`].
    phases: Phases,
}

/// The phases of a pass, timed on the host. On a GPU the backend queues kernels and returns, so `launch` is the
/// host's cost of issuing the pass (burn's op dispatch) and `read-back` includes waiting for the GPU to finish
/// it; on the CPU `launch` is the computation itself.
/// - `inputs`: token ids, positions, the mask and the cache destinations built and sent to the device;
/// - `launch`: the layers, the logits and the captured tensors issued;
/// - `read-back`: the asked rows copied to the host as f32;
/// - `unpack`: the rows handed to each sequence.
const PHASES: &[&str] = &["inputs", "launch", "read-back", "unpack"];

/// A pass's `[cells, vocab]` f32 logits, left on the device; a row is copied to the host when someone asks for
/// it ([`NextDist::logits`]).
struct DeviceRows<B: Backend>(Mutex<Tensor<B, 2>>);

impl<B: Backend> RowSource for DeviceRows<B>
where
    Tensor<B, 2>: Send,
{
    fn row(&self, i: usize) -> Vec<f32> {
        let t = lock(&self.0).clone();
        let [_, vocab] = t.dims();
        host_rows(t.slice([i..i + 1, 0..vocab])).pop().expect("one row")
    }
}

/// One sequence of a pass: its lane, first position, tokens and what it asked for.
struct Row<'a> {
    /// Index into the forward call's sequences.
    seq: usize,
    slot: usize,
    start: usize,
    ids: &'a [u32],
    want: super::Want,
}

impl<B: Backend> BatchedEngine<B> {
    pub fn new(mut model: Llama<B>, rope: Rope<B>, cfg: ModelConfig, device: B::Device) -> Self {
        let layers = model.layers.iter().map(FusedBlock::new).collect();
        model.layers = Vec::new();
        let lanes = Lanes { kv: vec![], slots: 0, capacity: 0 };
        let precision = Precision::F32;
        let phases = Phases::new(PHASES);
        BatchedEngine {
            model,
            layers,
            rope,
            cfg,
            device,
            precision,
            book: Arc::default(),
            lanes: Mutex::new(lanes),
            phases,
        }
    }

    /// Grows the buffers to hold `slots` lanes of `capacity` positions (both rounded up to powers of two);
    /// what they hold is kept.
    fn reserve(&self, lanes: &mut Lanes<B>, slots: usize, capacity: usize) {
        let slots = slots.max(MIN_SLOTS).next_power_of_two().max(lanes.slots);
        let capacity = capacity.max(MIN_CAPACITY).next_power_of_two().max(lanes.capacity);
        if slots == lanes.slots && capacity == lanes.capacity {
            return;
        }
        let (kv, hd) = (2 * self.cfg.num_kv_heads, self.cfg.head_dim);
        let grow = |old: Option<Tensor<B, 4>>| {
            let fresh = Tensor::<B, 4>::zeros([slots, kv, capacity, hd], (&self.device, self.precision.dtype()));
            match old {
                None => fresh,
                Some(old) => {
                    let [s, _, c, _] = old.dims();
                    fresh.slice_assign([0..s, 0..kv, 0..c, 0..hd], old)
                }
            }
        };
        let n = self.cfg.num_layers;
        lanes.kv = (0..n).map(|l| Some(grow(lanes.kv.get_mut(l).and_then(Option::take)))).collect();
        lanes.slots = slots;
        lanes.capacity = capacity;
    }

    /// Fails for a lane cache of another model (another engine's lanes and slots).
    fn check_own(&self, cache: &LaneCache) -> Result<()> {
        if !Arc::ptr_eq(&cache.book, &self.book) {
            return Err(anyhow!("a cache made by another model"));
        }
        Ok(())
    }

    /// The lane buffers, locked; fails where a pass failed halfway and left them incomplete.
    fn live_lanes(&self) -> Result<MutexGuard<'_, Lanes<B>>> {
        let lanes = lock(&self.lanes);
        if lanes.kv.iter().any(Option::is_none) {
            return Err(anyhow!("the batched engine's lane buffers were lost in an earlier failure"));
        }
        Ok(lanes)
    }

    fn ints<const D: usize>(&self, v: Vec<i32>, shape: [usize; D]) -> Tensor<B, D, Int> {
        Tensor::from_data(TensorData::new(v, shape), &self.device)
    }

    /// One pass over one or two grids (the decode grid and the prefill grid of a forward call): every weight
    /// product runs once over all their cells, attention per grid. Writes each sequence's keys and values and
    /// fills `outs`.
    fn pass(&self, lanes: &mut Lanes<B>, grids: &[Grid<'_, '_>], outs: &mut [ChunkOut]) {
        let mut since = std::time::Instant::now();
        let cfg = &self.cfg;
        let (d, nh, kvh, hd) = (cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim);
        let rep = nh / kvh;
        let max_pos = self.rope.max_pos();

        // host-side inputs: token ids and positions of every cell (the grids one after the other), per grid its
        // mask and gather, and where the valid cells' keys go
        let (mut ids, mut pos) = (Vec::new(), Vec::new());
        let (mut valid, mut dest) = (Vec::new(), Vec::new());
        let mut parts = Vec::with_capacity(grids.len());
        for g in grids {
            let (r, t, offset) = (g.rows.len(), g.t, ids.len());
            // keys each row attends over: up to the furthest position in the grid, rounded up to a power of two
            // (so that a run sees a few shapes, not one per step)
            let end = g.rows.iter().flatten().map(|w| w.start + t).max().unwrap_or(t);
            let keys = end.next_power_of_two().max(MIN_KEYS).min(lanes.capacity);
            let mut mask = Vec::with_capacity(r * t * keys);
            for (i, row) in g.rows.iter().enumerate() {
                let (start, len) = row.map_or((0, 0), |w| (w.start, w.ids.len()));
                for j in 0..t {
                    let p = start + j;
                    ids.push(row.and_then(|w| w.ids.get(j)).map_or(0, |&x| x as i32));
                    pos.push(p.min(max_pos - 1) as i32);
                    // causal within the lane: position p sees keys 0..=p
                    mask.extend((0..keys).map(|k| k > p));
                    if let Some(w) = row.filter(|_| j < len) {
                        valid.push((offset + i * t + j) as i32);
                        dest.extend((0..2 * kvh).flat_map(|h| [w.slot as i32, h as i32, p as i32]));
                    }
                }
            }
            let mask = Tensor::<B, 4, Bool>::from_data(TensorData::new(mask, [r, 1, t, keys]), &self.device);
            let gather =
                (!g.whole).then(|| self.ints(g.rows.iter().map(|w| w.map_or(0, |w| w.slot as i32)).collect(), [r]));
            parts.push(Part { offset, keys, mask, gather });
        }
        let n = ids.len(); // cells of all grids
        let n_valid = valid.len();
        let valid = self.ints(valid, [n_valid]);
        let dest = self.ints(dest, [n_valid * 2 * kvh, 3]);
        let pos = self.ints(pos, [n]);
        // RoPE tables over all heads of the q|k|v block, [n, nh + 2 kvh, hd]: the value heads get cos 1 and sin 0,
        // so one rotation leaves them as they are and the block stays one contiguous tensor
        let heads = nh + 2 * kvh;
        let (dev, dtype) = (&self.device, self.precision.dtype());
        let table = |tab: &Tensor<B, 2>, fill: f32| {
            let rot = tab.clone().select(0, pos.clone()).reshape([n, 1, hd]).expand([n, nh + kvh, hd]);
            Tensor::cat(vec![rot, Tensor::full([n, kvh, hd], fill, (dev, dtype))], 1)
        };
        let (cos, sin) = (table(&self.rope.cos, 1.0), table(&self.rope.sin, 0.0));
        let rotate = |x: Tensor<B, 3>| {
            // rotate-half RoPE on [n, heads, hd]
            let x1 = x.clone().narrow(2, 0, hd / 2);
            let x2 = x.clone().narrow(2, hd / 2, hd / 2);
            x.clone() * cos.clone() + Tensor::cat(vec![x2.neg(), x1], 2) * sin.clone()
        };

        let rows = || grids.iter().flat_map(|g| g.rows.iter().flatten());
        let captures = rows().any(|w| w.want.capture_from.is_some_and(|f| f < w.ids.len()));
        let ids = self.ints(ids, [n]);
        self.phases.lap(0, &mut since);
        // all cells as one row block, so that every weight product is one [n, in] x [in, out] product
        let mut x = self.model.embed_tokens.val().select(0, ids).reshape([1, n, d]); // [1, n, d]
        let mut layer_sum: Option<Tensor<B, 3>> = None;
        let mut probs_last: Vec<Option<Tensor<B, 4>>> = vec![None; grids.len()];
        let n_layers = self.layers.len();
        for (l, block) in self.layers.iter().enumerate() {
            // [n, nh + 2 kvh, hd]: queries (scaled by 1/sqrt(hd)) and keys rotated, values as they were
            let qkv = rotate(block.qkv(x.clone()).reshape([n, heads, hd]));
            // write the valid cells' keys and values into their lanes: [n_valid * 2 kvh, hd] at (slot, head, pos)
            let new = qkv.clone().select(0, valid.clone()).narrow(1, nh, 2 * kvh);
            let buf = lanes.kv[l].take().expect("lane buffers in place");
            let buf = buf.scatter_nd(dest.clone(), new.reshape([n_valid * 2 * kvh, hd]), IndexingUpdateOp::Assign);
            lanes.kv[l] = Some(buf.clone());
            let mut o_parts = Vec::with_capacity(grids.len());
            for (gi, (g, part)) in grids.iter().zip(&parts).enumerate() {
                let (r, t, keys) = (g.rows.len(), g.t, part.keys);
                // this grid's queries, [r, t, nh, hd]
                let q = if grids.len() == 1 { qkv.clone() } else { qkv.clone().narrow(0, part.offset, r * t) };
                let q = q.narrow(1, 0, nh).reshape([r, t, nh, hd]);
                // the rows' lanes up to `keys`: [slots, 2 kvh, keys, hd] on the decode grid, else [r, 2 kvh, keys, hd]
                let buf = match &part.gather {
                    None => buf.clone().narrow(2, 0, keys),
                    Some(g) => buf.clone().select(0, g.clone()).narrow(2, 0, keys),
                };
                // [., kvh, keys, hd] each
                let (kk, vv) = (buf.clone().narrow(1, 0, kvh), buf.narrow(1, kvh, kvh));
                // grouped-query attention: the query heads sharing a key/value head, [r, kvh, rep * t, hd]
                let q = q.swap_dims(1, 2).reshape([r, kvh, rep * t, hd]);
                let scores = q.matmul(kk.swap_dims(2, 3)); // [r, kvh, rep*t, keys], already scaled
                let scores = scores.reshape([r, nh, t, keys]).mask_fill(part.mask.clone(), f32::NEG_INFINITY);
                // softmax over the keys in stages (reduce.rs)
                let probs = reduce::softmax_rows(scores.cast(DType::F32).reshape([r * nh * t, keys]), reduce::CHUNK);
                let probs = probs.reshape([r, nh, t, keys]).cast(self.precision.dtype()); // [r, nh, t, keys]
                if l + 1 == n_layers && captures {
                    probs_last[gi] = Some(probs.clone());
                }
                let o = probs.reshape([r, kvh, rep * t, keys]).matmul(vv); // [r, kvh, rep*t, hd]
                o_parts.push(if t == 1 {
                    o.reshape([r, nh * hd]) // [r, nh, 1, hd] is already laid out as [r, 1, nh, hd]: no copy
                } else {
                    o.reshape([r, nh, t, hd]).swap_dims(1, 2).reshape([r * t, nh * hd])
                });
            }
            let o = if o_parts.len() == 1 { o_parts.pop().expect("one grid") } else { Tensor::cat(o_parts, 0) };
            let hmid = x + block.o_proj.forward(o.reshape([1, n, nh * hd]));
            x = hmid.clone() + block.mlp(hmid);
            if captures && l + 1 < n_layers {
                let x = x.clone().cast(DType::F32);
                layer_sum = Some(match layer_sum.take() {
                    Some(acc) => acc + x,
                    None => x,
                });
            }
        }
        let hidden = self.model.norm.forward(x).reshape([n, d]); // [n, d], in the engine's dtype

        // what each sequence asked for: logits of rows >= logits_from, internals of rows >= capture_from; a cell
        // is (grid, row, position in the row)
        let mut logit_cells = Vec::new();
        let mut capture_cells = Vec::new();
        for (gi, g) in grids.iter().enumerate() {
            for (i, w) in g.rows.iter().enumerate() {
                let Some(w) = w else { continue };
                let len = w.ids.len();
                logit_cells.extend((w.want.logits_from..len).map(|j| (gi, i, j)));
                if let Some(from) = w.want.capture_from {
                    capture_cells.extend((from..len).map(|j| (gi, i, j)));
                }
            }
        }
        let row = |&(gi, i, _): &(usize, usize, usize)| grids[gi].rows[i].expect("a cell of a sequence");
        let cell = |&(gi, i, j): &(usize, usize, usize)| parts[gi].offset + i * grids[gi].t + j;
        let flat =
            |cells: &[(usize, usize, usize)]| self.ints(cells.iter().map(|c| cell(c) as i32).collect(), [cells.len()]);
        if !logit_cells.is_empty() {
            let h = hidden.clone().select(0, flat(&logit_cells));
            let logits = self.model.logits(h.unsqueeze::<3>()); // [1, cells, vocab]
            let [_, n, vocab] = logits.dims();
            // each cell's distribution is scored here: only [n, 4] floats and [n] ids go to the host
            let logits = logits.reshape([n, vocab]).cast(DType::F32);
            let next: Vec<Option<u32>> = logit_cells.iter().map(|c| row(c).ids.get(c.2 + 1).copied()).collect();
            let next_ids = self.ints(next.iter().map(|x| x.map_or(0, |x| x as i32)).collect(), [n, 1]);
            // over the vocabulary in stages (reduce.rs: one GPU thread per row would read the whole row)
            let (max, argmax) = reduce::max_argmax_rows(logits.clone(), reduce::CHUNK); // [n, 1] each
            let z = logits.clone() - max.clone(); // [n, vocab]
            let e = z.clone().exp();
            // H = log Z - E[l - m], with Z = sum exp(l - m), as sampling::entropy_and_prob (in f32 here)
            let sum = reduce::sum_rows(e.clone(), reduce::CHUNK); // [n, 1]
            let entropy = sum.clone().log() - reduce::sum_rows(e * z, reduce::CHUNK).div(sum.clone());
            let lse = max.clone() + sum.log();
            let next_logit = logits.clone().gather(1, next_ids); // [n, 1]
            let stats = Tensor::cat(vec![entropy, lse, max, next_logit], 1); // [n, 4]
            self.phases.lap(1, &mut since);
            let stats = host_rows(stats);
            let argmax: Vec<i64> = argmax.into_data().iter::<i64>().collect();
            self.phases.lap(2, &mut since);
            // a session keeps its chunk's last row as its next-token distribution (and the row with it); the
            // rows inside a chunk are read only through their scores. So where a chunk has rows before its last,
            // the last rows get a tensor of their own, and the whole [n, vocab] one is freed with the chunk.
            let is_last = |c: &(usize, usize, usize)| c.2 + 1 == row(c).ids.len();
            let (source, last_source, last_row) = if logit_cells.iter().all(is_last) {
                let s: Arc<dyn RowSource> = Arc::new(DeviceRows(Mutex::new(logits)));
                (s.clone(), s, (0..n).collect::<Vec<_>>())
            } else {
                let lasts: Vec<usize> = (0..n).filter(|&c| is_last(&logit_cells[c])).collect();
                let mut at = vec![0; n];
                for (k, &c) in lasts.iter().enumerate() {
                    at[c] = k;
                }
                let idx = self.ints(lasts.iter().map(|&c| c as i32).collect(), [lasts.len()]);
                let last: Arc<dyn RowSource> = Arc::new(DeviceRows(Mutex::new(logits.clone().select(0, idx))));
                (Arc::new(DeviceRows(Mutex::new(logits))) as Arc<dyn RowSource>, last, at)
            };
            for (c, lc) in logit_cells.iter().enumerate() {
                let (source, at) = if is_last(lc) { (last_source.clone(), last_row[c]) } else { (source.clone(), c) };
                let [entropy, lse, max, next_logit] = stats[c][..] else { unreachable!("four scores per cell") };
                outs[row(lc).seq].logits.push(NextDist::scored(Scored {
                    entropy,
                    lse,
                    argmax: argmax[c] as u32,
                    max,
                    next: next[c].map(|id| (id, next_logit)),
                    source,
                    row: at,
                }));
            }
            self.phases.lap(3, &mut since);
        }
        if !capture_cells.is_empty() {
            let idx = flat(&capture_cells);
            let finals = hidden.clone().select(0, idx.clone());
            let hidden = hidden.cast(DType::F32);
            let sum = match layer_sum {
                Some(acc) => acc.reshape([n, d]) + hidden,
                None => hidden,
            };
            let means = sum.select(0, idx).div_scalar(n_layers as f64);
            // the last layer's attention rows, per grid (their key counts differ): [cells of the grid, nh * keys]
            let mut probs = Vec::with_capacity(grids.len());
            for (gi, (g, part)) in grids.iter().zip(&parts).enumerate() {
                let local: Vec<i32> =
                    capture_cells.iter().filter(|c| c.0 == gi).map(|&(_, i, j)| (i * g.t + j) as i32).collect();
                probs.push((!local.is_empty()).then(|| {
                    let p = probs_last[gi].take().expect("attention kept when capturing");
                    let m = local.len();
                    p.swap_dims(1, 2).reshape([g.rows.len() * g.t, nh * part.keys]).select(0, self.ints(local, [m]))
                }));
            }
            self.phases.lap(1, &mut since);
            let (finals, means) = (host_rows(finals), host_rows(means));
            let mut attn: Vec<std::vec::IntoIter<Vec<f32>>> =
                probs.into_iter().map(|p| p.map(host_rows).unwrap_or_default().into_iter()).collect();
            self.phases.lap(2, &mut since);
            for (c, cc) in capture_cells.iter().enumerate() {
                let (w, keys) = (row(cc), parts[cc.0].keys);
                let p = w.start + cc.2;
                let a = attn[cc.0].next().expect("one attention row per captured cell");
                let o = &mut outs[w.seq];
                o.hidden_final.push(finals[c].clone());
                o.hidden_mean.push(means[c].clone());
                o.attn.push((0..nh).map(|hh| a[hh * keys..hh * keys + p + 1].to_vec()).collect());
            }
            self.phases.lap(3, &mut since);
        }
        self.phases.lap(1, &mut since); // a pass that asked for nothing back
    }
}

/// The rows of one grid of a pass: `rows[i]` is the lane of grid row `i` and the sequence it carries (`None`: a
/// row computed and thrown away), each `t` positions long; `whole`: the grid is the whole buffer (row `i` is slot
/// `i`: no gather).
struct Grid<'a, 'b> {
    rows: Vec<Option<&'a Row<'b>>>,
    t: usize,
    whole: bool,
}

/// A grid's device-side inputs in a pass: where its cells start among all cells, the key positions its rows
/// attend over, its mask `[rows, 1, t, keys]` and (prefill) the slots its rows read.
struct Part<B: Backend> {
    offset: usize,
    keys: usize,
    mask: Tensor<B, 4, Bool>,
    gather: Option<Tensor<B, 1, Int>>,
}

impl<B: Backend> Engine for BatchedEngine<B>
where
    Llama<B>: Send + Sync,
    FusedBlock<B>: Send + Sync,
    Rope<B>: Send + Sync,
    Tensor<B, 4>: Send,
{
    fn new_cache(&self, _capacity: usize) -> Box<dyn Cache> {
        let mut book = lock(&self.book);
        let slot = book.free.pop().unwrap_or_else(|| {
            book.issued += 1;
            book.issued - 1
        });
        Box::new(LaneCache { slot, len: 0, book: self.book.clone() })
    }

    fn max_positions(&self) -> usize {
        self.rope.max_pos()
    }

    fn describe(&self) -> String {
        let backend = std::any::type_name::<B>().rsplit("::").next().unwrap_or("burn");
        match self.precision {
            Precision::F32 => format!("batched ({backend})"),
            p => format!("batched ({backend}, {p})"),
        }
    }

    fn phases(&self) -> Vec<(&'static str, std::time::Duration)> {
        self.phases.totals()
    }

    fn set_precision(&mut self, precision: Precision) -> Result<()> {
        // the lane buffers of live sequences hold keys in the old dtype: change only before the first
        anyhow::ensure!(lock(&self.book).issued == 0, "the dtype changes only before the first sequence");
        let dtype = precision.dtype();
        self.model = in_dtype(self.model.clone(), dtype); // a clone shares the weights' storage
        self.layers = self.layers.iter().map(|b| in_dtype(b.clone(), dtype)).collect();
        self.rope = self.rope.cast(dtype);
        self.precision = precision;
        *lock(&self.lanes) = Lanes { kv: vec![], slots: 0, capacity: 0 };
        Ok(())
    }

    fn copy_prefix(&self, from: &dyn Cache, to: &mut dyn Cache, len: usize) -> Result<()> {
        let (from, to) = super::cache_pair::<LaneCache>(from, to, len)?;
        self.check_own(from)?;
        self.check_own(to)?;
        if len > 0 && from.slot != to.slot {
            let mut lanes = self.live_lanes()?;
            let slots = (to.slot + 1).max(lock(&self.book).issued);
            self.reserve(&mut lanes, slots, len);
            let (kv, hd) = (2 * self.cfg.num_kv_heads, self.cfg.head_dim);
            for buf in lanes.kv.iter_mut() {
                // one slot's first `len` positions, keys and values of the layer, onto the other slot's; the
                // positions are copied out first (`mul_scalar` writes a tensor of its own) so that the buffer has
                // one owner again and is written in place, not copied whole
                let b = buf.take().expect("checked above");
                let part = b.clone().slice([from.slot..from.slot + 1, 0..kv, 0..len, 0..hd]).mul_scalar(1.0);
                *buf = Some(b.slice_assign([to.slot..to.slot + 1, 0..kv, 0..len, 0..hd], part));
            }
        }
        to.len = len;
        Ok(())
    }

    fn forward(&self, seqs: &mut [SeqIn<'_>]) -> Result<Vec<ChunkOut>> {
        check_positions(seqs, self.max_positions())?;
        let mut rows = Vec::with_capacity(seqs.len());
        for (i, s) in seqs.iter_mut().enumerate() {
            let cache = s
                .cache
                .as_any_mut()
                .downcast_mut::<LaneCache>()
                .ok_or_else(|| anyhow!("a cache made by another engine"))?;
            self.check_own(cache)?;
            rows.push(Row { seq: i, slot: cache.slot, start: cache.len, ids: s.ids, want: s.want });
        }
        let mut outs = vec![ChunkOut::default(); seqs.len()];
        {
            let mut lanes = self.live_lanes()?;
            let slots = rows.iter().map(|w| w.slot + 1).max().unwrap_or(0).max(lock(&self.book).issued);
            let capacity = rows.iter().map(|w| w.start + w.ids.len().next_power_of_two()).max().unwrap_or(0);
            self.reserve(&mut lanes, slots, capacity);
            // one pass over two grids: decode, the one-token rows on the whole buffer's grid; prefill, the longer
            // chunks together, padded to the longest
            let mut grids = Vec::with_capacity(2);
            let one: Vec<&Row<'_>> = rows.iter().filter(|w| w.ids.len() == 1).collect();
            if !one.is_empty() {
                let mut grid: Vec<Option<&Row<'_>>> = vec![None; lanes.slots];
                for w in &one {
                    grid[w.slot] = Some(w);
                }
                grids.push(Grid { rows: grid, t: 1, whole: true });
            }
            let many: Vec<Option<&Row<'_>>> = rows.iter().filter(|w| w.ids.len() > 1).map(Some).collect();
            if !many.is_empty() {
                let t = many.iter().flatten().map(|w| w.ids.len()).max().unwrap().max(MIN_CHUNK).next_power_of_two();
                grids.push(Grid { rows: many, t, whole: false });
            }
            if !grids.is_empty() {
                self.pass(&mut lanes, &grids, &mut outs);
            }
        }
        for (s, w) in seqs.iter_mut().zip(&rows) {
            let cache = s.cache.as_any_mut().downcast_mut::<LaneCache>().expect("checked above");
            cache.len = w.start + w.ids.len();
        }
        Ok(outs)
    }
}
