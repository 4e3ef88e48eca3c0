//! The GGUF file's own quantized weights as the CPU engine holds them, and matrix-vector products on them.
//!
//! A decode step multiplies one row vector by every weight matrix. In f32 that reads ~540 MB per token for
//! SmolLM2-135M and is bound by memory bandwidth, so the step cannot go faster than the memory allows. This
//! module holds each quantized GGUF weight as small integers with one f32 `(scale, offset)` pair per group and
//! computes `y = W x` from them, de-quantizing on the fly in registers. Two layouts:
//! - [`Layout::U4`] for the 4-bit formats (Q4_0, Q4_1, Q4_K): groups of 32 as 16 bytes of nibble pairs, ggml's
//!   own order (byte `i` holds weight `i` in its low nibble and weight `i + 16` in its high one): 0.75 bytes per
//!   weight;
//! - [`Layout::I8`] for the others: one signed byte per weight, groups of 16; one scale per 32 where the format
//!   has one (Q5_0, Q5_1, Q8_0, Q5_K) and no offsets where they are all zero (Q5_0, Q8_0, Q6_K): 1.125 bytes per
//!   weight for Q8_0 and Q5_0, 1.25 for Q5_1, Q5_K and Q6_K (1.5 with a scale and offset per 16).
//!
//! The copy is lossless: every ggml block format we accept (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K)
//! stores a weight as `scale * q + offset` with an integer `q` in -32..=31 (or 0..=31) and one scale/offset per
//! 16 or 32 columns, so `w = q as f32 * scale + offset` rebuilds exactly the f32 value candle's de-quantization
//! gives (tested below for each format). Only the order of the f32 additions in the dot product differs from a
//! gemm on the de-quantized matrix.
//!
//! Products of many rows at once (prefill) de-quantize a block of rows at a time ([`QMatrix::dequantize_rows`])
//! for an f32 gemm, except with `--int8-dot` where the integer products outrun it at any number of rows (AMX,
//! AMD's AVX-512 VNNI, AVX2's superblocks and quartets; `QMatrix::int8_many_rows`); training and the burn engines
//! use f32 weights of their own.
//!
//! Files: `blocks` reads the ggml block formats into the integer copy; `matvec` computes products from it,
//! with the SIMD kernels in `x86` (AVX-512, AVX2); `int8` computes them in integer arithmetic from inputs
//! quantized to 8 bits (`q8`), as llama.cpp does (`--int8-dot`: faster, no longer exact); `tiles` lays the
//! int8 copies without offsets and the nibble copies out in row tiles for those products with AVX-512 VNNI;
//! `superblocks` keeps the K-quant copies (Q4_K, Q6_K) as their files do for those products with AVX2 alone, and
//! `quartets` lays Q8_0 and Q5_0 copies out so that 4 blocks share each register there;
//! `amx` multiplies many rows at once from the same tiles on Intel AMX, to the same bits.

#[cfg(target_arch = "x86_64")]
mod amx;
mod blocks;
mod int8;
mod matvec;
mod q8;
mod quartets;
mod superblocks;
mod tiles;
#[cfg(target_arch = "x86_64")]
mod x86;

use anyhow::{bail, Result};
use candle_core::quantized::GgmlDType;

pub use blocks::supported;
use blocks::{block_layout, decode_block, Decoded};

/// Whether `--int8-dot` multiplies the decoding rows of many lanes from row tiles here (AVX-512 VNNI, `tiles`: a
/// pass over a tile's weights serves up to 8 rows, and many more on Intel AMX, `amx`): a row then costs less in a
/// pass of 32 lanes than of 8, so the CPU's default number of lanes is larger with it (`src/cli/model_args.rs`).
pub fn rows_on_tiles() -> bool {
    int8::int8_width() == 8
}

/// Rows computed together by the kernels: they share each load of `x` and give the CPU independent
/// accumulator chains.
const ROWS: usize = 4;

