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
        for block in x.chunks_exact(BLOCK) {
            let amax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            let inv = if d > 0.0 { 1.0 / d } else { 0.0 };
            let at = q.len();
            q.extend(block.iter().map(|v| (v * inv).round().clamp(-127.0, 127.0) as i8));
            scale.push(d);
            sum.push(d * q[at..].iter().map(|&v| v as i32).sum::<i32>() as f32);
        }
        let sum16 = q.chunks_exact(16).map(|h| h.iter().map(|&v| v as i32).sum()).collect();
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

#[cfg(test)]
mod tests {
    use super::*;

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
