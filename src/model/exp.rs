//! `exp` of the shifted logits `l - m <= 0` that a row's softmax statistics sum
//! ([`super::sampling::SoftmaxStats`]): one per vocabulary entry (151,936 for Qwen) per row, eight at a time with
//! AVX-512 (four with AVX2 and FMA) where libm's scalar `exp` took about 6 ns each.
//!
//! The method is the textbook one: `x = n ln 2 + r` with `n` the nearest integer to `x / ln 2` and `r` worked out
//! with `ln 2` in two parts (Cody and Waite), so `|r| <= ln 2 / 2`; `exp r` from its Taylor series to degree 13 by
//! Horner's rule in fused multiply-adds (the first term left out, `r^14 / 14! < 5e-18`, is below half an ulp);
//! then `2^n exp r`. Measured within 1 ulp of libm over `[-708, 0]` (a test). The scalar function and the AVX-512
//! and AVX2 ones do the same operations in the same order, so every CPU gets the same bits. Outside `[-708, 0]`
//! (where `2^n` would leave the normal range; `-inf` from a masked logit, NaN) all call libm.

/// `ln 2` in two parts (fdlibm's): the high one has 32 significant bits, so `n * LN2_HI` is exact for
/// `|n| < 2^21`; `LN2_HI + LN2_LO` is `ln 2` to about 2^-86.
const LN2_HI: f64 = f64::from_bits(0x3FE6_2E42_FEE0_0000);
const LN2_LO: f64 = f64::from_bits(0x3DEA_39EF_3579_3C76);
const INV_LN2: f64 = std::f64::consts::LOG2_E;
/// `1 / k!` for k = 13 down to 0: Horner's coefficients of `exp r`.
const TAYLOR: [f64; 14] = [
    1.0 / 6_227_020_800.0,
    1.0 / 479_001_600.0,
    1.0 / 39_916_800.0,
    1.0 / 3_628_800.0,
    1.0 / 362_880.0,
    1.0 / 40_320.0,
    1.0 / 5_040.0,
    1.0 / 720.0,
    1.0 / 120.0,
    1.0 / 24.0,
    1.0 / 6.0,
    0.5,
    1.0,
    1.0,
];
/// Below this, `2^n` is no longer a normal number: libm instead.
const LOWEST: f64 = -708.0;

/// `e^x` for `x` in `[-708, 0]` (libm's elsewhere), the same bits as [`for_each_exp`] gives.
pub fn exp(x: f64) -> f64 {
    if !(LOWEST..=0.0).contains(&x) {
        return x.exp();
    }
    let n = (x * INV_LN2).round_ties_even();
    let r = n.mul_add(-LN2_LO, n.mul_add(-LN2_HI, x));
    let p = TAYLOR[1..].iter().fold(TAYLOR[0], |p, &c| p.mul_add(r, c));
    // p in [0.7, 1.42] and n in [-1022, 0]: the product is a normal number, exact (scaling by 2^n)
    f64::from_bits((p.to_bits() as i64 + ((n as i64) << 52)) as u64)
}

/// `f(exp(l - m), l - m)` for each `l` of `logits` in order (`l - m` in f64, exact), as the softmax statistics
/// sum them; the exps eight at a time with AVX-512, four with AVX2 and FMA, each bit for bit [`exp`].
pub fn for_each_exp(logits: &[f32], m: f64, mut f: impl FnMut(f64, f64)) {
    #[cfg(target_arch = "x86_64")]
    let logits = if crate::model::simd::avx512f() {
        // SAFETY: the CPU has AVX-512F.
        unsafe { for_each_exp_avx512(logits, m, &mut f) }
    } else if crate::model::simd::avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA.
        unsafe { for_each_exp_avx2(logits, m, &mut f) }
    } else {
        logits
    };
    // what is left (all of it without AVX-512 or AVX2) one at a time
    for &l in logits {
        let d = l as f64 - m;
        f(exp(d), d);
    }
}