/// Weight rows per tile of a tiled copy (`tiles`): one 32-bit lane each of an AVX-512 register.
const TILE: usize = 16;

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
    /// `[rows, row_bytes]` (or row tiles, `tiled`)
    q: Vec<u8>,
    /// `[rows, cols / group >> scale_shift]` (or row tiles, `tiled`)
    scale: Vec<f32>,
    /// `[rows, cols / group >> scale_shift]` (or row tiles, `tiled`), or empty when every offset is +0 (the
    /// symmetric formats: Q8_0, Q5_0, Q6_K)
    offset: Vec<f32>,
    /// 1 when each scale and offset serve two consecutive groups (an [`Layout::I8`] copy of a format with one
    /// scale per 32 weights: Q5_0, Q5_1, Q8_0, Q5_K), else 0. With the empty offsets, a Q8_0 or Q5_0 copy takes
    /// 1.125 bytes per weight instead of 1.5: decoding a model is bound by the bytes it reads.
    scale_shift: u32,
    /// `q`, `scale` and `offset` laid out in row tiles of 16 for the integer products (`tiles`: an int8 copy
    /// without offsets or a nibble copy, under `--int8-dot` with AVX-512 VNNI).
    tiled: bool,
    /// A K-quant copy (Q4_K nibbles, Q6_K bytes) in its superblocks (`superblocks`, under `--int8-dot` with AVX2
    /// and no VNNI): `q` in the superblocks' order, `scale` one `d` per 256 weights, `offset` Q4_K's `-dmin` per
    /// 256 (Q6_K: empty), the sub-blocks' integer scales (and Q4_K's offsets) in `sub`.
    superblocks: bool,
    /// `[rows, cols / 256, 16]` of a superblock copy: Q4_K's 8 sub-blocks' `sc`, then their `m`; Q6_K's 16 signed
    /// `sc`. Else empty.
    sub: Vec<u8>,
    /// A Q8_0 or Q5_0 copy in quartets (`quartets`, under `--int8-dot` with AVX2 and no VNNI): each 128 columns'
    /// bytes in the order whose 32-bit lanes hold one block each; the scales as the plain copy's.
    quartets: bool,
    /// A quartet copy whose weights all lie in -16..=16 (Q5_0): its kernel adds 4 products' pairs in 16 bits.
    narrow: bool,
}

impl std::fmt::Debug for QMatrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let form = match (self.tiled, self.superblocks, self.quartets) {
            (true, _, _) => ", tiled",
            (_, true, _) => ", superblocks",
            (_, _, true) => ", quartets",
            _ => "",
        };
        write!(f, "QMatrix[{}x{}, {:?}{form}]", self.rows, self.cols, self.layout)
    }
}

