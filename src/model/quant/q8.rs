//! Input rows quantized to int8 in blocks of 32 values, as ggml's Q8_0 (scale `max |x| / 127`, values rounded
//! to -127..=127; the scale kept in f32), with what the integer kernels (`super::int8`, `super::x86`) read
//! besides: each block's `scale * sum q` and the scales laid out per AVX-512 register.

/// Input values per scale of the quantized rows (ggml's Q8_0 block).
pub(super) const BLOCK: usize = 32;

/// Columns per quartet (`super::quartets`): 4 blocks of 32.
pub(super) const QUARTET: usize = 4 * BLOCK;

/// Where value `k` of block `j` (0..4) of a quartet lies among its 128 bytes, in the quartet copies' weights
/// (`super::quartets`) and in [`QuartetRows`] alike: `16 (k / 4) + 4 j + k % 4`, so that each 32-bit lane of a
/// 32-byte load holds 4 values of one block.
pub(super) fn quartet_pos(j: usize, k: usize) -> usize {
    16 * (k / 4) + 4 * j + k % 4
}

/// `n` rows of `cols` values quantized to int8 in blocks of [`BLOCK`].
pub(super) struct Int8Rows {
    /// `[n, cols]`, each in -127..=127
    pub(super) q: Vec<i8>,
    /// `[n, cols / BLOCK]`: value = `q * scale`
    pub(super) scale: Vec<f32>,
    /// `[n, cols / BLOCK]`: each block's `scale * sum q` (what an offset is multiplied by)
    pub(super) sum: Vec<f32>,
    /// `[n, cols / 16]`: the sum of the `q` of each 16 values (what the tiled kernels subtract 128 times, their
    /// weights being stored as `w + 128`)
    pub(super) sum16: Vec<i32>,
    /// `[n, cols.div_ceil(64) * 16]`: per 64 columns, the scale of the first block in lanes 0..8 and of the second
    /// in lanes 8..16 (0 past the end), the layout of the 16 sums of 4 products one AVX-512 multiply-add gives.
    pub(super) lanes: Vec<f32>,
}

impl Int8Rows {
    /// Quantizes each row of `x` (`[n, cols]`, `cols` a multiple of [`BLOCK`]).
    pub(super) fn new(x: &[f32], cols: usize) -> Int8Rows {
        assert!(cols.is_multiple_of(BLOCK) && x.len().is_multiple_of(cols));
        let n = x.len() / cols;
        let mut r = Int8Rows::zeros(n, cols);
        quantize_rows(x, &mut r.q, &mut r.scale, &mut r.sum, &mut r.sum16);
        let (per_row, chunks) = (cols / BLOCK, cols.div_ceil(64));
        r.lanes = vec![0f32; n * chunks * 16];
        for (row, row_lanes) in r.lanes.chunks_exact_mut(chunks * 16).enumerate() {
            for (b, &d) in r.scale[row * per_row..(row + 1) * per_row].iter().enumerate() {
                let at = (b / 2) * 16 + (b % 2) * 8;
                row_lanes[at..at + 8].fill(d);
            }
        }
        r
    }

    /// [`Int8Rows::new`] for the tiled kernels, which read no `lanes` (left empty): `rows` rows, those past `x`'s
    /// zeros, quantized in blocks of 64 rows over the pool.
    pub(super) fn padded(x: &[f32], cols: usize, rows: usize) -> Int8Rows {
        assert!(cols.is_multiple_of(BLOCK) && x.len().is_multiple_of(cols) && x.len() <= rows * cols);
        use rayon::prelude::*;
        let mut r = Int8Rows::zeros(rows, cols);
        let (c, b) = (64 * cols, 64 * cols / BLOCK);
        x.par_chunks(c)
            .zip(r.q.par_chunks_mut(c))
            .zip(r.scale.par_chunks_mut(b).zip(r.sum.par_chunks_mut(b)))
            .zip(r.sum16.par_chunks_mut(2 * b))
            .for_each(|(((x, q), (scale, sum)), sum16)| quantize_rows(x, q, scale, sum, sum16));
        r
    }