/// A SIMD chunk's exps `e` of `d` handed to `f` in order. Where a lane lies outside `[-708, 0]` (or is NaN) the
/// chunk's exps are worked out again by the scalar [`exp`], which calls libm there; the polynomial holds only inside.
#[inline(always)]
fn hand_on(e: &mut [f64], d: &[f64], all_inside: bool, f: &mut impl FnMut(f64, f64)) {
    if !all_inside {
        for (e, &d) in e.iter_mut().zip(d) {
            *e = exp(d);
        }
    }
    for (&e, &d) in e.iter().zip(d) {
        f(e, d);
    }
}

/// [`for_each_exp`] over the whole chunks of 8 logits; returns the rest (fewer than 8).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn for_each_exp_avx512<'a>(logits: &'a [f32], m: f64, f: &mut impl FnMut(f64, f64)) -> &'a [f32] {
    use std::arch::x86_64::*;
    let (mv, lowest, zero) = (_mm512_set1_pd(m), _mm512_set1_pd(LOWEST), _mm512_setzero_pd());
    let (mut e, mut d) = ([0f64; 8], [0f64; 8]);
    let mut chunks = logits.chunks_exact(8);
    for c in &mut chunks {
        // SAFETY: c holds 8 f32 values
        let dv = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(c.as_ptr())), mv);
        let n = _mm512_roundscale_pd::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm512_mul_pd(
            dv,
            _mm512_set1_pd(INV_LN2),
        ));
        let r = _mm512_fmadd_pd(n, _mm512_set1_pd(-LN2_LO), _mm512_fmadd_pd(n, _mm512_set1_pd(-LN2_HI), dv));
        let mut p = _mm512_set1_pd(TAYLOR[0]);
        for &k in &TAYLOR[1..] {
            p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(k));
        }
        // SAFETY: e and d hold 8 f64 values
        _mm512_storeu_pd(e.as_mut_ptr(), _mm512_scalef_pd(p, n));
        _mm512_storeu_pd(d.as_mut_ptr(), dv);
        // lanes outside [-708, 0] (or NaN) as the scalar function takes them
        let inside = _mm512_cmp_pd_mask::<_CMP_GE_OQ>(dv, lowest) & _mm512_cmp_pd_mask::<_CMP_LE_OQ>(dv, zero);
        hand_on(&mut e, &d, inside == 0xFF, f);
    }
    chunks.remainder()
}

