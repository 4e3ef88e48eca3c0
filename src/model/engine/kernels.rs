//! CPU inference kernels on plain f32 buffers, for the CPU engine ([`super::cpu`]): the hot steps of the
//! decoder's forward pass without burn's generic tensor ops.
//!
//! Why: on a 153-token prefill a third of the time went outside the matrix products, into strided copies
//! (`swap_dims` + `reshape` around attention), RoPE's `narrow`/`cat`, a boolean causal mask built on the host
//! every layer, and one allocation per element-wise op. And gemm's own two-thread split of a 153-row product
//! scales poorly. So:
//! - [`matmul`]: `x [rows, k] @ w [k, n]` with the weight's output columns split over the rayon pool, one
//!   single-threaded gemm per block (each thread packs only its block of the weight);
//! - [`rope`] in place on `[t, heads * hd]` rows (the rotate-half form transformers uses, same products and sums);
//! - [`causal_attention`]: per head, `softmax(Q K^T / sqrt(hd))` over the visible keys and `P V`, with two gemm
//!   calls, written straight into the `[t, heads * hd]` layout `o_proj` reads; heads split over the rayon pool;
//! - [`rms_norm`] and [`silu_mul`] in one pass each.
//!
//! The sentence encoder's CPU engine ([`crate::encoder::bert_cpu`]) adds [`layer_norm`] (residual included),
//! [`gelu`] (with a vectorisable [`erf_fast`]) and [`bidirectional_attention`] (padding-masked, over fused QKV rows).
//!
//! The results equal burn's ops up to the order of f32 additions inside reductions (tested against them below and
//! by the reference tests against transformers). [`flex_linear`] lets a burn model on the flex backend (the
//! sentence encoder) use [`matmul`] for its dense layers.

use std::any::{Any, TypeId};

use burn::backend::flex::FlexTensor;
use burn::prelude::Backend;
use burn::tensor::{DType, Tensor, TensorData, TensorPrimitive};
use rayon::prelude::*;

/// A weight matrix `[k, n]` in memory: its elements and their row and column strides.
#[derive(Debug, Clone, Copy)]
pub struct Strided<'a> {
    pub data: &'a [f32],
    pub row_stride: isize,
    pub col_stride: isize,
}

impl<'a> Strided<'a> {
    /// A row-major `[k, n]` matrix.
    pub fn rows(data: &'a [f32], n: usize) -> Self {
        Strided { data, row_stride: n as isize, col_stride: 1 }
    }

    /// The transpose of a row-major `[n, k]` matrix, read as `[k, n]` without copying.
    pub fn transposed(data: &'a [f32], k: usize) -> Self {
        Strided { data, row_stride: 1, col_stride: k as isize }
    }
}

/// True when `B`'s float tensors are burn-flex ones (CPU, no autodiff).
pub fn is_flex<B: Backend>() -> bool {
    TypeId::of::<B::FloatTensorPrimitive>() == TypeId::of::<FlexTensor>()
}

/// The flex tensor behind `t` (an `Arc` clone, no copy), or `None` on any other backend or dtype.
fn as_flex<B: Backend, const D: usize>(t: &Tensor<B, D>) -> Option<FlexTensor> {
    if !is_flex::<B>() {
        return None;
    }
    let p = match t.clone().into_primitive() {
        TensorPrimitive::Float(p) => p,
        TensorPrimitive::QFloat(_) => return None,
    };
    let boxed: Box<dyn Any> = Box::new(p);
    let ft = *boxed.downcast::<FlexTensor>().ok()?;
    (ft.dtype() == DType::F32).then_some(ft)
}

/// A row-major contiguous f32 slice of `t` (borrowed when it already is one; copied otherwise).
fn contiguous(t: &FlexTensor) -> std::borrow::Cow<'_, [f32]> {
    match t.layout().contiguous_offsets() {
        Some((a, b)) => std::borrow::Cow::Borrowed(&t.storage::<f32>()[a..b]),
        None => std::borrow::Cow::Owned(t.to_contiguous().storage::<f32>().to_vec()),
    }
}

/// `x [b, t, k] @ w [k, n] (+ bias)` through [`matmul`] when every operand is a flex f32 tensor (CPU inference);
/// `None` otherwise (the caller then uses burn's ops).
pub fn flex_linear<B: Backend>(
    x: &Tensor<B, 3>,
    w: &Tensor<B, 2>,
    bias: Option<&Tensor<B, 1>>,
) -> Option<Tensor<B, 3>> {
    let (xf, wf) = (as_flex(x)?, as_flex(w)?);
    let bias = match bias {
        Some(b) => Some(as_flex(b)?),
        None => None,
    };
    let [b, t, k] = x.dims();
    let [_, n] = w.dims();
    let (ws, woff) = (wf.layout().strides().to_vec(), wf.layout().start_offset());
    let wdata = &wf.storage::<f32>()[woff..];
    let w = Strided { data: wdata, row_stride: ws[0], col_stride: ws[1] };
    let bias = bias.as_ref().map(contiguous);
    let y = matmul(&contiguous(&xf), b * t, k, w, n, bias.as_deref());
    Some(Tensor::from_data(TensorData::new(y, [b, t, n]), &x.device()))
}

/// A raw pointer that crosses into rayon workers; every worker writes a disjoint part of it.
#[derive(Clone, Copy)]
struct Ptr(*mut f32);
unsafe impl Send for Ptr {}
unsafe impl Sync for Ptr {}

/// `dst = lhs @ rhs` for strided operands (gemm's convention: `*_rs` row stride, `*_cs` column stride).
#[allow(clippy::too_many_arguments)]
unsafe fn gemm1(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut f32,
    dst_rs: isize,
    lhs: *const f32,
    lhs_rs: isize,
    lhs_cs: isize,
    rhs: *const f32,
    rhs_rs: isize,
    rhs_cs: isize,
) {
    gemm::gemm(
        m,
        n,
        k,
        dst,
        1,
        dst_rs,
        false,
        lhs,
        lhs_cs,
        lhs_rs,
        rhs,
        rhs_cs,
        rhs_rs,
        0.0f32,
        1.0f32,
        false,
        false,
        false,
        gemm::Parallelism::None,
    );
}

/// `x [rows, k] @ w [k, n] (+ bias)` -> `[rows, n]`, the weight's output columns split into one block per rayon
/// thread (a multiple of 16 columns each).
pub fn matmul(x: &[f32], rows: usize, k: usize, w: Strided<'_>, n: usize, bias: Option<&[f32]>) -> Vec<f32> {
    let mut y = vec![0f32; rows * n];
    matmul_into(x, rows, k, w, n, bias, &mut y);
    y
}

/// [`matmul`] into `y [rows, n]` (every value overwritten).
pub fn matmul_into(x: &[f32], rows: usize, k: usize, w: Strided<'_>, n: usize, bias: Option<&[f32]>, y: &mut [f32]) {
    debug_assert_eq!(x.len(), rows * k);
    assert_eq!(y.len(), rows * n, "matmul: output length");
    let ws = [w.row_stride, w.col_stride];
    let max = (k as isize - 1) * ws[0] + (n as isize - 1) * ws[1];
    assert!(k > 0 && n > 0 && (max as usize) < w.data.len(), "matmul: the weight view exceeds its buffer");
    let wdata = w.data;
    let threads = rayon::current_num_threads().max(1);
    // Few rows (decoding a float model): one call; splitting would only add thread wake-ups.
    let blocks = if rows <= 4 { 1 } else { threads };
    let chunk = n.div_ceil(blocks).div_ceil(16) * 16;
    let yp = Ptr(y.as_mut_ptr());
    let run = |j0: usize| {
        let cols = chunk.min(n - j0);
        #[allow(clippy::redundant_locals)] // moves the whole `Ptr` (Send) into the closure, not its raw field
        let yp = yp;
        // SAFETY: the weight view covers [k, n] with strides `ws` (checked above); each block writes its own columns.
        unsafe {
            gemm1(
                rows,
                cols,
                k,
                yp.0.add(j0),
                n as isize,
                x.as_ptr(),
                k as isize,
                1,
                wdata.as_ptr().offset(j0 as isize * ws[1]),
                ws[0],
                ws[1],
            )
        }
    };
    if chunk >= n {
        run(0);
    } else {
        (0..n).step_by(chunk).collect::<Vec<_>>().into_par_iter().for_each(run);
    }
    if let Some(b) = bias {
        add_bias(y, b);
    }
}

/// Adds `b [n]` to every `n`-wide row of `y`.
fn add_bias(y: &mut [f32], b: &[f32]) {
    debug_assert!(!b.is_empty() && y.len().is_multiple_of(b.len()));
    for row in y.chunks_mut(b.len()) {
        for (o, bb) in row.iter_mut().zip(b) {
            *o += bb;
        }
    }
}

/// f32 weight values per tile of [`matmul_filled_into`] (4M values, 16 MiB): a few tiles per matrix of a small model,
/// so each gemm call still amortises its packing of `x`; one tile per rayon worker in memory at a time.
const FILL_TILE_VALUES: usize = 1 << 22;

