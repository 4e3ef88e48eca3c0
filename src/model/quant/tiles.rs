//! The integer copies laid out in row tiles for the integer products of `--int8-dot` with AVX-512 VNNI, where
//! several sequences decode together: the symmetric int8 copies (Q8_0, Q5_0, Q6_K) and the nibble copies (Q4_0,
//! Q4_1, Q4_K).
//!
//! Row by row (`super::x86::rows_int8_avx512`), one `vpdpbusd` multiplies 64 weights of one row with 64 inputs,
//! and each vector then pays a sign fix, a conversion, a scale product and an FMA per 64 weights: at 8 vectors
//! those, not the reading of the weights, bound a decoding pass (Qwen2.5-Coder-0.5B: 61% of the time in that
//! kernel). In a tile, one register holds 4 consecutive columns of 16 rows, so one `vpdpbusd` against 4 input
//! values broadcast to every lane gives 16 rows' partial sums, and a whole scale group (16 or 32 columns: 4 or 8
//! registers) is summed in integers before its one conversion, scale product and FMA per 16 rows:
//!
//! - int8 `q`: `[rows / 16 tiles][cols / 4][16 rows][4 columns]`, each weight stored as `w + 128` (unsigned, what
//!   `vpdpbusd` takes first); the integer sum of a group is `sum (w + 128) x - 128 sum x = sum w x`, exactly (the
//!   inputs' sums per 16 values come with them, `Int8Rows::sum16`);
//! - nibble `q`: `[rows / 16 tiles][cols / 32 groups][4][16 rows][4 bytes]`, the low nibbles of the `r`-th 64
//!   bytes columns `4r..4r + 4` of the group, the high ones columns `16 + 4r..`, as two registers after a mask and
//!   a shift (unsigned already); each group's offset times its input block's `scale * sum q` is added with one more
//!   FMA per 16 rows;
//! - `scale` (and a nibble copy's `offset`): `[rows / 16 tiles][scales per row][16 rows]`;
//! - the last tile padded with weights, scales and offsets 0.
//!
//! Each result is the integer products of `super::int8` with the f32 additions in another order, and the same
//! for a vector whatever the others in its pass (bit for bit), or whether it came in a pass of up to 8 or, on
//! AMX, with many more (`super::amx`). Products of many rows (prefill) elsewhere, and the embedding's rows,
//! de-quantize from the tiles (`QMatrix::dequantize_rows`) to the same values as before tiling.

use super::int8::int8_width;
use super::matvec::{passes, PassOut};
use super::q8::{Int8Rows, BLOCK};
#[cfg(target_arch = "x86_64")]
use super::x86;
use super::{Layout, QMatrix, TILE};

/// Columns per tile register: the 4 bytes `vpdpbusd` sums into one lane.
const QUAD: usize = 4;

impl QMatrix {
    /// Lays an int8 copy with no offsets, or a nibble copy, out in row tiles (module doc) where the CPU multiplies
    /// in integers with AVX-512 VNNI ([`super::rows_on_tiles`], which also sets the CPU's default lanes); whether
    /// the copy is now tiled. Other copies (int8 with offsets: Q5_1, Q5_K), and other CPUs, keep rows.
    pub fn tile_for_int8(&mut self) -> bool {
        if !self.tiled && tiles(self) && super::rows_on_tiles() {
            self.tile();
        }
        self.tiled
    }

