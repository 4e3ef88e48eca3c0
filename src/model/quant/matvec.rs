//! `y = W x` from the integer copy: rows split over the rayon pool for large matrices, several vectors per pass
//! over the weights where a several-vector kernel exists, and the kernel picked by what the CPU offers
//! (`super::x86`, else the portable one).

#[cfg(target_arch = "x86_64")]
use super::x86;
use super::{Layout, QMatrix, ROWS};

impl QMatrix {
    /// `y[r] = sum_c W[r, c] x[c]` for each of the `x.len() / cols` row vectors in `x` (row-major), written to
    /// `y` (`[n, rows]`). Splits the rows over the rayon pool for large matrices. Several vectors go through one
    /// pass over the weights where a several-vector kernel exists (AVX-512: up to 8 at a time; AVX2: 2): the
    /// integer blocks are read and de-quantized once for all of them, and each result is bit for bit the
    /// one-vector product (several sequences decoded together, `Lm::feed_many`, give the same tokens as one at a
    /// time).
    pub fn matvec(&self, x: &[f32], y: &mut [f32]) {
        assert_eq!(x.len() % self.cols, 0, "matvec: input length {} is not a multiple of {}", x.len(), self.cols);
        let n = x.len() / self.cols;
        assert_eq!(y.len(), n * self.rows, "matvec: output length");
        if self.tiled || self.superblocks || self.quartets {
            // a tiled, superblock or quartet copy decodes in integers (`matvec_int8`); its exact product, one value
            // at a time
            for (xs, ys) in x.chunks_exact(self.cols).zip(y.chunks_exact_mut(self.rows)) {
                rows_scalar(self, 0, xs, ys);
            }
            return;
        }
        self.split_passes(n, Self::vectors_per_pass(), ROWS, PassOut::Interleaved, y, |_, done, k, row0, out| {
            let xs = &x[done * self.cols..(done + k) * self.cols];
            if k == 1 {
                self.rows_into(row0, xs, out)
            } else {
                self.rows_into_n(k, row0, xs, out)
            }
        });
    }

    /// Rows per piece when the matrix is split over the rayon pool (two pieces per thread, each a multiple of
    /// `align` rows), or `None` when it is too small to be worth splitting.
    fn piece_rows(&self, align: usize) -> Option<usize> {
        let threads = rayon::current_num_threads();
        (threads > 1 && self.rows * self.cols >= PARALLEL_MIN)
            .then(|| self.rows.div_ceil(threads * 2).next_multiple_of(align))
    }

    /// Runs `rows(row0, count)` over ranges of rows covering the matrix, each starting at a multiple of `align`
    /// rows, split over the rayon pool when the matrix is large; for kernels that write their rows of the output
    /// themselves (through [`Rows`]).
    pub(super) fn split_pieces(&self, align: usize, rows: impl Fn(usize, usize) + Sync) {
        use rayon::prelude::*;
        match self.piece_rows(align) {
            Some(chunk) => (0..self.rows.div_ceil(chunk))
                .into_par_iter()
                .for_each(|c| rows(c * chunk, chunk.min(self.rows - c * chunk))),
            None => rows(0, self.rows),
        }
    }

