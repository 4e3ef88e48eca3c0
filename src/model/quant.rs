//! Matrix-vector products on the GGUF file's own quantized weights, for CPU decoding.
//!
//! A decode step multiplies one row vector by every weight matrix. In f32 that reads ~540 MB per token for
//! SmolLM2-135M and is bound by memory bandwidth, so the step cannot go faster than the memory allows. This
//! module keeps a second copy of each quantized GGUF weight with one f32 `(scale, offset)` pair per group and
//! computes `y = W x` from it, de-quantizing on the fly in registers. Two layouts:
//! - [`Layout::U4`] for the 4-bit formats (Q4_0, Q4_1, Q4_K): groups of 32 as 16 bytes of nibble pairs, ggml's
//!   own order (byte `i` holds weight `i` in its low nibble and weight `i + 16` in its high one): 0.75 bytes per
//!   weight;
//! - [`Layout::I8`] for the others: one signed byte per weight, groups of 16: 1.5 bytes per weight.
//!
//! The copy is lossless: every ggml block format we accept (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K)
//! stores a weight as `scale * q + offset` with an integer `q` in -32..=31 (or 0..=31) and one scale/offset per
//! 16 or 32 columns, so `w = q as f32 * scale + offset` rebuilds exactly the f32 value candle's de-quantization
//! gives (tested below for each format). Only the order of the f32 additions in the dot product differs from a
//! gemm on the de-quantized matrix.
//!
//! Prefill (many rows at once) and training keep using burn's matmul on the f32 weights; this path is used only
//! for the few-row products of decoding on the CPU.

use anyhow::{bail, Result};
use candle_core::quantized::GgmlDType;
use half::f16;

/// How the integer weights are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// One `i8` per weight; a scale/offset pair per 16 weights.
    I8,
    /// Two unsigned 4-bit weights per byte (ggml's order within a group of 32); a scale/offset pair per 32.
    U4,
}

impl Layout {
    /// Weights per `(scale, offset)` group.
    pub fn group(self) -> usize {
        match self {
            Layout::I8 => 16,
            Layout::U4 => 32,
        }
    }

    /// Bytes per row of `cols` weights.
    fn row_bytes(self, cols: usize) -> usize {
        match self {
            Layout::I8 => cols,
            Layout::U4 => cols / 2,
        }
    }
}

/// A `[rows, cols]` matrix (Hugging Face `[out, in]` layout) as small integers with per-group scale and offset.
#[derive(Clone)]
pub struct QMatrix {
    pub rows: usize,
    pub cols: usize,
    pub layout: Layout,
    /// `[rows, row_bytes]`
    q: Vec<u8>,
    /// `[rows, cols / group]`
    scale: Vec<f32>,
    /// `[rows, cols / group]` (zeros for the symmetric formats)
    offset: Vec<f32>,
}

impl std::fmt::Debug for QMatrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "QMatrix[{}x{}, {:?}]", self.rows, self.cols, self.layout)
    }
}

fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// What the ggml blocks hold, in our layout.
struct Decoded {
    q: Vec<u8>,
    scale: Vec<f32>,
    offset: Vec<f32>,
}

/// Block size (weights) and byte size of the formats we can hold losslessly.
fn block_layout(dtype: GgmlDType) -> Option<(usize, usize)> {
    Some(match dtype {
        GgmlDType::Q4_0 => (32, 18),
        GgmlDType::Q4_1 => (32, 20),
        GgmlDType::Q5_0 => (32, 22),
        GgmlDType::Q5_1 => (32, 24),
        GgmlDType::Q8_0 => (32, 34),
        GgmlDType::Q4K => (256, 144),
        GgmlDType::Q5K => (256, 176),
        GgmlDType::Q6K => (256, 210),
        _ => return None,
    })
}

/// Whether [`QMatrix::from_ggml`] accepts this format.
pub fn supported(dtype: GgmlDType) -> bool {
    block_layout(dtype).is_some()
}

/// The K-quant 6-bit scale and min of sub-block `j` (llama.cpp's `get_scale_min_k4`).
fn scale_min_k4(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        ((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4))
    }
}