    /// [`QMatrix::tile_for_int8`] on any CPU (the portable kernel multiplies where there is no VNNI).
    pub(super) fn tile(&mut self) {
        assert!(tiles(self) && !self.tiled, "{self:?}: only int8 copies with no offsets and nibble copies tile");
        let (rows, cols, per_row) = (self.rows, self.cols, self.cols / self.scale_cols());
        let padded = rows.div_ceil(TILE) * TILE;
        let mut tiled = QMatrix {
            q: vec![if self.layout == Layout::I8 { 128 } else { 0 }; padded * self.layout.row_bytes(cols)],
            scale: vec![0f32; padded * per_row],
            offset: if self.offset.is_empty() { Vec::new() } else { vec![0f32; padded * per_row] },
            sub: Vec::new(),
            tiled: true,
            ..*self
        };
        // 4 bytes at a time: int8 weights as `w + 128` (the sign bit flipped); a nibble row's bytes `4r..4r + 4` of
        // a group already hold columns `4r..` (low) and `16 + 4r..` (high), the tile register's order
        let (rb, flip) = (self.layout.row_bytes(cols), if self.layout == Layout::I8 { 0x80 } else { 0 });
        for row in 0..rows {
            for (c, src) in self.q[row * rb..(row + 1) * rb].chunks_exact(QUAD).enumerate() {
                let col = match self.layout {
                    Layout::I8 => c * QUAD,
                    Layout::U4 => c / 4 * 32 + c % 4 * QUAD,
                };
                let (at, _) = tiled.tiled_at(row, col);
                for (d, &b) in tiled.q[at..at + QUAD].iter_mut().zip(src) {
                    *d = b ^ flip;
                }
            }
            for s in 0..per_row {
                let at = tiled.tiled_scale_index(row, s);
                tiled.scale[at] = self.scale[row * per_row + s];
                if !self.offset.is_empty() {
                    tiled.offset[at] = self.offset[row * per_row + s];
                }
            }
        }
        *self = tiled;
    }

    /// Columns per stored scale: 16, or 32 where a scale serves two groups or the group is 32 (nibbles).
    pub(super) fn scale_cols(&self) -> usize {
        self.layout.group() << self.scale_shift
    }

    /// Where weight `(row, col)` of a tiled copy is: its byte, and for a nibble copy whether the high nibble.
    fn tiled_at(&self, row: usize, col: usize) -> (usize, bool) {
        let (tile, lane) = (row / TILE, row % TILE);
        match self.layout {
            Layout::I8 => (((tile * (self.cols / QUAD) + col / QUAD) * TILE + lane) * QUAD + col % QUAD, false),
            Layout::U4 => {
                let (g, c) = (col / 32, col % 32);
                let reg = (tile * (self.cols / 32) + g) * 4 + (c % 16) / QUAD;
                ((reg * TILE + lane) * QUAD + c % QUAD, c >= 16)
            }
        }
    }

    /// Weight `(row, col)` of a tiled copy (the integer `q`: -128..=127, or 0..=15 for nibbles).
    pub(super) fn tiled_weight(&self, row: usize, col: usize) -> i32 {
        let (at, high) = self.tiled_at(row, col);
        match (self.layout, high) {
            (Layout::I8, _) => self.q[at] as i32 - 128,
            (Layout::U4, false) => (self.q[at] & 0x0F) as i32,
            (Layout::U4, true) => (self.q[at] >> 4) as i32,
        }
    }

    /// Index in `scale` (and `offset`) of scale `s` of `row` in a tiled copy.
    pub(super) fn tiled_scale_index(&self, row: usize, s: usize) -> usize {
        (row / TILE * (self.cols / self.scale_cols()) + s) * TILE + row % TILE
    }

    /// Rows `first..` of a tiled copy de-quantized into `out` (`[n, cols]`): `q * scale + offset`, the values and
    /// the arithmetic of the rows' own layout (`QMatrix::dequantize_rows`), 4 weights per index worked out.
    pub(super) fn dequantize_tiled_rows(&self, first: usize, out: &mut [f32]) {
        let (cols, sc) = (self.cols, self.scale_cols());
        for (i, row_out) in out.chunks_exact_mut(cols).enumerate() {
            let row = first + i;
            for (s, dst) in row_out.chunks_exact_mut(sc).enumerate() {
                let at = self.tiled_scale_index(row, s);
                let (scale, offset) = (self.scale[at], self.offset.get(at).copied().unwrap_or(0.0));
                for (quad, d4) in dst.chunks_exact_mut(QUAD).enumerate() {
                    let (at, high) = self.tiled_at(row, s * sc + quad * QUAD);
                    let bytes: [u8; QUAD] = self.q[at..at + QUAD].try_into().unwrap();
                    let q = match (self.layout, high) {
                        (Layout::I8, _) => bytes.map(|b| b as i32 - 128),
                        (Layout::U4, false) => bytes.map(|b| (b & 0x0F) as i32),
                        (Layout::U4, true) => bytes.map(|b| (b >> 4) as i32),
                    };
                    for (d, q) in d4.iter_mut().zip(q) {
                        *d = q as f32 * scale + offset;
                    }
                }
            }
        }
    }

