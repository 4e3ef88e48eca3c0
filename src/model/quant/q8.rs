//! Input rows quantized to int8 in blocks of 32 values, as ggml's Q8_0 (scale `max |x| / 127`, values rounded
//! to -127..=127; the scale kept in f32), with what the integer kernels (`super::int8`, `super::x86`) read
//! besides: each block's `scale * sum q` and the scales laid out per AVX-512 register.

/// Input values per scale of the quantized rows (ggml's Q8_0 block).
pub(super) const BLOCK: usize = 32;

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
        let mut q = Vec::with_capacity(x.len());
        let mut scale = Vec::with_capacity(x.len() / BLOCK);
        let mut sum = Vec::with_capacity(x.len() / BLOCK);
        let mut sum16 = Vec::with_capacity(x.len() / 16);
        #[cfg(target_arch = "x86_64")]
        let simd = std::arch::is_x86_feature_detected!("avx512f");
        for block in x.chunks_exact(BLOCK) {
            let block: &[f32; BLOCK] = block.try_into().unwrap();
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU has AVX-512F.
            let (d, ints) = if simd { unsafe { quantize_block_avx512(block) } } else { quantize_block(block) };
            #[cfg(not(target_arch = "x86_64"))]
            let (d, ints) = quantize_block(block);
            q.extend_from_slice(&ints);
            scale.push(d);
            // the block's sum from its sums per 16 values (integers: the same in any order)
            let at = sum16.len();
            sum16.extend(ints.chunks_exact(16).map(|h| h.iter().map(|&v| v as i32).sum::<i32>()));
            sum.push(d * sum16[at..].iter().sum::<i32>() as f32);
        }
        let (per_row, chunks) = (cols / BLOCK, cols.div_ceil(64));
        let mut lanes = vec![0f32; x.len() / cols * chunks * 16];
        for (r, row_lanes) in lanes.chunks_exact_mut(chunks * 16).enumerate() {
            for (b, &d) in scale[r * per_row..(r + 1) * per_row].iter().enumerate() {
                let at = (b / 2) * 16 + (b % 2) * 8;
                row_lanes[at..at + 8].fill(d);
            }
        }
        Int8Rows { q, scale, sum, sum16, lanes }
    }
}

/// One block's scale `max |x| / 127` and its values rounded to -127..=127.
#[inline(always)]
fn quantize_block(block: &[f32; BLOCK]) -> (f32, [i8; BLOCK]) {
    // the largest magnitude in 16 lanes, then across them: a maximum in any order (NaNs ignored, as by `f32::max`)
    let mut lanes = [0f32; 16];
    for (i, v) in block.iter().enumerate() {
        lanes[i % 16] = lanes[i % 16].max(v.abs());
    }
    let amax = lanes.iter().fold(0f32, |m, &v| m.max(v));
    let d = amax / 127.0;
    let inv = if d > 0.0 { 1.0 / d } else { 0.0 };
    let mut ints = [0i8; BLOCK];
    for (o, v) in ints.iter_mut().zip(block) {
        // a NaN (from a NaN or infinite input) gives 0, as `NaN as i8` does
        let r = round_half_away(v * inv);
        let r = if r.is_nan() { 0.0 } else { r.clamp(-127.0, 127.0) };
        // SAFETY: `r` is an integer in -127..=127 (no NaN, clamped).
        *o = unsafe { r.to_int_unchecked::<i32>() } as i8;
    }
    (d, ints)
}

/// [`quantize_block`] compiled for AVX-512 (the truncation one instruction for 16 values, not a call per value).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn quantize_block_avx512(block: &[f32; BLOCK]) -> (f32, [i8; BLOCK]) {
    quantize_block(block)
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

    /// The AVX-512 build of a block's quantization gives the portable one's bits (random blocks, the NaN block).
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
        for b in &blocks {
            let (d, ints) = quantize_block(b);
            // SAFETY: the CPU has AVX-512F.
            let (ds, ints_s) = unsafe { quantize_block_avx512(b) };
            assert_eq!((d.to_bits(), ints), (ds.to_bits(), ints_s));
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
