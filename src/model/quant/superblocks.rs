//! The K-quant copies (Q4_K, Q6_K) in their superblocks, for `--int8-dot` on CPUs with AVX2 but no AVX-512
//! VNNI: integer sub-block scales, as in ggml's `q4_K x q8_K` and `q6_K x q8_K` dot products, with inputs that keep
//! a step per 32 values.
//!
//! The plain copies hold an f32 scale (and offset) per group: a Q4_K nibble copy ([`Layout::U4`]) one pair per
//! 32 weights, 0.75 bytes per weight; a Q6_K int8 copy ([`Layout::I8`]) a scale per 16, 1.25 bytes per weight; and
//! their integer kernels convert and scale every group's sum (`super::x86::rows_int8_u4_avx2`, `rows_int8_avx2`).
//! A K-quant file stores less: per 256 weights one f16 `d` (Q4_K also a `dmin`), and per sub-block an integer
//! scale `sc` (Q4_K: 6 bits and a 6-bit `m` per 32 weights, the weight `d sc q - dmin m`; Q6_K: 8 bits per 16
//! weights, the weight `d sc q`). Here each superblock keeps
//! - `q`: Q4_K's 128 bytes of nibbles in the file's order (byte `i` of the `c`-th 32 holds weight `64c + i` in
//!   its low nibble and `64c + 32 + i` in its high one), so that one 32-byte load and two masks give 64 weights
//!   in column order; Q6_K's 256 weights as `q + 32` (0..=63), a byte each, so that they multiply the signed
//!   inputs as they are;
//! - `sub`: 16 bytes: Q4_K's 8 sub-blocks' `sc` then their 8 `m`; Q6_K's 16 signed `sc`;
//! - `scale`: `d`, and for Q4_K `offset`: `-dmin`, as f32: 0.59 bytes per weight for Q4_K, 1.08 for Q6_K.
//!
//! The inputs come quantized with two levels of scales (`super::q8::SubscaledRows`): per 256 values an f32
//! `s_x`, per 32 an integer `t` (up to 255 for Q4_K, 31 for Q6_K), a value being `q t s_x`. A Q4_K superblock's
//! product is then `d s_x sum_j sc_j t_j (sum_{i in j} q_i x_i) - dmin s_x sum_j m_j t_j (sum_{i in j} x_i)` and
//! a Q6_K one's `d s_x sum_j sc_j t_j (sum_{i in j} (q_i + 32) x_i - 32 sum_{i in j} x_i)`: integer sums, the
//! sub-scales multiplied into the weights' (`sc * t`, one 16-bit product per sub-block), one conversion and one FMA
//! per 256 weights where the plain kernels have one per group. ggml rounds the input with one step per 256 values
//! (Q8_K) here, which on Qwen2.5-Coder-1.5B doubled the distance of `--int8-dot`'s logits and entropies from the
//! exact products' (its `ffn_down` inputs have outliers, and a superblock that holds one rounds all its 256
//! values as coarsely); with the sub-scales each block of 32 keeps a step within `1 + 1 / t` of its own
//! `max |x| / 127`, and the distance is that of the plain copies' kernels (`docs/engine.md`).
//!
//! The copy is made from the plain one ([`QMatrix::superblocks_for_int8`]): each superblock's scales are
//! factored as `d * sc` with integer `sc` in the format's range (the file's `d` and `sc`: the product of an f16
//! and an integer of at most 8 bits is exact in f32), checked bit for bit, and the same for Q4_K's offsets; a
//! matrix where some superblock does not factor (Q4_0, Q4_1, Q8_0, Q5_0: a scale per 32), or an int8 weight lies
//! outside -32..=31, keeps its plain copy. De-quantized (the embedding's rows, the exact product) it gives the plain
//! copy's values bit for bit. Prefill chunks of any length go to the same kernels (`QMatrix::int8_many_rows`).

use super::q8::{SubscaledRows, SUPERBLOCK};
#[cfg(target_arch = "x86_64")]
use super::x86;
use super::{Layout, QMatrix};

/// Bytes of sub-block scales (and Q4_K's offsets) per superblock.
pub(super) const SUB_BYTES: usize = 16;