thread_local! {
    /// Each thread's tile for [`matmul_filled_into`], kept between calls: a fresh 4-16 MiB buffer per tile cost more
    /// in page faults and zeroing than filling it.
    static FILL_TILE: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Outputs up to which gemm multiplies by a column-major weight with dot products (its "horizontal" kernels),
/// adding in another order than its blocked kernels.
const GEMM_DOT_OUTPUTS: usize = 16 * 16;

/// `x_i [rows_i, k] @ W^T (+ bias)` -> `ys[i] [rows_i, n]` (every value overwritten) for each `x_i` of `xs` and
/// a weight `W [n, k]` that is not held in f32: `fill(j0, tile)` writes rows `j0..j0 + tile.len() / k` of `W`
/// (row-major) into `tile`. The output columns go in tiles of at most about `FILL_TILE_VALUES` (4M) weights and at
/// least one per thread (a multiple of 16 columns each), the tiles spread over the rayon pool; each tile is filled
/// once and multiplied with every `x_i` by a single-threaded gemm.
///
/// Each output is bit for bit what [`matmul`] gives on the f32 matrix `W^T`: gemm adds the products of an output
/// in an order set by `k` alone (its `k` blocking), whatever the columns around it (tested below).
pub fn matmul_filled_into(
    xs: &[&[f32]],
    k: usize,
    n: usize,
    bias: Option<&[f32]>,
    fill: &(dyn Fn(usize, &mut [f32]) + Sync),
    ys: &mut [Vec<f32>],
) {
    assert!(k > 0 && n > 0, "matmul_filled_into: empty weight");
    assert_eq!(xs.len(), ys.len(), "matmul_filled_into: one output per input");
    for (x, y) in xs.iter().zip(ys.iter()) {
        assert!(x.len().is_multiple_of(k) && y.len() == x.len() / k * n, "matmul_filled_into: output length");
    }
    if xs.iter().all(|x| x.is_empty()) {
        return; // nothing to multiply: no tile is filled
    }
    // at most FILL_TILE_VALUES weights per tile, and at least one tile per thread
    let per_thread = n.div_ceil(rayon::current_num_threads().max(1));
    let tile = (FILL_TILE_VALUES / k).min(per_thread).div_ceil(16).max(1) * 16;
    let yps: Vec<Ptr> = ys.iter_mut().map(|y| Ptr(y.as_mut_ptr())).collect();
    let starts: Vec<usize> = (0..n).step_by(tile).collect();
    starts.into_par_iter().for_each(|j0| {
        let cols = tile.min(n - j0);
        FILL_TILE.with_borrow_mut(|buf| {
            buf.resize(buf.len().max(cols * k), 0.0);
            let w = &mut buf[..cols * k];
            fill(j0, w);
            for (x, yp) in xs.iter().zip(&yps) {
                let rows = x.len() / k;
                if rows == 0 {
                    continue;
                }
                // gemm computes a product of at most 16 x 16 outputs whose weight is column-major with dot products
                // (another order of additions): such a tile is made row-major first, as `matmul`'s weights are.
                let row_major: Vec<f32>;
                let (wp, rs, cs) = if rows * cols <= GEMM_DOT_OUTPUTS {
                    row_major = (0..k * cols).map(|i| w[(i % cols) * k + i / cols]).collect();
                    (row_major.as_ptr(), cols as isize, 1)
                } else {
                    (w.as_ptr(), 1, k as isize)
                };
                // SAFETY: the weight (`w [cols, k]` read transposed, or its row-major copy) is `[k, cols]`; `y_i` is
                // `[rows, n]` and each tile writes its own columns of it.
                unsafe { gemm1(rows, cols, k, yp.0.add(j0), n as isize, x.as_ptr(), k as isize, 1, wp, rs, cs) }
            }
        })
    });
    if let Some(b) = bias {
        ys.iter_mut().for_each(|y| add_bias(y, b));
    }
}

/// Rotate-half RoPE in place on `x [t, heads * hd]` at positions `start..start + t`; `cos`/`sin` are the
/// `[max_pos, hd]` tables of [`crate::model::llama::Rope`] (its flex buffers) (frequencies repeated over both
/// halves). Computes exactly what `x * cos + cat(-x2, x1) * sin` does.
pub fn rope(x: &mut [f32], t: usize, heads: usize, hd: usize, start: usize, cos: &[f32], sin: &[f32]) {
    let half = hd / 2;
    for i in 0..t {
        let p = (start + i) * hd;
        let (c, s) = (&cos[p..p + hd], &sin[p..p + hd]);
        for h in 0..heads {
            let v = &mut x[(i * heads + h) * hd..(i * heads + h + 1) * hd];
            for j in 0..half {
                let (x1, x2) = (v[j], v[j + half]);
                v[j] = x1 * c[j] + (-x2) * s[j];
                v[j + half] = x2 * c[j + half] + x1 * s[j + half];
            }
        }
    }
}

thread_local! {
    /// Each thread's block of one head's probabilities `[t, keys]` for [`causal_attention`] when they are not kept
    /// (every layer but a captured last one), kept between calls: a prefill of 1,779 rows allocated and faulted in
    /// 177 MB of probabilities per layer (7% of its run in page faults); now 12.7 MB per thread, once.
    static ATTENTION_SCRATCH: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Query rows per block of [`causal_attention`]: each block multiplies only the keys its last row sees.
const ATTENTION_ROWS: usize = 64;

/// Query rows times keys per head from which [`causal_attention`] spreads its heads over the rayon pool: a head's
/// 2 x 1,024 x `hd` multiply-adds (about 10 us at `hd` = 64) outweigh handing it to another thread.
const ATTENTION_SPLIT: usize = 1024;

/// Keys per block of [`attend_row`]: a block's keys (or values) stay in the core's first-level cache while each
/// query head of the group reads them.
const ROW_KEYS: usize = 32;

/// One query row of decoding and the query heads that share a key/value head: what [`attend_row`] reads.
struct GroupRow<'a> {
    /// the heads' query rows `[rep, hd]`
    q: &'a [f32],
    /// the key and value rows of the `vis` positions the row sees, `[vis, hd]` each
    k: &'a [f32],
    v: &'a [f32],
    hd: usize,
    /// from one head's probability row to the next's in `p`
    stride: usize,
    /// each probability row's length (zeros past `vis`)
    keys: usize,
    scale: f32,
}

impl GroupRow<'_> {
    /// The heads and the positions seen (`rep`, `vis`), after checking that `p` and `out` hold what a kernel of
    /// [`attend_row`] writes and `v` what it reads: the bounds the SIMD kernels' unchecked loads and stores rely on.
    fn heads_and_seen(&self, p: &[f32], out: &[f32]) -> (usize, usize) {
        let GroupRow { q, k, v, hd, stride, keys, .. } = *self;
        let (rep, vis) = (q.len() / hd, k.len() / hd);
        assert!(
            rep > 0
                && out.len() == q.len()
                && v.len() >= vis * hd
                && vis <= keys
                && (rep - 1) * stride + keys <= p.len(),
            "attend_row: {rep} heads of {hd} over {vis} of {keys} keys"
        );
        (rep, vis)
    }
}

/// One query row's attention for the query heads that share a key/value head (decoding): head `j`'s probabilities
/// go to `p[j * row.stride..][..row.keys]` (zeros past the seen positions), its output to `out[j * hd..][..hd]`. Loops
/// over blocks of [`ROW_KEYS`] keys rather than gemm, which packed (transposed, one value at a time) `K` and `P`
/// afresh for every row: at a handful of rows, more work than the products. Heads 16, 32, 64 or 128 wide take
/// AVX-512 where the CPU has it ([`attend_row_avx512`]), else AVX2 with FMA ([`attend_row_avx2`]); other widths the
/// portable loops, compiled for AVX2 and FMA where the CPU has them: the same fused multiply-adds and additions in
/// the same order each way, so the same results (where the CPU lacks FMA, `f32::mul_add` is libm's `fmaf`: slow but
/// exact).
fn attend_row(row: &GroupRow, p: &mut [f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if crate::model::simd::avx512f() {
            // SAFETY: the CPU has AVX-512 (checked on the line above); the kernel's width is `hd`.
            match row.hd {
                16 => return unsafe { attend_row_avx512::<1>(row, p, out) },
                32 => return unsafe { attend_row_avx512::<2>(row, p, out) },
                64 => return unsafe { attend_row_avx512::<4>(row, p, out) },
                128 => return unsafe { attend_row_avx512::<8>(row, p, out) },
                _ => {}
            }
        }
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2(row: &GroupRow, p: &mut [f32], out: &mut [f32]) {
            attend_row_portable(row, p, out)
        }
        if crate::model::simd::avx2_fma() {
            // SAFETY: the CPU has AVX2 and FMA (checked on the line above); the kernel's width is `hd`.
            return match row.hd {
                16 => unsafe { attend_row_avx2::<1>(row, p, out) },
                32 => unsafe { attend_row_avx2::<2>(row, p, out) },
                64 => unsafe { attend_row_avx2::<4>(row, p, out) },
                128 => unsafe { attend_row_avx2::<8>(row, p, out) },
                _ => unsafe { avx2(row, p, out) },
            };
        }
    }
    attend_row_portable(row, p, out)
}

/// [`attend_row`] in portable code: each score a dot product in 16 lanes of fused multiply-adds (a width that is not
/// a multiple of 16 puts its rest in the first lanes), the lanes then added in halves; each output the
/// probability-weighted values fused-multiply-added in the keys' order.
#[inline(always)]
fn attend_row_portable(row: &GroupRow, p: &mut [f32], out: &mut [f32]) {
    let GroupRow { q, k, v, hd, stride, keys, scale } = *row;
    let vis = k.len() / hd;
    // scores: per block of keys, every head's dot products with them
    for (b, kb) in k.chunks(ROW_KEYS * hd).enumerate() {
        for (j, qj) in q.chunks_exact(hd).enumerate() {
            for (s, kr) in p[j * stride + b * ROW_KEYS..].iter_mut().zip(kb.chunks_exact(hd)) {
                *s = dot16(qj, kr);
            }
        }
    }
    for j in 0..q.len() / hd {
        softmax_prefix(&mut p[j * stride..][..keys], vis, scale);
    }
    // outputs: per block of values, every head's probability-weighted sum of them
    out.fill(0.0);
    for (b, vb) in v.chunks(ROW_KEYS * hd).enumerate() {
        for (j, oj) in out.chunks_exact_mut(hd).enumerate() {
            for (&w, vr) in p[j * stride + b * ROW_KEYS..].iter().zip(vb.chunks_exact(hd)) {
                for (o, &x) in oj.iter_mut().zip(vr) {
                    *o = w.mul_add(x, *o);
                }
            }
        }
    }
}