    /// `n` rows of zeros (scales 0), no `lanes`.
    fn zeros(n: usize, cols: usize) -> Int8Rows {
        Int8Rows {
            q: vec![0; n * cols],
            scale: vec![0.0; n * cols / BLOCK],
            sum: vec![0.0; n * cols / BLOCK],
            sum16: vec![0; n * cols / 16],
            lanes: Vec::new(),
        }
    }
}

/// `n` rows of `cols` values quantized to int8 in blocks of [`BLOCK`] as [`Int8Rows`] (the same scales and
/// integers), each 128 values (4 blocks) laid out as the quartet kernels read them
/// ([`quartet_pos`]: 4 values of each block per 16 bytes).
pub(super) struct QuartetRows {
    /// `[n, cols]` in the quartets' order, each in -127..=127
    pub(super) q: Vec<i8>,
    /// `[n, cols / BLOCK]`: value = `q * scale`
    pub(super) scale: Vec<f32>,
}

impl QuartetRows {
    /// Quantizes each row of `x` (`[n, cols]`, `cols` a multiple of 128).
    pub(super) fn new(x: &[f32], cols: usize) -> QuartetRows {
        assert!(cols.is_multiple_of(QUARTET) && x.len().is_multiple_of(cols));
        #[cfg(target_arch = "x86_64")]
        if crate::model::simd::avx2() {
            // SAFETY: AVX2 is present (checked above).
            return unsafe { Self::new_avx2(x) };
        }
        Self::quantize(x)
    }

    /// [`Self::quantize`] compiled for AVX2 (the same operations, 8 values per instruction where they vectorize:
    /// the same bits).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn new_avx2(x: &[f32]) -> QuartetRows {
        Self::quantize(x)
    }

    /// The quantization of [`Self::new`], inlined into each build of it.
    #[inline(always)]
    fn quantize(x: &[f32]) -> QuartetRows {
        let mut r = QuartetRows { q: vec![0; x.len()], scale: vec![0.0; x.len() / BLOCK] };
        for (c, (quartet, q)) in x.chunks_exact(QUARTET).zip(r.q.chunks_exact_mut(QUARTET)).enumerate() {
            for (j, block) in quartet.chunks_exact(BLOCK).enumerate() {
                let (d, ints) = quantize_block(block.try_into().unwrap());
                r.scale[4 * c + j] = d;
                // 4 values at a time: values 4t..4t + 4 go to bytes 16t + 4j..
                for (t, four) in ints.chunks_exact(4).enumerate() {
                    let at = quartet_pos(j, 4 * t);
                    q[at..at + 4].copy_from_slice(four);
                }
            }
        }
        r
    }
}

/// Quantizes `x`'s blocks into the first `x.len()` values of `q` and the matching blocks of `scale`, `sum` and
/// `sum16`.
fn quantize_rows(x: &[f32], q: &mut [i8], scale: &mut [f32], sum: &mut [f32], sum16: &mut [i32]) {
    #[cfg(target_arch = "x86_64")]
    let simd = crate::model::simd::avx512f();
    for (b, block) in x.chunks_exact(BLOCK).enumerate() {
        let block: &[f32; BLOCK] = block.try_into().unwrap();
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX-512F.
        let (d, ints, halves) = if simd { unsafe { quantize_block_avx512(block) } } else { portable(block) };
        #[cfg(not(target_arch = "x86_64"))]
        let (d, ints, halves) = portable(block);
        q[b * BLOCK..(b + 1) * BLOCK].copy_from_slice(&ints);
        scale[b] = d;
        // the block's sum from its sums per 16 values (integers: the same in any order)
        sum16[2 * b..2 * b + 2].copy_from_slice(&halves);
        sum[b] = d * (halves[0] + halves[1]) as f32;
    }
}

/// [`quantize_block`] and the sums of each 16 values.
fn portable(block: &[f32; BLOCK]) -> (f32, [i8; BLOCK], [i32; 2]) {
    let (d, ints) = quantize_block(block);
    let sum = |h: &[i8]| h.iter().map(|&v| v as i32).sum::<i32>();
    (d, ints, [sum(&ints[..16]), sum(&ints[16..])])
}

/// One block's scale `max |x| / 127` and its values rounded to -127..=127.
#[inline(always)]
fn quantize_block(block: &[f32; BLOCK]) -> (f32, [i8; BLOCK]) {
    let d = largest_magnitude(block) / 127.0;
    (d, round_block(block, if d > 0.0 { 1.0 / d } else { 0.0 }))
}

