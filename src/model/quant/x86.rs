//! The same kernel with AVX-512 (one group = one 16-lane register) and AVX2 (two 8-lane registers): each
//! group's 16 int8 weights are widened to f32, de-quantized with one FMA (`q * scale + offset`) and
//! accumulated with another. Four rows at a time share the loads of `x`; two accumulators per row (even and
//! odd groups) keep eight FMA chains in flight.

use std::arch::x86_64::*;

use super::{QMatrix, ROWS, TILE};

const GROUP: usize = 16;

#[target_feature(enable = "avx512f")]
pub(super) unsafe fn rows_avx512(m: &QMatrix, row0: usize, x: &[f32], out: &mut [f32]) {
    let (cols, groups) = (m.cols, m.cols / GROUP);
    let (qp, sp, op, xp) = (m.q.as_ptr(), m.scale.as_ptr(), m.offset.as_ptr(), x.as_ptr());
    // scale and offset of group i (= row * groups + g): sp[i >> sh], op[i >> sh] (0 when the copy keeps none)
    let (sh, has_off) = (m.scale_shift, !m.offset.is_empty());
    // acc + w x for group g of `row`
    macro_rules! step {
        ($acc:expr, $row:expr, $g:expr, $xv:expr) => {{
            let (row, g) = ($row, $g);
            let q = _mm_loadu_si128(qp.add(row * cols + g * GROUP) as *const __m128i);
            let qf = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q));
            let w = _mm512_fmadd_ps(
                qf,
                _mm512_set1_ps(*sp.add((row * groups + g) >> sh)),
                _mm512_set1_ps(if has_off { *op.add((row * groups + g) >> sh) } else { 0.0 }),
            );
            _mm512_fmadd_ps(w, $xv, $acc)
        }};
    }
    let n = out.len();
    let mut r = 0;
    while r + ROWS <= n {
        let row = row0 + r;
        let mut a = [_mm512_setzero_ps(); 2 * ROWS];
        let mut g = 0;
        while g + 2 <= groups {
            let x0 = _mm512_loadu_ps(xp.add(g * GROUP));
            let x1 = _mm512_loadu_ps(xp.add((g + 1) * GROUP));
            for k in 0..ROWS {
                a[2 * k] = step!(a[2 * k], row + k, g, x0);
                a[2 * k + 1] = step!(a[2 * k + 1], row + k, g + 1, x1);
            }
            g += 2;
        }
        if g < groups {
            let x0 = _mm512_loadu_ps(xp.add(g * GROUP));
            for k in 0..ROWS {
                a[2 * k] = step!(a[2 * k], row + k, g, x0);
            }
        }
        for k in 0..ROWS {
            out[r + k] = _mm512_reduce_add_ps(_mm512_add_ps(a[2 * k], a[2 * k + 1]));
        }
        r += ROWS;
    }
    while r < n {
        let mut acc = _mm512_setzero_ps();
        for g in 0..groups {
            acc = step!(acc, row0 + r, g, _mm512_loadu_ps(xp.add(g * GROUP)));
        }
        out[r] = _mm512_reduce_add_ps(acc);
        r += 1;
    }
}

/// U4: a group is 16 bytes; low nibbles are weights 0..16, high nibbles 16..32.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn rows_u4_avx512(m: &QMatrix, row0: usize, x: &[f32], out: &mut [f32]) {
    let groups = m.cols / 32;
    let rb = m.cols / 2;
    let (qp, sp, op, xp) = (m.q.as_ptr(), m.scale.as_ptr(), m.offset.as_ptr(), x.as_ptr());
    let mask = _mm_set1_epi8(0x0F);
    // (acc_lo, acc_hi) + w x for group g of `row`
    macro_rules! step {
        ($lo:expr, $hi:expr, $row:expr, $g:expr, $x0:expr, $x1:expr) => {{
            let (row, g) = ($row, $g);
            let b = _mm_loadu_si128(qp.add(row * rb + g * 16) as *const __m128i);
            let ql = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(b, mask)));
            let qh = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(b, 4), mask)));
            let s = _mm512_set1_ps(*sp.add(row * groups + g));
            let o = _mm512_set1_ps(*op.add(row * groups + g));
            $lo = _mm512_fmadd_ps(_mm512_fmadd_ps(ql, s, o), $x0, $lo);
            $hi = _mm512_fmadd_ps(_mm512_fmadd_ps(qh, s, o), $x1, $hi);
        }};
    }
    let n = out.len();
    let mut r = 0;
    while r + ROWS <= n {
        let row = row0 + r;
        let mut a = [_mm512_setzero_ps(); 2 * ROWS];
        for g in 0..groups {
            let x0 = _mm512_loadu_ps(xp.add(g * 32));
            let x1 = _mm512_loadu_ps(xp.add(g * 32 + 16));
            for k in 0..ROWS {
                let (mut lo, mut hi) = (a[2 * k], a[2 * k + 1]);
                step!(lo, hi, row + k, g, x0, x1);
                a[2 * k] = lo;
                a[2 * k + 1] = hi;
            }
        }
        for k in 0..ROWS {
            out[r + k] = _mm512_reduce_add_ps(_mm512_add_ps(a[2 * k], a[2 * k + 1]));
        }
        r += ROWS;
    }
    while r < n {
        let (mut lo, mut hi) = (_mm512_setzero_ps(), _mm512_setzero_ps());
        for g in 0..groups {
            step!(lo, hi, row0 + r, g, _mm512_loadu_ps(xp.add(g * 32)), _mm512_loadu_ps(xp.add(g * 32 + 16)));
        }
        out[r] = _mm512_reduce_add_ps(_mm512_add_ps(lo, hi));
        r += 1;
    }
}

/// Horizontal sum of the eight lanes.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)))
}