/// A score of [`attend_row_portable`]: the dot product in 16 lanes of fused multiply-adds (a width that is not a
/// multiple of 16 puts its rest in the first lanes), the lanes then added in halves. A function inlined always, not
/// a closure: a closure is compiled on its own, without the caller's `avx2,fma` features, so its `mul_add` was a
/// call into libm's `fmaf` per product even on a CPU with FMA.
#[inline(always)]
fn dot16(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    for (x, y) in a.chunks_exact(16).zip(b.chunks_exact(16)) {
        for l in 0..16 {
            acc[l] = x[l].mul_add(y[l], acc[l]);
        }
    }
    let whole = a.len() / 16 * 16;
    for (l, (x, y)) in a[whole..].iter().zip(&b[whole..]).enumerate() {
        acc[l] = x.mul_add(*y, acc[l]);
    }
    for w in [8, 4, 2, 1] {
        for l in 0..w {
            acc[l] += acc[l + w];
        }
    }
    acc[0]
}

/// [`attend_row`] for heads `16 * C` wide on AVX-512: a head's query row (and, per block of keys, its output) held
/// in `C` registers; the operations of [`attend_row_portable`] in its order. Scores go 16 keys at a time: 16 chains of
/// fused multiply-adds side by side, then their lanes added in halves for all 16 at once (`halves16`), which is
/// the pairs of additions `halves` makes one key at a time; outputs two heads at a time ([`weigh`]).
///
/// # Safety
/// The CPU must have AVX-512F (the width, `row.hd = 16 * C`, is checked).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn attend_row_avx512<const C: usize>(row: &GroupRow, p: &mut [f32], out: &mut [f32]) {
    use std::arch::x86_64::*;
    let GroupRow { q, k, v, hd, stride, keys, scale } = *row;
    assert_eq!(hd, 16 * C, "attend_row: the AVX-512 kernel for heads of {}", 16 * C);
    let (rep, vis) = row.heads_and_seen(p, out);
    // 16 lanes added in halves (8, 4, 2, 1), as the portable loop
    #[inline(always)]
    unsafe fn halves(a: __m512) -> f32 {
        halves_of_two(_mm512_castps512_ps256(a), _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(a))))
    }
    // a key row's products with the query row, added over the `C` vectors of 16 lanes
    #[inline(always)]
    unsafe fn dot16<const C: usize>(qj: &[__m512; C], kr: *const f32) -> __m512 {
        let mut acc = _mm512_setzero_ps();
        for (c, &r) in qj.iter().enumerate() {
            acc = _mm512_fmadd_ps(r, _mm512_loadu_ps(kr.add(16 * c)), acc);
        }
        acc
    }
    // `halves` of 16 vectors at once, their sums in one vector: each step adds the same pairs of lanes as `halves`
    // (so the same bits), two vectors' halves side by side per addition. Vector `s` lands in lane
    // `4 (s % 4) + s / 4` (a 4 x 4 transpose, its own inverse).
    #[inline(always)]
    unsafe fn halves16(a: &[__m512; 16]) -> __m512 {
        let mut h8 = [_mm512_setzero_ps(); 8];
        for (m, h) in h8.iter_mut().enumerate() {
            let (x, y) = (a[2 * m], a[2 * m + 1]);
            // [x 0..8 | y 0..8] + [x 8..16 | y 8..16]
            *h =
                _mm512_add_ps(_mm512_shuffle_f32x4::<0b01_00_01_00>(x, y), _mm512_shuffle_f32x4::<0b11_10_11_10>(x, y));
        }
        let mut h4 = [_mm512_setzero_ps(); 4];
        for (m, h) in h4.iter_mut().enumerate() {
            let (x, y) = (h8[2 * m], h8[2 * m + 1]);
            // within each half of 8: lanes 0..4 + lanes 4..8
            *h =
                _mm512_add_ps(_mm512_shuffle_f32x4::<0b10_00_10_00>(x, y), _mm512_shuffle_f32x4::<0b11_01_11_01>(x, y));
        }
        let mut h2 = [_mm512_setzero_ps(); 2];
        for (m, h) in h2.iter_mut().enumerate() {
            let (x, y) = (h4[2 * m], h4[2 * m + 1]);
            // within each quarter of 4: lanes 0..2 + lanes 2..4
            *h = _mm512_add_ps(_mm512_shuffle_ps::<0b01_00_01_00>(x, y), _mm512_shuffle_ps::<0b11_10_11_10>(x, y));
        }
        // within each pair: lane 0 + lane 1
        _mm512_add_ps(
            _mm512_shuffle_ps::<0b10_00_10_00>(h2[0], h2[1]),
            _mm512_shuffle_ps::<0b11_01_11_01>(h2[0], h2[1]),
        )
    }
    // SAFETY (every load and store below): key and value rows `b0..b0 + n < vis`, query and output rows `j < rep`,
    // each `hd` wide, probabilities `j * stride + b0..+ n` (`b0 + n <= vis <= keys`), inside the slices (checked
    // above).
    for b0 in (0..vis).step_by(ROW_KEYS) {
        let n = ROW_KEYS.min(vis - b0);
        for j in 0..rep {
            let mut qj = [_mm512_setzero_ps(); C];
            for (c, r) in qj.iter_mut().enumerate() {
                *r = _mm512_loadu_ps(q.as_ptr().add(j * hd + 16 * c));
            }
            let dot = |key: usize| dot16(&qj, k.as_ptr().add(key * hd));
            let pj = p.as_mut_ptr().add(j * stride + b0);
            let mut i = 0;
            while i + 16 <= n {
                // the keys' sums side by side (16 chains of fused multiply-adds), each in `dot`'s order
                let mut acc = [_mm512_setzero_ps(); 16];
                for (c, &r) in qj.iter().enumerate() {
                    for (s, a) in acc.iter_mut().enumerate() {
                        let kr = k.as_ptr().add((b0 + i + 4 * (s % 4) + s / 4) * hd + 16 * c);
                        *a = _mm512_fmadd_ps(r, _mm512_loadu_ps(kr), *a);
                    }
                }
                _mm512_storeu_ps(pj.add(i), halves16(&acc));
                i += 16;
            }
            for i in i..n {
                *pj.add(i) = halves(dot(b0 + i));
            }
        }
    }
    for j in 0..rep {
        softmax_prefix(&mut p[j * stride..][..keys], vis, scale);
    }
    out.fill(0.0);
    for b0 in (0..vis).step_by(ROW_KEYS) {
        let n = ROW_KEYS.min(vis - b0);
        let (vb, pb) = (v.as_ptr().add(b0 * hd), p.as_ptr().add(b0));
        for j in (0..rep).step_by(2) {
            let (oj, pj) = (out.as_mut_ptr().add(j * hd), pb.add(j * stride));
            if j + 1 < rep {
                weigh::<C, 2>(oj, pj, stride, vb, n);
            } else {
                weigh::<C, 1>(oj, pj, stride, vb, n);
            }
        }
    }
}

/// [`attend_row`] for heads `16 * C` wide with AVX2 and FMA: the operations of [`attend_row_portable`] in its
/// order, a score's 16 lanes held as two vectors of 8 (lanes 0..8 and 8..16). Scores go 4 keys at a time (8 chains
/// of fused multiply-adds side by side, the query's 16 lanes loaded once per 4 keys), then the 4 sums' lanes added
/// in halves together ([`halves4_avx2`]); outputs 64 lanes of a head at a time, held in 8 registers over a block's
/// values.
///
/// # Safety
/// The CPU must have AVX2 and FMA (the width, `row.hd = 16 * C`, is checked).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn attend_row_avx2<const C: usize>(row: &GroupRow, p: &mut [f32], out: &mut [f32]) {
    use std::arch::x86_64::*;
    let GroupRow { q, k, v, hd, stride, keys, scale } = *row;
    assert_eq!(hd, 16 * C, "attend_row: the AVX2 kernel for heads of {}", 16 * C);
    let (rep, vis) = row.heads_and_seen(p, out);
    // SAFETY (every load and store below): key and value rows `b0..b0 + n < vis`, query and output rows `j < rep`,
    // each `hd` wide, probabilities `j * stride + b0..+ n` (`b0 + n <= vis <= keys`), inside the slices (checked
    // above).
    for b0 in (0..vis).step_by(ROW_KEYS) {
        let n = ROW_KEYS.min(vis - b0);
        for j in 0..rep {
            let qj = q.as_ptr().add(j * hd);
            let pj = p.as_mut_ptr().add(j * stride + b0);
            let mut i = 0;
            while i + 4 <= n {
                let (mut lo, mut hi) = ([_mm256_setzero_ps(); 4], [_mm256_setzero_ps(); 4]);
                for c in 0..C {
                    let (ql, qh) = (_mm256_loadu_ps(qj.add(16 * c)), _mm256_loadu_ps(qj.add(16 * c + 8)));
                    for s in 0..4 {
                        let kr = k.as_ptr().add((b0 + i + s) * hd + 16 * c);
                        lo[s] = _mm256_fmadd_ps(ql, _mm256_loadu_ps(kr), lo[s]);
                        hi[s] = _mm256_fmadd_ps(qh, _mm256_loadu_ps(kr.add(8)), hi[s]);
                    }
                }
                let sums = halves4_avx2(&lo, &hi);
                for (s, &x) in sums.iter().enumerate() {
                    *pj.add(i + s) = x;
                }
                i += 4;
            }
            for i in i..n {
                let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
                let kr = k.as_ptr().add((b0 + i) * hd);
                for c in 0..C {
                    lo = _mm256_fmadd_ps(_mm256_loadu_ps(qj.add(16 * c)), _mm256_loadu_ps(kr.add(16 * c)), lo);
                    hi = _mm256_fmadd_ps(_mm256_loadu_ps(qj.add(16 * c + 8)), _mm256_loadu_ps(kr.add(16 * c + 8)), hi);
                }
                *pj.add(i) = halves_of_two(lo, hi);
            }
        }
    }
    for j in 0..rep {
        softmax_prefix(&mut p[j * stride..][..keys], vis, scale);
    }
    out.fill(0.0);
    // 64 lanes of a head's output (8 registers; all 16 C when C < 4) over a block's values, each lane the keys'
    // fused multiply-adds in the keys' order
    const R: usize = 8;
    let r = R.min(2 * C);
    for b0 in (0..vis).step_by(ROW_KEYS) {
        let n = ROW_KEYS.min(vis - b0);
        for j in 0..rep {
            let pj = p.as_ptr().add(j * stride + b0);
            for c0 in (0..hd).step_by(8 * r) {
                let oj = out.as_mut_ptr().add(j * hd + c0);
                let mut o = [_mm256_setzero_ps(); R];
                for (c, x) in o[..r].iter_mut().enumerate() {
                    *x = _mm256_loadu_ps(oj.add(8 * c));
                }
                for i in 0..n {
                    let w = _mm256_set1_ps(*pj.add(i));
                    let vr = v.as_ptr().add((b0 + i) * hd + c0);
                    for (c, x) in o[..r].iter_mut().enumerate() {
                        *x = _mm256_fmadd_ps(w, _mm256_loadu_ps(vr.add(8 * c)), *x);
                    }
                }
                for (c, &x) in o[..r].iter().enumerate() {
                    _mm256_storeu_ps(oj.add(8 * c), x);
                }
            }
        }
    }
}