/// The largest magnitude of a block: in 16 lanes, then across them (a maximum in any order; NaNs ignored, as by
/// `f32::max`).
#[inline(always)]
fn largest_magnitude(block: &[f32; BLOCK]) -> f32 {
    let mut lanes = [0f32; 16];
    for (i, v) in block.iter().enumerate() {
        lanes[i % 16] = lanes[i % 16].max(v.abs());
    }
    lanes.iter().fold(0f32, |m, &v| m.max(v))
}

/// A block's values times `inv`, rounded to -127..=127.
#[inline(always)]
fn round_block(block: &[f32; BLOCK], inv: f32) -> [i8; BLOCK] {
    let mut ints = [0i8; BLOCK];
    for (o, v) in ints.iter_mut().zip(block) {
        // a NaN (from a NaN or infinite input) gives 0, as `NaN as i8` does
        let r = round_half_away(v * inv);
        let r = if r.is_nan() { 0.0 } else { r.clamp(-127.0, 127.0) };
        // SAFETY: `r` is an integer in -127..=127 (no NaN, clamped).
        *o = unsafe { r.to_int_unchecked::<i32>() } as i8;
    }
    ints
}

/// Values per f32 scale of [`SubscaledRows`] (a K-quant superblock, ggml's Q8_K block).
pub(super) const SUPERBLOCK: usize = 256;

/// `n` rows of `cols` values quantized to int8 with two levels of scales, the inputs of the superblock kernels
/// (`super::superblocks`): per 256 values one f32 `d`, per 32 an integer `t` in 1..=`levels`, a value being
/// `q * t * d` with `q` in -127..=127. `d` is the 256 values' `max |x| / (127 levels)` and `t` the smallest
/// integer with the 32 values' `max |x| <= 127 t d`: a block's step `t d` is within `1 + 1 / t` of its own
/// `max |x| / 127` (the step of [`Int8Rows`], ggml's Q8_0), or `d` where that is smaller. ggml's Q8_K, which its
/// K-quant dot products take, is `levels` = 1: one step per 256 values, every block of a superblock that holds an
/// outlier rounded as coarsely as the outlier's own. The sub-scales are integers so that the kernels multiply them
/// into the weights' integer sub-block scales inside their integer sums.
pub(super) struct SubscaledRows {
    /// `[n, cols]`, each in -127..=127, per 64 values in the kernels' order ([`interleaved`]; [`Self::value`]
    /// reads one in column order)
    pub(super) q: Vec<i8>,
    /// `[n, cols / SUPERBLOCK]`: `d`
    pub(super) scale: Vec<f32>,
    /// `[n, cols / SUPERBLOCK, 16]`: each superblock's 8 `t` twice, for the two 128-bit halves of a register
    pub(super) t32x2: Vec<i16>,
    /// `[n, cols / SUPERBLOCK, 32]`: the `t` of each 16 values' block of 32, those of a superblock's first 8 twice,
    /// then its last 8 twice
    pub(super) t16x2: Vec<i16>,
    /// `[n, cols / 32]`: `t * sum q` of each 32 values (what a Q4_K sub-block's offset multiplies)
    pub(super) tsum32: Vec<i32>,
    /// `[n, cols / 16]`: `sum q` of each 16 values (at most 16 x 127; what Q6_K's `q + 32` take back)
    pub(super) sum16: Vec<i16>,
}

impl SubscaledRows {
    /// Quantizes each row of `x` (`[n, cols]`, `cols` a multiple of [`SUPERBLOCK`]) with sub-scales up to
    /// `levels` (1..=255).
    pub(super) fn new(x: &[f32], cols: usize, levels: i16) -> SubscaledRows {
        assert!(cols.is_multiple_of(SUPERBLOCK) && x.len().is_multiple_of(cols) && (1..=255).contains(&levels));
        #[cfg(target_arch = "x86_64")]
        if crate::model::simd::avx2() {
            // SAFETY: AVX2 is present (checked above).
            return unsafe { Self::new_avx2(x, levels) };
        }
        Self::quantize(x, levels)
    }