impl QMatrix {
    /// Turns a plain copy of a K-quant matrix (Q4_K, Q6_K) into its superblocks (module doc) where `--int8-dot`
    /// multiplies with AVX2 and not in row tiles (no AVX-512 VNNI: `super::rows_on_tiles`); whether the copy is
    /// now in superblocks.
    pub fn superblocks_for_int8(&mut self) -> bool {
        if !self.superblocks && super::int8::int8_width() == 2 {
            if let Some(m) = self.to_superblocks() {
                *self = m;
            }
        }
        self.superblocks
    }

    /// Groups (sub-blocks) per superblock: 8 of 32 nibbles, 16 of 16 bytes.
    fn subs(&self) -> usize {
        SUPERBLOCK / self.layout.group()
    }

    /// The superblock copy of a plain copy whose every superblock factors (module doc), else `None`.
    pub(super) fn to_superblocks(&self) -> Option<QMatrix> {
        let nibbles = self.layout == Layout::U4;
        if self.tiled
            || self.superblocks
            || !self.cols.is_multiple_of(SUPERBLOCK)
            || !(nibbles || self.offset.is_empty())
        {
            return None;
        }
        use rayon::prelude::*;
        let (per_row, subs) = (self.cols / SUPERBLOCK, self.subs());
        // Q4_K: sc and m in 0..=63; Q6_K: sc in -128..=127
        let tops = Tops::new(if nibbles { (0, 63) } else { (-128, 127) });
        let rb = self.layout.row_bytes(self.cols);
        let mut q = vec![0u8; self.q.len()];
        let mut sub = vec![0u8; self.rows * per_row * SUB_BYTES];
        let mut scale = vec![0f32; self.rows * per_row];
        // Q4_K's `-dmin` per superblock (kept for nibble copies only)
        let mut dmin = vec![0f32; self.rows * per_row];
        let ok = q
            .par_chunks_mut(rb.max(1))
            .zip(sub.par_chunks_mut((per_row * SUB_BYTES).max(1)))
            .zip(scale.par_chunks_mut(per_row.max(1)).zip(dmin.par_chunks_mut(per_row.max(1))))
            .enumerate()
            .all(|(row, ((q, sub), (scale, dmin)))| {
                (0..per_row).all(|b| {
                    let g0 = b * subs;
                    let (mut scales, mut offsets) = ([0f32; 16], [0f32; 16]);
                    for j in 0..subs {
                        (scales[j], offsets[j]) = self.scale_offset(row, g0 + j);
                    }
                    let Some((d, sc)) = factor(&scales[..subs], &tops) else { return false };
                    let sub = &mut sub[b * SUB_BYTES..(b + 1) * SUB_BYTES];
                    // as bytes: Q4_K's unsigned 6-bit values, Q6_K's signed ones in two's complement
                    sub[..subs].iter_mut().zip(&sc).for_each(|(o, &v)| *o = v as u8);
                    if nibbles {
                        let Some((dm, m)) = factor(&offsets[..subs], &tops) else { return false };
                        sub[subs..].iter_mut().zip(&m).for_each(|(o, &v)| *o = v as u8);
                        dmin[b] = dm;
                    }
                    scale[b] = d;
                    // the plain copy's bytes of this superblock: 16 per group in both layouts
                    let src = &self.q[row * rb + b * subs * 16..][..subs * 16];
                    if nibbles {
                        // plain group j: byte i holds weights i (low) and i + 16 (high); here group j's 32 weights
                        // are the low (j even) or high (j odd) nibbles of the 32 bytes of pair j / 2
                        for (j, g) in src.chunks_exact(16).enumerate() {
                            let (bytes, shift) = (&mut q[b * SUPERBLOCK / 2 + (j / 2) * 32..][..32], 4 * (j % 2));
                            for (i, &v) in g.iter().enumerate() {
                                bytes[i] |= (v & 0x0F) << shift;
                                bytes[i + 16] |= (v >> 4) << shift;
                            }
                        }
                    } else {
                        for (o, &v) in q[b * SUPERBLOCK..][..SUPERBLOCK].iter_mut().zip(src) {
                            if !(-32..=31).contains(&(v as i8)) {
                                return false;
                            }
                            *o = (v as i8 + 32) as u8;
                        }
                    }
                    true
                })
            });
        let offset = if nibbles { dmin } else { Vec::new() };
        ok.then_some(QMatrix { q, scale, offset, sub, scale_shift: 0, tiled: false, superblocks: true, ..*self })
    }