/// [`for_each_exp`] over the whole chunks of 4 logits with AVX2 and FMA; returns the rest (fewer than 4). The
/// operations of [`exp`] in its order; `2^n` added into the exponent bits as [`exp`] does (`n`, an integer in
/// `[-1022, 0]` here, read out of the mantissa of `n + 1.5 * 2^52`, since AVX2 has no f64 -> i64 conversion).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn for_each_exp_avx2<'a>(logits: &'a [f32], m: f64, f: &mut impl FnMut(f64, f64)) -> &'a [f32] {
    use std::arch::x86_64::*;
    const MAGIC: f64 = 6_755_399_441_055_744.0; // 1.5 * 2^52
    let (mv, lowest, zero, magic) =
        (_mm256_set1_pd(m), _mm256_set1_pd(LOWEST), _mm256_setzero_pd(), _mm256_set1_pd(MAGIC));
    let (mut e, mut d) = ([0f64; 4], [0f64; 4]);
    let mut chunks = logits.chunks_exact(4);
    for c in &mut chunks {
        // SAFETY: c holds 4 f32 values
        let dv = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(c.as_ptr())), mv);
        let n = _mm256_round_pd::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_pd(
            dv,
            _mm256_set1_pd(INV_LN2),
        ));
        let r = _mm256_fmadd_pd(n, _mm256_set1_pd(-LN2_LO), _mm256_fmadd_pd(n, _mm256_set1_pd(-LN2_HI), dv));
        let mut p = _mm256_set1_pd(TAYLOR[0]);
        for &k in &TAYLOR[1..] {
            p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(k));
        }
        let ni = _mm256_sub_epi64(_mm256_castpd_si256(_mm256_add_pd(n, magic)), _mm256_castpd_si256(magic));
        let scaled = _mm256_add_epi64(_mm256_castpd_si256(p), _mm256_slli_epi64::<52>(ni));
        // SAFETY: e and d hold 4 f64 values
        _mm256_storeu_pd(e.as_mut_ptr(), _mm256_castsi256_pd(scaled));
        _mm256_storeu_pd(d.as_mut_ptr(), dv);
        // lanes outside [-708, 0] (or NaN) as the scalar function takes them
        let inside = _mm256_and_pd(_mm256_cmp_pd::<_CMP_GE_OQ>(dv, lowest), _mm256_cmp_pd::<_CMP_LE_OQ>(dv, zero));
        hand_on(&mut e, &d, _mm256_movemask_pd(inside) == 0xF, f);
    }
    chunks.remainder()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ulps(a: f64, b: f64) -> u64 {
        (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs()
    }

    /// Within 1 ulp of libm over [-708, 0] (a fine sweep, the ends and values near 0), and libm's own value outside.
    #[test]
    fn exp_is_within_one_ulp_of_libm() {
        let mut x = LOWEST;
        let mut worst = 0;
        while x <= 0.0 {
            worst = worst.max(ulps(exp(x), x.exp()));
            x += 0.000_123_456_7;
        }
        for x in [0.0, -0.0, -1e-300, -1e-17, -1e-9, -0.5, -LN2_HI / 2.0, -1.0, -700.0, LOWEST] {
            worst = worst.max(ulps(exp(x), x.exp()));
        }
        assert!(worst <= 1, "{worst} ulps");
        assert_eq!(exp(0.0), 1.0);
        for x in [-708.5, -745.0, -746.0, -1e300, 1.0, 700.0] {
            assert_eq!(exp(x).to_bits(), x.exp().to_bits(), "{x}");
        }
        assert_eq!(exp(f64::NEG_INFINITY), 0.0);
        assert!(exp(f64::NAN).is_nan());
    }

    /// Hand-worked: e^-1 = 0.36787944117144233, e^(-ln 2) = 1/2, e^-10 = 4.5399929762484854e-5.
    #[test]
    fn exp_of_worked_values() {
        assert!(ulps(exp(-1.0), 0.367_879_441_171_442_33) <= 1);
        assert!(ulps(exp(-std::f64::consts::LN_2), 0.5) <= 1);
        assert!(ulps(exp(-10.0), 4.539_992_976_248_485_4e-5) <= 1);
    }

    /// The eight-at-a-time path gives each value the scalar function's bits, in order, with out-of-range lanes
    /// (a masked `-inf` logit, far below the largest) and a remainder of fewer than eight.
    #[test]
    fn for_each_exp_equals_the_scalar_function() {
        let mut logits: Vec<f32> = (0..1003).map(|i| ((i * 7919) % 2003) as f32 * 0.037 - 40.0).collect();
        logits[17] = f32::NEG_INFINITY;
        logits[500] = -900.0;
        let m = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        let mut got = Vec::new();
        for_each_exp(&logits, m, |e, d| got.push((e.to_bits(), d.to_bits())));
        let want: Vec<(u64, u64)> = logits
            .iter()
            .map(|&l| {
                let d = l as f64 - m;
                (exp(d).to_bits(), d.to_bits())
            })
            .collect();
        assert_eq!(got, want);
        assert_eq!(f64::from_bits(got[17].0), 0.0);
        // the AVX2 path by itself, wherever the CPU has it (one with AVX-512 takes the path above)
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            let mut got = Vec::new();
            // SAFETY: the CPU has AVX2 and FMA.
            let rest =
                unsafe { for_each_exp_avx2(&logits, m, &mut |e: f64, d: f64| got.push((e.to_bits(), d.to_bits()))) };
            for &l in rest {
                let d = l as f64 - m;
                got.push((exp(d).to_bits(), d.to_bits()));
            }
            assert_eq!(got, want);
        }
    }
}