    /// `n` vectors' products in passes of at most `width` vectors ([`passes`]), written to `y` (`[n, rows]`): the
    /// rows split over the pool once ([`QMatrix::split_pieces`]), and each piece, a block of [`BLOCK_BYTES`] of
    /// weights at a time, taking every pass over the block in turn (the block's weights then come from the core's
    /// cache after the first) rather than the pool split once per pass.
    /// `pass(i, first, k, row0, out)`, for the `i`-th pass, writes rows `row0..row0 + out.len() / k` of vectors
    /// `first..first + k` in the order `order` says.
    pub(super) fn split_passes(
        &self,
        n: usize,
        width: usize,
        align: usize,
        order: PassOut,
        y: &mut [f32],
        pass: impl Fn(usize, usize, usize, usize, &mut [f32]) + Sync,
    ) {
        assert_eq!(y.len(), n * self.rows, "split_passes: output length");
        let passes: Vec<(usize, usize)> = passes(n, width).collect();
        let y_at = Rows(y.as_mut_ptr());
        // at least `align` rows per block, however wide the rows
        let row_bytes = (self.bytes() / self.rows.max(1)).max(1);
        let block = (BLOCK_BYTES / row_bytes).next_multiple_of(align).max(align);
        self.split_pieces(align, |row0, rows| {
            // the passes' widths do not grow (8, ..., 8, then 4, 2, 1)
            let mut inter = vec![0f32; passes.first().map_or(0, |&(_, k)| k) * block.min(rows)];
            for b0 in (row0..row0 + rows).step_by(block) {
                let b_rows = block.min(row0 + rows - b0);
                for (i, &(done, k)) in passes.iter().enumerate() {
                    let inter = &mut inter[..k * b_rows];
                    pass(i, done, k, b0, inter);
                    for j in 0..k {
                        // SAFETY: y holds n rows of self.rows values (asserted above), and b0..b0 + b_rows are
                        // rows of this piece's own (split_pieces hands out disjoint ranges of the matrix's rows),
                        // so no other piece writes them.
                        let out = unsafe {
                            std::slice::from_raw_parts_mut(y_at.at().add((done + j) * self.rows + b0), b_rows)
                        };
                        match order {
                            PassOut::Interleaved => {
                                for (o, v) in out.iter_mut().zip(inter.chunks_exact(k)) {
                                    *o = v[j];
                                }
                            }
                            PassOut::ByVector => out.copy_from_slice(&inter[j * b_rows..(j + 1) * b_rows]),
                        }
                    }
                }
            }
        });
    }

    /// How many vectors one pass over the weights can take on this CPU: 8 with AVX-512, 2 with AVX2 + FMA
    /// (`rows_avx2::<2>`), else 1.
    pub fn vectors_per_pass() -> usize {
        #[cfg(target_arch = "x86_64")]
        {
            if crate::model::simd::avx512f() {
                return 8;
            }
            if crate::model::simd::avx2_fma() {
                return 2;
            }
        }
        1
    }

    /// Rows `row0..row0 + out.len() / k` of `W x_j` for the `k` vectors of `x` (`[k, cols]`), interleaved in `out`
    /// (`[rows][k]`); `k` is one that [`QMatrix::vectors_per_pass`] allows.
    fn rows_into_n(&self, k: usize, row0: usize, x: &[f32], out: &mut [f32]) {
        assert!(row0 + out.len() / k <= self.rows && x.len() == k * self.cols && out.len().is_multiple_of(k));
        #[cfg(target_arch = "x86_64")]
        {
            if crate::model::simd::avx512f() {
                // SAFETY: the CPU has AVX-512F; the bounds were checked above.
                unsafe {
                    return match (self.layout, k) {
                        (Layout::I8, 2) => x86::rows_avx512_n::<2>(self, row0, x, out),
                        (Layout::I8, 4) => x86::rows_avx512_n::<4>(self, row0, x, out),
                        (Layout::I8, 8) => x86::rows_avx512_n::<8>(self, row0, x, out),
                        (Layout::U4, 2) => x86::rows_u4_avx512_n::<2>(self, row0, x, out),
                        (Layout::U4, 4) => x86::rows_u4_avx512_n::<4>(self, row0, x, out),
                        (Layout::U4, 8) => x86::rows_u4_avx512_n::<8>(self, row0, x, out),
                        _ => unreachable!("no {k}-vector AVX-512 kernel"),
                    };
                }
            }
            if k == 2 && crate::model::simd::avx2_fma() {
                // SAFETY: the CPU has AVX2 and FMA; the bounds were checked above.
                return unsafe {
                    match self.layout {
                        Layout::I8 => x86::rows_avx2::<2>(self, row0, x, out),
                        Layout::U4 => x86::rows_u4_avx2::<2>(self, row0, x, out),
                    }
                };
            }
        }
        unreachable!("rows_into_n: no {k}-vector kernel on this CPU")
    }

