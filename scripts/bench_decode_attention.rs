//! One decoding row's attention on the CPU (`kernels::causal_attention` with one query row, the path a decoding
//! lane takes every layer): microseconds per call over caches of 256 to 4,096 positions, for the head layouts of
//! Qwen2.5-Coder-0.5B (14 query heads over 2 key/value heads of 64), Qwen2.5-Coder-1.5B (12 over 2 of 128) and
//! SmolLM2-135M (9 over 3 of 64), on one thread (the engine runs the lanes' attention side by side on the pool, one
//! lane per thread) and on the rayon pool (a long row split by key/value head). Fixed pseudo-random inputs; each
//! cell the best of 5 rounds of at least 20 ms. Build it at two commits to compare kernels (docs/engine.md, "CPU
//! kernels").
//!
//!     cargo run --release --example bench_decode_attention

use std::time::Instant;

use ragtime::model::engine::kernels;

fn main() {
    println!("| model | heads (query/key-value x width) | positions | one thread, us per row | pool, us per row |");
    println!("|---|---|---:|---:|---:|");
    for (model, h, kvh, hd) in
        [("Qwen2.5-Coder-0.5B", 14, 2, 64), ("Qwen2.5-Coder-1.5B", 12, 2, 128), ("SmolLM2-135M", 9, 3, 64)]
    {
        for keys in [256usize, 1024, 1800, 4096] {
            let q: Vec<f32> = (0..h * hd).map(|i| (i as f32 * 0.37).cos()).collect();
            let k: Vec<f32> = (0..kvh * keys * hd).map(|i| (i as f32 * 0.618).sin()).collect();
            let v: Vec<f32> = (0..kvh * keys * hd).map(|i| (i as f32 * 0.271).cos()).collect();
            let row =
                || std::hint::black_box(kernels::causal_attention(&q, 1, h, kvh, hd, &k, &v, keys * hd, keys, false));
            let best = |run: &dyn Fn()| {
                (0..5)
                    .map(|_| {
                        let (t0, mut n) = (Instant::now(), 0u32);
                        while n < 10 || t0.elapsed().as_secs_f64() < 0.02 {
                            run();
                            n += 1;
                        }
                        t0.elapsed().as_secs_f64() / n as f64 * 1e6
                    })
                    .fold(f64::INFINITY, f64::min)
            };
            let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap().install(|| best(&|| drop(row())));
            let pool = best(&|| drop(row()));
            println!("| {model} | {h}/{kvh} x {hd} | {keys} | {one:.1} | {pool:.1} |");
        }
    }
}
