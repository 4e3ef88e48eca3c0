//! The same kernel with AVX-512 (one group = one 16-lane register) and AVX2 (two 8-lane registers): each
//! group's 16 int8 weights are widened to f32, de-quantized with one FMA (`q * scale + offset`) and
//! accumulated with another. Four rows at a time share the loads of `x`; two accumulators per row (even and
//! odd groups) keep eight FMA chains in flight.

use std::arch::x86_64::*;

use super::{QMatrix, ROWS};

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