    /// [`Self::quantize`] compiled for AVX2 (the same operations, 8 values per instruction where they vectorize:
    /// the same bits; a prefill chunk's inputs are a few percent of its products' time).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn new_avx2(x: &[f32], levels: i16) -> SubscaledRows {
        Self::quantize(x, levels)
    }

    /// The quantization of [`Self::new`], inlined into each build of it.
    #[inline(always)]
    fn quantize(x: &[f32], levels: i16) -> SubscaledRows {
        let mut r = SubscaledRows {
            q: vec![0; x.len()],
            scale: vec![0.0; x.len() / SUPERBLOCK],
            t32x2: vec![0; x.len() / 16],
            t16x2: vec![0; x.len() / 8],
            tsum32: vec![0; x.len() / BLOCK],
            sum16: vec![0; x.len() / 16],
        };
        for (b, sb) in x.chunks_exact(SUPERBLOCK).enumerate() {
            let blocks: [&[f32; BLOCK]; SUPERBLOCK / BLOCK] =
                std::array::from_fn(|g| sb[g * BLOCK..(g + 1) * BLOCK].try_into().unwrap());
            let amax: [f32; SUPERBLOCK / BLOCK] = std::array::from_fn(|g| largest_magnitude(blocks[g]));
            let d = amax.iter().fold(0f32, |m, &v| m.max(v)) / (127.0 * levels as f32);
            for (g, block) in blocks.iter().enumerate() {
                let i = b * SUPERBLOCK / BLOCK + g;
                let t = if d > 0.0 && d.is_finite() {
                    (amax[g] / (127.0 * d)).ceil().clamp(1.0, levels as f32)
                } else {
                    1.0
                };
                let step = d * t;
                let ints = round_block(block, if step > 0.0 { 1.0 / step } else { 0.0 });
                r.q[i * BLOCK..(i + 1) * BLOCK].copy_from_slice(&ints);
                let halves = [&ints[..16], &ints[16..]].map(|h| h.iter().map(|&v| v as i16).sum::<i16>());
                for twice in 0..2 {
                    r.t32x2[b * 16 + twice * 8 + g] = t as i16;
                    // groups 2g, 2g + 1 of 16, in the superblock's first or second 8 of them
                    let at = b * 32 + (g / 4) * 16 + twice * 8 + 2 * (g % 4);
                    r.t16x2[at..at + 2].fill(t as i16);
                }
                r.sum16[2 * i..2 * i + 2].copy_from_slice(&halves);
                r.tsum32[i] = t as i32 * (halves[0] as i32 + halves[1] as i32);
            }
            r.scale[b] = d;
            for q in r.q[b * SUPERBLOCK..(b + 1) * SUPERBLOCK].chunks_exact_mut(64) {
                // 16-bit words: the first 32 values' and the second 32's interleaved ([`interleaved`])
                let word = |i: usize| [q[2 * i], q[2 * i + 1]];
                let words: [[i8; 2]; 32] = std::array::from_fn(|at| {
                    // word `at` of the stored 32: interleave `at / 16`, half `at % 16 / 8`, pair `at % 8 / 2`
                    let (k, second) = (at % 16 / 8 * 8 + at / 16 * 4 + at % 8 / 2, at % 2);
                    word(16 * second + k)
                });
                q.copy_from_slice(words.as_flattened());
            }
        }
        r
    }

    /// The sub-scale `t` of block `i` of 32 values (`[n, cols / 32]` in order; kept in [`Self::t32x2`]).
    pub(super) fn t(&self, i: usize) -> i16 {
        self.t32x2[i / 8 * 16 + i % 8]
    }

    /// Value `i` (in column order) of the quantized rows.
    pub(super) fn value(&self, i: usize) -> i8 {
        self.q[i / 64 * 64 + interleaved(i % 64)]
    }
}