/// One key's 16 lanes, `lo` (0..8) and `hi` (8..16), added in halves (8, 4, 2, 1 apart) as the portable loop adds
/// them: the last steps of both SIMD kernels of [`attend_row`].
///
/// # Safety
/// The CPU must have AVX.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn halves_of_two(lo: std::arch::x86_64::__m256, hi: std::arch::x86_64::__m256) -> f32 {
    use std::arch::x86_64::*;
    let s8 = _mm256_add_ps(lo, hi);
    let s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps::<1>(s8));
    let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps::<0b01>(s2, s2)))
}

/// The halves of [`attend_row_avx2`] for 4 keys at once, each key's 16 lanes in `lo[s]` (0..8) and `hi[s]` (8..16):
/// every step adds the pairs of lanes the portable loop adds (8, 4, 2, 1 apart), two keys side by side per
/// addition, so each sum has the bits one key at a time gives.
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn halves4_avx2(lo: &[std::arch::x86_64::__m256; 4], hi: &[std::arch::x86_64::__m256; 4]) -> [f32; 4] {
    use std::arch::x86_64::*;
    // 8 apart: lane l + lane l + 8
    let s = [
        _mm256_add_ps(lo[0], hi[0]),
        _mm256_add_ps(lo[1], hi[1]),
        _mm256_add_ps(lo[2], hi[2]),
        _mm256_add_ps(lo[3], hi[3]),
    ];
    // 4 apart, keys 0 and 1 in one vector, 2 and 3 in another: [a 0..4 | b 0..4] + [a 4..8 | b 4..8] (a function
    // inlined always, not a closure, which could be compiled out of line without AVX)
    #[inline(always)]
    unsafe fn four(a: __m256, b: __m256) -> __m256 {
        _mm256_add_ps(_mm256_permute2f128_ps::<0x20>(a, b), _mm256_permute2f128_ps::<0x31>(a, b))
    }
    let (h01, h23) = (four(s[0], s[1]), four(s[2], s[3]));
    // 2 apart, within each half of 4: [x0 + x2, x1 + x3, y0 + y2, y1 + y3] (halves: keys 0 and 2 | keys 1 and 3)
    let h2 = _mm256_add_ps(_mm256_shuffle_ps::<0b01_00_01_00>(h01, h23), _mm256_shuffle_ps::<0b11_10_11_10>(h01, h23));
    // 1 apart: [key 0, key 2, .. | key 1, key 3, ..]
    let h1 = _mm256_add_ps(_mm256_shuffle_ps::<0b10_00_10_00>(h2, h2), _mm256_shuffle_ps::<0b11_01_11_01>(h2, h2));
    let mut x = [0f32; 8];
    _mm256_storeu_ps(x.as_mut_ptr(), h1);
    [x[0], x[4], x[1], x[5]]
}

/// `H` query heads' outputs (`out[h * 16 C..][..16 C]`) plus their probability-weighted sums of `n` value rows
/// (head `h`'s weights at `p[h * stride..][..n]`), each output the keys' fused multiply-adds in the keys' order: two
/// heads side by side keep two chains per register busy, and read each value row once.
///
/// # Safety
/// The CPU must have AVX-512F; the pointers must cover what they are read and written at.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn weigh<const C: usize, const H: usize>(out: *mut f32, p: *const f32, stride: usize, v: *const f32, n: usize) {
    use std::arch::x86_64::*;
    let mut o = [[_mm512_setzero_ps(); C]; H];
    for (h, oh) in o.iter_mut().enumerate() {
        for (c, r) in oh.iter_mut().enumerate() {
            *r = _mm512_loadu_ps(out.add(h * 16 * C + 16 * c));
        }
    }
    for i in 0..n {
        let vr = v.add(i * 16 * C);
        for (h, oh) in o.iter_mut().enumerate() {
            let w = _mm512_set1_ps(*p.add(h * stride + i));
            for (c, r) in oh.iter_mut().enumerate() {
                *r = _mm512_fmadd_ps(w, _mm512_loadu_ps(vr.add(16 * c)), *r);
            }
        }
    }
    for (h, oh) in o.iter().enumerate() {
        for (c, &r) in oh.iter().enumerate() {
            _mm512_storeu_ps(out.add(h * 16 * C + 16 * c), r);
        }
    }
}

/// Causal grouped-query attention for one sequence.
///
/// `q [t, h * hd]` (RoPE applied): the last `t` of the `keys` positions; `k`, `v`: the cache, key/value head `g`'s
/// position `p` at `g * head_stride + p * hd` (so positions `0..keys` of every head, the new ones included, are
/// written). Query `i` sees keys `0..=keys - t + i`. Query head `hh` reads key/value head `hh / (h / kvh)`.
/// Returns the output `[t, h * hd]` and, with `keep_probs`, the probabilities `[h, t, keys]` (zero above the
/// diagonal); without, each head's probabilities live in a buffer of its thread's ([`ATTENTION_SCRATCH`]).
#[allow(clippy::too_many_arguments)]
pub fn causal_attention(
    q: &[f32],
    t: usize,
    h: usize,
    kvh: usize,
    hd: usize,
    k: &[f32],
    v: &[f32],
    head_stride: usize,
    keys: usize,
    keep_probs: bool,
) -> (Vec<f32>, Option<Vec<f32>>) {
    assert!(t <= keys && q.len() == t * h * hd, "causal_attention: {t} queries of {h}x{hd} over {keys} keys");
    assert!(
        kvh > 0 && h.is_multiple_of(kvh) && (kvh - 1) * head_stride + keys * hd <= k.len().min(v.len()),
        "causal_attention: the cache holds fewer than {keys} positions"
    );
    let ks = [0isize, head_stride as isize, hd as isize, 1];
    let vs = ks;
    let rep = h / kvh;
    let scale = (1.0 / (hd as f64).sqrt()) as f32;
    let mut out = vec![0f32; t * h * hd];
    let op = Ptr(out.as_mut_ptr());
    let head = |hh: usize, p: &mut [f32]| {
        let g = hh / rep;
        #[allow(clippy::redundant_locals)] // moves the whole `Ptr` (Send) into the closure, not its raw field
        let op = op;
        // the rows in blocks of ATTENTION_ROWS, each over the keys its last row sees: a prompt fed on an empty cache
        // skips the half of the scores and of `P V` that the mask zeroes (one block, all keys, up to 64 rows)
        for r0 in (0..t).step_by(ATTENTION_ROWS) {
            let rows = ATTENTION_ROWS.min(t - r0);
            let seen = keys - t + r0 + rows; // keys visible to the block's last row
            let pb = &mut p[r0 * keys..(r0 + rows) * keys];
            // SAFETY: k/v cover [kvh, keys, hd] at these strides (checked above), `seen <= keys`; head hh writes
            // only its own probs block and its out columns of the block's rows.
            unsafe {
                // scores [rows, seen] = Q_hh [rows, hd] @ K_g^T [hd, seen], row stride keys
                gemm1(
                    rows,
                    seen,
                    hd,
                    pb.as_mut_ptr(),
                    keys as isize,
                    q.as_ptr().add(r0 * h * hd + hh * hd),
                    (h * hd) as isize,
                    1,
                    k.as_ptr().offset(g as isize * ks[1]),
                    ks[3],
                    ks[2],
                );
            }
            for (i, row) in pb.chunks_mut(keys).enumerate() {
                let vis = keys - t + r0 + i + 1; // causal: the query's own position is keys - t + r0 + i
                softmax_prefix(row, vis, scale);
            }
            unsafe {
                // out[block, hh] [rows, hd] = P [rows, seen] @ V_g [seen, hd]
                gemm1(
                    rows,
                    hd,
                    seen,
                    op.0.add(r0 * h * hd + hh * hd),
                    (h * hd) as isize,
                    pb.as_ptr(),
                    keys as isize,
                    1,
                    v.as_ptr().offset(g as isize * vs[1]),
                    vs[2],
                    vs[3],
                );
            }
        }
    };
    // Fewer query rows than query heads per key/value head (decoding): per row, the `rep` heads that read key/value
    // head `g` together ([`attend_row`]), so the cache is read once per row rather than once per head. `p`: the
    // group's probabilities `[rep, t, keys]`.
    let group = |g: usize, p: &mut [f32]| {
        #[allow(clippy::redundant_locals)] // moves the whole `Ptr` (Send) into the closure, not its raw field
        let op = op;
        let (kg, vg) = (&k[g * head_stride..], &v[g * head_stride..]);
        for i in 0..t {
            let vis = keys - t + i + 1; // causal: the query's own position is keys - t + i
            let qi = &q[(i * h + g * rep) * hd..][..rep * hd];
            // SAFETY: `out` holds `t` rows of `h * hd`; group g alone writes its heads' columns of them.
            let oi = unsafe { std::slice::from_raw_parts_mut(op.0.add((i * h + g * rep) * hd), rep * hd) };
            let r = GroupRow { q: qi, k: &kg[..vis * hd], v: &vg[..vis * hd], hd, stride: t * keys, keys, scale };
            attend_row(&r, &mut p[i * keys..], oi);
        }
    };
    // the work in units of a head (`t * keys` probabilities each) or, for a few rows, of a key/value head's group
    let grouped = t < rep;
    let (units, len) = if grouped { (kvh, rep * t * keys) } else { (h, t * keys) };
    let unit = |u: usize, p: &mut [f32]| if grouped { group(u, p) } else { head(u, p) };
    // the units over the pool once each head has some work: a few rows over a short context are cheaper on one thread
    let split = t * keys >= ATTENTION_SPLIT;
    if keep_probs {
        let mut probs = vec![0f32; h * t * keys];
        if split {
            probs.par_chunks_mut(len).enumerate().for_each(|(u, p)| unit(u, p));
        } else {
            probs.chunks_mut(len).enumerate().for_each(|(u, p)| unit(u, p));
        }
        return (out, Some(probs));
    }
    // every value of a unit's block is written (the scores, then zeros above the diagonal) before it is read
    let scratch = |u: usize| {
        ATTENTION_SCRATCH.with_borrow_mut(|buf| {
            buf.resize(buf.len().max(len), 0.0);
            unit(u, &mut buf[..len]);
        })
    };
    if split {
        (0..units).into_par_iter().for_each(scratch);
    } else {
        (0..units).for_each(scratch);
    }
    (out, None)
}

