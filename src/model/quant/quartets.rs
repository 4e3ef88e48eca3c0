//! The int8 copies with one scale per 32 weights and no offsets (Q8_0, Q5_0) laid out in quartets, for
//! `--int8-dot` on CPUs with AVX2 but no AVX-512 VNNI.
//!
//! The plain copy holds each row's weights in column order, and its AVX2 kernel (`super::x86::rows_int8_avx2`)
//! pays per 32 weights and vector, besides the two multiplies (`vpmaddubsw`, `vpmaddwd`), a conversion, a scale
//! product, a broadcast and an FMA: each 32-byte load is one block, whose sum needs its own scale. Here each 128
//! columns of a row (a quartet: 4 blocks of 32) are stored so that every 32-bit lane of a 32-byte load holds 4
//! weights of one block: value `k` of block `j` at byte `16 (k / 4) + 4 j + k % 4` of the quartet, so that load
//! `c` holds values `8c..8c + 4` of the 4 blocks in its low 128-bit half and `8c + 4..8c + 8` in its high one.
//! The 4 loads' integer sums then add lane by lane (block by block) and only once per quartet does a vector pay
//! a conversion, a scale product (the weights' 4 scales, broadcast to both halves, times the inputs') and an FMA.
//! Where every weight lies in -16..=16 (Q5_0's -16..=15) the 4 loads' `vpmaddubsw` sums add in 16 bits (at most
//! 4 x 2 x 16 x 127 per word) before one `vpmaddwd` per quartet: one multiply instruction per 32 weights and
//! vector where the plain kernel has two. The inputs come quantized as for the plain kernel (ggml's Q8_0 per 32
//! values, the same bits) and laid out in the same order (`super::q8::QuartetRows`).
//!
//! The scales stay as they are (one f32 per 32 weights, row by row), and the copy holds the same bytes as the
//! plain one; it de-quantizes (an embedding's rows, the exact product) to the same values. Prefill chunks of any
//! length go to the same kernels (`QMatrix::int8_many_rows`): on a 2-core Intel Xeon run as an AVX2-only CPU
//! (`--cpu-kernels avx2`, gemm built without its AVX-512 kernels) they outran an AVX2 gemm on the de-quantized
//! weights from 8 to 512 rows (`docs/engine.md`).

use super::q8::{quartet_pos, QuartetRows, BLOCK, QUARTET};
#[cfg(target_arch = "x86_64")]
use super::x86;
use super::{Layout, QMatrix};

impl QMatrix {
    /// Turns a plain Q8_0 or Q5_0 copy into quartets (module doc) where `--int8-dot` multiplies with AVX2 and not
    /// in row tiles (no AVX-512 VNNI: `super::rows_on_tiles`); whether the copy is now in quartets.
    pub fn quartets_for_int8(&mut self) -> bool {
        if !self.quartets && super::int8::int8_width() == 2 {
            if let Some(m) = self.to_quartets() {
                *self = m;
            }
        }
        self.quartets
    }

    /// The quartet copy of a plain int8 copy with one scale per 32 weights and no offsets (Q8_0, Q5_0) whose rows
    /// hold whole quartets, else `None`.
    pub(super) fn to_quartets(&self) -> Option<QMatrix> {
        if self.tiled
            || self.superblocks
            || self.quartets
            || self.layout != Layout::I8
            || self.scale_shift != 1
            || !self.offset.is_empty()
            || !self.cols.is_multiple_of(QUARTET)
        {
            return None;
        }
        use rayon::prelude::*;
        let mut q = vec![0u8; self.q.len()];
        q.par_chunks_mut(QUARTET).zip(self.q.par_chunks(QUARTET)).for_each(|(dst, src)| {
            for (j, block) in src.chunks_exact(BLOCK).enumerate() {
                for (k, &v) in block.iter().enumerate() {
                    dst[quartet_pos(j, k)] = v;
                }
            }
        });
        let narrow = self.q.par_iter().all(|&v| (-16..=16).contains(&(v as i8)));
        let (scale, offset, sub) = (self.scale.clone(), Vec::new(), Vec::new());
        Some(QMatrix { q, scale, offset, sub, quartets: true, narrow, ..*self })
    }

    /// Group `g` (16 weights) of `row` in a quartet copy, in column order, as `group_ints`.
    pub(super) fn quartet_ints(&self, row: usize, g: usize, out: &mut [f32; 32]) {
        let at = row * self.cols + g * 16 / QUARTET * QUARTET;
        let (j, k0) = (g * 16 % QUARTET / BLOCK, g * 16 % BLOCK);
        for (i, o) in out[..16].iter_mut().enumerate() {
            *o = self.q[at + quartet_pos(j, k0 + i)] as i8 as f32;
        }
    }