/// Where value `i` of 64 (in column order) lies in [`SubscaledRows::q`]: the 16-bit words of the first 32 values
/// and of the second 32 interleaved as `vpunpcklwd` and `vpunpckhwd` interleave two 32-byte registers, the low
/// interleave's 32 bytes first. Word `k` of the first 32 (values `2k`, `2k + 1`) goes to 128-bit half `k / 8` of
/// interleave `k % 8 / 4`, word `2 (k % 4)` there; the second 32's word `k` goes next to it. So one `vpmaddubsw` of
/// 32 such bytes pairs each word of the first 32 with its own, each of the second 32 with its own, alternately: the
/// superblock kernels add two such products in 16 bits and scale both of their two sub-blocks with one
/// `vpmaddwd` (`super::x86::rows_int8_q4k_avx2`).
pub(super) fn interleaved(i: usize) -> usize {
    let (second, k, byte) = (i / 32, i % 32 / 2, i % 2);
    32 * (k % 8 / 4) + 16 * (k / 8) + 4 * (k % 4) + 2 * second + byte
}

/// [`quantize_block`] with AVX-512, 16 values per instruction, and the sums of each 16 values: the same bits
/// (`vmaxps` keeps its second operand where the first is a NaN, so `max(|v|, acc)` ignores NaNs as `f32::max`
/// does; the rounding and the clamp as [`round_half_away`] and `clamp`, a NaN first set to 0).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn quantize_block_avx512(block: &[f32; BLOCK]) -> (f32, [i8; BLOCK], [i32; 2]) {
    use std::arch::x86_64::*;
    let v = [_mm512_loadu_ps(block.as_ptr()), _mm512_loadu_ps(block.as_ptr().add(16))];
    let zero = _mm512_setzero_ps();
    let lanes = _mm512_max_ps(_mm512_abs_ps(v[1]), _mm512_max_ps(_mm512_abs_ps(v[0]), zero));
    let d = _mm512_reduce_max_ps(lanes) / 127.0;
    let inv = _mm512_set1_ps(if d > 0.0 { 1.0 / d } else { 0.0 });
    let (one, sign) = (_mm512_set1_ps(1.0), _mm512_set1_epi32(i32::MIN));
    let (lo, hi) = (_mm512_set1_ps(-127.0), _mm512_set1_ps(127.0));
    let mut ints = [0i8; BLOCK];
    let mut sums = [0i32; 2];
    for (h, &x) in v.iter().enumerate() {
        let x = _mm512_mul_ps(x, inv);
        let t = _mm512_roundscale_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(x);
        let half = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(_mm512_abs_ps(_mm512_sub_ps(x, t)), _mm512_set1_ps(0.5));
        let away = _mm512_castsi512_ps(_mm512_or_si512(
            _mm512_and_si512(_mm512_castps_si512(x), sign),
            _mm512_castps_si512(one),
        ));
        let r = _mm512_mask_add_ps(t, half, t, away);
        let r = _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(r, r), zero);
        let q = _mm512_cvttps_epi32(_mm512_min_ps(_mm512_max_ps(r, lo), hi));
        _mm_storeu_si128(ints.as_mut_ptr().add(16 * h) as *mut __m128i, _mm512_cvtepi32_epi8(q));
        sums[h] = _mm512_reduce_add_epi32(q);
    }
    (d, ints, sums)
}