/// RMSNorm of each `d`-wide row: `x * (1 / sqrt(mean(x^2) + eps)) * w`.
pub fn rms_norm(x: &[f32], d: usize, w: &[f32], eps: f64) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    for (xr, or) in x.chunks(d).zip(out.chunks_mut(d)) {
        let ms = xr.iter().map(|a| a * a).sum::<f32>() / d as f32;
        let r = 1.0 / (ms + eps as f32).sqrt();
        for ((o, a), ww) in or.iter_mut().zip(xr).zip(w) {
            *o = a * r * ww;
        }
    }
    out
}

/// `silu(g) * u` in place on `g` (`silu(x) = x * sigmoid(x)`), [`exp_fast`] for the exponential so that the loop
/// runs on 8 lanes (AVX2 where the CPU has it; libm's `expf`, one call per value, kept it scalar).
pub fn silu_mul(g: &mut [f32], u: &[f32]) {
    #[inline(always)]
    fn each(gc: &mut [f32], uc: &[f32]) {
        for (a, b) in gc.iter_mut().zip(uc) {
            *a = *a * (1.0 / (1.0 + exp_fast(-*a))) * b;
        }
    }
    let f = |gc: &mut [f32], uc: &[f32]| {
        #[cfg(target_arch = "x86_64")]
        {
            #[target_feature(enable = "avx2")]
            unsafe fn avx2(gc: &mut [f32], uc: &[f32]) {
                each(gc, uc)
            }
            if crate::model::simd::avx2() {
                // SAFETY: the CPU has AVX2 (checked on the line above).
                return unsafe { avx2(gc, uc) };
            }
        }
        each(gc, uc)
    };
    if g.len() >= 1 << 15 {
        g.par_chunks_mut(1 << 13).zip(u.par_chunks(1 << 13)).for_each(|(gc, uc)| f(gc, uc));
    } else {
        f(g, u);
    }
}

/// LayerNorm of each `d`-wide row of `x` (plus `res`, the residual, when given), in place on `x`:
/// `(y - mean) / sqrt(var + eps) * w + b` with the biased variance, as torch and the encoder's burn
/// `LayerNorm` compute it.
pub fn layer_norm(x: &mut [f32], res: Option<&[f32]>, d: usize, w: &[f32], b: &[f32], eps: f64) {
    assert!(w.len() == d && b.len() == d && x.len().is_multiple_of(d), "layer_norm: rows of {d} expected");
    let row = |xr: &mut [f32], rr: Option<&[f32]>| {
        if let Some(rr) = rr {
            for (a, r) in xr.iter_mut().zip(rr) {
                *a += r;
            }
        }
        let mean = xr.iter().sum::<f32>() / d as f32;
        let var = xr.iter().map(|a| (a - mean) * (a - mean)).sum::<f32>() / d as f32;
        let den = (var + eps as f32).sqrt();
        for ((a, ww), bb) in xr.iter_mut().zip(w).zip(b) {
            *a = (*a - mean) / den * ww + bb;
        }
    };
    match res {
        Some(r) => {
            assert_eq!(r.len(), x.len(), "layer_norm: the residual's size differs");
            x.par_chunks_mut(d).zip(r.par_chunks(d)).for_each(|(xr, rr)| row(xr, Some(rr)));
        }
        None => x.par_chunks_mut(d).for_each(|xr| row(xr, None)),
    }
}

/// `erf(x)` in f32 without a branch per element, so the loop over a row vectorises: the rational approximation
/// of Eigen's `generic_fast_erf_float` (odd degree-13 numerator over even degree-8 denominator, input clamped to
/// [-4, 4], where erf is within f32 rounding of +-1). Within 1e-6 of libm's `erff` (tested below). Plain `*` and
/// `+`, not `mul_add`: without the FMA target feature at compile time `mul_add` is a call into libm's `fmaf`.
#[inline(always)]
pub fn erf_fast(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = x2 * -2.726_142_3e-10 + 2.770_681_4e-8;
    p = x2 * p - 2.101_024e-6;
    p = x2 * p - 5.692_506_4e-5;
    p = x2 * p - 7.349_906e-4;
    p = x2 * p - 2.954_600_1e-3;
    p = x2 * p - 1.609_603_3e-2;
    let mut q = x2 * -1.456_607_2e-5 - 2.133_740_6e-4;
    q = x2 * q - 1.682_827e-3;
    q = x2 * q - 7.373_329e-3;
    q = x2 * q - 1.426_474e-2;
    x * p / q
}

/// GELU in place: `x * (1 + erf(x / sqrt 2)) / 2` (BERT's `gelu`), or with `tanh` its tanh approximation
/// `x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))) / 2` (`gelu_new`, `gelu_pytorch_tanh`).
pub fn gelu(x: &mut [f32], tanh: bool) {
    let f = |c: &mut [f32]| {
        if tanh {
            let k = (2.0 / std::f64::consts::PI).sqrt() as f32;
            for a in c.iter_mut() {
                *a = 0.5 * *a * (1.0 + (k * (*a + 0.044715 * *a * *a * *a)).tanh());
            }
        } else {
            gelu_erf(c)
        }
    };
    x.par_chunks_mut(1 << 14).for_each(f);
}

/// The erf form of GELU over `c`, on 8-lane AVX2 registers where the CPU has them: the binary targets baseline
/// x86-64, where this loop gets 4-lane SSE. The same IEEE operations in the same order either way (no fused
/// multiply-adds), so the results are identical.
fn gelu_erf(c: &mut [f32]) {
    #[inline(always)]
    fn each(c: &mut [f32]) {
        let r = std::f32::consts::FRAC_1_SQRT_2;
        for a in c.iter_mut() {
            *a = 0.5 * *a * (1.0 + erf_fast(*a * r));
        }
    }
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2")]
        unsafe fn avx2(c: &mut [f32]) {
            each(c)
        }
        if crate::model::simd::avx2() {
            // SAFETY: the CPU has AVX2 (checked on the line above).
            return unsafe { avx2(c) };
        }
    }
    each(c)
}

/// `exp(x)` in f32 without a branch or a call, so loops over it vectorise: Cephes' `expf` (x = n ln 2 + r, a degree-6
/// polynomial for e^r, 2^n written into the exponent bits), 0 below -87 (where expf underflows) and clamped above
/// 88. Within 2 ulp of libm's `expf` on [-87, 88] (tested below).
#[inline(always)]
pub fn exp_fast(x: f32) -> f32 {
    let xc = x.clamp(-87.0, 88.0);
    // n = round(x / ln 2): adding and subtracting 1.5 * 2^23 rounds to the nearest integer
    let n = (xc * std::f32::consts::LOG2_E + 12_582_912.0) - 12_582_912.0;
    let r = xc - n * 0.693_359_4 - n * -2.121_944_4e-4;
    let mut p = 1.987_569_1e-4;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let y = p * r * r + r + 1.0;
    // 2^n from its exponent bits; n + 127 (in 1..=254) read out of the mantissa of 2^23 + n + 127 rather than by
    // `as i32`, whose saturation keeps the loop from vectorising
    let scale = f32::from_bits(((n + (127.0 + 8_388_608.0)).to_bits() - 0x4B00_0000) << 23);
    if x < -87.0 {
        0.0
    } else {
        y * scale
    }
}

