//! Row-wise reductions in one pass (burn's `max_dim`, `argmax`, `sum_dim`, `log_softmax`) against the same in stages
//! (`ragtime::model::reduce`), at the shapes ragtime reduces: a decode pass's scores over the vocabulary (maximum,
//! argmax and two sums, as the batched engine computes them), RMS norms' mean of squares, the attention softmax over
//! the keys, and training's loss with its backward. Prints a table; on CUDA the difference is what burn's
//! one-thread-per-row reduction costs (docs/burn.md, item 6).
//!
//!     cargo run --release --example bench_staged_reductions -- cpu      # or cuda, cuda:N
//!
//! Each cell is the mean wall time of repeated calls after two warm-up calls (kernel compilation), each call ending
//! with its small result read back to the host.

use std::time::Instant;

use anyhow::Result;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{activation, Distribution, ElementConversion, Int, Tensor, TensorData};
use ragtime::device::{train_on, DeviceKind, TrainJob};
use ragtime::model::reduce::{self, CHUNK};

struct Bench;

/// Mean seconds per call of `f` after two warm-up calls: at least 3 calls, up to 50 or 0.5 s.
fn time(mut f: impl FnMut()) -> f64 {
    f();
    f();
    let (t0, mut n) = (Instant::now(), 0);
    while n < 3 || (n < 50 && t0.elapsed().as_secs_f64() < 0.5) {
        f();
        n += 1;
    }
    t0.elapsed().as_secs_f64() / n as f64
}

impl TrainJob for Bench {
    type Output = ();
    fn run<B: AutodiffBackend>(self, device: &B::Device) -> Result<()> {
        let read = |t: Tensor<B, 2>| -> f32 { t.sum().into_scalar().elem() };
        let random =
            |rows: usize, len: usize| Tensor::<B, 2>::random([rows, len], Distribution::Normal(0.0, 3.0), device);
        println!("| reduction | rows x length | one pass (ms) | in stages (ms) | one pass / stages |");
        println!("|---|---|---:|---:|---:|");
        let row = |what: &str, rows: usize, len: usize, one: f64, staged: f64| {
            println!("| {what} | {rows} x {len} | {:.3} | {:.3} | {:.2} |", one * 1e3, staged * 1e3, one / staged);
        };
        // a decode pass's scores: max, argmax, sum exp(z), sum exp(z) z
        for (rows, len) in [(1, 151_936), (8, 151_936), (128, 151_936), (256, 49_152)] {
            let x = random(rows, len);
            let one = time(|| {
                let max = x.clone().max_dim(1);
                let z = x.clone() - max.clone();
                let e = z.clone().exp();
                let s = e.clone().sum_dim(1) + (e * z).sum_dim(1);
                read(s + max + x.clone().argmax(1).float());
            });
            let staged = time(|| {
                let (max, arg) = reduce::max_argmax_rows(x.clone(), CHUNK);
                let z = x.clone() - max.clone();
                let e = z.clone().exp();
                let s = reduce::sum_rows(e.clone(), CHUNK) + reduce::sum_rows(e * z, CHUNK);
                read(s + max + arg.float());
            });
            row("scores (max, argmax, 2 sums)", rows, len, one, staged);
        }
        // RMS norms' mean of squares
        for (rows, len) in [(128, 896), (4096, 576)] {
            let x = random(rows, len);
            let one = time(|| {
                read(x.clone().powi_scalar(2).mean_dim(1));
            });
            let staged = time(|| {
                read(reduce::mean_of_squares(x.clone().unsqueeze::<3>()).squeeze_dim::<2>(0));
            });
            row("mean of squares", rows, len, one, staged);
        }
        // the attention softmax of 128 lanes x 14 heads over 1,024 keys
        let (rows, len) = (128 * 14, 1024);
        let x = random(rows, len);
        let one = time(|| {
            read(activation::softmax(x.clone(), 1).narrow(1, 0, 1));
        });
        let staged = time(|| {
            read(reduce::softmax_rows(x.clone(), CHUNK).narrow(1, 0, 1));
        });
        row("softmax", rows, len, one, staged);
        // training's loss, -log p(target), and its backward: burn's log-softmax and a gather, against log sum exp in
        // stages minus the target's logit
        let (rows, len) = (2048, 49_152);
        let x0 = random(rows, len);
        let targets: Vec<i64> = (0..rows as i64).map(|i| i * 7919 % len as i64).collect();
        let tgt = Tensor::<B, 2, Int>::from_data(TensorData::new(targets, [rows, 1]), device);
        let backward = |staged: bool| {
            let x = x0.clone().detach().require_grad();
            let nll = if staged {
                reduce::log_sum_exp_rows(x.clone(), CHUNK) - x.clone().gather(1, tgt.clone())
            } else {
                activation::log_softmax(x.clone(), 1).gather(1, tgt.clone()).neg()
            };
            let grads = nll.sum().backward();
            let g: f32 = x.grad(&grads).expect("a gradient").narrow(1, 0, 1).sum().into_scalar().elem();
            g
        };
        let one = time(|| {
            backward(false);
        });
        let staged = time(|| {
            backward(true);
        });
        row("loss (-log p(target)), forward and backward", rows, len, one, staged);
        Ok(())
    }
}

fn main() -> Result<()> {
    let device: DeviceKind = std::env::args().nth(1).as_deref().unwrap_or("cpu").parse()?;
    println!("device: {device:?}");
    train_on(device, Bench)
}
