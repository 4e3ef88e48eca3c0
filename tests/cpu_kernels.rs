//! `--cpu-kernels avx2`: a CPU with AVX-512 runs the kernels an AVX2-only CPU runs. The cap is the process's
//! (`ragtime::model::simd`), so these tests have a test binary of their own, every test in it under the same cap
//! (no other test binary sets one). On an AVX-512 machine they are what runs the superblock and quartet copies
//! (`quant::superblocks`, `quant::quartets`) inside a model; on an AVX2-only one they repeat `tests/batch.rs`.

mod common;

use common::int8_feeds_equal_feeding_each_alone;
use ragtime::model::simd::{self, CpuKernels};

/// Under the cap (the same in every test; the cap hides AVX-512), `lm` (`None`: its data is missing, skipped) with
/// `--int8-dot` fed several sequences at once gives each bit for bit what it gets alone. Returns at once on a CPU
/// without AVX2 and FMA.
fn feeds_under_avx2(lm: impl FnOnce() -> Option<ragtime::model::Lm>) {
    simd::set_cpu_kernels(CpuKernels::Avx2);
    assert!(!simd::avx512f() && !simd::avx512_vnni(), "the cap hides AVX-512");
    if !simd::avx2_fma() {
        return;
    }
    let Some(mut lm) = lm() else { return };
    lm.int8_dot().unwrap();
    int8_feeds_equal_feeding_each_alone(&lm);
}

/// Q4_K and Q6_K blocks in their superblocks: several sequences fed together, each bit for bit as alone.
#[test]
fn k_quants_under_the_avx2_cap_feed_as_each_alone() {
    feeds_under_avx2(|| common::small_k_quants(14));
}

/// Q5_0 and Q8_0 blocks in quartets (the tied head and the embedding's rows from Q8_0 quartets): the same.
#[test]
fn q5_q8_under_the_avx2_cap_feed_as_each_alone() {
    feeds_under_avx2(|| common::small_q5_q8(15));
}
