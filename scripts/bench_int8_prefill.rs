//! The products of a prefill chunk on the integer blocks against the f32 gemm, by rows per call: why chunks of more
//! than 32 rows go through gemm with `--int8-dot` on some CPUs (docs/engine.md, "Integer dot products"), and what
//! the row tiles of `--int8-dot` (`QMatrix::tile_for_int8`, AVX-512 VNNI; on a CPU with AMX, more than 8 rows per
//! call go to the tile unit), the K-quant superblocks (`QMatrix::superblocks_for_int8`, AVX2 without VNNI) and
//! the Q8_0 and Q5_0 quartets (`QMatrix::quartets_for_int8`, the same CPUs) gain. Qwen2.5-Coder-0.5B's shapes: a 4,864 x 896 matrix (gate/up) quantized by candle to Q8_0 and Q5_0, a
//! 896 x 4,864 one (down) to Q4_K; Qwen2.5-Coder-1.5B's gate/up (8,960 x 1,536) in Q4_K and down (1,536 x 8,960) in
//! Q6_K, as its Q4_K_M file holds them; fixed pseudo-random weights; the rayon pool's threads (RAYON_NUM_THREADS);
//! each cell the mean of at least 2 calls, in GFLOPS ("-": the copy does not exist on this CPU or format).
//!
//!     cargo run --release --example bench_int8_prefill [-- [avx2] FORMAT ...]
//!
//! FORMAT (Q8_0, Q5_0, Q4K, Q6K) keeps only those formats' rows; `avx2` caps ragtime's kernels at AVX2
//! (`--cpu-kernels avx2`: what a CPU without AVX-512 runs; the gemm crate still picks its own, AVX-512 where the
//! CPU has it, unless built without its `x86-v4` feature).

use std::time::Instant;

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use ragtime::model::engine::kernels;
use ragtime::model::quant::QMatrix;

fn main() -> anyhow::Result<()> {
    let mut only: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = only.iter().position(|a| a == "avx2") {
        only.remove(i);
        ragtime::model::simd::set_cpu_kernels(ragtime::model::simd::CpuKernels::Avx2);
    }
    if let Some(f) = only.iter().find(|f| !["Q8_0", "Q5_0", "Q4K", "Q6K"].contains(&f.as_str())) {
        anyhow::bail!("bench_int8_prefill: format {f:?}: expected avx2, Q8_0, Q5_0, Q4K or Q6K");
    }
    println!(
        "| blocks | rows per call | integer kernel (`--int8-dot`), row tiles | integer kernel, rows | exact blocks | \
         gemm on de-quantized tiles | the same from the row tiles | superblocks or quartets | gemm on de-quantized \
         superblocks or quartets |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (dtype, rows, cols) in [
        (GgmlDType::Q8_0, 4864, 896),
        (GgmlDType::Q5_0, 4864, 896),
        (GgmlDType::Q4K, 896, 4864),
        (GgmlDType::Q4K, 8960, 1536),
        (GgmlDType::Q6K, 1536, 8960),
    ] {
        if !only.is_empty() && !only.contains(&format!("{dtype:?}")) {
            continue;
        }
        let w: Vec<f32> = (0..rows * cols).map(|i| (i as f32 * 0.618).sin() * 0.05).collect();
        let t = Tensor::from_vec(w, (rows, cols), &Device::Cpu)?;
        let m = QMatrix::from_ggml(dtype, &QTensor::quantize(&t, dtype)?.data()?, rows, cols)?;
        let mut tiled = m.clone();
        let tiles = if tiled.tile_for_int8() { "" } else { " (no VNNI: rows)" };
        let mut sb = m.clone();
        let has_sb = sb.superblocks_for_int8() || sb.quartets_for_int8();
        for n in [1usize, 8, 32, 64, 128, 256, 512] {
            let x: Vec<f32> = (0..n * cols).map(|i| (i as f32 * 0.37).cos()).collect();
            let mut y = vec![0f32; n * rows];
            let reps = (2048 / n).max(2);
            let gflops = |secs: f64| 2.0 * (n * rows * cols * reps) as f64 / secs / 1e9;
            // inside the pool, as the CPU engine calls its products
            let (int8_tiles, int8, exact, gemm, gemm_tiles, sbs, gemm_sb) = rayon::scope(|_| {
                let time = |f: &mut dyn FnMut()| {
                    let t0 = Instant::now();
                    (0..reps).for_each(|_| f());
                    gflops(t0.elapsed().as_secs_f64())
                };
                let int8_tiles = time(&mut || tiled.matvec_int8(&x, &mut y));
                let int8 = time(&mut || m.matvec_int8(&x, &mut y));
                let exact = time(&mut || m.matvec(&x, &mut y));
                // into the same output buffer each time, as the engine's products write into spare buffers
                let ys = std::slice::from_mut(&mut y);
                let gemm = time(&mut || {
                    kernels::matmul_filled_into(&[&x], cols, rows, None, &|j0, tile| m.dequantize_rows(j0, tile), ys);
                });
                let gemm_tiles = time(&mut || {
                    let fill = |j0, tile: &mut [f32]| tiled.dequantize_rows(j0, tile);
                    kernels::matmul_filled_into(&[&x], cols, rows, None, &fill, ys);
                });
                let (sbs, gemm_sb) = if has_sb {
                    let sbs = time(&mut || sb.matvec_int8(&x, &mut y));
                    let ys = std::slice::from_mut(&mut y);
                    let fill = |j0, tile: &mut [f32]| sb.dequantize_rows(j0, tile);
                    (
                        format!("{sbs:.0}"),
                        format!("{:.0}", time(&mut || kernels::matmul_filled_into(&[&x], cols, rows, None, &fill, ys))),
                    )
                } else {
                    ("-".into(), "-".into())
                };
                (int8_tiles, int8, exact, gemm, gemm_tiles, sbs, gemm_sb)
            });
            println!(
                "| {dtype:?} | {n} | {int8_tiles:.0}{tiles} | {int8:.0} | {exact:.0} | {gemm:.0} | {gemm_tiles:.0} | {sbs} | {gemm_sb} |"
            );
        }
    }
    Ok(())
}