/// AVX2, one row at a time, for `N` vectors at once: `x` is `[N, cols]`, `out` is `[rows][N]` (for N = 1 the
/// plain `W x`). Each group is de-quantized once (one FMA: `q * scale + offset`) and multiplied into every
/// vector. A vector's sum is formed by the same FMAs in the same order whatever N is, so the two-vector pass
/// that several questions decoding together use (`matvec`) gives each of them bit for bit its one-vector result.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn rows_avx2<const N: usize>(m: &QMatrix, row0: usize, x: &[f32], out: &mut [f32]) {
    let (cols, groups) = (m.cols, m.cols / GROUP);
    let (qp, sp, op, xp) = (m.q.as_ptr(), m.scale.as_ptr(), m.offset.as_ptr(), x.as_ptr());
    // scale and offset of group i (= row * groups + g): sp[i >> sh], op[i >> sh] (0 when the copy keeps none)
    let (sh, has_off) = (m.scale_shift, !m.offset.is_empty());
    for r in 0..out.len() / N {
        let row = row0 + r;
        let mut a = [[_mm256_setzero_ps(); 2]; N];
        for g in 0..groups {
            let base = qp.add(row * cols + g * GROUP);
            let s = _mm256_set1_ps(*sp.add((row * groups + g) >> sh));
            let o = _mm256_set1_ps(if has_off { *op.add((row * groups + g) >> sh) } else { 0.0 });
            let w0 = _mm256_fmadd_ps(
                _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(base as *const __m128i))),
                s,
                o,
            );
            let w1 = _mm256_fmadd_ps(
                _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(base.add(8) as *const __m128i))),
                s,
                o,
            );
            for (j, acc) in a.iter_mut().enumerate() {
                let xj = xp.add(j * cols + g * GROUP);
                acc[0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xj), acc[0]);
                acc[1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xj.add(8)), acc[1]);
            }
        }
        for (j, acc) in a.iter().enumerate() {
            out[N * r + j] = hsum(_mm256_add_ps(acc[0], acc[1]));
        }
    }
}

/// [`rows_avx2`] for U4 blocks (layout and guarantee the same): a group is 16 bytes, low nibbles weights
/// 0..16, high nibbles 16..32; four accumulators per vector.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn rows_u4_avx2<const N: usize>(m: &QMatrix, row0: usize, x: &[f32], out: &mut [f32]) {
    let (cols, groups) = (m.cols, m.cols / 32);
    let rb = m.cols / 2;
    let (qp, sp, op, xp) = (m.q.as_ptr(), m.scale.as_ptr(), m.offset.as_ptr(), x.as_ptr());
    let mask = _mm_set1_epi8(0x0F);
    for r in 0..out.len() / N {
        let row = row0 + r;
        let mut a = [[_mm256_setzero_ps(); 4]; N];
        for g in 0..groups {
            let bytes = _mm_loadu_si128(qp.add(row * rb + g * 16) as *const __m128i);
            let lo = _mm_and_si128(bytes, mask);
            let hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
            let s = _mm256_set1_ps(*sp.add(row * groups + g));
            let o = _mm256_set1_ps(*op.add(row * groups + g));
            // weights 0..8, 8..16 (low nibbles), 16..24, 24..32 (high nibbles)
            let parts = [lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)];
            for (k, p) in parts.into_iter().enumerate() {
                let w = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(p)), s, o);
                for (j, acc) in a.iter_mut().enumerate() {
                    acc[k] = _mm256_fmadd_ps(w, _mm256_loadu_ps(xp.add(j * cols + g * 32 + 8 * k)), acc[k]);
                }
            }
        }
        for (j, acc) in a.iter().enumerate() {
            out[N * r + j] = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
        }
    }
}

/// [`rows_avx512`] for `N` vectors at once: `x` is `[N, cols]`, `out` is `[rows][N]`. Each group is read and
/// de-quantized once and multiplied into every vector, so several sequences decoding together stream each weight
/// block once. Every vector's sum is formed by the same FMAs in the same order as [`rows_avx512`] forms it (rows of
/// the full four-row blocks: even and odd groups in two accumulators; the remaining rows: one accumulator), so each
/// result is bit for bit the one-vector result.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn rows_avx512_n<const N: usize>(m: &QMatrix, row0: usize, x: &[f32], out: &mut [f32]) {
    let (cols, groups) = (m.cols, m.cols / GROUP);
    let (qp, sp, op, xp) = (m.q.as_ptr(), m.scale.as_ptr(), m.offset.as_ptr(), x.as_ptr());
    // scale and offset of group i (= row * groups + g): sp[i >> sh], op[i >> sh] (0 when the copy keeps none)
    let (sh, has_off) = (m.scale_shift, !m.offset.is_empty());
    // the de-quantized weights of group g of `row`
    macro_rules! w {
        ($row:expr, $g:expr) => {{
            let (row, g) = ($row, $g);
            let q = _mm_loadu_si128(qp.add(row * cols + g * GROUP) as *const __m128i);
            _mm512_fmadd_ps(
                _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)),
                _mm512_set1_ps(*sp.add((row * groups + g) >> sh)),
                _mm512_set1_ps(if has_off { *op.add((row * groups + g) >> sh) } else { 0.0 }),
            )
        }};
    }
    let n = out.len() / N;
    let blocked = n - n % ROWS;
    for r in 0..n {
        let row = row0 + r;
        if r < blocked {
            let mut a = [[_mm512_setzero_ps(); 2]; N];
            let mut g = 0;
            while g + 2 <= groups {
                let (w0, w1) = (w!(row, g), w!(row, g + 1));
                for (j, acc) in a.iter_mut().enumerate() {
                    let xj = xp.add(j * cols + g * GROUP);
                    acc[0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xj), acc[0]);
                    acc[1] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xj.add(GROUP)), acc[1]);
                }
                g += 2;
            }
            if g < groups {
                let w0 = w!(row, g);
                for (j, acc) in a.iter_mut().enumerate() {
                    acc[0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xp.add(j * cols + g * GROUP)), acc[0]);
                }
            }
            for (j, acc) in a.iter().enumerate() {
                out[N * r + j] = _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]));
            }
        } else {
            let mut a = [_mm512_setzero_ps(); N];
            for g in 0..groups {
                let w0 = w!(row, g);
                for (j, acc) in a.iter_mut().enumerate() {
                    *acc = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xp.add(j * cols + g * GROUP)), *acc);
                }
            }
            for (j, acc) in a.iter().enumerate() {
                out[N * r + j] = _mm512_reduce_add_ps(*acc);
            }
        }
    }
}