    /// The largest sub-scale of the inputs (`SubscaledRows`) the kernels' 32-bit sums allow: 255 for Q4_K
    /// (`sc * t` at most 63 x 255), 31 for Q6_K (`sc * t` at most 128 x 31; `super::x86` gives the bounds).
    fn levels(&self) -> i16 {
        match self.layout {
            Layout::U4 => 255,
            Layout::I8 => 31,
        }
    }

    /// Group `g` of `row` in a superblock copy: its integer weights in column order, as `group_ints`.
    pub(super) fn superblock_ints(&self, row: usize, g: usize, out: &mut [f32; 32]) {
        let (b, j) = (g / self.subs(), g % self.subs());
        let rb = self.layout.row_bytes(self.cols);
        match self.layout {
            Layout::U4 => {
                let at = row * rb + b * SUPERBLOCK / 2 + (j / 2) * 32;
                for (o, &byte) in out.iter_mut().zip(&self.q[at..at + 32]) {
                    *o = if j % 2 == 0 { byte & 0x0F } else { byte >> 4 } as f32;
                }
            }
            Layout::I8 => {
                let at = row * rb + g * 16;
                for (o, &byte) in out.iter_mut().zip(&self.q[at..at + 16]) {
                    *o = (byte as i32 - 32) as f32;
                }
            }
        }
    }

    /// Group `g` of `row`'s scale `d * sc` and offset (`-dmin * m`; +0 for Q6_K) in a superblock copy: the plain
    /// copy's bits.
    pub(super) fn superblock_scale_offset(&self, row: usize, g: usize) -> (f32, f32) {
        let subs = self.subs();
        let (b, j) = (row * self.cols / SUPERBLOCK + g / subs, g % subs);
        let sub = &self.sub[b * SUB_BYTES..(b + 1) * SUB_BYTES];
        match self.layout {
            Layout::U4 => (self.scale[b] * sub[j] as f32, self.offset[b] * sub[subs + j] as f32),
            Layout::I8 => (self.scale[b] * sub[j] as i8 as f32, 0.0),
        }
    }

    /// [`QMatrix::dequantize_rows`] of a superblock copy: `q * scale + offset` per weight, the plain copy's
    /// values (a Q6_K weight's offset +0, as the plain copy adds).
    pub(super) fn dequantize_superblock_rows(&self, first: usize, out: &mut [f32]) {
        let (cols, per_row, subs) = (self.cols, self.cols / SUPERBLOCK, self.subs());
        let rb = self.layout.row_bytes(cols);
        for (i, row_out) in out.chunks_exact_mut(cols).enumerate() {
            let row = first + i;
            let q = &self.q[row * rb..(row + 1) * rb];
            for (b, dst) in row_out.chunks_exact_mut(SUPERBLOCK).enumerate() {
                let sb = row * per_row + b;
                let (d, sub) = (self.scale[sb], &self.sub[sb * SUB_BYTES..(sb + 1) * SUB_BYTES]);
                match self.layout {
                    Layout::U4 => {
                        let dm = self.offset[sb];
                        let bytes = &q[b * SUPERBLOCK / 2..(b + 1) * SUPERBLOCK / 2];
                        // per 64 weights: 32 bytes, the low nibbles sub-block 2c, the high ones 2c + 1
                        for (c, (dst, src)) in dst.chunks_exact_mut(64).zip(bytes.chunks_exact(32)).enumerate() {
                            let (lo, hi) = dst.split_at_mut(32);
                            let (s0, o0) = (d * sub[2 * c] as f32, dm * sub[subs + 2 * c] as f32);
                            let (s1, o1) = (d * sub[2 * c + 1] as f32, dm * sub[subs + 2 * c + 1] as f32);
                            for ((l, h), &v) in lo.iter_mut().zip(hi.iter_mut()).zip(src) {
                                *l = (v & 0x0F) as f32 * s0 + o0;
                                *h = (v >> 4) as f32 * s1 + o1;
                            }
                        }
                    }
                    Layout::I8 => {
                        let bytes = &q[b * SUPERBLOCK..(b + 1) * SUPERBLOCK];
                        for (j, (dst, src)) in dst.chunks_exact_mut(16).zip(bytes.chunks_exact(16)).enumerate() {
                            let s = d * sub[j] as i8 as f32;
                            for (o, &v) in dst.iter_mut().zip(src) {
                                *o = (v as i32 - 32) as f32 * s + 0.0;
                            }
                        }
                    }
                }
            }
        }
    }