impl QMatrix {
    /// From the raw ggml blocks of a `[rows, cols]` tensor (candle's `QTensor::data()`).
    pub fn from_ggml(dtype: GgmlDType, bytes: &[u8], rows: usize, cols: usize) -> Result<QMatrix> {
        let Some((bs, size)) = block_layout(dtype) else { bail!("no integer form for {dtype:?} blocks") };
        if !cols.is_multiple_of(bs) {
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
        let mut m = QMatrix {
            rows,
            cols,
            layout,
            q: d.q,
            scale: d.scale,
            offset: d.offset,
            scale_shift: 0,
            tiled: false,
            superblocks: false,
            sub: Vec::new(),
            quartets: false,
            narrow: false,
        };
        if layout == Layout::I8 {
            m.compact_scales();
        }
        Ok(m)
    }

    /// Drops what the copy need not store: offsets that are all +0 (the kernels then add a +0 of their own, the
    /// same FMA), and every second scale and offset where each pair of groups shares them (a pair never straddles
    /// rows: the formats' blocks are 32 or 256 weights, and rows hold whole blocks).
    fn compact_scales(&mut self) {
        if self.offset.iter().all(|o| o.to_bits() == 0) {
            self.offset = Vec::new();
        }
        let paired = |v: &[f32]| v.chunks_exact(2).all(|p| p[0].to_bits() == p[1].to_bits());
        if paired(&self.scale) && paired(&self.offset) {
            self.scale = self.scale.iter().step_by(2).copied().collect();
            self.offset = self.offset.iter().step_by(2).copied().collect();
            self.scale_shift = 1;
        }
    }

    /// The scale and offset of group `g` of `row` (offset +0 when the copy keeps none).
    fn scale_offset(&self, row: usize, g: usize) -> (f32, f32) {
        if self.superblocks {
            return self.superblock_scale_offset(row, g);
        }
        if self.tiled {
            let i = self.tiled_scale_index(row, g >> self.scale_shift);
            return (self.scale[i], self.offset.get(i).copied().unwrap_or(0.0));
        }
        let i = (row * (self.cols / self.layout.group()) + g) >> self.scale_shift;
        (self.scale[i], if self.offset.is_empty() { 0.0 } else { self.offset[i] })
    }

    /// The integer weights of group `g` of `row` (16 or 32 of them, in column order).
    fn group_ints(&self, row: usize, g: usize, out: &mut [f32; 32]) {
        let n = self.layout.group();
        if self.superblocks {
            return self.superblock_ints(row, g, out);
        }
        if self.quartets {
            return self.quartet_ints(row, g, out);
        }
        if self.tiled {
            for (i, o) in out[..n].iter_mut().enumerate() {
                *o = self.tiled_weight(row, g * n + i) as f32;
            }
            return;
        }
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
        let mut out = vec![0f32; self.rows * self.cols];
        self.dequantize_rows(0, &mut out);
        out
    }

    /// Rows `first..first + out.len() / cols` of [`QMatrix::dequantize`]'s matrix, written to `out`
    /// (`[n, cols]`, row-major): what the f32 products of prefill multiply, a block of rows at a time. The same
    /// `q * scale + offset` per weight as `group_ints` and `dequantize` (the tests compare them).
    pub fn dequantize_rows(&self, first: usize, out: &mut [f32]) {
        let (cols, n) = (self.cols, self.layout.group());
        assert!(
            out.len().is_multiple_of(cols) && first + out.len() / cols <= self.rows,
            "dequantize_rows: rows {first}.. ({} values) exceed the {}x{cols} matrix",
            out.len(),
            self.rows
        );
        if self.tiled {
            return self.dequantize_tiled_rows(first, out);
        }
        if self.superblocks {
            return self.dequantize_superblock_rows(first, out);
        }
        if self.quartets {
            return self.dequantize_quartet_rows(first, out);
        }
        let rb = self.layout.row_bytes(cols);
        // groups per row: even where a scale serves two groups (rows hold whole 32-weight blocks), so group `g` of
        // `row` takes scale `(row * per_row + g) >> shift` = `(row * per_row >> shift) + (g >> shift)`
        let (per_row, shift) = (cols / n, self.scale_shift);
        for (i, row_out) in out.chunks_exact_mut(cols).enumerate() {
            let row = first + i;
            let q = &self.q[row * rb..(row + 1) * rb];
            let s0 = (row * per_row) >> shift;
            let scales = &self.scale[s0..s0 + (per_row >> shift)];
            let offsets = if self.offset.is_empty() { &[][..] } else { &self.offset[s0..s0 + (per_row >> shift)] };
            let so = |g: usize| (scales[g >> shift], offsets.get(g >> shift).copied().unwrap_or(0.0));
            // every group's bytes are 16 in both layouts: 16 int8 weights, or 32 nibbles
            let groups = row_out.chunks_exact_mut(n).zip(q.chunks_exact(16)).enumerate();
            match self.layout {
                Layout::I8 => {
                    for (g, (dst, src)) in groups {
                        let (s, o) = so(g);
                        let (dst, src): (&mut [f32; 16], &[u8; 16]) =
                            (dst.try_into().unwrap(), src.try_into().unwrap());
                        for (d, &b) in dst.iter_mut().zip(src) {
                            *d = (b as i8 as f32) * s + o;
                        }
                    }
                }
                Layout::U4 => {
                    for (g, (dst, src)) in groups {
                        let (s, o) = so(g);
                        let src: &[u8; 16] = src.try_into().unwrap();
                        let (lo, hi) = dst.split_at_mut(16);
                        let (lo, hi): (&mut [f32; 16], &mut [f32; 16]) =
                            (lo.try_into().unwrap(), hi.try_into().unwrap());
                        for ((l, h), &b) in lo.iter_mut().zip(hi.iter_mut()).zip(src) {
                            *l = ((b & 0x0F) as f32) * s + o;
                            *h = ((b >> 4) as f32) * s + o;
                        }
                    }
                }
            }
        }
    }

    /// Row `dst` of the result is row `src_of[dst]` of `self` (for undoing llama.cpp's Q/K permutation).
    pub fn permute_rows(&self, src_of: &[usize]) -> QMatrix {
        assert!(
            !self.tiled && !self.superblocks && !self.quartets,
            "permute_rows: a tiled, superblock or quartet copy (rows are permuted at load, before any)"
        );
        let rb = self.layout.row_bytes(self.cols);
        // scales and offsets per row (offsets: none when the copy keeps none; no rows, nothing to move)
        let per_row = |len: usize| len.checked_div(self.rows).unwrap_or(0);
        let (sg, og) = (per_row(self.scale.len()), per_row(self.offset.len()));
        let mut q = Vec::with_capacity(self.q.len());
        let mut scale = Vec::with_capacity(self.scale.len());
        let mut offset = Vec::with_capacity(self.offset.len());
        for &s in src_of {
            q.extend_from_slice(&self.q[s * rb..(s + 1) * rb]);
            scale.extend_from_slice(&self.scale[s * sg..(s + 1) * sg]);
            offset.extend_from_slice(&self.offset[s * og..(s + 1) * og]);
        }
        QMatrix { q, scale, offset, sub: Vec::new(), ..*self }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.q.len() + 4 * (self.scale.len() + self.offset.len()) + self.sub.len()
    }
}

#[cfg(test)]
pub(crate) mod fixtures {
    //! Random weights for the tests of the quantized matrices.