/// [`rows_u4_avx512`] for `N` vectors at once (layout and guarantee as [`rows_avx512_n`]).
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn rows_u4_avx512_n<const N: usize>(m: &QMatrix, row0: usize, x: &[f32], out: &mut [f32]) {
    let (cols, groups) = (m.cols, m.cols / 32);
    let rb = m.cols / 2;
    let (qp, sp, op, xp) = (m.q.as_ptr(), m.scale.as_ptr(), m.offset.as_ptr(), x.as_ptr());
    let mask = _mm_set1_epi8(0x0F);
    for r in 0..out.len() / N {
        let row = row0 + r;
        let mut a = [[_mm512_setzero_ps(); 2]; N];
        for g in 0..groups {
            let b = _mm_loadu_si128(qp.add(row * rb + g * 16) as *const __m128i);
            let ql = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(b, mask)));
            let qh = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(b, 4), mask)));
            let s = _mm512_set1_ps(*sp.add(row * groups + g));
            let o = _mm512_set1_ps(*op.add(row * groups + g));
            let (wl, wh) = (_mm512_fmadd_ps(ql, s, o), _mm512_fmadd_ps(qh, s, o));
            for (j, acc) in a.iter_mut().enumerate() {
                let xj = xp.add(j * cols + g * 32);
                acc[0] = _mm512_fmadd_ps(wl, _mm512_loadu_ps(xj), acc[0]);
                acc[1] = _mm512_fmadd_ps(wh, _mm512_loadu_ps(xj.add(16)), acc[1]);
            }
        }
        for (j, acc) in a.iter().enumerate() {
            out[N * r + j] = _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]));
        }
    }
}

/// The per-row loop of the integer kernels: `$step!(acc, $row, c)` for `c` in `0..$n`, even `c` into one set of
/// `N` accumulators and odd `c` into another (two dependency chains per vector); gives `(even, odd)`.
macro_rules! even_odd {
    ($n:expr, $zero:expr, $step:ident, $row:expr) => {{
        let (mut even, mut odd) = ([$zero; N], [$zero; N]);
        let mut c = 0;
        while c + 2 <= $n {
            $step!(even, $row, c);
            $step!(odd, $row, c + 1);
            c += 2;
        }
        if c < $n {
            $step!(even, $row, c);
        }
        (even, odd)
    }};
}

/// Integer products (`super::int8`) with AVX-512 VNNI, for `N` quantized rows at once, `out` `[rows][N]`. Per 64
/// columns: the weights' magnitudes (unsigned) times the inputs with the weights' signs, 4 products summed per
/// 32-bit lane by one `vpdpbusd` (lanes 0..4 are weights 0..16 of the chunk, and so on); the 16 sums converted to
/// f32 and multiplied by their weight group's scale times their input block's scale, in two accumulators (even and
/// odd chunks). A last chunk of 32 columns loads under a mask. Each vector's sum is formed in the same order
/// whatever `N` is.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) unsafe fn rows_int8_avx512<const N: usize>(
    m: &QMatrix,
    row0: usize,
    x: &super::q8::Int8Rows,
    out: &mut [f32],
) {
    let (cols, groups, sh) = (m.cols, m.cols / GROUP, m.scale_shift);
    let chunks = cols.div_ceil(64);
    let (qp, sp, xq, xl) = (m.q.as_ptr(), m.scale.as_ptr(), x.q.as_ptr(), x.lanes.as_ptr());
    // lane -> which of the chunk's weight scales: one per 32 weights (sh = 1) or per 16
    let (idx, scales) = if sh == 1 {
        (_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), 2)
    } else {
        (_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3), 4)
    };
    let zero = _mm512_setzero_si512();
    // acc[j] += the products of chunk c for every vector j
    macro_rules! chunk {
        ($acc:expr, $row:expr, $c:expr) => {{
            let (row, c) = ($row, $c);
            let col = c * 64;
            let (bytes, nscales): (__mmask64, u32) =
                if col + 64 <= cols { (!0, scales) } else { ((1u64 << (cols - col)) - 1, scales / 2) };
            let w = _mm512_maskz_loadu_epi8(bytes, qp.add(row * cols + col) as *const i8);
            let (mag, neg) = (_mm512_abs_epi8(w), _mm512_movepi8_mask(w));
            let first = (row * groups + col / GROUP) >> sh;
            let ws =
                _mm512_permutexvar_ps(idx, _mm512_maskz_loadu_ps(((1u32 << nscales) - 1) as __mmask16, sp.add(first)));
            for (j, a) in $acc.iter_mut().enumerate() {
                let v = _mm512_maskz_loadu_epi8(bytes, xq.add(j * cols + col));
                let signed = _mm512_mask_sub_epi8(v, neg, zero, v);
                let dot = _mm512_dpbusd_epi32(zero, mag, signed);
                let s = _mm512_mul_ps(ws, _mm512_loadu_ps(xl.add((j * chunks + c) * 16)));
                *a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), s, *a);
            }
        }};
    }
    for r in 0..out.len() / N {
        let (even, odd) = even_odd!(chunks, _mm512_setzero_ps(), chunk, row0 + r);
        for j in 0..N {
            out[N * r + j] = _mm512_reduce_add_ps(_mm512_add_ps(even[j], odd[j]));
        }
    }
}

/// [`rows_int8_avx512`] with AVX2, per 32 columns: `vpmaddubsw` (magnitudes times signed inputs, pairs summed in
/// 16 bits: at most 2 x 128 x 127, no saturation) and `vpmaddwd` by ones (4 products per 32-bit lane: lanes 0..4
/// are the chunk's first 16 weights); the scale of each half times the input block's, two accumulators.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn rows_int8_avx2<const N: usize>(
    m: &QMatrix,
    row0: usize,
    x: &super::q8::Int8Rows,
    out: &mut [f32],
) {
    let (cols, groups, sh) = (m.cols, m.cols / GROUP, m.scale_shift);
    let blocks = cols / 32;
    let (qp, sp, xq, xs) = (m.q.as_ptr(), m.scale.as_ptr(), x.q.as_ptr(), x.scale.as_ptr());
    let ones = _mm256_set1_epi16(1);
    // acc[j] += the products of block b for every vector j
    macro_rules! block {
        ($acc:expr, $row:expr, $b:expr) => {{
            let (row, b) = ($row, $b);
            let col = b * 32;
            let w = _mm256_loadu_si256(qp.add(row * cols + col) as *const __m256i);
            let mag = _mm256_abs_epi8(w);
            let g = row * groups + col / GROUP;
            let ws = if sh == 1 {
                _mm256_set1_ps(*sp.add(g >> 1))
            } else {
                _mm256_setr_m128(_mm_set1_ps(*sp.add(g)), _mm_set1_ps(*sp.add(g + 1)))
            };
            for (j, a) in $acc.iter_mut().enumerate() {
                let v = _mm256_loadu_si256(xq.add(j * cols + col) as *const __m256i);
                let dot = _mm256_madd_epi16(_mm256_maddubs_epi16(mag, _mm256_sign_epi8(v, w)), ones);
                let s = _mm256_mul_ps(ws, _mm256_set1_ps(*xs.add(j * blocks + b)));
                *a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), s, *a);
            }
        }};
    }
    for r in 0..out.len() / N {
        let (even, odd) = even_odd!(blocks, _mm256_setzero_ps(), block, row0 + r);
        for j in 0..N {
            out[N * r + j] = hsum(_mm256_add_ps(even[j], odd[j]));
        }
    }
}

