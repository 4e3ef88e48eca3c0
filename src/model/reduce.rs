//! Row-wise reductions of long rows in stages, so that a GPU spreads them over many threads.
//!
//! burn's CUDA backend, built without autotuning (ragtime's default, `docs/gpu.md`), reduces a tensor along a dim
//! with one GPU thread per output value (cubek's "unit" routine): the maximum of each of 128 logits rows of
//! Qwen's 151,936 tokens is 128 threads, each reading its 600 KB row alone, one load after another, while the rest
//! of the GPU idles. These functions reduce a `[rows, len]` tensor in stages instead: the row is cut into chunks
//! of `chunk` values (`[rows, len / chunk, chunk]`), each chunk reduced by a thread of its own, then the
//! `len / chunk` partial results the same way, until at most `chunk` are left. A row of 151,936 values in chunks
//! of 128 is 1,187 threads, then 10, then one. A stage takes a shorter chunk where one divides the row (64 for
//! SmolLM2's 576 hidden values); otherwise the tail of the row is filled with the reduction's identity (0 for a
//! sum, -inf for a maximum), which copies the row once.
//!
//! The results are those of one reduction up to f32 rounding (a sum adds in another order); a maximum and the
//! index of the first largest value are exact. On the CPU backend the stages cost a few more small tensors.

use burn::prelude::Backend;
use burn::tensor::{Int, Tensor};

/// Values per thread of each stage (a power of two, so that loads vectorise).
pub const CHUNK: usize = 128;

/// The chunk length of a stage over rows of `len`: the largest power of two that divides `len`, up to `chunk`, when
/// it is at least a quarter of `chunk` (no padding: 576 = 9 x 64, 896 = 7 x 128), else `chunk` (the tail padded).
fn chunk_for(len: usize, chunk: usize) -> usize {
    let fits = 1usize << len.trailing_zeros().min(usize::BITS - 1);
    if fits >= chunk {
        chunk
    } else if fits >= 2 && fits * 4 >= chunk {
        fits
    } else {
        chunk
    }
}

/// `x [rows, len]` with `len` rounded up to a multiple of `chunk` by columns of `fill`.
fn padded<B: Backend>(x: Tensor<B, 2>, chunk: usize, fill: f32) -> Tensor<B, 2> {
    let [rows, len] = x.dims();
    let pad = len.div_ceil(chunk) * chunk - len;
    if pad == 0 {
        return x;
    }
    let device = x.device();
    let tail = Tensor::<B, 2>::full([rows, pad], fill, (&device, x.dtype()));
    Tensor::cat(vec![x, tail], 1)
}

/// Reduces `x [rows, len]` along dim 1 to `[rows, 1]` in stages of at most `chunk` values: `reduce3` reduces dim 2
/// of `[rows, chunks, chunk]` (keeping it), `reduce2` dim 1 of the last `[rows, <= chunk]`; `fill` is the
/// reduction's identity.
fn staged<B: Backend>(
    mut x: Tensor<B, 2>,
    chunk: usize,
    fill: f32,
    reduce3: impl Fn(Tensor<B, 3>) -> Tensor<B, 3>,
    reduce2: impl Fn(Tensor<B, 2>) -> Tensor<B, 2>,
) -> Tensor<B, 2> {
    assert!(chunk >= 2, "staged reduction: chunk of {chunk}");
    loop {
        let [rows, len] = x.dims();
        if len <= chunk {
            return reduce2(x);
        }
        let c = chunk_for(len, chunk);
        let x3 = padded(x, c, fill);
        let k = x3.dims()[1] / c;
        x = reduce3(x3.reshape([rows, k, c])).reshape([rows, k]);
    }
}

/// `sum_j x[i, j]`: `[rows, 1]`.
pub fn sum_rows<B: Backend>(x: Tensor<B, 2>, chunk: usize) -> Tensor<B, 2> {
    staged(x, chunk, 0.0, |t| t.sum_dim(2), |t| t.sum_dim(1))
}