    /// Whether products of any number of rows run in integers here, so that a prefill chunk needs no f32 gemm: a
    /// tiled copy on a CPU with AMX (`super::amx`, many rows per pass over the weights) or where the VNNI tile
    /// kernel outruns gemm at every number of rows (`super::int8::tiles_outrun_gemm`, 8 rows per pass), the tile
    /// kernels' results either way; or a superblock or quartet copy (`super::superblocks`, `super::quartets`,
    /// AVX2, 4 rows per pass), whose kernels outran gemm from 32 to 512 rows (superblocks: a 2-core AMD EPYC, Zen
    /// 3; quartets: an Intel Xeon run as an AVX2-only CPU, docs/engine.md).
    pub fn int8_many_rows(&self) -> bool {
        self.on_amx() || (self.tiled && super::int8::tiles_outrun_gemm()) || self.superblocks || self.quartets
    }

    /// Whether products of more than 8 rows go to the AMX kernel: a tiled copy on a CPU with AMX.
    fn on_amx(&self) -> bool {
        #[cfg(target_arch = "x86_64")]
        if self.tiled && super::amx::available() {
            return true;
        }
        false
    }

    /// `y = W x` in integers (`--int8-dot`) from a tiled copy: more than 8 vectors in one pass over the weights
    /// on AMX, else up to 8 per pass, every pass over one block of the weights before the next block.
    pub(super) fn matvec_tiles(&self, x: &[f32], y: &mut [f32]) {
        let n = x.len() / self.cols;
        #[cfg(target_arch = "x86_64")]
        if n > 8 && self.on_amx() {
            // whole tiles of 16 input rows: the rest zeros
            let xq = Int8Rows::padded(x, self.cols, n.next_multiple_of(16));
            let inputs = super::amx::Inputs::new(&xq, self);
            let y_at = super::matvec::Rows(y.as_mut_ptr());
            self.split_pieces(TILE, |row0, rows| {
                // SAFETY: AMX is available and the copy tiled (on_amx), the kernel picked by its layout and
                // columns per scale; `inputs` were made for it from `n` rows rounded up to 16; `y` holds `n` rows of
                // `self.rows`, and split_pieces hands each call whole tiles of its own.
                unsafe {
                    match (self.layout, self.scale_cols()) {
                        (Layout::I8, 16) => {
                            super::amx::tiles_int8_amx::<4, false>(self, row0, rows, &inputs, n, y_at.at())
                        }
                        (Layout::I8, 32) => {
                            super::amx::tiles_int8_amx::<8, false>(self, row0, rows, &inputs, n, y_at.at())
                        }
                        (Layout::U4, 32) => {
                            super::amx::tiles_int8_amx::<8, true>(self, row0, rows, &inputs, n, y_at.at())
                        }
                        (l, c) => unreachable!("no AMX kernel for {l:?} with {c} columns per scale"),
                    }
                }
            });
            return;
        }
        // every pass of up to 8 vectors over one block of the weights before the next block (split_passes)
        let xs: Vec<Int8Rows> = passes(n, 8)
            .map(|(done, k)| Int8Rows::padded(&x[done * self.cols..(done + k) * self.cols], self.cols, k))
            .collect();
        self.split_passes(n, 8, TILE, PassOut::ByVector, y, |i, _, k, row0, out| self.tiles_into(k, row0, &xs[i], out));
    }