/// [`rows_int8_avx512`] for nibble copies (U4): per 64 columns (two groups of 32) the 32 bytes are split into low
/// and high nibbles and put in column order (weights are unsigned: they multiply the signed inputs directly); each
/// group's offset times its input block's `scale * sum q` is added once per row (16 groups per step).
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) unsafe fn rows_int8_u4_avx512<const N: usize>(
    m: &QMatrix,
    row0: usize,
    x: &super::q8::Int8Rows,
    out: &mut [f32],
) {
    let (cols, groups) = (m.cols, m.cols / 32);
    let (rb, chunks) = (cols / 2, cols.div_ceil(64));
    let (qp, sp, op) = (m.q.as_ptr(), m.scale.as_ptr(), m.offset.as_ptr());
    let (xq, xl, xs) = (x.q.as_ptr(), x.lanes.as_ptr(), x.sum.as_ptr());
    let idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    let nib = _mm256_set1_epi8(0x0F);
    let zero = _mm512_setzero_si512();
    macro_rules! chunk {
        ($acc:expr, $row:expr, $c:expr) => {{
            let (row, c) = ($row, $c);
            let col = c * 64;
            let full = col + 64 <= cols;
            let at = qp.add(row * rb + col / 2);
            let b = if full {
                _mm256_loadu_si256(at as *const __m256i)
            } else {
                _mm256_zextsi128_si256(_mm_loadu_si128(at as *const __m128i))
            };
            let (lo, hi) = (_mm256_and_si256(b, nib), _mm256_and_si256(_mm256_srli_epi16(b, 4), nib));
            // [A lo, B lo, A hi, B hi] -> [A lo, A hi, B lo, B hi]: weights in column order
            let both = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
            let w = _mm512_shuffle_i64x2(both, both, 0b11_01_10_00);
            let bytes: __mmask64 = if full { !0 } else { (1u64 << 32) - 1 };
            let ws = _mm512_permutexvar_ps(
                idx,
                _mm512_maskz_loadu_ps(if full { 0b11 } else { 0b1 }, sp.add(row * groups + col / 32)),
            );
            for (j, a) in $acc.iter_mut().enumerate() {
                let v = _mm512_maskz_loadu_epi8(bytes, xq.add(j * cols + col));
                let dot = _mm512_dpbusd_epi32(zero, w, v);
                let s = _mm512_mul_ps(ws, _mm512_loadu_ps(xl.add((j * chunks + c) * 16)));
                *a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), s, *a);
            }
        }};
    }
    for r in 0..out.len() / N {
        let row = row0 + r;
        let (even, odd) = even_odd!(chunks, _mm512_setzero_ps(), chunk, row);
        for j in 0..N {
            let mut off = _mm512_setzero_ps();
            let mut g = 0;
            while g < groups {
                let k: __mmask16 = if g + 16 <= groups { !0 } else { (1u16 << (groups - g)) - 1 };
                let o = _mm512_maskz_loadu_ps(k, op.add(row * groups + g));
                off = _mm512_fmadd_ps(o, _mm512_maskz_loadu_ps(k, xs.add(j * groups + g)), off);
                g += 16;
            }
            out[N * r + j] = _mm512_reduce_add_ps(_mm512_add_ps(even[j], odd[j])) + _mm512_reduce_add_ps(off);
        }
    }
}