/// `max_j x[i, j]`: `[rows, 1]`.
pub fn max_rows<B: Backend>(x: Tensor<B, 2>, chunk: usize) -> Tensor<B, 2> {
    staged(x, chunk, f32::NEG_INFINITY, |t| t.max_dim(2), |t| t.max_dim(1))
}

/// The largest value of each row and the index of its first occurrence: `([rows, 1], [rows, 1])`. Each stage
/// takes the first largest value of each chunk and keeps its column, so the first chunk holding the row's
/// maximum gives the first index overall.
pub fn max_argmax_rows<B: Backend>(x: Tensor<B, 2>, chunk: usize) -> (Tensor<B, 2>, Tensor<B, 2, Int>) {
    assert!(chunk >= 2, "staged reduction: chunk of {chunk}");
    let device = x.device();
    // the column of `x` each current value came from (None: the value's own column)
    let mut at: Option<Tensor<B, 2, Int>> = None;
    let mut x = x;
    loop {
        let [rows, len] = x.dims();
        if len <= chunk {
            let (max, arg) = x.max_dim_with_indices(1); // [rows, 1] each
            let arg = match at {
                Some(at) => at.gather(1, arg),
                None => arg,
            };
            return (max, arg);
        }
        let c = chunk_for(len, chunk);
        let k = len.div_ceil(c);
        let x3 = padded(x, c, f32::NEG_INFINITY).reshape([rows, k, c]);
        let (max, arg) = x3.max_dim_with_indices(2); // [rows, k, 1] each
        at = Some(match at {
            // the first stage: chunk j starts at column j * c
            None => {
                let start = Tensor::<B, 1, Int>::arange(0..k as i64, &device).mul_scalar(c as i64);
                arg.reshape([rows, k]) + start.reshape([1, k])
            }
            // later stages: the columns the chunk's values came from, padded like the values (with column 0,
            // never chosen: a padded value is -inf, below every real one)
            Some(at) => {
                let at = pad_int(at, c).reshape([rows, k, c]);
                at.gather(2, arg).reshape([rows, k])
            }
        });
        x = max.reshape([rows, k]);
    }
}

/// `x [rows, len]` with `len` rounded up to a multiple of `chunk` by columns of 0.
fn pad_int<B: Backend>(x: Tensor<B, 2, Int>, chunk: usize) -> Tensor<B, 2, Int> {
    let [rows, len] = x.dims();
    let pad = len.div_ceil(chunk) * chunk - len;
    if pad == 0 {
        return x;
    }
    let tail = Tensor::<B, 2, Int>::zeros([rows, pad], &x.device());
    Tensor::cat(vec![x, tail], 1)
}

/// The mean of squares over the last dim of `x [a, b, d]` (an RMS norm's), summed in stages: `[a, b, 1]`.
pub fn mean_of_squares<B: Backend>(x: Tensor<B, 3>) -> Tensor<B, 3> {
    let [a, b, d] = x.dims();
    sum_rows(x.powi_scalar(2).reshape([a * b, d]), CHUNK).reshape([a, b, 1]).div_scalar(d as f64)
}

/// `softmax` of each row of `x [rows, len]`, its maximum and normaliser reduced in stages: `exp(x - m) / sum
/// exp(x - m)`. A row needs one value above -inf (an attention row always sees its own position).
pub fn softmax_rows<B: Backend>(x: Tensor<B, 2>, chunk: usize) -> Tensor<B, 2> {
    let m = max_rows(x.clone().detach(), chunk); // [rows, 1]
    let e = (x - m).exp();
    let sum = sum_rows(e.clone(), chunk);
    e / sum
}

