//! Which SIMD instruction sets the CPU engine's own kernels may use (`--cpu-kernels`): what the CPU offers,
//! capped by the flag. Every kernel choice of `quant`, `engine::kernels` and `exp` asks here.
//!
//! Kernels for different instruction sets add in different orders, and with `--int8-dot` they also lay the
//! weights out and round the inputs differently (AVX-512 VNNI's row tiles, AMX, AVX2's superblocks and quartets),
//! so the same command gives other numbers on another kind of CPU (`docs/engine.md`). Capping the set makes a
//! larger CPU run a smaller one's kernels, to reproduce a run made there or to test and time each family on one
//! machine: `--cpu-kernels avx2` on an AVX-512 machine runs what an AVX2-only one runs. The f32 gemm of long
//! prefill chunks (the `gemm` crate) and burn's engines pick their own instructions; with `--int8-dot` on AVX2
//! the K-quant, Q8_0 and Q5_0 matrices take no gemm at all (`quant::QMatrix::int8_many_rows`).

use std::sync::atomic::{AtomicU8, Ordering};

/// The largest family of kernels the CPU engine may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, clap::ValueEnum)]
pub enum CpuKernels {
    /// No SIMD kernels: the portable ones (as on a CPU without AVX2).
    Portable = 0,
    /// AVX2 and FMA at most (as on a CPU without AVX-512).
    Avx2 = 1,
    /// Whatever the CPU has: AVX-512 (F, BW, VNNI) and AMX where present.
    #[default]
    Auto = 2,
}

static CAP: AtomicU8 = AtomicU8::new(CpuKernels::Auto as u8);

/// Caps the kernels for the rest of the process. Set it before a model is loaded: the integer copies are laid
/// out for the kernels at load (`--int8-dot`), and a copy laid out for other kernels keeps its layout.
pub fn set_cpu_kernels(k: CpuKernels) {
    CAP.store(k as u8, Ordering::Relaxed);
}

/// The cap [`set_cpu_kernels`] set (`Auto` by default).
pub fn cpu_kernels() -> CpuKernels {
    match CAP.load(Ordering::Relaxed) {
        0 => CpuKernels::Portable,
        1 => CpuKernels::Avx2,
        _ => CpuKernels::Auto,
    }
}

fn allows(k: CpuKernels) -> bool {
    cpu_kernels() >= k
}

/// AVX-512F, where allowed.
pub fn avx512f() -> bool {
    #[cfg(target_arch = "x86_64")]
    return allows(CpuKernels::Auto) && std::arch::is_x86_feature_detected!("avx512f");
    #[allow(unreachable_code)]
    false
}

/// AVX-512 F, BW and VNNI (the integer kernels' AVX-512 set), where allowed.
pub fn avx512_vnni() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        return allows(CpuKernels::Auto) && has!("avx512f") && has!("avx512bw") && has!("avx512vnni");
    }
    #[allow(unreachable_code)]
    false
}

/// AVX2 and FMA, where allowed.
pub fn avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    return allows(CpuKernels::Avx2)
        && std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("fma");
    #[allow(unreachable_code)]
    false
}

/// AVX2, where allowed.
pub fn avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    return allows(CpuKernels::Avx2) && std::arch::is_x86_feature_detected!("avx2");
    #[allow(unreachable_code)]
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The levels order as the caps nest, and a cap never grants what the CPU lacks.
    #[test]
    fn caps_nest() {
        assert!(CpuKernels::Portable < CpuKernels::Avx2 && CpuKernels::Avx2 < CpuKernels::Auto);
        assert_eq!(cpu_kernels(), CpuKernels::Auto, "no test changes the process's cap");
        #[cfg(target_arch = "x86_64")]
        {
            assert_eq!(
                avx2_fma(),
                std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
            );
            assert_eq!(avx512f(), std::arch::is_x86_feature_detected!("avx512f"));
            assert!(!avx512_vnni() || avx512f());
        }
    }
}
