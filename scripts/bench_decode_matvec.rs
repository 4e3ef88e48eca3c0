//! One decoding row's product with a weight matrix on the integer blocks, per format: microseconds per call and
//! the GB/s of the copy's bytes that makes, for the exact kernels and `--int8-dot`'s. Qwen2.5-Coder-1.5B's shapes
//! and blocks in a Q4_K_M file (gate/up 8,960 x 1,536 in Q4_K, down 1,536 x 8,960 in Q6_K as in half its layers,
//! the 151,936 x 1,536 output head in Q6_K) of fixed pseudo-random weights quantized by candle; the rayon pool's
//! threads (RAYON_NUM_THREADS), called inside the pool as the CPU engine calls its products; the best of 5 rounds of
//! 20 calls (3 for the head). The two 10-17 MB matrices stay in a server CPU's L3 cache from call to call, so they
//! show what the kernels compute per second; the 292 MB head is read from memory each time.
//!
//!     cargo run --release --example bench_decode_matvec

use std::time::Instant;

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use ragtime::model::quant::QMatrix;

fn main() -> anyhow::Result<()> {
    println!(
        "| matrix | blocks | MB held | exact us | exact GB/s | `--int8-dot` us | `--int8-dot` GB/s | superblocks MB | \
         superblocks us | superblocks GB/s |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (name, dtype, rows, cols, calls) in [
        ("gate/up", GgmlDType::Q4K, 8960, 1536, 20),
        ("down", GgmlDType::Q6K, 1536, 8960, 20),
        ("output head", GgmlDType::Q6K, 151_936, 1536, 3),
    ] {
        let w: Vec<f32> = (0..rows * cols).map(|i| (i as f32 * 0.618).sin() * 0.05).collect();
        let t = Tensor::from_vec(w, (rows, cols), &Device::Cpu)?;
        let m = QMatrix::from_ggml(dtype, &QTensor::quantize(&t, dtype)?.data()?, rows, cols)?;
        drop(t);
        let x: Vec<f32> = (0..cols).map(|i| (i as f32 * 0.37).cos()).collect();
        let mut y = vec![0f32; rows];
        // the copy `--int8-dot` multiplies from on an AVX2 CPU without VNNI where it factors (Q4_K, Q6_K)
        let mut sb = m.clone();
        let sb_ok = sb.superblocks_for_int8();
        let (exact, int8, superblocks) = rayon::scope(|_| {
            let time = |f: &mut dyn FnMut()| {
                (0..5)
                    .map(|_| {
                        let t0 = Instant::now();
                        (0..calls).for_each(|_| f());
                        t0.elapsed().as_secs_f64() / calls as f64
                    })
                    .fold(f64::INFINITY, f64::min)
            };
            let exact = time(&mut || m.matvec(&x, &mut y));
            let int8 = time(&mut || m.matvec_int8(&x, &mut y));
            let superblocks = if sb_ok { time(&mut || sb.matvec_int8(&x, &mut y)) } else { f64::NAN };
            (exact, int8, superblocks)
        });
        let (mb, sb_mb) = (m.bytes() as f64 / 1e6, sb.bytes() as f64 / 1e6);
        let cell = |v: f64| if v.is_nan() { "-".to_string() } else { format!("{v:.1}") };
        println!(
            "| {name} {rows} x {cols} | {dtype:?} | {mb:.1} | {:.0} | {:.1} | {:.0} | {:.1} | {} | {} | {} |",
            exact * 1e6,
            mb / 1e3 / exact,
            int8 * 1e6,
            mb / 1e3 / int8,
            cell(if sb_ok { sb_mb } else { f64::NAN }),
            cell(superblocks * 1e6),
            cell(sb_mb / 1e3 / superblocks)
        );
    }
    Ok(())
}