/// [`rows_int8_u4_avx512`] with AVX2, per group of 32: the nibbles in column order in one register,
/// `vpmaddubsw` (unsigned weights times signed inputs: at most 2 x 15 x 127 per pair) and `vpmaddwd` by ones, the
/// 8 sums converted and multiplied into the accumulator (even groups into one, odd into another) by the group's
/// scale times its input block's. Per row, before its groups: those scale products for all its groups, 8 at a
/// time (the same f32 products; per group and vector one broadcast, not two loads and a multiply), and the
/// offsets' term (`sum_g o_g s_x sum q_x`) in 8 lanes, added after. Added one group after another, each FMA waiting
/// for the last, that term had bounded the kernel (`bench_decode_matvec`: twice as fast in lanes on a Zen 3). Per
/// 2 groups, one load of their 32 bytes of nibbles.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn rows_int8_u4_avx2<const N: usize>(
    m: &QMatrix,
    row0: usize,
    x: &super::q8::Int8Rows,
    out: &mut [f32],
) {
    let (cols, groups) = (m.cols, m.cols / 32);
    let rb = cols / 2;
    let (qp, sp, op) = (m.q.as_ptr(), m.scale.as_ptr(), m.offset.as_ptr());
    let (xq, xs, xsum) = (x.q.as_ptr(), x.scale.as_ptr(), x.sum.as_ptr());
    let nib = _mm256_set1_epi8(0x0F);
    let ones = _mm256_set1_epi16(1);
    // per vector, the row's groups' `s_w[g] * s_x[g]`
    let mut prod = vec![0f32; N * groups];
    let pp = prod.as_mut_ptr();
    // acc + the products of group g for vector j, weights `w` (32 bytes, column order)
    macro_rules! group {
        ($acc:expr, $w:expr, $j:expr, $g:expr) => {{
            let (j, g) = ($j, $g);
            let v = _mm256_loadu_si256(xq.add(j * cols + g * 32) as *const __m256i);
            let dot = _mm256_madd_epi16(_mm256_maddubs_epi16($w, v), ones);
            $acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_broadcast_ss(&*pp.add(j * groups + g)), $acc);
        }};
    }
    for r in 0..out.len() / N {
        let row = row0 + r;
        let (sr, or) = (sp.add(row * groups), op.add(row * groups));
        let mut off = [0f32; N];
        for (j, o) in off.iter_mut().enumerate() {
            let (xs, xsum, pj) = (xs.add(j * groups), xsum.add(j * groups), pp.add(j * groups));
            let mut lanes = _mm256_setzero_ps();
            let mut g = 0;
            while g + 8 <= groups {
                _mm256_storeu_ps(pj.add(g), _mm256_mul_ps(_mm256_loadu_ps(sr.add(g)), _mm256_loadu_ps(xs.add(g))));
                lanes = _mm256_fmadd_ps(_mm256_loadu_ps(or.add(g)), _mm256_loadu_ps(xsum.add(g)), lanes);
                g += 8;
            }
            let mut tail = 0f32;
            while g < groups {
                *pj.add(g) = *sr.add(g) * *xs.add(g);
                tail = (*or.add(g)).mul_add(*xsum.add(g), tail);
                g += 1;
            }
            *o = hsum(lanes) + tail;
        }
        let (mut even, mut odd) = ([_mm256_setzero_ps(); N], [_mm256_setzero_ps(); N]);
        let mut g = 0;
        while g + 2 <= groups {
            // groups g and g + 1: [g low, g + 1 low] and [g high, g + 1 high] nibbles -> each group's 32 in order
            let b = _mm256_loadu_si256(qp.add(row * rb + g * 16) as *const __m256i);
            let (lo, hi) = (_mm256_and_si256(b, nib), _mm256_and_si256(_mm256_srli_epi16(b, 4), nib));
            let (w0, w1) = (_mm256_permute2x128_si256(lo, hi, 0x20), _mm256_permute2x128_si256(lo, hi, 0x31));
            for j in 0..N {
                group!(even[j], w0, j, g);
                group!(odd[j], w1, j, g + 1);
            }
            g += 2;
        }
        if g < groups {
            let b = _mm_loadu_si128(qp.add(row * rb + g * 16) as *const __m128i);
            let n4 = _mm256_castsi256_si128(nib);
            let w = _mm256_setr_m128i(_mm_and_si128(b, n4), _mm_and_si128(_mm_srli_epi16(b, 4), n4));
            for (j, e) in even.iter_mut().enumerate() {
                group!(*e, w, j, g);
            }
        }
        for j in 0..N {
            out[N * r + j] = hsum(_mm256_add_ps(even[j], odd[j])) + off[j];
        }
    }
}

/// The products of a Q4_K superblock copy (`super::superblocks`) with AVX2, for `N` vectors quantized with
/// sub-scales (`super::q8::SubscaledRows`, `t` up to 255, each 64 values' words interleaved as
/// `super::q8::interleaved` says): per vector and superblock the 8 sub-blocks' `sc * t` (at most 63 x 255) in 16
/// bits; per 64 columns one 32-byte load of nibbles, masked into sub-blocks `2c` (low) and `2c + 1` (high), their
/// words interleaved as the inputs' (`vpunpcklwd`, `vpunpckhwd`: once per weight row, for all `N` vectors), two
/// `vpmaddubsw` with the inputs (at most 2 x 15 x 127 per pair) added in 16 bits (at most 7,620), whose words
/// alternate between the two sub-blocks, and one `vpmaddwd` by their two `sc * t` alternately (at most
/// 2 x 7,620 x 16,065 per lane), added in 32-bit lanes over the superblock (at most 4 x 244.9 million); per
/// superblock one conversion and one FMA by `d s_x`, and the offsets' term, each sub-block's `m` times its inputs'
/// `t * sum q` in one of 8 lanes, one FMA by `-dmin s_x` into the same accumulator (one per vector: with 4 vectors,
/// a second one per vector for the offsets had spilled). A vector's sums are formed in the same order whatever `N`
/// and the spans ([`by_spans`]): bit for bit its one-vector result.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn rows_int8_q4k_avx2<const N: usize>(
    m: &QMatrix,
    row0: usize,
    x: &super::q8::SubscaledRows,
    out: &mut [f32],
) {
    let (cols, per_row, groups) = (m.cols, m.cols / 256, m.cols / 32);
    let (qp, sp, op, subp) = (m.q.as_ptr(), m.scale.as_ptr(), m.offset.as_ptr(), m.sub.as_ptr());
    let (xq, xs, xt, xts) = (x.q.as_ptr(), x.scale.as_ptr(), x.t32x2.as_ptr(), x.tsum32.as_ptr());
    let nib = _mm256_set1_epi8(0x0F);
    let span = |r: usize, bs: std::ops::Range<usize>, acc_in: &mut [__m256; N]| {
        let row = row0 + r;
        let mut acc = *acc_in;
        for b in bs {
            let sb = row * per_row + b;
            let sub = subp.add(sb * 16);
            // the 8 scales widened to 16 bits times each vector's sub-scales, in both halves; the 8 `m` in 32 bits
            // (`t` is stored twice rather than broadcast here: LLVM turns a shuffle of a broadcast into two)
            let sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_loadl_epi64(sub as *const __m128i)));
            let st: [__m256i; N] = std::array::from_fn(|j| {
                _mm256_mullo_epi16(sc, _mm256_loadu_si256(xt.add(j * groups * 2 + b * 16) as *const __m256i))
            });
            let mv = _mm256_cvtepu8_epi32(_mm_loadl_epi64(sub.add(8) as *const __m128i));
            let mut dot = [_mm256_setzero_si256(); N];
            macro_rules! chunk {
                ($c:literal) => {
                    let bytes = _mm256_loadu_si256(qp.add(row * cols / 2 + b * 128 + $c * 32) as *const __m256i);
                    let (lo, hi) = (_mm256_and_si256(bytes, nib), _mm256_and_si256(_mm256_srli_epi16(bytes, 4), nib));
                    let (w1, w2) = (_mm256_unpacklo_epi16(lo, hi), _mm256_unpackhi_epi16(lo, hi));
                    for (j, dot) in dot.iter_mut().enumerate() {
                        let at = xq.add(j * cols + b * 256 + $c * 64);
                        let p = _mm256_add_epi16(
                            _mm256_maddubs_epi16(w1, _mm256_loadu_si256(at as *const __m256i)),
                            _mm256_maddubs_epi16(w2, _mm256_loadu_si256(at.add(32) as *const __m256i)),
                        );
                        // 32-bit lane `c` of each half: sub-blocks 2c and 2c + 1's `sc * t`, alternately
                        let s = _mm256_shuffle_epi32::<{ $c * 0x55 }>(st[j]);
                        *dot = _mm256_add_epi32(*dot, _mm256_madd_epi16(p, s));
                    }
                };
            }
            chunk!(0);
            chunk!(1);
            chunk!(2);
            chunk!(3);
            let (d, dm) = (*sp.add(sb), *op.add(sb));
            for j in 0..N {
                let dx = *xs.add(j * per_row + b);
                acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[j]), _mm256_set1_ps(d * dx), acc[j]);
                let tsums = _mm256_loadu_si256(xts.add(j * groups + b * 8) as *const __m256i);
                let msum = _mm256_cvtepi32_ps(_mm256_mullo_epi32(mv, tsums));
                acc[j] = _mm256_fmadd_ps(msum, _mm256_set1_ps(dm * dx), acc[j]);
            }
        }
        *acc_in = acc;
    };
    by_spans(out.len() / N, per_row, span, |r, acc| {
        for j in 0..N {
            out[N * r + j] = hsum(acc[j]);
        }
    });
}

