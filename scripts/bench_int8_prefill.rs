//! The products of a prefill chunk on the integer blocks against the f32 gemm, by rows per call: why chunks of more
//! than 32 rows go through gemm with `--int8-dot` too (docs/engine.md, "Integer dot products"). One 4,864 x 896
//! matrix (Qwen2.5-Coder-0.5B's gate/up shape) of fixed pseudo-random weights, quantized by candle to Q8_0 and Q5_0;
//! the rayon pool's threads (RAYON_NUM_THREADS); each cell the mean of at least 2 calls, in GFLOPS.
//!
//!     cargo run --release --example bench_int8_prefill

use std::time::Instant;

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use ragtime::model::engine::kernels;
use ragtime::model::quant::QMatrix;

fn main() -> anyhow::Result<()> {
    let (rows, cols) = (4864usize, 896usize);
    let w: Vec<f32> = (0..rows * cols).map(|i| (i as f32 * 0.618).sin() * 0.05).collect();
    let t = Tensor::from_vec(w, (rows, cols), &Device::Cpu)?;
    println!("| blocks | rows per call | integer kernel (`--int8-dot`) | exact blocks | gemm on de-quantized tiles |");
    println!("|---|---:|---:|---:|---:|");
    for dtype in [GgmlDType::Q8_0, GgmlDType::Q5_0] {
        let m = QMatrix::from_ggml(dtype, &QTensor::quantize(&t, dtype)?.data()?, rows, cols)?;
        for n in [8usize, 32, 64, 128, 256, 512] {
            let x: Vec<f32> = (0..n * cols).map(|i| (i as f32 * 0.37).cos()).collect();
            let mut y = vec![0f32; n * rows];
            let reps = (2048 / n).max(2);
            let gflops = |secs: f64| 2.0 * (n * rows * cols * reps) as f64 / secs / 1e9;
            // inside the pool, as the CPU engine calls its products
            let (int8, exact, gemm) = rayon::scope(|_| {
                let time = |f: &mut dyn FnMut()| {
                    let t0 = Instant::now();
                    (0..reps).for_each(|_| f());
                    gflops(t0.elapsed().as_secs_f64())
                };
                let int8 = time(&mut || m.matvec_int8(&x, &mut y));
                let exact = time(&mut || m.matvec(&x, &mut y));
                let gemm = time(&mut || {
                    kernels::matmul_filled(&[&x], cols, rows, None, &|j0, tile| m.dequantize_rows(j0, tile));
                });
                (int8, exact, gemm)
            });
            println!("| {dtype:?} | {n} | {int8:.0} | {exact:.0} | {gemm:.0} |");
        }
    }
    Ok(())
}
