//! `y = W x` in integer arithmetic, as llama.cpp decodes (`--int8-dot`): each input row is quantized to int8 in
//! blocks of 32 values (ggml's Q8_0: scale `max |x| / 127`, values rounded to -127..=127), each group of integer
//! weights is multiplied with it in 32-bit integers, and only the group's sum is scaled:
//! `y = sum_g s_w[g] s_x[b(g)] (sum_{i in g} q_w[i] q_x[i])`.
//!
//! That is one integer multiply-add per weight (AVX-512 VNNI: 64 per instruction) where the exact path
//! de-quantizes each weight to f32 with one FMA and multiplies it with another. The price is the rounding of `x`
//! to 8 bits: products differ from the exact ones by about `max |x| / 254` per block of 32 inputs, times the
//! weights; the logits, entropies and hidden states that come out differ accordingly (measured in
//! `docs/engine.md`). The nibble copies ([`Layout::U4`]: Q4_0, Q4_1, Q4_K) add each group's offset times the
//! sum of its quantized inputs (`o_g s_x sum q_x`, ggml's Q8_1 sums). The symmetric [`Layout::I8`] copies (Q8_0,
//! Q5_0, Q6_K) take this path; I8 copies with offsets (Q5_1, Q5_K), and CPUs without AVX2, use the exact kernels.

use super::matvec::{passes, PassOut};
use super::q8::Int8Rows;
#[cfg(test)]
use super::q8::BLOCK;
#[cfg(target_arch = "x86_64")]
use super::x86;
use super::{Layout, QMatrix, ROWS};

impl QMatrix {
    /// Whether [`QMatrix::matvec_int8`] multiplies in integers here: a nibble copy or a symmetric int8 copy on a
    /// CPU with AVX2 (x86-64), or a tiled, superblock or quartet copy (`super::tiles`, `super::superblocks`,
    /// `super::quartets`) — else it gives the exact [`QMatrix::matvec`].
    pub fn int8_dot(&self) -> bool {
        self.tiled
            || self.superblocks
            || self.quartets
            || ((self.layout == Layout::U4 || self.offset.is_empty()) && int8_width() > 0)
    }

    /// [`QMatrix::matvec`] with the inputs quantized to int8 and integer products (module doc); the exact
    /// `matvec` where [`QMatrix::int8_dot`] is false. As there, several vectors share each pass over the weights
    /// and each result is bit for bit the one-vector result.
    pub fn matvec_int8(&self, x: &[f32], y: &mut [f32]) {
        if !self.int8_dot() {
            return self.matvec(x, y);
        }
        assert_eq!(x.len() % self.cols, 0, "matvec_int8: input length {} is not a multiple of {}", x.len(), self.cols);
        let n = x.len() / self.cols;
        assert_eq!(y.len(), n * self.rows, "matvec_int8: output length");
        if self.tiled {
            return self.matvec_tiles(x, y);
        }
        if self.superblocks {
            return self.matvec_superblocks(x, y);
        }
        if self.quartets {
            return self.matvec_quartets(x, y);
        }
        // each row is quantized on its own, so each pass quantizes just its rows
        let width = int8_width();
        let xs: Vec<Int8Rows> = passes(n, width)
            .map(|(done, k)| Int8Rows::new(&x[done * self.cols..(done + k) * self.cols], self.cols))
            .collect();
        self.split_passes(n, width, ROWS, PassOut::Interleaved, y, |i, _, k, row0, out| {
            self.int8_rows_into(k, row0, &xs[i], out)
        });
    }

    /// The products of the AVX2 copies (`super::superblocks`, `super::quartets`): `x`'s vectors in passes of at
    /// most 4 (their kernels' `N` of 1, 2 or 4), each pass's rows quantized over the pool by `quantize` (a prefill
    /// chunk's many passes), then `kernel(x, k, row0, out)` for each pass and piece of the rows, `out` the rows'
    /// `k` results interleaved (`[rows][k]`), as [`QMatrix::split_passes`] hands them out.
    pub(super) fn int8_passes_of_4<X: Send + Sync>(
        &self,
        x: &[f32],
        y: &mut [f32],
        quantize: impl Fn(&[f32]) -> X + Sync + Send,
        kernel: impl Fn(&X, usize, usize, &mut [f32]) + Sync,
    ) {
        use rayon::prelude::*;
        let (n, width) = (x.len() / self.cols, 4);
        let xs: Vec<X> = passes(n, width)
            .collect::<Vec<_>>()
            .into_par_iter()
            .map(|(done, k)| quantize(&x[done * self.cols..(done + k) * self.cols]))
            .collect();
        self.split_passes(n, width, 1, PassOut::Interleaved, y, |i, _, k, row0, out| kernel(&xs[i], k, row0, out));
    }