    /// 7 random vectors of `cols` values in -4..4 (from `seed`), each with an outlier (300) at column 5.
    pub(crate) fn seven_with_outliers(cols: usize, seed: u64) -> Vec<f32> {
        let mut x: Vec<f32> = random(7 * cols, seed).iter().map(|v| v * 4.0).collect();
        (0..7).for_each(|j| x[j * cols + 5] = 300.0);
        x
    }

    /// `m`'s integer products of the 7 vectors `x`: all at once on a pool of 2 threads (`[7][rows]`), and each
    /// alone (`[7][rows]`).
    pub(crate) fn int8_together_and_alone(m: &super::QMatrix, x: &[f32]) -> (Vec<f32>, Vec<f32>) {
        let mut all = vec![0f32; 7 * m.rows];
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        pool.install(|| m.matvec_int8(x, &mut all));
        let mut alone = vec![0f32; 7 * m.rows];
        for (x, y) in x.chunks_exact(m.cols).zip(alone.chunks_exact_mut(m.rows)) {
            m.matvec_int8(x, y);
        }
        (all, alone)
    }

    pub(crate) fn random(n: usize, seed: u64) -> Vec<f32> {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        (0..n).map(|_| rng.random::<f32>() * 2.0 - 1.0).collect()
    }

    /// A `[rows, cols]` matrix of [`random`] weights quantized by candle to `dtype`, as the integer copy.
    pub(crate) fn matrix(
        dtype: candle_core::quantized::GgmlDType,
        rows: usize,
        cols: usize,
        seed: u64,
    ) -> super::QMatrix {
        use candle_core::{quantized::QTensor, Device, Tensor};
        let t = Tensor::from_vec(random(rows * cols, seed), (rows, cols), &Device::Cpu).unwrap();
        let qt = QTensor::quantize(&t, dtype).unwrap();
        super::QMatrix::from_ggml(dtype, &qt.data().unwrap(), rows, cols).unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::random;
    use super::*;
    use candle_core::quantized::QTensor;
    use candle_core::{Device, Tensor};

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
            assert_eq!(
                bad,
                None,
                "{dtype:?}: weight {bad:?} differs: {:?} vs {:?}",
                bad.map(|i| got[i]),
                bad.map(|i| want[i])
            );
        }
    }