/// Lanes of the softmaxes below: maxima and sums are kept per lane so their loops vectorise.
const L: usize = 8;

/// The second half of a softmax on [`L`] lanes: `row`, already scaled (and biased), whose lane `j` has the maximum
/// `mx[j]`, becomes `exp(row - max) / sum` with [`exp_fast`]. Inlined into each caller's AVX-512 and AVX2 copies,
/// which give the same results: the exponentials are taken one value at a time, however many lanes the loop runs on;
/// maxima and sums are kept on [`L`] lanes either way.
#[inline(always)]
fn exp_normalize(row: &mut [f32], mx: &[f32; L]) {
    let m = mx.iter().fold(f32::NEG_INFINITY, |a, &b| if b > a { b } else { a });
    // the exponentials in one loop, then their sums on the lanes over whole chunks taken as arrays (one loop doing
    // both kept `sum` in memory: a masked load and store per chunk)
    for x in row.iter_mut() {
        *x = exp_fast(*x - m);
    }
    let mut sum = [0f32; L];
    let mut chunks = row.chunks_exact(L);
    for c in &mut chunks {
        let c: &[f32; L] = c.try_into().unwrap();
        for j in 0..L {
            sum[j] += c[j];
        }
    }
    for (j, x) in chunks.remainder().iter().enumerate() {
        sum[j] += x;
    }
    let total: f32 = sum.iter().sum();
    for x in row.iter_mut() {
        *x /= total;
    }
}

/// `row[..vis]` becomes `softmax(row[..vis] * scale)` and `row[vis..]` zeros (a causal attention row): as
/// [`softmax_rows`], on 8 lanes (AVX-512 or AVX2 where the CPU has it; [`exp_normalize`]), [`exp_fast`] for the
/// exponentials.
fn softmax_prefix(row: &mut [f32], vis: usize, scale: f32) {
    #[inline(always)]
    fn each(row: &mut [f32], vis: usize, scale: f32) {
        let (seen, masked) = row.split_at_mut(vis);
        let mut mx = [f32::NEG_INFINITY; L];
        let mut chunks = seen.chunks_exact_mut(L);
        for c in &mut chunks {
            let c: &mut [f32; L] = c.try_into().unwrap();
            for j in 0..L {
                c[j] *= scale;
                mx[j] = if c[j] > mx[j] { c[j] } else { mx[j] };
            }
        }
        for (j, x) in chunks.into_remainder().iter_mut().enumerate() {
            *x *= scale;
            mx[j] = if *x > mx[j] { *x } else { mx[j] };
        }
        exp_normalize(seen, &mx);
        masked.fill(0.0);
    }
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f")]
        unsafe fn avx512(row: &mut [f32], vis: usize, scale: f32) {
            each(row, vis, scale)
        }
        if crate::model::simd::avx512f() {
            // SAFETY: the CPU has AVX-512F (checked on the line above).
            return unsafe { avx512(row, vis, scale) };
        }
        #[target_feature(enable = "avx2")]
        unsafe fn avx2(row: &mut [f32], vis: usize, scale: f32) {
            each(row, vis, scale)
        }
        if crate::model::simd::avx2() {
            // SAFETY: the CPU has AVX2 (checked on the line above).
            return unsafe { avx2(row, vis, scale) };
        }
    }
    each(row, vis, scale)
}

/// Each `t`-wide row of `p` becomes `softmax(row * scale + bias)`, on 8 lanes (AVX-512 or AVX2 where the CPU has
/// it): the maxima and sums kept per lane so the loops vectorise (whole chunks taken as arrays, so that the maxima
/// stay in a register), [`exp_fast`] for the exponentials.
fn softmax_rows(p: &mut [f32], t: usize, bias: &[f32], scale: f32) {
    #[inline(always)]
    fn each(p: &mut [f32], t: usize, bias: &[f32], scale: f32) {
        for row in p.chunks_mut(t) {
            let mut mx = [f32::NEG_INFINITY; L];
            let whole = row.len() / L * L;
            let (full, rest) = row.split_at_mut(whole);
            for (c, b) in full.chunks_exact_mut(L).zip(bias.chunks_exact(L)) {
                let (c, b): (&mut [f32; L], &[f32; L]) = (c.try_into().unwrap(), b.try_into().unwrap());
                for j in 0..L {
                    c[j] = c[j] * scale + b[j];
                    mx[j] = if c[j] > mx[j] { c[j] } else { mx[j] };
                }
            }
            for (j, (x, b)) in rest.iter_mut().zip(&bias[whole..]).enumerate() {
                *x = *x * scale + b;
                mx[j] = if *x > mx[j] { *x } else { mx[j] };
            }
            exp_normalize(row, &mx);
        }
    }
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f")]
        unsafe fn avx512(p: &mut [f32], t: usize, bias: &[f32], scale: f32) {
            each(p, t, bias, scale)
        }
        if crate::model::simd::avx512f() {
            // SAFETY: the CPU has AVX-512F (checked on the line above).
            return unsafe { avx512(p, t, bias, scale) };
        }
        #[target_feature(enable = "avx2")]
        unsafe fn avx2(p: &mut [f32], t: usize, bias: &[f32], scale: f32) {
            each(p, t, bias, scale)
        }
        if crate::model::simd::avx2() {
            // SAFETY: the CPU has AVX2 (checked on the line above).
            return unsafe { avx2(p, t, bias, scale) };
        }
    }
    each(p, t, bias, scale)
}