    /// [`QMatrix::dequantize_rows`] of a quartet copy: `q * scale` per weight, the plain copy's values (`+ 0.0`,
    /// the offset the plain copy adds).
    pub(super) fn dequantize_quartet_rows(&self, first: usize, out: &mut [f32]) {
        let cols = self.cols;
        for (i, row_out) in out.chunks_exact_mut(cols).enumerate() {
            let row = first + i;
            let q = &self.q[row * cols..(row + 1) * cols];
            let scales = &self.scale[row * cols / BLOCK..(row + 1) * cols / BLOCK];
            for (c, (dst, src)) in row_out.chunks_exact_mut(QUARTET).zip(q.chunks_exact(QUARTET)).enumerate() {
                for (j, dst) in dst.chunks_exact_mut(BLOCK).enumerate() {
                    let s = scales[c * 4 + j];
                    for (k, d) in dst.iter_mut().enumerate() {
                        *d = (src[quartet_pos(j, k)] as i8 as f32) * s + 0.0;
                    }
                }
            }
        }
    }

    /// [`QMatrix::matvec_int8`] of a quartet copy: each pass's vectors quantized in the quartets' order
    /// ([`QuartetRows`]), the AVX2 kernel (else the portable one); each vector's result bit for bit the same
    /// whatever the others in its pass. Passes of at most 4 vectors (16 accumulators at 4: as many as AVX2 has).
    pub(super) fn matvec_quartets(&self, x: &[f32], y: &mut [f32]) {
        self.int8_passes_of_4(
            x,
            y,
            |x| QuartetRows::new(x, self.cols),
            |x, k, row0, out| {
                #[cfg(target_arch = "x86_64")]
                if super::int8::int8_width() > 0 {
                    // SAFETY: int8_width() saw AVX2 and FMA; `x` holds `k` rows of `cols`, `out` whole rows for them,
                    // within the matrix (split_passes).
                    unsafe {
                        return match (self.narrow, k) {
                            (true, 1) => x86::rows_int8_quartets_avx2::<1, true>(self, row0, x, out),
                            (true, 2) => x86::rows_int8_quartets_avx2::<2, true>(self, row0, x, out),
                            (true, 4) => x86::rows_int8_quartets_avx2::<4, true>(self, row0, x, out),
                            (false, 1) => x86::rows_int8_quartets_avx2::<1, false>(self, row0, x, out),
                            (false, 2) => x86::rows_int8_quartets_avx2::<2, false>(self, row0, x, out),
                            (false, 4) => x86::rows_int8_quartets_avx2::<4, false>(self, row0, x, out),
                            _ => unreachable!("passes of at most 4"),
                        };
                    }
                }
                quartets_portable(self, k, row0, x, out)
            },
        );
    }
}