    /// A block of rows de-quantizes to the same bits as the weights one group at a time, in both layouts.
    #[test]
    fn dequantize_rows_equals_the_groups_values() {
        let (rows, cols) = (5, 256);
        let t = Tensor::from_vec(random(rows * cols, 11), (rows, cols), &Device::Cpu).unwrap();
        for dtype in [GgmlDType::Q4_1, GgmlDType::Q4K, GgmlDType::Q8_0, GgmlDType::Q6K] {
            let qt = QTensor::quantize(&t, dtype).unwrap();
            let m = QMatrix::from_ggml(dtype, &qt.data().unwrap(), rows, cols).unwrap();
            let n = m.layout.group();
            let mut ints = [0f32; 32];
            let mut want = Vec::new();
            for row in 1..4 {
                for g in 0..cols / n {
                    m.group_ints(row, g, &mut ints);
                    let (s, o) = m.scale_offset(row, g);
                    want.extend(ints[..n].iter().map(|&q| (q * s + o).to_bits()));
                }
            }
            let mut got = vec![f32::NAN; 3 * cols];
            m.dequantize_rows(1, &mut got);
            assert_eq!(got.iter().map(|f| f.to_bits()).collect::<Vec<_>>(), want, "{dtype:?}");
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

    /// The int8 copies keep one scale per block of 32 where the format has one, and no offsets where all are +0:
    /// bytes per weight as worked out by hand (int8 weight + 4-byte scale per 16 or 32 + 4-byte offset per 16 or
    /// 32 or none), still de-quantizing bit for bit (above) and moving scales with their rows.
    #[test]
    fn int8_copies_keep_only_the_scales_and_offsets_the_format_has() {
        let (rows, cols) = (4, 512);
        let t = Tensor::from_vec(random(rows * cols, 9), (rows, cols), &Device::Cpu).unwrap();
        for (dtype, bytes_per_weight) in [
            (GgmlDType::Q8_0, 1.0 + 4.0 / 32.0),
            (GgmlDType::Q5_0, 1.0 + 4.0 / 32.0),
            (GgmlDType::Q5_1, 1.0 + 8.0 / 32.0),
            (GgmlDType::Q5K, 1.0 + 8.0 / 32.0),
            (GgmlDType::Q6K, 1.0 + 4.0 / 16.0),
            (GgmlDType::Q4_1, 0.5 + 8.0 / 32.0),
        ] {
            let qt = QTensor::quantize(&t, dtype).unwrap();
            let m = QMatrix::from_ggml(dtype, &qt.data().unwrap(), rows, cols).unwrap();
            assert_eq!(m.bytes() as f64 / (rows * cols) as f64, bytes_per_weight, "{dtype:?}");
            let (a, p) = (m.dequantize(), m.permute_rows(&[2, 0, 3, 1]).dequantize());
            assert_eq!(&p[0..cols], &a[2 * cols..3 * cols], "{dtype:?}");
            assert_eq!(&p[3 * cols..4 * cols], &a[cols..2 * cols], "{dtype:?}");
        }
    }

    #[test]
    fn wrong_sizes_are_errors() {
        assert!(QMatrix::from_ggml(GgmlDType::Q4_1, &[0u8; 19], 1, 32).is_err());
        assert!(QMatrix::from_ggml(GgmlDType::Q4_1, &[0u8; 20], 1, 16).is_err());
        assert!(QMatrix::from_ggml(GgmlDType::F16, &[0u8; 64], 1, 32).is_err());
    }
}