/// Superblocks per span of columns: where a pass's inputs would not stay in the level-1 cache over all the rows
/// ([`SPANS_FROM`] bytes), the superblock kernels take one span of every row before the next, so that the span's
/// inputs (at most 4 x 2,048 bytes) do: `ffn_down`'s 8,960 columns of 4 inputs (35 KB) did not, and the kernels
/// waited on their loads. Decoding's one or two vectors read each row whole instead: its weights come from memory,
/// whose prefetch a row's 2,048-byte spans would interrupt (decoding one sequence fell 0.88x that way).
const SPAN: usize = 8;

/// Bytes of a pass's inputs from which the superblock kernels go by spans ([`SPAN`]).
const SPANS_FROM: usize = 24 << 10;

/// Drives a superblock kernel over `rows` rows of `per_row` superblocks: `span(r, superblocks, acc)` adds those
/// superblocks of row `r` into its accumulator per vector (zero at first), in order, and `finish(r, acc)` then
/// writes the row's results. Each accumulator takes the row's superblocks in the same order whatever the spans.
#[inline(always)]
fn by_spans<const N: usize>(
    rows: usize,
    per_row: usize,
    mut span: impl FnMut(usize, std::ops::Range<usize>, &mut [__m256; N]),
    mut finish: impl FnMut(usize, [__m256; N]),
) {
    // SAFETY: an all-zero `__m256` is eight 0.0f32.
    let zero: [__m256; N] = unsafe { std::mem::zeroed() };
    if N * per_row * 256 < SPANS_FROM {
        for r in 0..rows {
            let mut sums = zero;
            span(r, 0..per_row, &mut sums);
            finish(r, sums);
        }
        return;
    }
    let mut sums = vec![zero; rows];
    for b0 in (0..per_row).step_by(SPAN) {
        for (r, sums) in sums.iter_mut().enumerate() {
            span(r, b0..(b0 + SPAN).min(per_row), sums);
        }
    }
    for (r, sums) in sums.into_iter().enumerate() {
        finish(r, sums);
    }
}

/// [`rows_int8_q4k_avx2`] for a Q6_K superblock copy (`q + 32`, 0..=63, a byte each; 16 signed scales per 256),
/// the inputs' sub-scales `t` up to 31: per vector and superblock the 16 groups' `sc * t` (at most 128 x 31) in 16
/// bits; per 64 columns (groups `4c` to `4c + 3`) two 32-byte loads of weights, their words interleaved as the
/// inputs' (once per weight row), two `vpmaddubsw` with the inputs (at most 2 x 63 x 127 per pair) added in 16 bits
/// (at most 32,004), whose words alternate between groups `4c` and `4c + 2` in the low 128-bit half and `4c + 1`
/// and `4c + 3` in the high one, and one `vpmaddwd` by those groups' `sc * t` alike (at most 2 x 32,004 x 3,968 per
/// lane), added in 32-bit lanes over the superblock (at most 4 x 254 million); per superblock
/// `32 sum_j sc_j t_j sum_{i in j} q_i` taken back (the 16 `sc * t` times the inputs' 16 sums in one `vpmaddwd`:
/// at most 32 x 16.1 million), one conversion and one FMA by `d s_x`.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn rows_int8_q6k_avx2<const N: usize>(
    m: &QMatrix,
    row0: usize,
    x: &super::q8::SubscaledRows,
    out: &mut [f32],
) {
    let (cols, per_row) = (m.cols, m.cols / 256);
    let (qp, sp, subp) = (m.q.as_ptr(), m.scale.as_ptr(), m.sub.as_ptr());
    let (xq, xs, xt, xsum) = (x.q.as_ptr(), x.scale.as_ptr(), x.t16x2.as_ptr(), x.sum16.as_ptr());
    // byte shuffles of a register holding groups 0..8's (or 8..16's) `sc * t` in both halves: per 32-bit lane,
    // groups `4c` and `4c + 2` in the low half, `4c + 1` and `4c + 3` in the high one (`c` of 2 per half)
    let pair = |a: i8, b: i8| _mm_set1_epi32(i32::from_le_bytes([2 * a, 2 * a + 1, 2 * b, 2 * b + 1].map(|v| v as u8)));
    let pick: [__m256i; 2] = std::array::from_fn(|c| {
        let c = 4 * c as i8;
        _mm256_setr_m128i(pair(c, c + 2), pair(c + 1, c + 3))
    });
    let span = |r: usize, bs: std::ops::Range<usize>, acc_in: &mut [__m256; N]| {
        let row = row0 + r;
        let mut acc = *acc_in;
        for b in bs {
            let sb = row * per_row + b;
            // per vector the 16 groups' `sc * t` in 16 bits; groups 0..8 in both halves of one register, 8..16 of
            // another
            let sc: [__m256i; 2] = std::array::from_fn(|h| {
                _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_loadl_epi64(
                    subp.add(sb * 16 + 8 * h) as *const __m128i
                )))
            });
            let halves: [[__m256i; 2]; N] = std::array::from_fn(|j| {
                let t = xt.add(j * cols / 8 + b * 32);
                std::array::from_fn(|h| _mm256_mullo_epi16(sc[h], _mm256_loadu_si256(t.add(16 * h) as *const __m256i)))
            });
            let mut dot = [_mm256_setzero_si256(); N];
            for c in 0..4 {
                let at = qp.add(row * cols + b * 256 + c * 64);
                let (u, v) =
                    (_mm256_loadu_si256(at as *const __m256i), _mm256_loadu_si256(at.add(32) as *const __m256i));
                let (w1, w2) = (_mm256_unpacklo_epi16(u, v), _mm256_unpackhi_epi16(u, v));
                for (j, dot) in dot.iter_mut().enumerate() {
                    let at = xq.add(j * cols + b * 256 + c * 64);
                    let p = _mm256_add_epi16(
                        _mm256_maddubs_epi16(w1, _mm256_loadu_si256(at as *const __m256i)),
                        _mm256_maddubs_epi16(w2, _mm256_loadu_si256(at.add(32) as *const __m256i)),
                    );
                    let s = _mm256_shuffle_epi8(halves[j][c / 2], pick[c % 2]);
                    *dot = _mm256_add_epi32(*dot, _mm256_madd_epi16(p, s));
                }
            }
            let d = *sp.add(sb);
            for j in 0..N {
                let sums = _mm256_loadu_si256(xsum.add(j * cols / 16 + b * 16) as *const __m256i);
                let st = _mm256_blend_epi32::<0xF0>(halves[j][0], halves[j][1]);
                let back = _mm256_slli_epi32(_mm256_madd_epi16(st, sums), 5);
                let dx = *xs.add(j * per_row + b);
                let total = _mm256_cvtepi32_ps(_mm256_sub_epi32(dot[j], back));
                acc[j] = _mm256_fmadd_ps(total, _mm256_set1_ps(d * dx), acc[j]);
            }
        }
        *acc_in = acc;
    };
    by_spans(out.len() / N, per_row, span, |r, acc| {
        for j in 0..N {
            out[N * r + j] = hsum(acc[j]);
        }
    });
}