    /// [`QMatrix::matvec_int8`] of a superblock copy: each pass's vectors quantized with sub-scales
    /// (`SubscaledRows`), the superblock kernel (AVX2, else the portable one); each vector's result bit for bit the
    /// same whatever the others in its pass. Passes of at most 4 vectors (a prefill chunk's passes of 8 were no
    /// faster, docs/engine.md).
    pub(super) fn matvec_superblocks(&self, x: &[f32], y: &mut [f32]) {
        let levels = self.levels();
        let quantize = |x: &[f32]| SubscaledRows::new(x, self.cols, levels);
        self.int8_passes_of_4(x, y, quantize, |x, k, row0, out| {
            #[cfg(target_arch = "x86_64")]
            if super::int8::int8_width() > 0 {
                // SAFETY: int8_width() saw AVX2 and FMA; `x` holds `k` rows of `cols`, `out` whole rows for them,
                // within the matrix (split_passes).
                unsafe {
                    return match (self.layout, k) {
                        (Layout::U4, 1) => x86::rows_int8_q4k_avx2::<1>(self, row0, x, out),
                        (Layout::U4, 2) => x86::rows_int8_q4k_avx2::<2>(self, row0, x, out),
                        (Layout::I8, 1) => x86::rows_int8_q6k_avx2::<1>(self, row0, x, out),
                        (Layout::I8, 2) => x86::rows_int8_q6k_avx2::<2>(self, row0, x, out),
                        (Layout::U4, 4) => x86::rows_int8_q4k_avx2::<4>(self, row0, x, out),
                        (Layout::I8, 4) => x86::rows_int8_q6k_avx2::<4>(self, row0, x, out),
                        _ => unreachable!("passes of at most 4"),
                    };
                }
            }
            superblocks_portable(self, k, row0, x, out)
        });
    }
}

/// An integer range's non-zero values, largest magnitude first (negative first among equals): the values
/// [`factor`] tries for the largest scale.
struct Tops {
    range: (i32, i32),
    order: Vec<i32>,
}

impl Tops {
    fn new((lo, hi): (i32, i32)) -> Tops {
        let mut order: Vec<i32> = (lo..=hi).filter(|&t| t != 0).collect();
        order.sort_by_key(|&t| (std::cmp::Reverse(t.abs()), t));
        Tops { range: (lo, hi), order }
    }
}

/// `(f, k)` with `vals[j] == f * k[j] as f32` bit for bit and every `k[j]` in the range of `tops`, or `None`:
/// the largest magnitude taken as `f * top` for each `top` in turn (a Q4_K quantizer maps the largest scale to
/// 63, a Q6_K one to -128: the first tried).
fn factor(vals: &[f32], tops: &Tops) -> Option<(f32, [i32; 16])> {
    let (lo, hi) = (tops.range.0 as f32, tops.range.1 as f32);
    let big = vals.iter().copied().fold(0f32, |a, v| if v.abs() > a.abs() { v } else { a });
    if big == 0.0 {
        // all zeros: `f` with their sign (`-0 * 0` is `-0`)
        return vals.iter().all(|v| v.to_bits() == vals[0].to_bits()).then_some((vals[0], [0; 16]));
    }
    tops.order.iter().find_map(|&top| {
        let f = big / top as f32;
        let mut k = [0i32; 16];
        for (k, &v) in k.iter_mut().zip(vals) {
            let r = (v / f).round();
            if !(lo..=hi).contains(&r) || (f * r).to_bits() != v.to_bits() {
                return None;
            }
            *k = r as i32;
        }
        Some((f, k))
    })
}