/// `v.round()` (halves away from zero, as ggml's `roundf`) in operations that vectorize (`round` is a libm call
/// per value): `trunc(v)`, plus one away from zero where the fraction `v - trunc(v)` (exact in f32) is at least a
/// half.
#[inline(always)]
fn round_half_away(v: f32) -> f32 {
    let t = v.trunc();
    if (v - t).abs() >= 0.5 {
        t + 1f32.copysign(v)
    } else {
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vectorizing rounding gives `f32::round`'s bits on halves, values next to halves, integers, zeros of
    /// both signs, large values and random ones.
    #[test]
    fn rounding_is_f32_round() {
        let mut vals =
            vec![0.0f32, -0.0, 0.5, -0.5, 1.5, -2.5, 126.5, -126.5, 8388607.5, 1e30, -1e30, f32::MIN_POSITIVE];
        for h in [0.5f32, 1.5, 2.5, 63.5, 126.5] {
            vals.extend([h.next_down(), h.next_up(), -h.next_down(), -h.next_up()]);
        }
        vals.extend(super::super::fixtures::random(10_000, 5).iter().map(|v| v * 300.0));
        for v in vals {
            assert_eq!(round_half_away(v).to_bits(), v.round().to_bits(), "{v:e}");
        }
    }

    /// A block with a NaN and an infinity quantizes as `(x * inv).round().clamp(-127, 127) as i8` does: the NaN
    /// ignored by the largest magnitude and rounded to 0; an infinite largest magnitude gives scale infinity and
    /// every value 0 (`x * 0` is NaN for the infinity itself).
    #[test]
    fn nan_and_infinite_inputs_quantize_as_the_casts_do() {
        let mut block = [1.0f32; BLOCK];
        block[3] = f32::NAN;
        block[5] = -2.54;
        let (d, ints) = quantize_block(&block);
        assert!((d - 0.02).abs() < 1e-7);
        assert_eq!((ints[3], ints[5], ints[0]), (0, -127, 50));
        block[7] = f32::INFINITY;
        let (d, ints) = quantize_block(&block);
        assert_eq!((d, ints), (f32::INFINITY, [0i8; BLOCK]));
    }

    /// Two levels of scales worked by hand, `levels` 255: the superblock's largest magnitude 127 x 255 gives
    /// `d` = 1; a block whose largest is 127 x 2.5 gets `t` = 3 (step 3: 317.5 -> 106, 7.4 -> 2), a block of zeros
    /// `t` = 1, the outlier's block `t` = 255 (step 255: 32385 -> 127, 100 -> 0).
    #[test]
    fn subscales_worked_by_hand() {
        let mut x = vec![0f32; SUPERBLOCK];
        x[0] = 127.0 * 255.0;
        x[1] = 100.0;
        x[32] = 127.0 * 2.5;
        x[33] = 7.4;
        x[34] = -317.5;
        let r = SubscaledRows::new(&x, SUPERBLOCK, 255);
        assert_eq!(r.scale, vec![1.0]);
        assert_eq!((r.t(0), r.t(1), r.t(2)), (255, 3, 1));
        assert_eq!(&r.t32x2[..3], &[255, 3, 1]);
        assert_eq!(&r.t32x2[8..11], &[255, 3, 1]);
        assert_eq!(&r.t16x2[..6], &[255, 255, 3, 3, 1, 1]);
        assert_eq!(&r.t16x2[8..14], &[255, 255, 3, 3, 1, 1]);
        let q = |i| r.value(i);
        assert_eq!((q(0), q(1), q(32), q(33), q(34)), (127, 0, 106, 2, -106));
        assert_eq!(&r.sum16[..3], &[127, 0, 2]);
        assert_eq!(&r.tsum32[..3], &[255 * 127, 3 * 2, 0]);
        // each value within half a step of `q * t * d`
        for (i, &v) in x.iter().enumerate() {
            let step = r.scale[0] * r.t(i / 32) as f32;
            assert!((v - q(i) as f32 * step).abs() <= step / 2.0, "{i}");
        }
    }

    /// [`SubscaledRows::new`] compiled for AVX2 gives the portable build's bits (random rows, an outlier, a NaN, an
    /// infinity, zeros, a subnormal).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn subscaled_rows_on_avx2_as_portable() {
        if !is_x86_feature_detected!("avx2") {
            return;
        }
        let mut x: Vec<f32> = (0..3 * 512).map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 37.0).collect();
        (x[3], x[300], x[600], x[900], x[1000]) = (f32::NAN, 1e4, f32::INFINITY, 1e-40, -0.0);
        x[1024..1280].fill(0.0);
        for levels in [1, 31, 255] {
            let a = SubscaledRows::quantize(&x, levels);
            // SAFETY: AVX2 checked above.
            let b = unsafe { SubscaledRows::new_avx2(&x, levels) };
            assert_eq!((a.q, a.t32x2, a.t16x2), (b.q, b.t32x2, b.t16x2), "{levels}");
            assert_eq!((a.tsum32, a.sum16), (b.tsum32, b.sum16), "{levels}");
            assert_eq!(
                a.scale.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                b.scale.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            );
        }
    }

    /// [`interleaved`] on hand-worked places, a permutation of the 64, and the order `vpunpcklwd` / `vpunpckhwd`
    /// give two registers of 32 bytes (where the CPU has AVX2).
    #[test]
    fn interleaved_as_the_word_unpacks() {
        // first 32's word 0 then second 32's word 0; first 32's word 1; word 4 opens the second interleave; word
        // 8 the low interleave's high half; the last byte stays last
        let worked = [(0, 0), (1, 1), (32, 2), (33, 3), (2, 4), (8, 32), (16, 16), (40, 34), (63, 63)];
        for (i, at) in worked {
            assert_eq!(interleaved(i), at, "value {i}");
        }
        let mut seen = [false; 64];
        (0..64).for_each(|i| seen[interleaved(i)] = true);
        assert!(seen.iter().all(|&s| s));
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") {
            use std::arch::x86_64::*;
            let v: [u8; 64] = std::array::from_fn(|i| i as u8);
            let mut got = [0u8; 64];
            // SAFETY: AVX2 checked above; unaligned loads and stores of 32 bytes within the arrays.
            unsafe {
                let (u, w) = (_mm256_loadu_si256(v.as_ptr().cast()), _mm256_loadu_si256(v.as_ptr().add(32).cast()));
                _mm256_storeu_si256(got.as_mut_ptr().cast(), _mm256_unpacklo_epi16(u, w));
                _mm256_storeu_si256(got.as_mut_ptr().add(32).cast(), _mm256_unpackhi_epi16(u, w));
            }
            (0..64).for_each(|i| assert_eq!(got[interleaved(i)], i as u8, "value {i}"));
        }
    }

    /// The AVX-512 quantization of a block gives the portable one's bits and sums (random blocks, a NaN, exact
    /// halves, an infinity, zeros of both signs, a subnormal largest value).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_avx512_build_quantizes_as_the_portable_one() {
        if !std::arch::is_x86_feature_detected!("avx512f") {
            return;
        }
        let x = super::super::fixtures::random(BLOCK * 200, 6);
        let mut blocks: Vec<[f32; BLOCK]> = x.chunks_exact(BLOCK).map(|b| b.try_into().unwrap()).collect();
        let mut odd = [0.5f32; BLOCK];
        (odd[1], odd[2]) = (f32::NAN, -1.5);
        blocks.push(odd);
        // exact halves of the scale 1 (127 the largest), an infinity, zeros, a subnormal largest (1 / d overflows)
        let mut halves: [f32; BLOCK] = std::array::from_fn(|i| (i as f32 - 16.0) * 2.5 + 0.5);
        halves[31] = -127.0;
        let mut inf = [1.0f32; BLOCK];
        inf[7] = f32::INFINITY;
        let mut tiny = [0f32; BLOCK];
        (tiny[0], tiny[20]) = (1e-42, -5e-43);
        blocks.extend([halves, inf, [0f32; BLOCK], [-0.0f32; BLOCK], tiny]);
        for b in &blocks {
            let (d, ints, sums) = portable(b);
            // SAFETY: the CPU has AVX-512F.
            let (ds, ints_s, sums_s) = unsafe { quantize_block_avx512(b) };
            assert_eq!((d.to_bits(), ints, sums), (ds.to_bits(), ints_s, sums_s));
        }
    }

    /// Quantization by hand: a block of 32 whose largest magnitude is 2.54 gets scale 0.02; 1.0 -> 50, -2.54 ->
    /// -127, 0.011 -> 1 (0.55 rounds up), 0.009 -> 0; an all-zero block gets scale 0 and zeros; the lanes hold the
    /// first block's scale in 0..8, the second's in 8..16.
    #[test]
    fn rows_quantize_as_ggml_q8_0() {
        let mut x = vec![0f32; 64];
        x[0] = 1.0;
        x[1] = -2.54;
        x[2] = 0.011;
        x[3] = 0.009;
        let r = Int8Rows::new(&x, 64);
        assert!((r.scale[0] - 0.02).abs() < 1e-7, "{}", r.scale[0]);
        assert_eq!(&r.q[0..4], &[50, -127, 1, 0]);
        assert!((r.sum[0] - 0.02 * -76.0).abs() < 1e-6, "{}", r.sum[0]);
        assert_eq!(r.scale[1], 0.0);
        assert!(r.q[32..].iter().all(|&v| v == 0));
        assert_eq!(r.sum16, vec![50 - 127 + 1, 0, 0, 0]);
        assert_eq!(r.lanes.len(), 16);
        assert!(r.lanes[..8].iter().all(|&v| v == r.scale[0]) && r.lanes[8..].iter().all(|&v| v == 0.0));
    }
}