/// Decodes one block, following candle's `to_float` for the format weight by weight.
fn decode_block(dtype: GgmlDType, b: &[u8], out: &mut Decoded) {
    let (q, scale, offset) = (&mut out.q, &mut out.scale, &mut out.offset);
    match dtype {
        GgmlDType::Q4_0 | GgmlDType::Q4_1 => {
            // U4: the nibble bytes are already in our order. Q4_0's `(q - 8) d` is `q d + (-8 d)`: both exact.
            let d = f16_at(b, 0);
            let (m, qs) = if dtype == GgmlDType::Q4_1 { (f16_at(b, 2), &b[4..20]) } else { (-8.0 * d, &b[2..18]) };
            q.extend_from_slice(qs);
            scale.push(d);
            offset.push(m);
        }
        GgmlDType::Q5_0 | GgmlDType::Q5_1 => {
            let d = f16_at(b, 0);
            let (m, rest) = if dtype == GgmlDType::Q5_1 { (f16_at(b, 2), &b[4..]) } else { (0.0, &b[2..]) };
            let qh = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
            let qs = &rest[4..20];
            let bias = if dtype == GgmlDType::Q5_0 { 16 } else { 0 };
            let mut vals = [0u8; 32];
            for j in 0..16 {
                let xh0 = (((qh >> j) << 4) & 0x10) as u8;
                let xh1 = ((qh >> (j + 12)) & 0x10) as u8;
                vals[j] = (((qs[j] & 0x0F) | xh0) as i8 - bias) as u8;
                vals[j + 16] = (((qs[j] >> 4) | xh1) as i8 - bias) as u8;
            }
            q.extend_from_slice(&vals);
            scale.extend_from_slice(&[d, d]);
            offset.extend_from_slice(&[m, m]);
        }
        GgmlDType::Q8_0 => {
            let d = f16_at(b, 0);
            q.extend_from_slice(&b[2..34]);
            scale.extend_from_slice(&[d, d]);
            offset.extend_from_slice(&[0.0, 0.0]);
        }
        GgmlDType::Q4K => {
            // U4. Each 32 bytes of `qs` hold 64 weights: sub-block 2j in the low nibbles, 2j+1 in the high ones;
            // we repack each sub-block of 32 as 16 nibble pairs (weight i low, weight i + 16 high).
            let d = f16_at(b, 0);
            let dmin = f16_at(b, 2);
            let scales = &b[4..16];
            let qs = &b[16..144];
            for j in 0..4 {
                let qs = &qs[32 * j..32 * j + 32];
                for half in 0..2 {
                    let (sc, m) = scale_min_k4(2 * j + half, scales);
                    let nib = |v: u8| if half == 0 { v & 0x0F } else { v >> 4 };
                    q.extend((0..16).map(|i| nib(qs[i]) | (nib(qs[i + 16]) << 4)));
                    scale.push(d * sc as f32);
                    offset.push(-(dmin * m as f32));
                }
            }
        }
        GgmlDType::Q5K => {
            let d = f16_at(b, 0);
            let dmin = f16_at(b, 2);
            let scales = &b[4..16];
            let (qh, qs) = (&b[16..48], &b[48..176]);
            let (mut u1, mut u2) = (1u8, 2u8);
            for (s, j) in (0..256).step_by(64).enumerate() {
                let qs = &qs[j / 2..j / 2 + 32];
                for half in 0..2 {
                    let (sc, m) = scale_min_k4(2 * s + half, scales);
                    let (d1, m1) = (d * sc as f32, dmin * m as f32);
                    let u = if half == 0 { u1 } else { u2 };
                    for l in 0..32 {
                        let nib = if half == 0 { qs[l] & 0x0F } else { qs[l] >> 4 };
                        q.push(nib + if qh[l] & u != 0 { 16 } else { 0 });
                    }
                    scale.extend_from_slice(&[d1, d1]);
                    offset.extend_from_slice(&[-m1, -m1]);
                }
                u1 <<= 2;
                u2 <<= 2;
            }
        }
        GgmlDType::Q6K => {
            let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
            let d = f16_at(b, 208);
            let mut vals = [0u8; 256];
            for n in (0..256).step_by(128) {
                let idx = n / 128;
                let (ql, qh) = (&ql[64 * idx..], &qh[32 * idx..]);
                for l in 0..32 {
                    vals[n + l] = (((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i8 - 32) as u8;
                    vals[n + l + 32] = (((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32) as u8;
                    vals[n + l + 64] = (((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32) as u8;
                    vals[n + l + 96] = (((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32) as u8;
                }
            }
            q.extend_from_slice(&vals);
            // group g (16 weights) uses scales[g]: candle computes `d * sc as f32 * q as f32`
            for &s in sc {
                scale.push(d * (s as i8) as f32);
                offset.push(0.0);
            }
        }
        _ => unreachable!("checked by block_layout"),
    }
}

impl QMatrix {
    /// From the raw ggml blocks of a `[rows, cols]` tensor (candle's `QTensor::data()`).
    pub fn from_ggml(dtype: GgmlDType, bytes: &[u8], rows: usize, cols: usize) -> Result<QMatrix> {
        let Some((bs, size)) = block_layout(dtype) else { bail!("no integer form for {dtype:?} blocks") };
        if cols % bs != 0 {
            bail!("{cols} columns is not a multiple of the {dtype:?} block size {bs}");
        }
        let blocks = rows * cols / bs;
        if bytes.len() != blocks * size {
            bail!("{dtype:?} data has {} bytes, {rows}x{cols} needs {}", bytes.len(), blocks * size);
        }
        let layout = match dtype {
            GgmlDType::Q4_0 | GgmlDType::Q4_1 | GgmlDType::Q4K => Layout::U4,
            _ => Layout::I8,
        };
        let groups = rows * cols / layout.group();
        let mut d = Decoded {
            q: Vec::with_capacity(rows * layout.row_bytes(cols)),
            scale: Vec::with_capacity(groups),
            offset: Vec::with_capacity(groups),
        };
        for blk in bytes.chunks_exact(size) {
            decode_block(dtype, blk, &mut d);
        }
        debug_assert_eq!((d.q.len(), d.scale.len()), (rows * layout.row_bytes(cols), groups));
        Ok(QMatrix { rows, cols, layout, q: d.q, scale: d.scale, offset: d.offset })
    }

    /// The integer weights of group `g` of `row` (16 or 32 of them, in column order).
    fn group_ints(&self, row: usize, g: usize, out: &mut [f32; 32]) {
        let n = self.layout.group();
        let start = row * self.layout.row_bytes(self.cols) + g * self.layout.row_bytes(n);
        match self.layout {
            Layout::I8 => {
                for (o, &b) in out.iter_mut().zip(&self.q[start..start + n]) {
                    *o = b as i8 as f32;
                }
            }
            Layout::U4 => {
                for (i, &b) in self.q[start..start + 16].iter().enumerate() {
                    out[i] = (b & 0x0F) as f32;
                    out[i + 16] = (b >> 4) as f32;
                }
            }
        }
    }

    /// The f32 matrix this holds, row-major `[rows, cols]` (`q * scale + offset`, as candle de-quantizes).
    pub fn dequantize(&self) -> Vec<f32> {
        let n = self.layout.group();
        let groups = self.cols / n;
        let mut out = Vec::with_capacity(self.rows * self.cols);
        let mut ints = [0f32; 32];
        for row in 0..self.rows {
            for g in 0..groups {
                self.group_ints(row, g, &mut ints);
                let gi = row * groups + g;
                out.extend(ints[..n].iter().map(|&q| q * self.scale[gi] + self.offset[gi]));
            }
        }
        out
    }

    /// Row `dst` of the result is row `src_of[dst]` of `self` (for undoing llama.cpp's Q/K permutation).
    pub fn permute_rows(&self, src_of: &[usize]) -> QMatrix {
        let g = self.cols / self.layout.group();
        let rb = self.layout.row_bytes(self.cols);
        let mut q = Vec::with_capacity(self.q.len());
        let mut scale = Vec::with_capacity(self.scale.len());
        let mut offset = Vec::with_capacity(self.offset.len());
        for &s in src_of {
            q.extend_from_slice(&self.q[s * rb..(s + 1) * rb]);
            scale.extend_from_slice(&self.scale[s * g..(s + 1) * g]);
            offset.extend_from_slice(&self.offset[s * g..(s + 1) * g]);
        }
        QMatrix { rows: self.rows, cols: self.cols, layout: self.layout, q, scale, offset }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.q.len() + 4 * (self.scale.len() + self.offset.len())
    }

    /// `y[r] = sum_c W[r, c] x[c]` for each of the `x.len() / cols` row vectors in `x` (row-major), written to
    /// `y` (`[n, rows]`). Splits the rows over the rayon pool for large matrices. Vectors go two at a time
    /// through one pass over the weights where a two-vector kernel exists (AVX2): the integer blocks are read and
    /// de-quantized once for both, and each result is bit for bit the one-vector product (several questions
    /// decoded together, `Lm::feed_many`, give the same tokens as one at a time).
    pub fn matvec(&self, x: &[f32], y: &mut [f32]) {
        assert_eq!(x.len() % self.cols, 0, "matvec: input length {} is not a multiple of {}", x.len(), self.cols);
        let n = x.len() / self.cols;
        assert_eq!(y.len(), n * self.rows, "matvec: output length");
        let threads = rayon::current_num_threads();
        let parallel = threads > 1 && self.rows * self.cols >= PARALLEL_MIN;
        let chunk = self.rows.div_ceil(threads * 2).next_multiple_of(ROWS);
        let pairs = if self.has_pair_kernel() { n / 2 } else { 0 };
        let mut pair_out = vec![0f32; if pairs > 0 { 2 * self.rows } else { 0 }];
        for p in 0..pairs {
            // two vectors, results interleaved [rows][2]
            let xs = &x[2 * p * self.cols..(2 * p + 2) * self.cols];
            if parallel {
                use rayon::prelude::*;
                pair_out.par_chunks_mut(2 * chunk).enumerate().for_each(|(c, out)| self.rows_into_x2(c * chunk, xs, out));
            } else {
                self.rows_into_x2(0, xs, &mut pair_out);
            }
            let (ya, yb) = y[2 * p * self.rows..(2 * p + 2) * self.rows].split_at_mut(self.rows);
            for r in 0..self.rows {
                ya[r] = pair_out[2 * r];
                yb[r] = pair_out[2 * r + 1];
            }
        }
        let done = 2 * pairs;
        for (xi, yi) in x[done * self.cols..].chunks_exact(self.cols).zip(y[done * self.rows..].chunks_exact_mut(self.rows)) {
            if parallel {
                use rayon::prelude::*;
                yi.par_chunks_mut(chunk).enumerate().for_each(|(c, out)| self.rows_into(c * chunk, xi, out));
            } else {
                self.rows_into(0, xi, yi);
            }
        }
    }

    /// Whether [`QMatrix::rows_into_x2`] has a kernel on this CPU (AVX2 + FMA without AVX-512; an AVX-512 CPU
    /// keeps its one-vector kernels, which have no two-vector twin yet).
    fn has_pair_kernel(&self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            !std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// Rows `row0..row0 + out.len() / 2` of `W x_0` and `W x_1` (`x` = `[2, cols]`), interleaved in `out`.
    fn rows_into_x2(&self, row0: usize, x: &[f32], out: &mut [f32]) {
        assert!(row0 + out.len() / 2 <= self.rows && x.len() == 2 * self.cols && out.len() % 2 == 0);
        #[cfg(target_arch = "x86_64")]
        {
            if self.has_pair_kernel() {
                // SAFETY: the CPU has AVX2 and FMA; the bounds were checked above.
                return unsafe {
                    match self.layout {
                        Layout::I8 => x86::rows_avx2::<2>(self, row0, x, out),
                        Layout::U4 => x86::rows_u4_avx2::<2>(self, row0, x, out),
                    }
                };
            }
        }
        unreachable!("rows_into_x2 without a two-vector kernel")
    }

    /// Rows `row0..row0 + out.len()` of `W x`.
    fn rows_into(&self, row0: usize, x: &[f32], out: &mut [f32]) {
        assert!(row0 + out.len() <= self.rows && x.len() == self.cols);
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                // SAFETY: the CPU has AVX-512F; the bounds were checked above.
                return unsafe {
                    match self.layout {
                        Layout::I8 => x86::rows_avx512(self, row0, x, out),
                        Layout::U4 => x86::rows_u4_avx512(self, row0, x, out),
                    }
                };
            }
            if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
                // SAFETY: as above, with AVX2 and FMA.
                return unsafe {
                    match self.layout {
                        Layout::I8 => x86::rows_avx2::<1>(self, row0, x, out),
                        Layout::U4 => x86::rows_u4_avx2::<1>(self, row0, x, out),
                    }
                };
            }
        }
        rows_scalar(self, row0, x, out)
    }
}

/// Weights at or above which a matrix-vector product is split over threads (the tied lm_head; the per-layer
/// matrices stay on one thread: waking the pool 200 times per token costs more than it gains).
const PARALLEL_MIN: usize = 4 << 20;
/// Rows computed together: they share each load of `x` and give the CPU independent accumulator chains.
const ROWS: usize = 4;

/// Portable kernel (and the reference for the SIMD ones): `w = q * scale + offset`, then `sum w x`.
fn rows_scalar(m: &QMatrix, row0: usize, x: &[f32], out: &mut [f32]) {
    let n = m.layout.group();
    let groups = m.cols / n;
    let mut ints = [0f32; 32];
    for (r, o) in out.iter_mut().enumerate() {
        let row = row0 + r;
        let mut acc = [0f32; 32];
        for g in 0..groups {
            m.group_ints(row, g, &mut ints);
            let (s, off) = (m.scale[row * groups + g], m.offset[row * groups + g]);
            for i in 0..n {
                acc[i] += (ints[i] * s + off) * x[g * n + i];
            }
        }
        *o = acc.iter().sum();
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! The same kernel with AVX-512 (one group = one 16-lane register) and AVX2 (two 8-lane registers): each
    //! group's 16 int8 weights are widened to f32, de-quantized with one FMA (`q * scale + offset`) and
    //! accumulated with another. Four rows at a time share the loads of `x`; two accumulators per row (even and
    //! odd groups) keep eight FMA chains in flight.
    use super::{QMatrix, ROWS};

    const GROUP: usize = 16;
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn rows_avx512(m: &QMatrix, row0: usize, x: &[f32], out: &mut [f32]) {
        let (cols, groups) = (m.cols, m.cols / GROUP);
        let (qp, sp, op, xp) = (m.q.as_ptr(), m.scale.as_ptr(), m.offset.as_ptr(), x.as_ptr());
        // acc + w x for group g of `row`
        macro_rules! step {
            ($acc:expr, $row:expr, $g:expr, $xv:expr) => {{
                let (row, g) = ($row, $g);
                let q = _mm_loadu_si128(qp.add(row * cols + g * GROUP) as *const __m128i);
                let qf = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q));
                let w = _mm512_fmadd_ps(qf, _mm512_set1_ps(*sp.add(row * groups + g)), _mm512_set1_ps(*op.add(row * groups + g)));
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
        for r in 0..out.len() / N {
            let row = row0 + r;
            let mut a = [[_mm256_setzero_ps(); 2]; N];
            for g in 0..groups {
                let base = qp.add(row * cols + g * GROUP);
                let s = _mm256_set1_ps(*sp.add(row * groups + g));
                let o = _mm256_set1_ps(*op.add(row * groups + g));
                let w0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(base as *const __m128i))), s, o);
                let w1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(base.add(8) as *const __m128i))), s, o);
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::QTensor;
    use candle_core::{Device, Tensor};

    fn random(n: usize, seed: u64) -> Vec<f32> {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        (0..n).map(|_| rng.random::<f32>() * 2.0 - 1.0).collect()
    }

    const FORMATS: [GgmlDType; 8] = [
        GgmlDType::Q4_0,
        GgmlDType::Q4_1,
        GgmlDType::Q5_0,
        GgmlDType::Q5_1,
        GgmlDType::Q8_0,
        GgmlDType::Q4K,
        GgmlDType::Q5K,
        GgmlDType::Q6K,
    ];

    /// candle quantizes random weights; our integer copy must de-quantize to exactly candle's f32 values.
    #[test]
    fn int8_copy_is_lossless_for_every_format() {
        let (rows, cols) = (6, 512);
        let w = random(rows * cols, 1);
        let t = Tensor::from_vec(w, (rows, cols), &Device::Cpu).unwrap();
        for dtype in FORMATS {
            let qt = QTensor::quantize(&t, dtype).unwrap();
            let want: Vec<f32> = qt.dequantize(&Device::Cpu).unwrap().flatten_all().unwrap().to_vec1().unwrap();
            let m = QMatrix::from_ggml(dtype, &qt.data().unwrap(), rows, cols).unwrap();
            let got = m.dequantize();
            // bit for bit, except that 0 * (negative scale) + 0 offset gives +0.0 where candle gives -0.0
            let bad = got.iter().zip(&want).position(|(a, b)| a.to_bits() != b.to_bits() && !(*a == 0.0 && *b == 0.0));
            assert_eq!(bad, None, "{dtype:?}: weight {bad:?} differs: {:?} vs {:?}", bad.map(|i| got[i]), bad.map(|i| want[i]));
        }
    }

    #[test]
    fn matvec_equals_the_dequantized_product() {
        // 37 rows: the 4-row blocks and the remainder; two input vectors
        let (rows, cols) = (37, 256);
        let t = Tensor::from_vec(random(rows * cols, 2), (rows, cols), &Device::Cpu).unwrap();
        let x = random(2 * cols, 3);
        for dtype in [GgmlDType::Q4_1, GgmlDType::Q8_0, GgmlDType::Q6K, GgmlDType::Q4K] {
            let qt = QTensor::quantize(&t, dtype).unwrap();
            let m = QMatrix::from_ggml(dtype, &qt.data().unwrap(), rows, cols).unwrap();
            let w = m.dequantize();
            let mut y = vec![0f32; 2 * rows];
            m.matvec(&x, &mut y);
            for n in 0..2 {
                for r in 0..rows {
                    let want: f64 = (0..cols).map(|c| w[r * cols + c] as f64 * x[n * cols + c] as f64).sum();
                    let got = y[n * rows + r] as f64;
                    assert!((got - want).abs() < 1e-4 * (1.0 + want.abs()), "{dtype:?} row {r}: {got} vs {want}");
                }
            }
            // the portable kernel gives the same numbers up to rounding
            let mut y0 = vec![0f32; rows];
            rows_scalar(&m, 0, &x[..cols], &mut y0);
            for r in 0..rows {
                assert!((y0[r] - y[r]).abs() < 1e-4 * (1.0 + y[r].abs()));
            }
        }
    }

    /// A matrix large enough to be split over the rayon pool gives the same result as one thread.
    #[test]
    fn parallel_rows_equal_one_thread() {
        let (rows, cols) = (1030, 4096);
        let t = Tensor::from_vec(random(rows * cols, 5), (rows, cols), &Device::Cpu).unwrap();
        let qt = QTensor::quantize(&t, GgmlDType::Q8_0).unwrap();
        let m = QMatrix::from_ggml(GgmlDType::Q8_0, &qt.data().unwrap(), rows, cols).unwrap();
        assert!(rows * cols >= PARALLEL_MIN);
        let x = random(cols, 6);
        let mut y = vec![0f32; rows];
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
        pool.install(|| m.matvec(&x, &mut y));
        let mut y1 = vec![0f32; rows];
        m.rows_into(0, &x, &mut y1);
        assert_eq!(y, y1);
    }

    /// Vectors that go through the two-vector kernels (pairs, with a leftover third) give exactly the
    /// one-vector results, on one thread and split over a pool.
    #[test]
    fn several_vectors_equal_one_at_a_time_bit_for_bit() {
        for (dtype, rows, cols) in [(GgmlDType::Q4_1, 37, 256), (GgmlDType::Q8_0, 37, 256), (GgmlDType::Q4_1, 1030, 4096), (GgmlDType::Q8_0, 1030, 4096)] {
            let t = Tensor::from_vec(random(rows * cols, 7), (rows, cols), &Device::Cpu).unwrap();
            let qt = QTensor::quantize(&t, dtype).unwrap();
            let m = QMatrix::from_ggml(dtype, &qt.data().unwrap(), rows, cols).unwrap();
            let x = random(3 * cols, 8);
            let mut one = vec![0f32; 3 * rows];
            for j in 0..3 {
                m.rows_into(0, &x[j * cols..(j + 1) * cols], &mut one[j * rows..(j + 1) * rows]);
            }
            for threads in [1, 3] {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                let mut y = vec![0f32; 3 * rows];
                pool.install(|| m.matvec(&x, &mut y));
                assert_eq!(y, one, "{dtype:?} {rows}x{cols}, {threads} threads");
            }
        }
    }

    #[test]
    fn permute_rows_moves_whole_rows() {
        let (rows, cols) = (4, 32);
        let t = Tensor::from_vec(random(rows * cols, 4), (rows, cols), &Device::Cpu).unwrap();
        let qt = QTensor::quantize(&t, GgmlDType::Q4_1).unwrap();
        let m = QMatrix::from_ggml(GgmlDType::Q4_1, &qt.data().unwrap(), rows, cols).unwrap();
        let p = m.permute_rows(&[2, 0, 3, 1]);
        let (a, b) = (m.dequantize(), p.dequantize());
        assert_eq!(&b[0..cols], &a[2 * cols..3 * cols]);
        assert_eq!(&b[3 * cols..4 * cols], &a[cols..2 * cols]);
    }

    #[test]
    fn wrong_sizes_are_errors() {
        assert!(QMatrix::from_ggml(GgmlDType::Q4_1, &[0u8; 19], 1, 32).is_err());
        assert!(QMatrix::from_ggml(GgmlDType::Q4_1, &[0u8; 20], 1, 16).is_err());
        assert!(QMatrix::from_ggml(GgmlDType::F16, &[0u8; 64], 1, 32).is_err());
    }
}