    /// Rows `row0..row0 + out.len() / k` (`row0` a tile's first) of `W x_j` for the `k` quantized vectors of
    /// `x`, one vector after another in `out` (`[k][rows]`: a tile kernel stores each vector's 16 rows at once).
    fn tiles_into(&self, k: usize, row0: usize, x: &Int8Rows, out: &mut [f32]) {
        assert!(self.tiled && row0.is_multiple_of(TILE) && row0 + out.len() / k <= self.rows);
        assert!(x.q.len() == k * self.cols && out.len().is_multiple_of(k));
        #[cfg(target_arch = "x86_64")]
        if int8_width() == 8 {
            // SAFETY: int8_width() saw AVX-512 F, BW and VNNI; the bounds were checked above.
            unsafe {
                return match (self.layout, k, self.scale_cols()) {
                    (Layout::I8, 1, 16) => x86::tiles_int8_avx512::<1, 4>(self, row0, x, out),
                    (Layout::I8, 2, 16) => x86::tiles_int8_avx512::<2, 4>(self, row0, x, out),
                    (Layout::I8, 4, 16) => x86::tiles_int8_avx512::<4, 4>(self, row0, x, out),
                    (Layout::I8, 8, 16) => x86::tiles_int8_avx512::<8, 4>(self, row0, x, out),
                    (Layout::I8, 1, 32) => x86::tiles_int8_avx512::<1, 8>(self, row0, x, out),
                    (Layout::I8, 2, 32) => x86::tiles_int8_avx512::<2, 8>(self, row0, x, out),
                    (Layout::I8, 4, 32) => x86::tiles_int8_avx512::<4, 8>(self, row0, x, out),
                    (Layout::I8, 8, 32) => x86::tiles_int8_avx512::<8, 8>(self, row0, x, out),
                    (Layout::U4, 1, _) => x86::tiles_int8_u4_avx512::<1>(self, row0, x, out),
                    (Layout::U4, 2, _) => x86::tiles_int8_u4_avx512::<2>(self, row0, x, out),
                    (Layout::U4, 4, _) => x86::tiles_int8_u4_avx512::<4>(self, row0, x, out),
                    (Layout::U4, 8, _) => x86::tiles_int8_u4_avx512::<8>(self, row0, x, out),
                    (l, k, c) => unreachable!("no {l:?} tile kernel for {k} vectors and {c} columns per scale"),
                };
            }
        }
        tiles_portable(self, k, row0, x, out)
    }
}

/// Whether a copy has a tiled form: int8 with no offsets, or nibbles (not in superblocks or quartets).
fn tiles(m: &QMatrix) -> bool {
    !m.superblocks && !m.quartets && (m.layout == Layout::U4 || m.offset.is_empty())
}