/// [`rows_int8_avx2`] for a quartet copy (`super::quartets`: per 128 columns, each 32-bit lane of a 32-byte load
/// holds 4 weights of one of the 4 blocks, in both 128-bit halves), for `N` vectors in the same order
/// (`super::q8::QuartetRows`). Per quartet, 4 loads of weights, each's magnitudes taken once for all vectors; per
/// vector and load, `vpmaddubsw` with the inputs carrying the weights' signs (at most 2 x 128 x 127 per word).
/// With `NARROW` (every weight in -16..=16) the 4 loads' words add in 16 bits (at most 4 x 2 x 16 x 127) and one
/// `vpmaddwd` by ones per quartet makes the 8 lanes' 32-bit sums; else each load's `vpmaddwd` by ones adds into
/// them. Then per quartet one conversion and one FMA by the weights' 4 scales times the inputs' (both broadcast to
/// the two halves). Each vector's result is [`super::quartets::quartets_portable`]'s, bit for bit, whatever `N` is.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn rows_int8_quartets_avx2<const N: usize, const NARROW: bool>(
    m: &QMatrix,
    row0: usize,
    x: &super::q8::QuartetRows,
    out: &mut [f32],
) {
    let (cols, blocks) = (m.cols, m.cols / 32);
    let (qp, sp, xq, xs) = (m.q.as_ptr(), m.scale.as_ptr(), x.q.as_ptr(), x.scale.as_ptr());
    let ones = _mm256_set1_epi16(1);
    for r in 0..out.len() / N {
        let row = row0 + r;
        let mut acc = [_mm256_setzero_ps(); N];
        for c in 0..cols / 128 {
            let mut sums = [_mm256_setzero_si256(); N];
            for load in 0..4 {
                let w = _mm256_loadu_si256(qp.add(row * cols + c * 128 + load * 32) as *const __m256i);
                let mag = _mm256_abs_epi8(w);
                for (j, sum) in sums.iter_mut().enumerate() {
                    let v = _mm256_loadu_si256(xq.add(j * cols + c * 128 + load * 32) as *const __m256i);
                    let p = _mm256_maddubs_epi16(mag, _mm256_sign_epi8(v, w));
                    *sum = if NARROW {
                        _mm256_add_epi16(*sum, p)
                    } else {
                        _mm256_add_epi32(*sum, _mm256_madd_epi16(p, ones))
                    };
                }
            }
            let ws = _mm256_broadcast_ps(&_mm_loadu_ps(sp.add(row * blocks + 4 * c)));
            for j in 0..N {
                let s = _mm256_mul_ps(ws, _mm256_broadcast_ps(&_mm_loadu_ps(xs.add(j * blocks + 4 * c))));
                let ints = if NARROW { _mm256_madd_epi16(sums[j], ones) } else { sums[j] };
                acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ints), s, acc[j]);
            }
        }
        for j in 0..N {
            out[N * r + j] = hsum(acc[j]);
        }
    }
}

