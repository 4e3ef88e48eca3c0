//! A row's softmax statistics on the CPU (`sampling::SoftmaxStats::of`: the largest logit, and in f64 the sums of
//! `exp(l - m)` and `exp(l - m) (l - m)` that entropy and probabilities are read from), the work every decoding row
//! that reports its entropy does over the whole vocabulary: microseconds per row for Qwen's 151,936 logits and
//! SmolLM2's 49,152, on the calling thread. Fixed pseudo-random logits; each cell the best of 7 rounds of 50 rows.
//! Build it at two commits to compare (docs/engine.md, "Several questions at once").
//!
//!     cargo run --release --example bench_softmax_stats

use std::time::Instant;

use ragtime::model::sampling::SoftmaxStats;

fn main() {
    println!("| vocabulary | us per row |");
    println!("|---:|---:|");
    for vocab in [151_936usize, 49_152] {
        let logits: Vec<f32> = (0..vocab).map(|i| (i as f32 * 0.0137).sin() * 12.0).collect();
        let best = (0..7)
            .map(|_| {
                let t0 = Instant::now();
                for _ in 0..50 {
                    std::hint::black_box(SoftmaxStats::of(std::hint::black_box(&logits)));
                }
                t0.elapsed().as_secs_f64() / 50.0 * 1e6
            })
            .fold(f64::INFINITY, f64::min);
        println!("| {vocab} | {best:.0} |");
    }
}