/// The quartet kernel's arithmetic one value at a time, for `k` quantized vectors: rows `row0..` into `out`
/// (`[rows][k]`), bit for bit what `super::x86::rows_int8_quartets_avx2` gives. Per quartet, lane `l` of 8 (half
/// `l / 4`, block `l % 4`) holds the integer sum of its 16 products; it is converted, multiplied by the weight's
/// scale times the input block's and added into the lane's f32 sum with one fused multiply-add; the row's result
/// is the 8 lanes' sum in the kernel's order, `((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7))`.
pub(super) fn quartets_portable(m: &QMatrix, k: usize, row0: usize, x: &QuartetRows, out: &mut [f32]) {
    let (cols, blocks) = (m.cols, m.cols / BLOCK);
    for r in 0..out.len() / k {
        let row = row0 + r;
        for j in 0..k {
            let mut acc = [0f32; 8];
            for c in 0..cols / QUARTET {
                let at = c * QUARTET;
                let (w, v) = (&m.q[row * cols + at..][..QUARTET], &x.q[j * cols + at..][..QUARTET]);
                for (l, acc) in acc.iter_mut().enumerate() {
                    let (h, b) = (l / 4, l % 4);
                    // lane l of each of the 4 loads: bytes 32 load + 16 h + 4 b + 0..4
                    let sum: i32 = (0..4)
                        .flat_map(|load| (0..4).map(move |i| 32 * load + 16 * h + 4 * b + i))
                        .map(|p| w[p] as i8 as i32 * v[p] as i32)
                        .sum();
                    let s = m.scale[row * blocks + 4 * c + b] * x.scale[j * blocks + 4 * c + b];
                    *acc = (sum as f32).mul_add(s, *acc);
                }
            }
            out[k * r + j] = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{int8_together_and_alone, matrix, random, seven_with_outliers};
    use super::super::int8::int8_reference;
    use super::super::q8::Int8Rows;
    use super::*;
    use candle_core::quantized::GgmlDType;

    /// Positions worked out by hand: value 0 of block 0 opens the quartet, value 5 of block 1 is the second
    /// value of the high half of the first load (16 + 4 + 1), value 31 of block 3 closes it; the quartet's 128
    /// positions are each taken once.
    #[test]
    fn quartet_positions_by_hand() {
        assert_eq!(quartet_pos(0, 0), 0);
        assert_eq!(quartet_pos(1, 0), 4);
        assert_eq!(quartet_pos(0, 4), 16);
        assert_eq!(quartet_pos(1, 5), 21);
        assert_eq!(quartet_pos(2, 8), 40);
        assert_eq!(quartet_pos(3, 31), 127);
        let mut seen = [false; QUARTET];
        (0..4).flat_map(|j| (0..32).map(move |k| quartet_pos(j, k))).for_each(|p| seen[p] = true);
        assert!(seen.iter().all(|&s| s));
    }

    /// A hand-made quartet row: weights `w[c] = c % 31 - 15` with scale `(b + 1) / 8` for block `b`, inputs all
    /// 1 except block 2's (all 2): the bytes at the worked-out positions, and the product worked by hand. Block b
    /// holds `c = 32 b + k`, so its integer sum is that of `(32 b + k) % 31 - 15` over `k`.
    #[test]
    fn a_hand_made_quartet_multiplies_as_worked_out() {
        let cols = QUARTET;
        let w: Vec<f32> = (0..4 * cols)
            .map(|i| {
                let c = i % cols;
                ((c % 31) as f32 - 15.0) * ((c / 32 + 1) as f32 / 8.0)
            })
            .collect();
        let t = candle_core::Tensor::from_vec(w, (4, cols), &candle_core::Device::Cpu).unwrap();
        let qt = candle_core::quantized::QTensor::quantize(&t, GgmlDType::Q8_0).unwrap();
        let plain = QMatrix::from_ggml(GgmlDType::Q8_0, &qt.data().unwrap(), 4, cols).unwrap();
        let m = plain.to_quartets().unwrap();
        // Q8_0 maps each block's largest magnitude (15 or 16 times the scale) to 127: block b's integers are
        // `round(v * 127 / max)`; the quartet keeps the plain copy's bytes at the new places
        assert_eq!(m.q[21], plain.q[37]);
        assert_eq!(m.q[cols + 127], plain.q[cols + 127]);
        assert_eq!(m.q[cols + 16], plain.q[cols + 4]);
        assert!(!m.narrow, "Q8_0's integers reach 127");
        let mut x = vec![1f32; cols];
        x[64..96].fill(2.0);
        let xq = QuartetRows::new(&x, cols);
        // the inputs quantize to 127 everywhere, at scales 1/127 and 2/127: held exactly but for the scales'
        // rounding, so the product is the de-quantized weights' to f32 precision
        assert!(xq.q.iter().all(|&v| v == 127));
        let mut y = [0f32; 1];
        quartets_portable(&m, 1, 0, &xq, &mut y);
        let w = plain.dequantize();
        let want: f64 = (0..cols).map(|c| w[c] as f64 * x[c] as f64).sum();
        assert!((y[0] as f64 - want).abs() < 1e-5 * (1.0 + want.abs()), "{} vs {want}", y[0]);
        // block b's integer sum times its scales, by hand
        let by_blocks: f64 = (0..4)
            .map(|b| {
                let sum: i32 = (0..32).map(|k| plain.q[32 * b + k] as i8 as i32 * 127).sum();
                sum as f64 * plain.scale[b] as f64 * xq.scale[b] as f64
            })
            .sum();
        assert!((y[0] as f64 - by_blocks).abs() < 1e-5 * (1.0 + want.abs()), "{} vs {by_blocks}", y[0]);
    }

    /// A Q8_0 or Q5_0 matrix's quartet copy de-quantizes to the plain copy's values bit for bit, holds as many
    /// bytes, gives the exact product the plain copy gives, and is narrow for Q5_0 only; formats with a scale per
    /// 16, offsets or nibbles, and rows of a half quartet, keep their plain copies.
    #[test]
    fn quartets_keep_the_weights() {
        for (dtype, narrow) in [(GgmlDType::Q8_0, false), (GgmlDType::Q5_0, true)] {
            let plain = matrix(dtype, 21, 384, 41);
            let m = plain.to_quartets().expect("a Q8_0 or Q5_0 matrix of whole quartets");
            assert_eq!(m.narrow, narrow, "{dtype:?}");
            let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
            assert_eq!(bits(m.dequantize()), bits(plain.dequantize()), "{dtype:?}");
            let mut rows = vec![0f32; 3 * 384];
            m.dequantize_rows(7, &mut rows);
            assert_eq!(bits(rows), bits(plain.dequantize()[7 * 384..10 * 384].to_vec()), "{dtype:?}");
            assert_eq!(m.bytes(), plain.bytes(), "{dtype:?}");
            let x = random(2 * 384, 42);
            let (mut a, mut b) = (vec![0f32; 42], vec![0f32; 42]);
            plain.matvec(&x, &mut a);
            m.matvec(&x, &mut b);
            for (a, b) in a.iter().zip(&b) {
                assert!((a - b).abs() < 1e-4 * (1.0 + a.abs()), "{dtype:?}: {a} vs {b}");
            }
        }
        for dtype in [GgmlDType::Q4_0, GgmlDType::Q4_1, GgmlDType::Q5_1, GgmlDType::Q6K, GgmlDType::Q4K] {
            assert!(matrix(dtype, 8, 256, 43).to_quartets().is_none(), "{dtype:?}");
        }
        assert!(matrix(GgmlDType::Q8_0, 8, 96, 44).to_quartets().is_none(), "96 columns");
    }

    /// The quartet products against the integer products worked out one at a time ([`int8_reference`] of the
    /// plain copy, the same quantized inputs: within f32 rounding of the products' magnitudes), the AVX2 kernel
    /// bit for bit the portable one, and 7 vectors in passes of 4, 2 and 1 bit for bit as each alone, through
    /// `matvec_int8` on a pool too; Q8_0 (wide sums) and Q5_0 (16-bit sums), at Qwen2.5-Coder-0.5B's 896
    /// columns too.
    #[test]
    fn quartet_products_equal_the_integer_products() {
        for (dtype, rows, cols) in [
            (GgmlDType::Q8_0, 37, 384),
            (GgmlDType::Q5_0, 37, 384),
            (GgmlDType::Q8_0, 9, 896),
            (GgmlDType::Q5_0, 9, 896),
        ] {
            let plain = matrix(dtype, rows, cols, 45);
            let m = plain.to_quartets().unwrap();
            let w = plain.dequantize();
            let x = seven_with_outliers(cols, 46);
            let (xq, plain_x) = (QuartetRows::new(&x, cols), Int8Rows::new(&x, cols));
            assert_eq!(xq.scale, plain_x.scale, "{dtype:?}: the same quantization as the plain kernels'");
            let mut portable = vec![0f32; 7 * rows];
            quartets_portable(&m, 7, 0, &xq, &mut portable);
            let (all, alone) = int8_together_and_alone(&m, &x);
            for j in 0..7 {
                let one = &alone[j * rows..(j + 1) * rows];
                for r in 0..rows {
                    let want = int8_reference(&plain, &plain_x, r, j);
                    let size: f64 = (0..cols)
                        .map(|c| {
                            let (b, i) = ((j * cols + c) / BLOCK, j * cols + c);
                            let w = w[r * cols + c] as f64;
                            (w * plain_x.q[i] as f64 * plain_x.scale[b] as f64).abs()
                        })
                        .sum();
                    let port = portable[7 * r + j] as f64;
                    assert!((port - want).abs() <= 1e-6 * size, "{dtype:?} row {r}: {port} vs {want} ({size})");
                    if int8_width_here() {
                        assert_eq!(one[r].to_bits(), portable[7 * r + j].to_bits(), "{dtype:?} row {r}, vector {j}");
                    }
                    assert_eq!(all[j * rows + r].to_bits(), one[r].to_bits(), "{dtype:?} row {r}, vector {j}");
                }
            }
        }
    }

    /// Whether `matvec_int8` runs the AVX2 kernel here (else the portable one, which it then equals trivially).
    fn int8_width_here() -> bool {
        super::super::int8::int8_width() > 0
    }
}