/// Integer products from a tiled copy (`super::tiles`) with AVX-512 VNNI, for `N` quantized vectors, `Q` tile
/// registers (4 columns each) per weight scale: rows `row0..` (`row0` a tile's first), `out` `[N][rows]`. Per
/// tile of 16 rows and scale group, the group's `Q` registers are loaded once for all vectors; per vector,
/// `vpdpbusd` of each with 4 of the vector's inputs broadcast, from `-128 sum x` (the weights are stored as
/// `w + 128`), in two chains, then one conversion, one scale product (the 16 rows' scales times the input
/// block's) and one FMA per 16 rows. Integer sums are exact, so each vector's result is that of
/// `super::tiles::tiles_portable`, bit for bit, whatever `N` is.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) unsafe fn tiles_int8_avx512<const N: usize, const Q: usize>(
    m: &QMatrix,
    row0: usize,
    x: &super::q8::Int8Rows,
    out: &mut [f32],
) {
    let (cols, glen) = (m.cols, 4 * Q);
    let (groups, blocks, halves) = (cols / glen, cols / super::q8::BLOCK, cols / 16);
    let rows = out.len() / N;
    let (qp, sp, xq, xs, xsum) = (m.q.as_ptr(), m.scale.as_ptr(), x.q.as_ptr(), x.scale.as_ptr(), x.sum16.as_ptr());
    for t in 0..rows.div_ceil(TILE) {
        let tile = row0 / TILE + t;
        let (wt, st) = (qp.add(tile * TILE * cols), sp.add(tile * TILE * groups));
        // even and odd groups in two accumulators (summed at the end)
        let mut acc = [[_mm512_setzero_ps(); N]; 2];
        for g in 0..groups {
            let mut w = [_mm512_setzero_si512(); Q];
            for (k, wk) in w.iter_mut().enumerate() {
                *wk = _mm512_loadu_si512(wt.add((g * Q + k) * 64) as *const __m512i);
            }
            let ws = _mm512_loadu_ps(st.add(g * TILE));
            for (j, a) in acc[g % 2].iter_mut().enumerate() {
                let xj = xq.add(j * cols + g * glen);
                let h = j * halves + g * glen / 16;
                let xsum16 = if Q == 8 { *xsum.add(h) + *xsum.add(h + 1) } else { *xsum.add(h) };
                let (mut d0, mut d1) = (_mm512_set1_epi32(-128 * xsum16), _mm512_setzero_si512());
                let mut k = 0;
                while k < Q {
                    let v0 = _mm512_set1_epi32((xj.add(4 * k) as *const i32).read_unaligned());
                    let v1 = _mm512_set1_epi32((xj.add(4 * k + 4) as *const i32).read_unaligned());
                    d0 = _mm512_dpbusd_epi32(d0, w[k], v0);
                    d1 = _mm512_dpbusd_epi32(d1, w[k + 1], v1);
                    k += 2;
                }
                let s = _mm512_mul_ps(ws, _mm512_set1_ps(*xs.add(j * blocks + g * glen / super::q8::BLOCK)));
                *a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(d0, d1)), s, *a);
            }
        }
        store_tile(out, rows, t, &acc);
    }
}

/// A tile's 16 rows of each of the `N` vectors (the sums of the even and odd groups' accumulators) into `out`
/// (`[N][rows]`): one store per vector, masked for a last tile of fewer rows.
#[target_feature(enable = "avx512f")]
unsafe fn store_tile<const N: usize>(out: &mut [f32], rows: usize, t: usize, acc: &[[__m512; N]; 2]) {
    assert_eq!(out.len(), N * rows, "store_tile: output length");
    let valid = TILE.min(rows - t * TILE);
    let mask: __mmask16 = if valid == TILE { !0 } else { (1 << valid) - 1 };
    for (j, (even, odd)) in acc[0].iter().zip(&acc[1]).enumerate() {
        // SAFETY: rows j * rows + t * TILE .. + valid are inside `out` (asserted above); the mask keeps the
        // store to them.
        _mm512_mask_storeu_ps(out.as_mut_ptr().add(j * rows + t * TILE), mask, _mm512_add_ps(*even, *odd));
    }
}

/// [`tiles_int8_avx512`] for tiled nibble copies: per tile of 16 rows and group of 32 columns, 4 loads of 64 bytes
/// give the group's 8 registers (the low nibbles columns `4r..4r + 4`, the high ones `16 + 4r..`, unsigned as
/// `vpdpbusd` takes them); per vector, the 8 `vpdpbusd` in two chains, one conversion, scale product and FMA, and
/// one FMA more for the offsets times the input block's `scale * sum q`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) unsafe fn tiles_int8_u4_avx512<const N: usize>(
    m: &QMatrix,
    row0: usize,
    x: &super::q8::Int8Rows,
    out: &mut [f32],
) {
    let (cols, groups) = (m.cols, m.cols / 32);
    let rows = out.len() / N;
    let (qp, sp, op) = (m.q.as_ptr(), m.scale.as_ptr(), m.offset.as_ptr());
    let (xq, xs, xsum) = (x.q.as_ptr(), x.scale.as_ptr(), x.sum.as_ptr());
    let nib = _mm512_set1_epi8(0x0F);
    for t in 0..rows.div_ceil(TILE) {
        let tile = row0 / TILE + t;
        let (wt, st, ot) = (qp.add(tile * TILE * cols / 2), sp.add(tile * TILE * groups), op.add(tile * TILE * groups));
        // even and odd groups in two accumulators (summed at the end)
        let mut acc = [[_mm512_setzero_ps(); N]; 2];
        for g in 0..groups {
            let mut w = [_mm512_setzero_si512(); 8];
            for r in 0..4 {
                let b = _mm512_loadu_si512(wt.add((g * 4 + r) * 64) as *const __m512i);
                w[r] = _mm512_and_si512(b, nib);
                w[r + 4] = _mm512_and_si512(_mm512_srli_epi16(b, 4), nib);
            }
            let (ws, os) = (_mm512_loadu_ps(st.add(g * TILE)), _mm512_loadu_ps(ot.add(g * TILE)));
            for (j, a) in acc[g % 2].iter_mut().enumerate() {
                let xj = xq.add(j * cols + g * 32);
                let (mut d0, mut d1) = (_mm512_setzero_si512(), _mm512_setzero_si512());
                let mut k = 0;
                while k < 8 {
                    let v0 = _mm512_set1_epi32((xj.add(4 * k) as *const i32).read_unaligned());
                    let v1 = _mm512_set1_epi32((xj.add(4 * k + 4) as *const i32).read_unaligned());
                    d0 = _mm512_dpbusd_epi32(d0, w[k], v0);
                    d1 = _mm512_dpbusd_epi32(d1, w[k + 1], v1);
                    k += 2;
                }
                let b = j * groups + g;
                let s = _mm512_mul_ps(ws, _mm512_set1_ps(*xs.add(b)));
                *a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(d0, d1)), s, *a);
                *a = _mm512_fmadd_ps(os, _mm512_set1_ps(*xsum.add(b)), *a);
            }
        }
        store_tile(out, rows, t, &acc);
    }
}