/// `log sum_j exp x[i, j]` of each row of `x [rows, len]`: `[rows, 1]`, as `m + log sum exp(x - m)` with `m` the
/// row's maximum (held constant for the gradient, which is then `softmax(x)` as with any constant), summed in
/// stages. A loss `lse - x[target]` (`sft::loss`) needs no `[rows, len]` log-probabilities, and its backward no
/// reduction over the row: the gradient reaches `x` through the stages' sums (broadcasts) and the gather.
pub fn log_sum_exp_rows<B: Backend>(x: Tensor<B, 2>, chunk: usize) -> Tensor<B, 2> {
    let m = max_rows(x.clone().detach(), chunk); // [rows, 1]
    sum_rows((x - m.clone()).exp(), chunk).log() + m
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, Flex};
    use burn::tensor::TensorData;

    type B = Flex;

    fn t(rows: usize, v: Vec<f32>) -> Tensor<B, 2> {
        let len = v.len() / rows;
        Tensor::from_data(TensorData::new(v, [rows, len]), &Default::default())
    }

    fn col(x: Tensor<B, 2>) -> Vec<f32> {
        x.into_data().to_vec::<f32>().unwrap()
    }

    fn col_int(x: Tensor<B, 2, Int>) -> Vec<i64> {
        x.into_data().convert::<i64>().to_vec::<i64>().unwrap()
    }

    #[test]
    fn chunks_divide_the_row_where_a_large_enough_power_of_two_does() {
        assert_eq!(chunk_for(151_936, 128), 128); // 1187 x 128
        assert_eq!(chunk_for(576, 128), 64); // SmolLM2's width: 9 x 64
        assert_eq!(chunk_for(896, 128), 128); // Qwen's: 7 x 128
        assert_eq!(chunk_for(1187, 128), 128); // odd: padded to 1280
        assert_eq!(chunk_for(1040, 128), 128); // 65 x 16: 16 is too short, padded to 1152
        assert_eq!(chunk_for(11, 3), 3);
        assert_eq!(chunk_for(7, 2), 2); // never a chunk of 1: every stage shortens the row
    }

    /// Two rows of 11 values in chunks of 3: stages of 11 -> 4 (one padded column) -> 2 -> 1, worked by hand.
    #[test]
    fn stages_give_the_sum_max_and_first_argmax_of_each_row() {
        // row 0: maximum 9 at columns 4 and 9 (first: 4); row 1: maximum 7 in the padded last chunk (column 10)
        let x = t(
            2,
            vec![
                1., 2., 0., -1., 9., 3., 2., 2., 0., 9., 1., //
                -3., -2., -5., 0., 1., 6., 6., -1., 2., 0., 7.,
            ],
        );
        assert_eq!(col(sum_rows(x.clone(), 3)), vec![28.0, 11.0]);
        assert_eq!(col(max_rows(x.clone(), 3)), vec![9.0, 7.0]);
        let (max, arg) = max_argmax_rows(x.clone(), 3);
        assert_eq!(col(max), vec![9.0, 7.0]);
        assert_eq!(col_int(arg), vec![4, 10]);
        // a chunk as long as the row: one reduction, the same answers
        let (max1, arg1) = max_argmax_rows(x.clone(), 11);
        assert_eq!((col(max1), col_int(arg1)), (vec![9.0, 7.0], vec![4, 10]));
        assert_eq!(col(sum_rows(x, 64)), vec![28.0, 11.0]);
    }

    /// Random rows of a vocabulary's length: staged equals one reduction (the sum to f32 rounding), ties included.
    #[test]
    fn staged_equals_one_reduction_on_long_rows() {
        let (rows, len) = (3, 1187 * 2 + 5);
        let mut v: Vec<f32> = (0..rows * len).map(|i| ((i as f32 * 0.7548).sin() * 13.0).round() / 4.0).collect();
        v[len + 2000] = 50.0; // row 1's maximum twice: the first is at 1500
        v[len + 1500] = 50.0;
        let x = t(rows, v);
        for chunk in [2, 3, 128, 1000] {
            let (m, a) = max_argmax_rows(x.clone(), chunk);
            assert_eq!(col(m.clone()), col(x.clone().max_dim(1)), "chunk {chunk}");
            assert_eq!(col_int(a.clone()), col_int(x.clone().argmax(1)), "chunk {chunk}");
            assert_eq!(col_int(a)[1], 1500);
            let (s, want) = (col(sum_rows(x.clone(), chunk)), col(x.clone().sum_dim(1)));
            for (s, w) in s.iter().zip(&want) {
                assert!((s - w).abs() <= 1e-5 * w.abs().max(1.0), "chunk {chunk}: {s} vs {w}");
            }
        }
    }

    /// The staged softmax equals burn's, rows with masked (-inf) values and whole masked chunks included.
    #[test]
    fn staged_softmax_equals_burns_with_masked_chunks() {
        let (rows, len) = (3, 256);
        let v: Vec<f32> = (0..rows * len)
            .map(|i| if i % len >= 70 && i / len > 0 { f32::NEG_INFINITY } else { (i as f32 * 0.91).sin() * 6.0 })
            .collect();
        let x = t(rows, v);
        let (got, want) = (col(softmax_rows(x.clone(), 32)), col(burn::tensor::activation::softmax(x, 1)));
        for (a, b) in got.iter().zip(&want) {
            assert!((a - b).abs() < 1e-6, "{a} vs {b}");
        }
        assert!(got[len + 100] == 0.0 && (got[..len].iter().sum::<f32>() - 1.0).abs() < 1e-5);
    }

    /// An RMS norm's mean of squares over 300 values (chunks of 128, the last padded) equals burn's `mean_dim`.
    #[test]
    fn mean_of_squares_equals_mean_dim() {
        let v: Vec<f32> = (0..2 * 3 * 300).map(|i| (i as f32 * 0.29).sin() * 3.0).collect();
        let x = Tensor::<B, 3>::from_data(TensorData::new(v, [2, 3, 300]), &Default::default());
        let got = mean_of_squares(x.clone()).into_data().to_vec::<f32>().unwrap();
        let want = x.powi_scalar(2).mean_dim(2).into_data().to_vec::<f32>().unwrap();
        assert_eq!(got.len(), 6);
        for (a, b) in got.iter().zip(&want) {
            assert!((a - b).abs() < 1e-5 * b, "{a} vs {b}");
        }
    }

    /// `lse - x[target]` equals burn's `-log_softmax(x)[target]`, and so does its gradient.
    #[test]
    fn staged_log_sum_exp_loss_and_its_gradient_equal_burns() {
        type A = Autodiff<Flex>;
        let (rows, len) = (3, 300);
        let v: Vec<f32> = (0..rows * len).map(|i| (i as f32 * 0.37).cos() * 8.0).collect();
        let dev = Default::default();
        let targets = Tensor::<A, 2, Int>::from_data(TensorData::new(vec![5i64, 299, 130], [rows, 1]), &dev);
        let run = |staged: bool| {
            let x = Tensor::<A, 2>::from_data(TensorData::new(v.clone(), [rows, len]), &dev).require_grad();
            let nll = if staged {
                log_sum_exp_rows(x.clone(), 16) - x.clone().gather(1, targets.clone())
            } else {
                burn::tensor::activation::log_softmax(x.clone(), 1).gather(1, targets.clone()).neg()
            };
            let grads = nll.clone().sum().backward();
            let g = x.grad(&grads).unwrap().into_data().to_vec::<f32>().unwrap();
            (nll.into_data().to_vec::<f32>().unwrap(), g)
        };
        let ((y1, g1), (y0, g0)) = (run(true), run(false));
        assert_eq!(y1.len(), rows);
        for (a, b) in y1.iter().zip(&y0).chain(g1.iter().zip(&g0)) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
        // d nll / d x = softmax(x) - onehot(target): each row's gradient sums to 0
        for row in g1.chunks(len) {
            assert!(row.iter().sum::<f32>().abs() < 1e-5);
        }
    }
}