/// Bidirectional multi-head attention over a right- or left-padded batch (the encoder's): `qkv [b * t, 3 * h * hd]`,
/// each row one token's query, key and value (the heads side by side within each); `mask [b * t]`, 1 for a token,
/// 0 for padding. Every query attends to every key of its sequence, padding keys with `-1e9` added to their score
/// (weight exactly 0 in f32), as the burn encoder does: `softmax(Q K^T / sqrt(hd) + bias) V`. Returns
/// `[b * t, h * hd]`, the layout the output projection reads; the (sequence, head) pairs are split over the rayon
/// pool, two gemm calls each.
pub fn bidirectional_attention(qkv: &[f32], b: usize, t: usize, h: usize, hd: usize, mask: &[f32]) -> Vec<f32> {
    let d = h * hd;
    assert!(qkv.len() == b * t * 3 * d && mask.len() == b * t, "bidirectional_attention: {b}x{t} rows of 3x{h}x{hd}");
    let scale = (1.0 / (hd as f64).sqrt()) as f32;
    let bias: Vec<f32> = mask.iter().map(|m| (m - 1.0) * 1e9).collect(); // [b * t]: 0 token, -1e9 padding
    let mut out = vec![0f32; b * t * d];
    let op = Ptr(out.as_mut_ptr());
    (0..b * h).into_par_iter().for_each(|job| {
        let (s, hh) = (job / h, job % h);
        #[allow(clippy::redundant_locals)] // moves the whole `Ptr` (Send) into the closure, not its raw field
        let op = op;
        let base = s * t * 3 * d + hh * hd; // sequence s, head hh: its query; + d its key, + 2d its value
        let mut p = vec![0f32; t * t];
        // SAFETY: the views stay inside qkv (checked above); job (s, hh) writes only rows s*t.. of columns hh*hd...
        unsafe {
            // scores [t, t] = Q [t, hd] @ K^T [hd, t]
            gemm1(
                t,
                t,
                hd,
                p.as_mut_ptr(),
                t as isize,
                qkv.as_ptr().add(base),
                (3 * d) as isize,
                1,
                qkv.as_ptr().add(base + d),
                1,
                (3 * d) as isize,
            );
        }
        softmax_rows(&mut p, t, &bias[s * t..(s + 1) * t], scale);
        unsafe {
            // out [t, hd] (row stride d) = P [t, t] @ V [t, hd]
            gemm1(
                t,
                hd,
                t,
                op.0.add(s * t * d + hh * hd),
                d as isize,
                p.as_ptr(),
                t as isize,
                1,
                qkv.as_ptr().add(base + 2 * d),
                (3 * d) as isize,
                1,
            );
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
    use burn::tensor::activation::{silu, softmax};
    use burn::tensor::{Bool, TensorData};

    type B = Flex;

    fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((s >> 33) as f32 / (1u64 << 31) as f32) - 0.5
            })
            .collect()
    }

    fn t2(v: Vec<f32>, shape: [usize; 2]) -> Tensor<B, 2> {
        Tensor::from_data(TensorData::new(v, shape), &Default::default())
    }

    fn close(a: &[f32], b: &[f32], tol: f32) {
        assert_eq!(a.len(), b.len());
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!((x - y).abs() <= tol * (1.0 + y.abs()), "at {i}: {x} vs {y}");
        }
    }

    #[test]
    fn only_flex_is_flex() {
        assert!(is_flex::<Flex>());
        assert!(!is_flex::<burn::backend::Autodiff<Flex>>());
        let a = Tensor::<burn::backend::Autodiff<Flex>, 3>::zeros([1, 2, 2], &Default::default());
        let w = Tensor::<burn::backend::Autodiff<Flex>, 2>::zeros([2, 2], &Default::default());
        assert!(flex_linear(&a, &w, None).is_none());
    }

    /// The burn-model entry: a transposed (strided) flex weight and a bias, against burn's matmul.
    #[test]
    fn flex_linear_equals_burn_matmul() {
        let (b, t, k, n) = (2, 3, 16, 24);
        let dev = Default::default();
        let x = Tensor::<B, 3>::from_data(TensorData::new(rand_vec(b * t * k, 11), [b, t, k]), &dev);
        let w = t2(rand_vec(n * k, 12), [n, k]).transpose(); // [k, n], column stride k
        let bias = Tensor::<B, 1>::from_data(TensorData::new(rand_vec(n, 13), [n]), &dev);
        let want = x.clone().matmul(w.clone().unsqueeze::<3>()) + bias.clone().unsqueeze::<3>();
        let got = flex_linear(&x, &w, Some(&bias)).unwrap();
        close(&got.into_data().to_vec::<f32>().unwrap(), &want.into_data().to_vec::<f32>().unwrap(), 1e-5);
    }

    #[test]
    fn matmul_equals_burn_for_split_and_strided_weights() {
        for (rows, k, n) in [(1, 8, 5), (7, 33, 70), (20, 64, 200)] {
            let x = rand_vec(rows * k, 1);
            let wv = rand_vec(k * n, 2);
            let bias = rand_vec(n, 3);
            let w = t2(wv.clone(), [k, n]);
            let want = t2(x.clone(), [rows, k]).matmul(w.clone()) + t2(bias.clone(), [1, n]);
            let want = want.into_data().to_vec::<f32>().unwrap();
            let got = matmul(&x, rows, k, Strided::rows(&wv, n), n, Some(&bias));
            close(&got, &want, 1e-5);
            // the same weight stored [n, k] and read transposed: strided columns (the tied output projection)
            let wt = w.transpose().into_data().to_vec::<f32>().unwrap();
            let got = matmul(&x, rows, k, Strided::transposed(&wt, k), n, Some(&bias));
            close(&got, &want, 1e-5);
        }
    }

    /// A weight filled a tile at a time gives bit for bit what the whole f32 matrix `[k, n]` gives (the CPU engine's
    /// f32 layout): one tile and several (the last one partial), `k` under and over gemm's 512-long `k` blocks,
    /// 1 and 3 threads (other column splits), inputs of several rows, none and 2 rows sharing the tiles (each as if alone).
    #[test]
    fn matmul_filled_equals_matmul_bit_for_bit() {
        for (rows, k, n) in [(5, 40, 70), (37, 600, 4000), (9, 1300, 900)] {
            let x = rand_vec(rows * k, 7);
            let w = rand_vec(n * k, 8); // [n, k]
            let bias = rand_vec(n, 9);
            let fill = |j0: usize, tile: &mut [f32]| tile.copy_from_slice(&w[j0 * k..j0 * k + tile.len()]);
            let wt: Vec<f32> = (0..k * n).map(|i| w[(i % n) * k + i / n]).collect(); // [k, n]
            for threads in [1, 3] {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                let (got, rows_major, transposed) = pool.install(|| {
                    let x2 = &x[..2 * k]; // a second input sharing the tiles

                    // outputs filled with NaN: every value must be overwritten
                    let outputs = |xs: &[&[f32]]| -> Vec<Vec<f32>> {
                        xs.iter().map(|x| vec![f32::NAN; x.len() / k * n]).collect()
                    };
                    let product = |xs: &[&[f32]], bias: Option<&[f32]>, fill: &(dyn Fn(usize, &mut [f32]) + Sync)| {
                        let mut ys = outputs(xs);
                        matmul_filled_into(xs, k, n, bias, fill, &mut ys);
                        ys
                    };
                    let mut ys = product(&[&x, &[], x2], Some(&bias), &fill);
                    let alone = product(&[x2], Some(&bias), &fill);
                    let filled = std::sync::atomic::AtomicUsize::new(0);
                    let count = |j0: usize, tile: &mut [f32]| {
                        filled.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        fill(j0, tile)
                    };
                    assert!(product(&[&[], &[]], None, &count).iter().all(Vec::is_empty));
                    assert_eq!(filled.into_inner(), 0, "tiles filled for inputs without rows");
                    assert_eq!((ys[1].len(), &ys[2]), (0, &alone[0]), "{rows}x{k}x{n}, {threads} threads");
                    (
                        ys.swap_remove(0),
                        matmul(&x, rows, k, Strided::rows(&wt, n), n, Some(&bias)),
                        matmul(&x, rows, k, Strided::transposed(&w, k), n, Some(&bias)),
                    )
                });
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&rows_major), "{rows}x{k}x{n}, {threads} threads");
                // (gemm's path for tiny strided products can add in another order: equal up to rounding)
                close(&got, &transposed, 1e-6);
            }
        }
    }

    /// Hand-worked: head dim 2 (half 1), one head, position 1 with angle 1 rad: (x1, x2) = (1, 2) becomes
    /// (cos 1 - 2 sin 1, 2 cos 1 + sin 1).
    #[test]
    fn rope_rotates_pairs_by_position() {
        let (c, s) = (1f32.cos(), 1f32.sin());
        let cos = [1.0, 1.0, c, c];
        let sin = [0.0, 0.0, s, s];
        let mut x = vec![1.0, 2.0];
        rope(&mut x, 1, 1, 2, 1, &cos, &sin);
        close(&x, &[c - 2.0 * s, 2.0 * c + s], 1e-7);
        let mut x0 = vec![1.0, 2.0];
        rope(&mut x0, 1, 1, 2, 0, &cos, &sin);
        assert_eq!(x0, vec![1.0, 2.0]);
    }

    /// Against burn's ops as `llama::Attention` composes them: grouped heads, a causal mask offset by `start`; the
    /// heads on one thread (5 x 8 query-key pairs per head) and split over the pool (40 x 70); 150 rows in blocks of
    /// 64, 64 and 22, on an empty cache and after 20 positions; fewer rows than heads per group (decoding: one row
    /// after 40 and after 2,000 positions, the latter split over the pool; two rows; heads 24 wide), each group's
    /// heads together.
    #[test]
    fn causal_attention_equals_burn_ops() {
        for (start, t) in [(3, 5), (30, 40), (0, 150), (20, 150), (40, 1), (11, 2), (2000, 1)] {
            causal_attention_case(start, t, 8);
        }
        // head widths of a lane block and a part, and of the AVX-512 kernels
        causal_attention_case(70, 1, 24);
        causal_attention_case(70, 1, 32);
        causal_attention_case(2000, 1, 64);
    }

    /// A decoding row's attention on AVX-512 and on AVX2 (where the CPU has them) equals the portable loops bit for
    /// bit: three query heads over 75 of 80 keys (two whole blocks, each two groups of 16 keys, and 11 keys one at a
    /// time, 2 by 4 and 3 alone on AVX2; the outputs of a pair of heads and of one), at every width the kernels take
    /// (16 to 128) and at 24, which goes to the portable loops compiled for AVX2 (a score's last 8 products in the
    /// first lanes).
    #[test]
    fn attend_row_kernels_agree() {
        for hd in [16, 24, 32, 64, 128] {
            let (rep, vis, keys, stride) = (3, 75, 80, 90);
            let (q, k, v) = (rand_vec(rep * hd, 11), rand_vec(vis * hd, 12), rand_vec(vis * hd, 13));
            let r = GroupRow { q: &q, k: &k, v: &v, hd, stride, keys, scale: 0.125 };
            let run = |kernel: &dyn Fn(&mut [f32], &mut [f32])| {
                let (mut p, mut out) = (vec![f32::NAN; 2 * stride + keys], vec![f32::NAN; rep * hd]);
                kernel(&mut p, &mut out);
                let rows: Vec<u32> =
                    (0..rep).flat_map(|j| p[j * stride..][..keys].to_vec()).map(f32::to_bits).collect();
                (rows, out.iter().map(|x| x.to_bits()).collect::<Vec<_>>())
            };
            let portable = run(&|p, out| attend_row_portable(&r, p, out));
            let fast = run(&|p, out| attend_row(&r, p, out));
            assert!(
                fast.0.iter().all(|&b| !f32::from_bits(b).is_nan())
                    && fast.1.iter().all(|&b| !f32::from_bits(b).is_nan())
            );
            assert_eq!(fast, portable, "heads of {hd}");
            #[cfg(target_arch = "x86_64")]
            if hd % 16 == 0 && std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
            {
                // SAFETY: the CPU has AVX2 and FMA (checked above); the kernel's width is `hd`.
                let avx2 = run(&|p, out| unsafe {
                    match hd {
                        16 => attend_row_avx2::<1>(&r, p, out),
                        32 => attend_row_avx2::<2>(&r, p, out),
                        64 => attend_row_avx2::<4>(&r, p, out),
                        _ => attend_row_avx2::<8>(&r, p, out),
                    }
                });
                assert_eq!(avx2, portable, "heads of {hd}, AVX2");
            }
        }
    }

    fn causal_attention_case(start: usize, t: usize, hd: usize) {
        let (h, kvh) = (6, 2);
        let keys = start + t;
        let rep = h / kvh;
        let q = rand_vec(t * h * hd, 4);
        let kc = rand_vec(kvh * keys * hd, 5);
        let vc = rand_vec(kvh * keys * hd, 6);
        let dev = Default::default();
        let k4 = Tensor::<B, 4>::from_data(TensorData::new(kc.clone(), [1, kvh, keys, hd]), &dev);
        let v4 = Tensor::<B, 4>::from_data(TensorData::new(vc.clone(), [1, kvh, keys, hd]), &dev);
        // the cache as the CPU engine holds it: [kvh, capacity, hd], capacity beyond the keys
        let cap = keys + 3;
        let in_cache = |c: &[f32]| {
            let mut buf = vec![f32::NAN; kvh * cap * hd];
            for g in 0..kvh {
                buf[g * cap * hd..g * cap * hd + keys * hd].copy_from_slice(&c[g * keys * hd..(g + 1) * keys * hd]);
            }
            buf
        };
        let (out, probs) = causal_attention(&q, t, h, kvh, hd, &in_cache(&kc), &in_cache(&vc), cap * hd, keys, true);
        let probs = probs.unwrap();
        // without the probabilities: the same output, bit for bit
        let (alone, none) = causal_attention(&q, t, h, kvh, hd, &in_cache(&kc), &in_cache(&vc), cap * hd, keys, false);
        assert!(none.is_none());
        assert_eq!(alone, out);

        let qt =
            Tensor::<B, 3>::from_data(TensorData::new(q, [1, t, h * hd]), &dev).reshape([1, t, h, hd]).swap_dims(1, 2);
        let qg = qt.reshape([1, kvh, rep * t, hd]);
        let scores = qg.matmul(k4.swap_dims(2, 3)).mul_scalar(1.0 / (hd as f64).sqrt()).reshape([1, h, t, keys]);
        let mask: Vec<bool> = (0..t).flat_map(|i| (0..keys).map(move |j| j > start + i)).collect();
        let mask = Tensor::<B, 2, Bool>::from_data(TensorData::new(mask, [t, keys]), &dev);
        let p = softmax(scores.mask_fill(mask.unsqueeze::<4>(), f32::NEG_INFINITY), 3);
        let o = p.clone().reshape([1, kvh, rep * t, keys]).matmul(v4).reshape([1, h, t, hd]).swap_dims(1, 2).reshape([
            1,
            t,
            h * hd,
        ]);
        close(&probs, &p.into_data().to_vec::<f32>().unwrap(), 1e-6);
        close(&out, &o.into_data().to_vec::<f32>().unwrap(), 1e-5);
    }

    #[test]
    fn silu_mul_at_the_extremes() {
        // past exp_fast's clamps (|x| > 87) and through zero, against silu in f64; 40,000 values take the lanes and
        // the pool's chunks
        let mut g: Vec<f32> = [-1e30f32, -200.0, -88.5, -87.0, -20.0, -1e-3, 0.0, 1e-3, 20.0, 87.0, 88.5, 200.0, 1e30]
            .into_iter()
            .chain((0..40_000).map(|i| (i as f32 - 20_000.0) * 0.01))
            .collect();
        let u: Vec<f32> = (0..g.len()).map(|i| 1.0 + (i % 7) as f32 * 0.25).collect();
        let want: Vec<f32> =
            g.iter().zip(&u).map(|(&x, &b)| (x as f64 / (1.0 + (-x as f64).exp()) * b as f64) as f32).collect();
        silu_mul(&mut g, &u);
        close(&g, &want, 1e-6);
    }

    #[test]
    fn norm_and_silu_equal_burn_ops() {
        let (t, d) = (3, 16);
        let x = rand_vec(t * d, 7);
        let w = rand_vec(d, 8);
        let dev = Default::default();
        let xt = Tensor::<B, 2>::from_data(TensorData::new(x.clone(), [t, d]), &dev);
        let var = xt.clone().powi_scalar(2).mean_dim(1);
        let want = xt.clone()
            * var.add_scalar(1e-5).sqrt().recip()
            * Tensor::<B, 1>::from_data(TensorData::new(w.clone(), [d]), &dev).unsqueeze::<2>();
        close(&rms_norm(&x, d, &w, 1e-5), &want.into_data().to_vec::<f32>().unwrap(), 1e-6);

        let u = rand_vec(t * d, 9);
        let mut g = x.clone();
        silu_mul(&mut g, &u);
        let want = silu(xt) * Tensor::<B, 2>::from_data(TensorData::new(u, [t, d]), &dev);
        close(&g, &want.into_data().to_vec::<f32>().unwrap(), 1e-6);
    }

    /// GELU's erf form against burn's `gelu` (libm's erff), and the tanh form against `gelu_approximate`, on a
    /// grid through [-10, 10]; erf_fast against libm's erff directly, its ends within f32 rounding of +-1.
    #[test]
    fn gelu_and_erf_equal_burn_and_libm() {
        let xs: Vec<f32> = (-2000..=2000).map(|i| i as f32 * 0.005).collect();
        let dev = Default::default();
        let xt = Tensor::<B, 1>::from_data(TensorData::new(xs.clone(), [xs.len()]), &dev);
        let mut g = xs.clone();
        gelu(&mut g, false);
        close(&g, &burn::tensor::activation::gelu(xt.clone()).into_data().to_vec::<f32>().unwrap(), 1e-6);
        let mut g = xs.clone();
        gelu(&mut g, true);
        close(&g, &burn::tensor::activation::gelu_approximate(xt).into_data().to_vec::<f32>().unwrap(), 1e-6);
        let e = Tensor::<B, 1>::from_data(TensorData::new(xs.clone(), [xs.len()]), &dev).erf();
        let want = e.into_data().to_vec::<f32>().unwrap();
        for (x, w) in xs.iter().zip(&want) {
            assert!((erf_fast(*x) - w).abs() <= 1e-6, "erf({x}): {} vs {w}", erf_fast(*x));
        }
        assert_eq!(erf_fast(0.0), 0.0);
        assert!((erf_fast(30.0) - 1.0).abs() <= 2e-7 && (erf_fast(-30.0) + 1.0).abs() <= 2e-7);
    }

    /// LayerNorm with and without the residual, against burn's ops as the encoder's `LayerNorm` composes them;
    /// hand-worked: the row (1, 3) normalises to (-1, 1) (mean 2, variance 1).
    #[test]
    fn layer_norm_equals_burn_ops() {
        let mut x = vec![1.0, 3.0];
        layer_norm(&mut x, None, 2, &[1.0, 1.0], &[0.0, 0.0], 0.0);
        close(&x, &[-1.0, 1.0], 1e-7);
        let (t, d) = (5, 24);
        let (x, r, w, b) = (rand_vec(t * d, 21), rand_vec(t * d, 22), rand_vec(d, 23), rand_vec(d, 24));
        let dev = Default::default();
        let y = Tensor::<B, 2>::from_data(TensorData::new(x.clone(), [t, d]), &dev)
            + Tensor::<B, 2>::from_data(TensorData::new(r.clone(), [t, d]), &dev);
        let c = y.clone() - y.mean_dim(1);
        let var = c.clone().powi_scalar(2).mean_dim(1);
        let want = c / var.add_scalar(1e-12).sqrt()
            * Tensor::<B, 1>::from_data(TensorData::new(w.clone(), [d]), &dev).unsqueeze::<2>()
            + Tensor::<B, 1>::from_data(TensorData::new(b.clone(), [d]), &dev).unsqueeze::<2>();
        let mut got = x;
        layer_norm(&mut got, Some(&r), d, &w, &b, 1e-12);
        close(&got, &want.into_data().to_vec::<f32>().unwrap(), 1e-5);
    }

    /// Against burn's ops as the encoder composes them: two sequences, the second padded by two, fused QKV rows.
    #[test]
    fn bidirectional_attention_equals_burn_ops() {
        let (b, t, h, hd) = (2, 5, 3, 4);
        let d = h * hd;
        let qkv = rand_vec(b * t * 3 * d, 31);
        let mut mask = vec![1f32; b * t];
        mask[2 * t - 2..].fill(0.0);
        let got = bidirectional_attention(&qkv, b, t, h, hd, &mask);
        let dev = Default::default();
        let all = Tensor::<B, 3>::from_data(TensorData::new(qkv, [b, t, 3 * d]), &dev);
        let heads = |i: usize| all.clone().narrow(2, i * d, d).reshape([b, t, h, hd]).swap_dims(1, 2);
        let (q, k, v) = (heads(0), heads(1), heads(2));
        let bias = (Tensor::<B, 2>::from_data(TensorData::new(mask, [b, t]), &dev).reshape([b, 1, 1, t]) - 1.0) * 1e9;
        let p = softmax(q.matmul(k.swap_dims(2, 3)) * (1.0 / (hd as f64).sqrt()) + bias, 3);
        let want = p.matmul(v).swap_dims(1, 2).reshape([b, t, d]);
        close(&got, &want.into_data().to_vec::<f32>().unwrap(), 1e-5);
    }

    /// A causal row by hand: scores `2 ln k` for keys k = 1, 2, 3 scaled by 1/2 are `ln k`, so the weights are
    /// `k / 6`; the two keys past the query are 0 whatever they held. Eleven keys seen (a whole lane block and a
    /// part): the softmax worked out with libm's `exp`, zeros past them.
    #[test]
    fn softmax_prefix_by_hand() {
        let mut row = [2.0 * 1f32.ln(), 2.0 * 2f32.ln(), 2.0 * 3f32.ln(), 7.0, -7.0];
        softmax_prefix(&mut row, 3, 0.5);
        close(&row, &[1.0 / 6.0, 2.0 / 6.0, 3.0 / 6.0, 0.0, 0.0], 1e-6);
        let mut long: Vec<f32> = (0..16).map(|i| i as f32).collect();
        softmax_prefix(&mut long, 11, 1.0);
        let z: f32 = (0..11).map(|i| (i as f32 - 10.0).exp()).sum();
        close(&long[..11], &(0..11).map(|i| (i as f32 - 10.0).exp() / z).collect::<Vec<_>>(), 1e-6);
        assert!(long[11..].iter().all(|&p| p == 0.0));
    }

    /// exp_fast against libm's expf (std's `exp`) on a grid inside (-87, 88): within 2 ulp (relative 2.4e-7);
    /// exactly 0 below -87 (the padding keys' weight) and 1 at 0.
    #[test]
    fn exp_fast_equals_libm() {
        for i in -86_999..=87_999 {
            let x = i as f32 * 1e-3;
            let (got, want) = (exp_fast(x), x.exp());
            assert!((got - want).abs() <= 2.4e-7 * want, "exp({x}): {got} vs {want}");
        }
        assert_eq!((exp_fast(0.0), exp_fast(-1e9), exp_fast(-88.0)), (1.0, 0.0, 0.0));
    }
}