    /// Rows `row0..row0 + out.len() / k` of `W x_j` for the `k` quantized rows of `x`, interleaved in `out`
    /// (`[rows][k]`).
    fn int8_rows_into(&self, k: usize, row0: usize, x: &Int8Rows, out: &mut [f32]) {
        assert!(row0 + out.len() / k <= self.rows && x.q.len() == k * self.cols && out.len().is_multiple_of(k));
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: int8_width() saw the features each kernel needs; the bounds were checked above.
            unsafe {
                return match (int8_width(), self.layout, k) {
                    (8, Layout::I8, 1) => x86::rows_int8_avx512::<1>(self, row0, x, out),
                    (8, Layout::I8, 2) => x86::rows_int8_avx512::<2>(self, row0, x, out),
                    (8, Layout::I8, 4) => x86::rows_int8_avx512::<4>(self, row0, x, out),
                    (8, Layout::I8, 8) => x86::rows_int8_avx512::<8>(self, row0, x, out),
                    (8, Layout::U4, 1) => x86::rows_int8_u4_avx512::<1>(self, row0, x, out),
                    (8, Layout::U4, 2) => x86::rows_int8_u4_avx512::<2>(self, row0, x, out),
                    (8, Layout::U4, 4) => x86::rows_int8_u4_avx512::<4>(self, row0, x, out),
                    (8, Layout::U4, 8) => x86::rows_int8_u4_avx512::<8>(self, row0, x, out),
                    (2, Layout::I8, 1) => x86::rows_int8_avx2::<1>(self, row0, x, out),
                    (2, Layout::I8, 2) => x86::rows_int8_avx2::<2>(self, row0, x, out),
                    (2, Layout::U4, 1) => x86::rows_int8_u4_avx2::<1>(self, row0, x, out),
                    (2, Layout::U4, 2) => x86::rows_int8_u4_avx2::<2>(self, row0, x, out),
                    _ => unreachable!("no {k}-vector kernel for {:?}", self.layout),
                };
            }
        }
        #[allow(unreachable_code)]
        {
            unreachable!("int8_rows_into without a kernel")
        }
    }
}

/// Vectors per pass of the integer kernels on this CPU (as far as `--cpu-kernels` allows, `crate::model::simd`): 8
/// with AVX-512 (F, BW, VNNI), 2 with AVX2, 0 without (no integer path).
pub(super) fn int8_width() -> usize {
    use crate::model::simd;
    if simd::avx512_vnni() {
        8
    } else if simd::avx2_fma() {
        2
    } else {
        0
    }
}

/// Whether the VNNI tile kernels (`super::tiles`, 8 rows per pass over the weights) multiply many rows faster
/// than an f32 gemm on the de-quantized weights at every number of rows, so that `--int8-dot` sends prefill
/// chunks to them, as it sends them to the tile unit where there is AMX: measured so on AMD's AVX-512 (Zen 4),
/// not on Intel's. A 4,864 x 896 matrix on 2 cores (`cargo run --release --example bench_int8_prefill`): on an
/// AMD EPYC the tiles give 358-441 GFLOPS from 8 to 512 rows, gemm 18-198 (1.9-3.1 times the tiles' time from
/// 128 rows on); on an Intel Xeon, gemm passes the tiles from about 256 rows, so there prefill chunks of more
/// than 32 rows stay on gemm (docs/engine.md).
pub(super) fn tiles_outrun_gemm() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static AMD: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let amd = *AMD.get_or_init(|| {
            // SAFETY: CPUID is available on every x86-64 CPU; leaf 0 gives the vendor string in EBX, EDX, ECX.
            #[allow(unused_unsafe)]
            let r = unsafe { std::arch::x86_64::__cpuid(0) };
            [r.ebx, r.edx, r.ecx].map(u32::to_le_bytes).concat() == b"AuthenticAMD"
        });
        amd && super::rows_on_tiles()
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// The integer products worked out one at a time, in f64: `sum_g s_w[g] s_x[b] sum q_w q_x + o_g s_x sum q_x`
/// (the reference the kernels are tested against).
#[cfg(test)]
pub(super) fn int8_reference(m: &QMatrix, x: &Int8Rows, row: usize, j: usize) -> f64 {
    let group = m.layout.group();
    let mut ints = [0f32; 32];
    let mut sum = 0f64;
    for g in 0..m.cols / group {
        m.group_ints(row, g, &mut ints);
        let (s, o) = m.scale_offset(row, g);
        let b = j * m.cols / BLOCK + g * group / BLOCK;
        let xq = &x.q[j * m.cols + g * group..j * m.cols + (g + 1) * group];
        let dot: i32 = ints[..group].iter().zip(xq).map(|(&w, &v)| w as i32 * v as i32).sum();
        let xsum: i32 = xq.iter().map(|&v| v as i32).sum();
        sum += s as f64 * x.scale[b] as f64 * dot as f64 + o as f64 * x.scale[b] as f64 * xsum as f64;
    }
    sum
}