/// The tile kernels' arithmetic one value at a time (where there is no AVX-512 VNNI, and the SIMD kernels'
/// reference, bit for bit): per scale group the integer sum (for int8 weights `sum (w + 128) x - 128 sum x`),
/// converted to f32 and added as `dot * (s_w * s_x) + acc`, then for nibbles `o * (s_x sum x) + acc` (each one
/// rounding, as an FMA), even and odd groups in two sums added at the end.
pub(super) fn tiles_portable(m: &QMatrix, k: usize, row0: usize, x: &Int8Rows, out: &mut [f32]) {
    let (cols, sc) = (m.cols, m.scale_cols());
    let rows = out.len() / k;
    for (j, outs) in out.chunks_exact_mut(rows).enumerate() {
        let xq = &x.q[j * cols..(j + 1) * cols];
        for (r, o) in outs.iter_mut().enumerate() {
            let row = row0 + r;
            let mut acc = [0f32; 2];
            for s in 0..cols / sc {
                let (c0, block) = (s * sc, (j * cols + s * sc) / BLOCK);
                let at = m.tiled_scale_index(row, s);
                let a = &mut acc[s % 2];
                let dot = match m.layout {
                    Layout::I8 => {
                        let shifted: i32 = (c0..c0 + sc).map(|c| (m.tiled_weight(row, c) + 128) * xq[c] as i32).sum();
                        let xsum: i32 = x.sum16[(j * cols + c0) / 16..(j * cols + c0 + sc) / 16].iter().sum();
                        shifted - 128 * xsum
                    }
                    Layout::U4 => (c0..c0 + sc).map(|c| m.tiled_weight(row, c) * xq[c] as i32).sum(),
                };
                *a = (dot as f32).mul_add(m.scale[at] * x.scale[block], *a);
                if m.layout == Layout::U4 {
                    *a = m.offset[at].mul_add(x.sum[block], *a);
                }
            }
            *o = acc[0] + acc[1];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::matrix;
    use super::super::int8::{check_integer_products, CASES};
    use super::*;
    use candle_core::quantized::GgmlDType;

    /// By hand: two rows of 32 int8 weights, row 0 `q = c - 16` with scale 0.5, row 1 all 3 with scale 0.25;
    /// inputs all 127 (one block, scale 1, q = 127), one vector and nine. Row 1's weight at column 5 sits at byte
    /// `((0 * 8 + 1) * 16 + 1) * 4 + 1 = 69` as `3 + 128`; the padding rows 2..16 hold 128 (weight 0).
    /// `y0 = 0.5 * 1 * 127 * sum(c - 16) = 0.5 * 127 * -16 = -1016`, `y1 = 0.25 * 127 * 3 * 32 = 3048`.
    #[test]
    fn a_hand_worked_tile() {
        let mut q: Vec<u8> = (0..32).map(|c| (c as i8 - 16) as u8).collect();
        q.extend([3u8; 32]);
        let mut m = QMatrix {
            rows: 2,
            cols: 32,
            layout: Layout::I8,
            q,
            scale: vec![0.5, 0.25],
            offset: Vec::new(),
            scale_shift: 1,
            tiled: false,
            superblocks: false,
            sub: Vec::new(),
            quartets: false,
            narrow: false,
        };
        m.tile();
        assert_eq!(m.q.len(), 16 * 32);
        assert_eq!(m.q[69], 131);
        assert_eq!((m.q[0], m.q[4 * 4 - 1], m.q[2 * 4]), (112, 128, 128));
        assert_eq!(m.scale[..3], [0.5, 0.25, 0.0]);
        let mut y = [0f32; 2];
        m.matvec_int8(&[127.0; 32], &mut y);
        assert_eq!(y, [-1016.0, 3048.0]);
        let mut portable = [0f32; 2];
        tiles_portable(&m, 1, 0, &Int8Rows::new(&[127.0; 32], 32), &mut portable);
        assert_eq!(portable, y);
        // 9 such vectors in one pass (on AMX, one tile of 16 input rows, 7 of them padding)
        let mut nine = [0f32; 18];
        m.matvec_int8(&[127.0; 9 * 32], &mut nine);
        assert_eq!(nine, [[-1016.0, 3048.0]; 9].concat()[..]);
    }

    /// By hand, a nibble row: 32 weights `q = c % 16` (row layout: byte `i` holds `i` low and `i + 16` high), scale
    /// 0.5, offset -1; inputs all 127. Column 17 is register 0's byte 1, high nibble, so byte 1 is `0x11`; columns
    /// 5 and 21 share byte `(1 * 16 + 0) * 4 + 1 = 65`: `0x55`. `y = 0.5 * 127 * 240 - 1 * (1 * 127 * 32) = 11176`.
    #[test]
    fn a_hand_worked_nibble_tile() {
        let mut m = QMatrix {
            rows: 1,
            cols: 32,
            layout: Layout::U4,
            q: (0..16).map(|i| i | (i << 4)).collect(),
            scale: vec![0.5],
            offset: vec![-1.0],
            scale_shift: 0,
            tiled: false,
            superblocks: false,
            sub: Vec::new(),
            quartets: false,
            narrow: false,
        };
        m.tile();
        assert_eq!((m.q.len(), m.q[1], m.q[65], m.q[4]), (16 * 16, 0x11, 0x55, 0));
        assert_eq!((&m.scale[..2], &m.offset[..2]), (&[0.5, 0.0][..], &[-1.0, 0.0][..]));
        let mut y = [0f32; 1];
        m.matvec_int8(&[127.0; 32], &mut y);
        assert_eq!(y, [11176.0]);
    }

    /// Tiling keeps every weight: the matrix, a block of rows from inside a tile, and each group's integers, scale
    /// and offset de-quantize to the same bits as before, for 37 rows (a last tile of 5) of each format that tiles.
    #[test]
    fn tiling_keeps_every_weight() {
        for (dtype, cols) in [
            (GgmlDType::Q8_0, 256),
            (GgmlDType::Q5_0, 96),
            (GgmlDType::Q6K, 256),
            (GgmlDType::Q4_0, 96),
            (GgmlDType::Q4_1, 256),
            (GgmlDType::Q4K, 256),
        ] {
            let rows = 37;
            let m = matrix(dtype, rows, cols, 31);
            let mut t = m.clone();
            t.tile();
            assert_eq!(t.dequantize(), m.dequantize(), "{dtype:?}");
            let (mut a, mut b) = (vec![0f32; 3 * cols], vec![0f32; 3 * cols]);
            m.dequantize_rows(14, &mut a);
            t.dequantize_rows(14, &mut b);
            assert_eq!(a, b, "{dtype:?}: rows 14..17");
            let (mut ga, mut gb) = ([0f32; 32], [0f32; 32]);
            for row in [0, 15, 16, 36] {
                for g in 0..cols / m.layout.group() {
                    m.group_ints(row, g, &mut ga);
                    t.group_ints(row, g, &mut gb);
                    assert_eq!((ga, m.scale_offset(row, g)), (gb, t.scale_offset(row, g)), "{dtype:?} {row} {g}");
                }
            }
        }
    }

    /// Tiled products against the integer products worked out one by one; 15 vectors (8 + 4 + 2 + 1 per pass)
    /// bit for bit what each gives alone, split over a pool or not; the SIMD kernel bit for bit the portable one;
    /// the exact product of a tiled copy still the exact one.
    #[test]
    fn tiled_products_equal_the_integer_products() {
        for (dtype, rows, cols) in CASES {
            let rowwise = matrix(dtype, rows, cols, 32);
            let mut m = rowwise.clone();
            m.tile();
            assert!(m.int8_dot());
            let (x, _) = check_integer_products(&m, &rowwise, 33);
            let eight = Int8Rows::new(&x[..8 * cols], cols);
            let (mut simd, mut portable) = (vec![0f32; 8 * rows], vec![0f32; 8 * rows]);
            m.tiles_into(8, 0, &eight, &mut simd);
            tiles_portable(&m, 8, 0, &eight, &mut portable);
            assert_eq!(simd, portable, "{dtype:?}: SIMD against portable");
            let (mut exact_rows, mut exact_tiles) = (vec![0f32; rows], vec![0f32; rows]);
            rowwise.matvec(&x[..cols], &mut exact_rows);
            m.matvec(&x[..cols], &mut exact_tiles);
            for (a, b) in exact_rows.iter().zip(&exact_tiles) {
                assert!((a - b).abs() < 1e-4 * (1.0 + a.abs()), "{dtype:?}: exact product {b} vs {a}");
            }
        }
    }

    /// On AMX, 9 to 37 vectors in one pass (a last block of 16 input rows part padding) give bit for bit what
    /// each gives alone from the VNNI tile kernel, on pools of 1 and 3 threads, for every tiled format (int8 with
    /// 16 and 32 columns per scale, nibbles) and two of a real model's size.
    #[test]
    fn amx_products_equal_the_tile_kernels() {
        #[cfg(target_arch = "x86_64")]
        if !super::super::amx::available() {
            eprintln!("no AMX on this CPU: the AMX kernel is not exercised");
            return;
        }
        #[cfg(not(target_arch = "x86_64"))]
        return;
        for (dtype, rows, cols) in CASES {
            let mut m = matrix(dtype, rows, cols, 36);
            m.tile();
            assert!(m.int8_many_rows(), "{dtype:?}");
            for n in [9, 16, 37] {
                let x = super::super::fixtures::random(n * cols, 37 + n as u64);
                let mut one = vec![0f32; n * rows];
                for j in 0..n {
                    m.matvec_int8(&x[j * cols..(j + 1) * cols], &mut one[j * rows..(j + 1) * rows]);
                }
                for threads in [1, 3] {
                    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                    let mut all = vec![0f32; n * rows];
                    pool.install(|| m.matvec_int8(&x, &mut all));
                    assert_eq!(all, one, "{dtype:?} {rows}x{cols}, {n} vectors, {threads} threads");
                }
            }
        }
    }

    /// Int8 copies with offsets keep rows on every CPU; the others tile where the CPU has VNNI.
    #[test]
    fn int8_copies_with_offsets_keep_rows() {
        for dtype in [GgmlDType::Q5_1, GgmlDType::Q5K] {
            let mut m = matrix(dtype, 16, 256, 34);
            assert!(!m.tile_for_int8(), "{dtype:?}");
        }
        for dtype in [GgmlDType::Q8_0, GgmlDType::Q4_1] {
            let mut m = matrix(dtype, 16, 256, 35);
            assert_eq!(m.tile_for_int8(), int8_width() == 8, "{dtype:?}");
        }
    }
}