/// The superblock products one value at a time, for `k` quantized vectors: rows `row0..` into `out`
/// (`[rows][k]`). Each superblock's integer sums (`sum_j sc_j t_j sum_{i in j} q_i x_i`, and Q4_K's
/// `sum_j m_j t_j sum_{i in j} x_i`), then `d s_x` and `-dmin s_x` times them.
pub(super) fn superblocks_portable(m: &QMatrix, k: usize, row0: usize, x: &SubscaledRows, out: &mut [f32]) {
    let (cols, per_row, subs, n) = (m.cols, m.cols / SUPERBLOCK, m.subs(), m.layout.group());
    let nibbles = m.layout == Layout::U4;
    let mut ints = [0f32; 32];
    for r in 0..out.len() / k {
        let row = row0 + r;
        for j in 0..k {
            let (mut acc, mut mins) = (0f32, 0f32);
            for b in 0..per_row {
                let sb = row * per_row + b;
                let sub = &m.sub[sb * SUB_BYTES..(sb + 1) * SUB_BYTES];
                let (mut dot, mut msum) = (0i64, 0i64);
                for s in 0..subs {
                    m.superblock_ints(row, b * subs + s, &mut ints);
                    let at = j * cols + b * SUPERBLOCK + s * n;
                    let d: i64 = (0..n).map(|i| ints[i] as i64 * x.value(at + i) as i64).sum();
                    // the sub-scale of the inputs' block of 32 that holds these weights
                    let t = x.t(at / 32) as i64;
                    if nibbles {
                        dot += sub[s] as i64 * t * d;
                        msum += sub[subs + s] as i64 * x.tsum32[at / 32] as i64;
                    } else {
                        dot += sub[s] as i8 as i64 * t * d;
                    }
                }
                let dx = x.scale[j * per_row + b];
                acc += dot as f32 * (m.scale[sb] * dx);
                if nibbles {
                    mins += msum as f32 * (m.offset[sb] * dx);
                }
            }
            out[k * r + j] = acc + mins;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{int8_together_and_alone, matrix, random, seven_with_outliers};
    use super::*;
    use candle_core::quantized::GgmlDType;

    /// `k` padded with zeros to [`factor`]'s 16.
    fn pad(k: &[i32]) -> [i32; 16] {
        let mut out = [0; 16];
        out[..k.len()].copy_from_slice(k);
        out
    }

    /// Factoring finds the file's `d` and `sc` and refuses what no `f * k` in the range gives.
    #[test]
    fn factor_recovers_integer_scales() {
        let d = half::f16::from_f32(0.0123).to_f32();
        let sc = [63, 0, 17, 5, 62, 1, 33, 40];
        let vals: Vec<f32> = sc.iter().map(|&s| d * s as f32).collect();
        assert_eq!(factor(&vals, &Tops::new((0, 63))), Some((d, pad(&sc))));
        // Q4_K's negated offsets: -0 where m = 0
        let neg: Vec<f32> = sc.iter().map(|&s| -(d * s as f32)).collect();
        let (f, k) = factor(&neg, &Tops::new((0, 63))).unwrap();
        assert_eq!((f.to_bits(), k), ((-d).to_bits(), pad(&sc)));
        // Q6_K: signed scales, the largest magnitude at -128
        let sc6 = [-128, 127, 0, -1, 5, -77, 100, 3, 9, -9, 64, -64, 1, 2, -3, 4];
        let vals6: Vec<f32> = sc6.iter().map(|&s| d * s as f32).collect();
        assert_eq!(factor(&vals6, &Tops::new((-128, 127))), Some((d, pad(&sc6))));
        assert_eq!(factor(&vals6, &Tops::new((0, 63))), None);
        assert_eq!(factor(&[0.0; 8], &Tops::new((0, 63))), Some((0.0, [0; 16])));
        let negzero = factor(&[-0.0; 8], &Tops::new((0, 63))).map(|(f, k)| (f.to_bits(), k));
        assert_eq!(negzero, Some(((-0.0f32).to_bits(), [0; 16])));
        assert_eq!(factor(&[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.123_456_7], &Tops::new((0, 63))), None);
        assert_eq!(factor(&[1.0, -1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], &Tops::new((0, 63))), None);
    }

    /// A Q4_K or Q6_K matrix's superblock copy de-quantizes to the plain copy's values bit for bit, holds 0.59 or
    /// 1.08 bytes per weight, and gives the exact product the plain copy gives; Q4_0, Q8_0 and Q5_0 (a scale per
    /// 32) keep their plain copies.
    #[test]
    fn superblocks_keep_the_weights() {
        for (dtype, bytes) in [(GgmlDType::Q4K, 128 + 16 + 8), (GgmlDType::Q6K, 256 + 16 + 4)] {
            let plain = matrix(dtype, 21, 512, 31);
            let sb = plain.to_superblocks().expect("a K-quant matrix factors");
            let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
            assert_eq!(bits(sb.dequantize()), bits(plain.dequantize()), "{dtype:?}");
            let mut rows = vec![0f32; 3 * 512];
            sb.dequantize_rows(7, &mut rows);
            assert_eq!(bits(rows), bits(plain.dequantize()[7 * 512..10 * 512].to_vec()), "{dtype:?}");
            assert_eq!(sb.bytes(), 21 * 2 * bytes, "{dtype:?}");
            let x = random(2 * 512, 32);
            let (mut a, mut b) = (vec![0f32; 42], vec![0f32; 42]);
            plain.matvec(&x, &mut a);
            sb.matvec(&x, &mut b);
            for (a, b) in a.iter().zip(&b) {
                assert!((a - b).abs() < 1e-4 * (1.0 + a.abs()), "{dtype:?}: {a} vs {b}");
            }
        }
        for dtype in [GgmlDType::Q4_0, GgmlDType::Q8_0, GgmlDType::Q5_0] {
            assert!(matrix(dtype, 8, 256, 33).to_superblocks().is_none(), "{dtype:?}");
        }
    }

    /// The superblock products against the exact f32 product within the rounding of `x` per 256 values (half a
    /// step per input: `sum |w| s_x / 2`), the AVX2 kernels against the portable one (which adds in another order:
    /// within f32 rounding of the products' magnitudes), and 7 vectors in passes of 4, 2 and 1 bit for bit as each
    /// alone, through `matvec_int8` over a pool too (rows long enough for the 4-vector passes to go by spans).
    #[test]
    fn superblock_products_equal_the_integer_products() {
        // 6,400 columns: 4 vectors' inputs go by spans of columns (`x86::by_spans`), one or two vectors' whole
        for (dtype, rows, cols) in
            [(GgmlDType::Q4K, 37, 768), (GgmlDType::Q6K, 37, 768), (GgmlDType::Q4K, 9, 6400), (GgmlDType::Q6K, 9, 6400)]
        {
            let m = matrix(dtype, rows, cols, 34).to_superblocks().unwrap();
            let w = m.dequantize();
            // an outlier in the first superblock of each vector: its other blocks' sub-scales far below the largest
            let x = seven_with_outliers(cols, 35);
            let xq = SubscaledRows::new(&x, cols, m.levels());
            let mut portable = vec![0f32; 7 * rows];
            superblocks_portable(&m, 7, 0, &xq, &mut portable);
            let (all, alone) = int8_together_and_alone(&m, &x);
            for j in 0..7 {
                let one = &alone[j * rows..(j + 1) * rows];
                for r in 0..rows {
                    let exact: f64 = (0..cols).map(|c| w[r * cols + c] as f64 * x[j * cols + c] as f64).sum();
                    let step: f64 = (0..cols)
                        .map(|c| {
                            let (i, b) = (j * cols + c, (j * cols + c) / SUPERBLOCK);
                            (w[r * cols + c] as f64).abs() * (xq.scale[b] * xq.t(i / 32) as f32) as f64 / 2.0
                        })
                        .sum();
                    // the products' magnitudes, what the f32 roundings of the sums scale with
                    let size: f64 = (0..cols)
                        .map(|c| {
                            let (i, b) = (j * cols + c, (j * cols + c) / SUPERBLOCK);
                            let v = xq.value(i) as f32 * xq.scale[b] * xq.t(i / 32) as f32;
                            (w[r * cols + c] as f64 * v as f64).abs()
                        })
                        .sum();
                    let (got, port) = (one[r] as f64, portable[7 * r + j] as f64);
                    assert!((port - exact).abs() <= step + 1e-4, "{dtype:?} row {r}: {port} vs {exact} ({step})");
                    assert!((got - port).abs() <= 1e-6 * size, "{dtype:?} row {r}: {got} vs {port} ({size})");
                    assert_eq!(all[j * rows + r].to_bits(), one[r].to_bits(), "{dtype:?} row {r}, vector {j}");
                }
            }
        }
    }
}