    /// Rows `row0..row0 + out.len()` of `W x`.
    fn rows_into(&self, row0: usize, x: &[f32], out: &mut [f32]) {
        assert!(row0 + out.len() <= self.rows && x.len() == self.cols);
        #[cfg(target_arch = "x86_64")]
        {
            if crate::model::simd::avx512f() {
                // SAFETY: the CPU has AVX-512F; the bounds were checked above.
                return unsafe {
                    match self.layout {
                        Layout::I8 => x86::rows_avx512(self, row0, x, out),
                        Layout::U4 => x86::rows_u4_avx512(self, row0, x, out),
                    }
                };
            }
            if crate::model::simd::avx2_fma() {
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

/// The passes over the weights that `n` vectors take with kernels of at most `width` vectors: `(first vector,
/// vectors)`, each the widest kernel that fits what is left (8, 4, 2 or 1 vectors).
pub(super) fn passes(n: usize, width: usize) -> impl Iterator<Item = (usize, usize)> {
    let mut done = 0;
    std::iter::from_fn(move || {
        (done < n).then(|| {
            let k = [8, 4, 2, 1].into_iter().find(|&k| k <= width && k <= n - done).unwrap_or(1);
            done += k;
            (done - k, k)
        })
    })
}

/// How a pass of [`QMatrix::split_passes`] lays out its `k` vectors' rows.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum PassOut {
    /// `[rows][k]`: each row's `k` values together (the kernels that take one row at a time)
    Interleaved,
    /// `[k][rows]`: each vector's rows together (the tile kernels, which finish 16 rows of a vector at once)
    ByVector,
}

/// Where the pieces of [`QMatrix::split_pieces`] write their rows of an output `[vectors][rows]`; each piece writes
/// only the rows it was given.
pub(super) struct Rows(pub(super) *mut f32);

// SAFETY: the pieces of split_pieces are disjoint ranges of rows, and each writes only its own (the callers'
// contract).
unsafe impl Sync for Rows {}

impl Rows {
    pub(super) fn at(&self) -> *mut f32 {
        self.0
    }
}

/// Weights at or above which a matrix-vector product is split over threads: every matrix of a real model (the
/// CPU engine runs its forward pass on a thread of the pool, so a split hands rows to a worker that is already
/// awake; from outside the pool, waking it 200 times per token cost more than it gained). Smaller ones, as in
/// the tests' tiny models, stay on one thread.
const PARALLEL_MIN: usize = 1 << 16;

/// Bytes of weights [`QMatrix::split_passes`] takes every pass over before moving on: a quarter of a Zen 4 core's
/// L2 cache (1 MiB; Sapphire Rapids has 2), which leaves room for the passes' inputs and outputs. Qwen's `synth
/// hallucination --int8-dot` took the same time with 128 or 512 KiB, within the noise.
const BLOCK_BYTES: usize = 256 << 10;

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
            let (s, off) = m.scale_offset(row, g);
            for i in 0..n {
                acc[i] += (ints[i] * s + off) * x[g * n + i];
            }
        }
        *o = acc.iter().sum();
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::random;
    use super::*;
    use candle_core::quantized::{GgmlDType, QTensor};
    use candle_core::{Device, Tensor};

    #[test]
    fn matvec_equals_the_dequantized_product() {
        // 37 rows: the 4-row blocks and the remainder; two input vectors
        let (rows, cols) = (37, 256);
        let t = Tensor::from_vec(random(rows * cols, 2), (rows, cols), &Device::Cpu).unwrap();
        let x = random(2 * cols, 3);
        for dtype in [GgmlDType::Q4_1, GgmlDType::Q8_0, GgmlDType::Q5_1, GgmlDType::Q5K, GgmlDType::Q6K, GgmlDType::Q4K]
        {
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

    /// The AVX2 kernels, which an AVX-512 CPU never picks, against the portable one: each layout, with and without
    /// offsets and with one scale per 16 or per 32 weights; the two-vector pass bit for bit the one-vector one.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_kernels_equal_the_portable_one() {
        if !(std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")) {
            return;
        }
        let (rows, cols) = (37, 256);
        let t = Tensor::from_vec(random(rows * cols, 10), (rows, cols), &Device::Cpu).unwrap();
        let x = random(2 * cols, 11);
        for dtype in [GgmlDType::Q4_1, GgmlDType::Q8_0, GgmlDType::Q5_1, GgmlDType::Q5K, GgmlDType::Q6K, GgmlDType::Q4K]
        {
            let qt = QTensor::quantize(&t, dtype).unwrap();
            let m = QMatrix::from_ggml(dtype, &qt.data().unwrap(), rows, cols).unwrap();
            let (mut one, mut two) = (vec![0f32; 2 * rows], vec![0f32; 2 * rows]);
            // SAFETY: the CPU has AVX2 and FMA; x holds 2 vectors of `cols`, the outputs `rows` (x 2).
            unsafe {
                for j in 0..2 {
                    let (xj, oj) = (&x[j * cols..(j + 1) * cols], &mut one[j * rows..(j + 1) * rows]);
                    match m.layout {
                        Layout::I8 => x86::rows_avx2::<1>(&m, 0, xj, oj),
                        Layout::U4 => x86::rows_u4_avx2::<1>(&m, 0, xj, oj),
                    }
                }
                match m.layout {
                    Layout::I8 => x86::rows_avx2::<2>(&m, 0, &x, &mut two),
                    Layout::U4 => x86::rows_u4_avx2::<2>(&m, 0, &x, &mut two),
                }
            }
            for j in 0..2 {
                let mut want = vec![0f32; rows];
                rows_scalar(&m, 0, &x[j * cols..(j + 1) * cols], &mut want);
                for r in 0..rows {
                    let (got, w) = (one[j * rows + r], want[r]);
                    assert!((got - w).abs() < 1e-4 * (1.0 + w.abs()), "{dtype:?} row {r}: {got} vs {w}");
                    assert_eq!(two[2 * r + j].to_bits(), got.to_bits(), "{dtype:?} row {r}, vector {j}");
                }
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

    /// Vectors that go through the several-vector kernels (15 = 8 + 4 + 2 + 1 with AVX-512, 7 pairs and a leftover
    /// with AVX2) give exactly the one-vector results, on one thread and split over a pool (the large matrices
    /// in several blocks of `BLOCK_BYTES` per piece, the last one short; the widest, rows of more than
    /// `BLOCK_BYTES` each, the fewest rows a kernel takes per block).
    #[test]
    fn several_vectors_equal_one_at_a_time_bit_for_bit() {
        for (dtype, rows, cols) in [
            (GgmlDType::Q4_1, 37, 256),
            (GgmlDType::Q8_0, 37, 256),
            (GgmlDType::Q4_1, 1030, 4096),
            (GgmlDType::Q8_0, 1030, 4096),
            (GgmlDType::Q8_0, 6, 278_528),
        ] {
            let t = Tensor::from_vec(random(rows * cols, 7), (rows, cols), &Device::Cpu).unwrap();
            let qt = QTensor::quantize(&t, dtype).unwrap();
            let m = QMatrix::from_ggml(dtype, &qt.data().unwrap(), rows, cols).unwrap();
            let nv = 15;
            let x = random(nv * cols, 8);
            let mut one = vec![0f32; nv * rows];
            for j in 0..nv {
                m.rows_into(0, &x[j * cols..(j + 1) * cols], &mut one[j * rows..(j + 1) * rows]);
            }
            for threads in [1, 3] {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                let mut y = vec![0f32; nv * rows];
                pool.install(|| m.matvec(&x, &mut y));
                assert_eq!(y, one, "{dtype:?} {rows}x{cols}, {threads} threads");
            }
        }
    }
}