/// The matrices the integer kernels are tested on: each format with an integer path, a 96-column one (a last
/// half-chunk of 32), and two of a real model's size.
#[cfg(test)]
pub(super) const CASES: [(candle_core::quantized::GgmlDType, usize, usize); 8] = {
    use candle_core::quantized::GgmlDType as T;
    [
        (T::Q8_0, 37, 256),
        (T::Q6K, 37, 256),
        (T::Q5_0, 21, 96),
        (T::Q4_0, 21, 96),
        (T::Q4_1, 37, 256),
        (T::Q4K, 37, 256),
        (T::Q8_0, 1030, 4096),
        (T::Q4K, 1030, 4096),
    ]
};

/// `m`'s integer products of 15 random vectors (from `seed`), one at a time, against [`int8_reference`] of
/// `weights` (the same weights, in any layout; tight), and all 15 at once (8 + 4 + 2 + 1 per pass) on pools of 1
/// and 3 threads bit for bit the same. Returns the vectors and the one-at-a-time products (`[15][rows]`).
#[cfg(test)]
pub(super) fn check_integer_products(m: &QMatrix, weights: &QMatrix, seed: u64) -> (Vec<f32>, Vec<f32>) {
    let (rows, cols, nv) = (m.rows, m.cols, 15);
    let x = super::fixtures::random(nv * cols, seed);
    let xq = Int8Rows::new(&x, cols);
    let mut one = vec![0f32; nv * rows];
    for j in 0..nv {
        m.matvec_int8(&x[j * cols..(j + 1) * cols], &mut one[j * rows..(j + 1) * rows]);
    }
    for j in 0..nv {
        for r in 0..rows {
            let (got, want) = (one[j * rows + r] as f64, int8_reference(weights, &xq, r, j));
            assert!((got - want).abs() < 1e-4 * (1.0 + want.abs()), "{m:?} row {r} vector {j}: {got} vs {want}");
        }
    }
    for threads in [1, 3] {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        let mut all = vec![0f32; nv * rows];
        pool.install(|| m.matvec_int8(&x, &mut all));
        assert_eq!(all, one, "{m:?}, {threads} threads");
    }
    (x, one)
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{matrix, random};
    use super::*;
    use candle_core::quantized::GgmlDType;

    /// Inputs that int8 holds exactly (multiples of a block's scale, the largest 127 of them) give the exact
    /// product up to f32 rounding: only the order of the additions differs.
    #[test]
    fn exactly_representable_inputs_give_the_exact_product() {
        let (rows, cols) = (37, 256);
        for dtype in [GgmlDType::Q8_0, GgmlDType::Q5_0, GgmlDType::Q6K, GgmlDType::Q4_1, GgmlDType::Q4K] {
            let m = matrix(dtype, rows, cols, 21);
            // steps of 0.125 with 127 steps at the start of each block: the scale is 0.125 exactly
            let x: Vec<f32> = (0..cols)
                .map(|c| if c % BLOCK == 0 { 127.0 * 0.125 } else { ((c * 37 % 255) as f32 - 127.0) * 0.125 })
                .collect();
            let (mut exact, mut int) = (vec![0f32; rows], vec![0f32; rows]);
            m.matvec(&x, &mut exact);
            m.matvec_int8(&x, &mut int);
            assert!(m.int8_dot() || int8_width() == 0);
            assert!(Int8Rows::new(&x, cols).scale.iter().all(|&d| d == 0.125));
            for r in 0..rows {
                assert!(
                    (exact[r] - int[r]).abs() < 1e-4 * (1.0 + exact[r].abs()),
                    "{dtype:?} row {r}: {} vs {}",
                    int[r],
                    exact[r]
                );
            }
        }
    }

    /// On random inputs: each kernel against the integer products worked out one by one (tight), and against the
    /// exact f32 product within the rounding of `x` to 8 bits (at most half a step per input: `sum |w| s_x / 2`);
    /// 15 vectors (8 + 4 + 2 + 1 per pass) give bit for bit what each gives alone; a 96-column matrix (a last
    /// half-chunk of 32) and a split over a pool too.
    #[test]
    fn kernels_equal_the_integer_products() {
        for (dtype, rows, cols) in CASES {
            let m = matrix(dtype, rows, cols, 22);
            let (x, one) = check_integer_products(&m, &m, 23);
            let xq = Int8Rows::new(&x, cols);
            let w = m.dequantize();
            for j in 0..x.len() / cols {
                for r in 0..rows {
                    let got = one[j * rows + r] as f64;
                    let exact: f64 = (0..cols).map(|c| w[r * cols + c] as f64 * x[j * cols + c] as f64).sum();
                    let step: f64 = (0..cols)
                        .map(|c| (w[r * cols + c] as f64).abs() * xq.scale[j * cols / BLOCK + c / BLOCK] as f64 / 2.0)
                        .sum();
                    assert!(
                        (got - exact).abs() <= step + 1e-4,
                        "{dtype:?} row {r}: {got} vs exact {exact} (bound {step})"
                    );
                }
            }
        }
    }

    /// The AVX2 kernels, which an AVX-512 CPU never picks, against the integer products.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_kernels_equal_the_integer_products() {
        if !(std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")) {
            return;
        }
        for (dtype, rows, cols) in [
            (GgmlDType::Q8_0, 37, 256),
            (GgmlDType::Q6K, 37, 256),
            (GgmlDType::Q5_0, 21, 96),
            (GgmlDType::Q4_1, 21, 96),
            (GgmlDType::Q4K, 37, 256),
        ] {
            let m = matrix(dtype, rows, cols, 24);
            let x = random(2 * cols, 25);
            let xq = Int8Rows::new(&x, cols);
            let (mut one, mut two) = (vec![0f32; 2 * rows], vec![0f32; 2 * rows]);
            // SAFETY: the CPU has AVX2 and FMA; x holds 2 rows of `cols`, the outputs `rows` (x 2).
            unsafe {
                for j in 0..2 {
                    let (xj, oj) =
                        (&Int8Rows::new(&x[j * cols..(j + 1) * cols], cols), &mut one[j * rows..(j + 1) * rows]);
                    match m.layout {
                        Layout::U4 => x86::rows_int8_u4_avx2::<1>(&m, 0, xj, oj),
                        _ => x86::rows_int8_avx2::<1>(&m, 0, xj, oj),
                    }
                }
                match m.layout {
                    Layout::U4 => x86::rows_int8_u4_avx2::<2>(&m, 0, &xq, &mut two),
                    _ => x86::rows_int8_avx2::<2>(&m, 0, &xq, &mut two),
                }
            }
            for j in 0..2 {
                for r in 0..rows {
                    let (got, want) = (one[j * rows + r] as f64, int8_reference(&m, &xq, r, j));
                    assert!((got - want).abs() < 1e-4 * (1.0 + want.abs()), "{dtype:?} row {r}: {got} vs {want}");
                    assert_eq!(two[2 * r + j].to_bits(), one[j * rows + r].to_bits(), "{dtype:?} row {r}, vector {j}");
                }
            }
        }
    }

    /// Int8 copies with offsets (Q5_1, Q5_K) are not multiplied in integers: the exact product.
    #[test]
    fn other_layouts_give_the_exact_product() {
        for dtype in [GgmlDType::Q5_1, GgmlDType::Q5K] {
            let m = matrix(dtype, 8, 256, 26);
            assert!(!m.int8_dot(), "{dtype:?}");
            let x = random(256, 27);
            let (mut a, mut b) = (vec![0f32; 8], vec![0f32; 8]);
            m.matvec(&x, &mut a);
            m.matvec_int8(&x, &mut b);
            assert_eq!(a, b, "{dtype:?}");
        }
    }
}
