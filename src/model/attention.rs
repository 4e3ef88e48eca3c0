//! Causal grouped-query attention of the reference decoder, `softmax(Q K^T / sqrt(hd) + mask) V` with the softmax in
//! f32 ([`Mask`]: causal over each row, or causal within each sequence of a packed row), in two forms:
//!
//! - [`probs`] then a product with V, in burn's tensor ops: what inference runs, and what it captures (the
//!   probabilities). Under autodiff every intermediate its backward reads stays alive until the backward pass:
//!   the exponentials and the probabilities, two `[b, h, t, keys]` tensors per layer, in f32.
//! - on an autodiff backend, [`causal`] is one autodiff operation whose backward recomputes the probabilities from
//!   q and k (one more `Q K^T` product and softmax per layer) instead of keeping them. It keeps q, k and v, which
//!   are `[.., t, hd]`, so a layer's attention keeps memory linear in t rather than quadratic, as PyTorch's
//!   `scaled_dot_product_attention` kernels do. For SmolLM2 (30 layers, 9 heads) on 8 rows of 1,024 tokens the
//!   two kept tensors are 18 GB in f32.
//!
//! The backward pass, per query row, with `P = softmax(S)`, `S = scale Q K^T + mask`, `O = P V`:
//!
//! ```text
//! dV = P^T dO        dP = dO V^T        dS = P * (dP - rowsum(P * dP))
//! dQ = scale dS K    dK = scale dS^T Q
//! ```
//!
//! `dS` is formed in f32 from the f32 probabilities, as the composed ops' softmax backward does; the products run in
//! the model's dtype. Masked keys have `P = 0`, so their `dS` is 0.
//!
//! burn's own `module::attention` on an autodiff backend falls back to the composed ops (it keeps the same
//! intermediates), so the recomputing operation is written here with burn-autodiff's `Backward` interface. It is
//! used for the autodiff backends `train autorag` runs on (`Autodiff<Flex>`, and `Autodiff<Cuda>` in a CUDA build),
//! found by type (`model::autodiff_ops`); any other backend gets the composed ops.

use burn::prelude::Backend;
use burn::tensor::activation::softmax;
use burn::tensor::{Bool, DType, Int, Tensor};
use burn_autodiff::checkpoint::base::Checkpointer;
use burn_autodiff::grads::Gradients;
use burn_autodiff::ops::{Backward, Ops};

use super::autodiff_ops::{dispatch, float, inner, inner_bool, outer, prim, record, AutodiffOp};
use super::dtype::to_dtype;

/// Which keys each query row sees.
#[derive(Debug, Clone)]
pub enum Mask<B: Backend> {
    /// The queries sit at positions `start..start + t` of every row, the keys at `0..keys`: query `i` sees keys
    /// `0..=start + i` (a sequence per row, after a cached prefix of `start` positions).
    Causal { start: usize },
    /// `[b, 1, t, keys]`, true where a query must not see a key: packed rows, where a row holds several sequences
    /// and a query sees only its own sequence's keys up to itself ([`crate::model::llama::Packed`]).
    Hide(Tensor<B, 4, Bool>),
}

/// `[t, keys]`, true where key `j` lies after query `i`'s position `start + i`: made on the device from two ranges
/// (a few small kernels, where a mask written on the host and copied over would cost a loop over `t * keys` cells
/// and the copy, in every layer of every pass).
pub fn causal_hide<B: Backend>(start: usize, t: usize, keys: usize, device: &B::Device) -> Tensor<B, 2, Bool> {
    let query = Tensor::<B, 1, Int>::arange(start as i64..(start + t) as i64, device).reshape([t, 1]).expand([t, keys]);
    let key = Tensor::<B, 1, Int>::arange(0..keys as i64, device).reshape([1, keys]).expand([t, keys]);
    key.greater(query)
}

/// Attention probabilities in f32: `[b, h, t, keys]` from `q [b, kv, rep * t, hd]` (the query heads that share a
/// key/value head, grouped) and `k [b, kv, keys, hd]`, masked by `mask`.
fn probs_f32<B: Backend>(q: Tensor<B, 4>, k: Tensor<B, 4>, mask: &Mask<B>, t: usize) -> Tensor<B, 4> {
    let [b, kv, rows, hd] = q.dims();
    let keys = k.dims()[2];
    let h = kv * rows / t;
    let scores = q.matmul(k.swap_dims(2, 3)).mul_scalar(1.0 / (hd as f64).sqrt()); // [b, kv, rep*t, keys]
    let mut scores = scores.reshape([b, h, t, keys]);
    match mask {
        Mask::Causal { start } if t > 1 => {
            let hide = causal_hide::<B>(*start, t, keys, &scores.device());
            scores = scores.mask_fill(hide.unsqueeze::<4>(), f32::NEG_INFINITY);
        }
        Mask::Causal { .. } => {}
        Mask::Hide(hide) => scores = scores.mask_fill(hide.clone(), f32::NEG_INFINITY),
    }
    softmax(to_dtype(scores, DType::F32), 3)
}

/// Attention probabilities `[b, h, t, keys]` in q's dtype (the softmax computed in f32, as transformers does for a
/// bf16 model). Shapes as [`causal`].
pub fn probs<B: Backend>(q: Tensor<B, 4>, k: Tensor<B, 4>, mask: &Mask<B>, t: usize) -> Tensor<B, 4> {
    let dtype = q.dtype();
    to_dtype(probs_f32(q, k, mask, t), dtype)
}

/// `P V` for probabilities `[b, h, t, keys]` and `v [b, kv, keys, hd]`: `[b, kv, rep * t, hd]`.
pub fn apply<B: Backend>(probs: Tensor<B, 4>, v: Tensor<B, 4>) -> Tensor<B, 4> {
    let [b, h, t, keys] = probs.dims();
    let kv = v.dims()[1];
    probs.reshape([b, kv, h / kv * t, keys]).matmul(v)
}

/// Masked attention: `q [b, kv, rep * t, hd]` (the `t` queries of each row, the `rep` query heads of each
/// key/value head grouped), `k`, `v [b, kv, keys, hd]` -> `[b, kv, rep * t, hd]`. On `train autorag`'s autodiff
/// backends, one operation whose backward recomputes the probabilities (module docs).
pub fn causal<B: Backend>(q: Tensor<B, 4>, k: Tensor<B, 4>, v: Tensor<B, 4>, mask: Mask<B>, t: usize) -> Tensor<B, 4> {
    dispatch(Causal { q, k, v, mask, t })
}

struct Causal<B: Backend> {
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    mask: Mask<B>,
    t: usize,
}

impl<B: Backend> AutodiffOp<B> for Causal<B> {
    type Output = Tensor<B, 4>;

    fn fallback(self) -> Tensor<B, 4> {
        apply(probs(self.q, self.k, &self.mask, self.t), self.v)
    }

    /// Forward as [`probs`] + [`apply`]; the backward keeps q, k, v (and a given mask) only.
    fn autodiff<I: Backend>(self) -> Tensor<B, 4> {
        let t = self.t;
        let mask: Mask<I> = match self.mask {
            Mask::Causal { start } => Mask::Causal { start },
            Mask::Hide(hide) => Mask::Hide(inner_bool::<B, I, 4>(hide)),
        };
        let out = record(
            RecomputeAttention,
            [inner::<B, I, 4>(self.q), inner::<B, I, 4>(self.k), inner::<B, I, 4>(self.v)],
            |[q, k, v]| prim(apply(probs(float::<I, 4>(q), float(k), &mask, t), float(v))),
            |[q, k, v]| (q, k, v, mask.clone(), t),
        );
        outer::<B, I, 4>(out)
    }
}

#[derive(Debug)]
struct RecomputeAttention;

impl<I: Backend> Backward<I, 3> for RecomputeAttention {
    /// q, k, v, the mask and the queries per row.
    type State = (I::FloatTensorPrimitive, I::FloatTensorPrimitive, I::FloatTensorPrimitive, Mask<I>, usize);

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [q_node, k_node, v_node] = ops.parents;
        let grad = float::<I, 4>(grads.consume::<I>(&ops.node)); // dO: [b, kv, rep*t, hd]
        let (q, k, v, mask, t) = ops.state;
        let (q, k, v) = (float::<I, 4>(q), float::<I, 4>(k), float::<I, 4>(v));
        let dtype = q.dtype();
        let [b, kv, rows, hd] = q.dims();
        let keys = k.dims()[2];
        let h = kv * rows / t;
        let scale = 1.0 / (hd as f64).sqrt();

        let p32 = probs_f32(q.clone(), k.clone(), &mask, t); // [b, h, t, keys]
        let p = to_dtype(p32.clone(), dtype).reshape([b, kv, rows, keys]);
        if let Some(node) = v_node {
            let dv = p.swap_dims(2, 3).matmul(grad.clone()); // [b, kv, keys, hd]
            grads.register::<I>(node.id, prim(dv));
        }
        if q_node.is_none() && k_node.is_none() {
            return;
        }
        let dp = to_dtype(grad.matmul(v.swap_dims(2, 3)), DType::F32).reshape([b, h, t, keys]); // dO V^T
        let row = (dp.clone() * p32.clone()).sum_dim(3); // [b, h, t, 1]
        let ds = to_dtype(p32 * (dp - row), dtype).reshape([b, kv, rows, keys]).mul_scalar(scale);
        if let Some(node) = k_node {
            let dk = ds.clone().swap_dims(2, 3).matmul(q); // [b, kv, keys, hd]
            grads.register::<I>(node.id, prim(dk));
        }
        if let Some(node) = q_node {
            let dq = ds.matmul(k); // [b, kv, rep*t, hd]
            grads.register::<I>(node.id, prim(dq));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::autodiff_ops::assert_close;
    use burn::backend::{Autodiff, Flex};
    use burn::tensor::{Distribution, TensorData};

    type AB = Autodiff<Flex>;

    /// Hand-worked: one head, two queries, two keys, hd 1. Query 0 sees key 0 only; query 1 sees both with scores
    /// q1 k0 = 1 and q1 k1 = 2 (scale 1), so P1 = softmax(1, 2) = (0.2689, 0.7311).
    #[test]
    fn hand_worked_two_tokens() {
        let _exclusive = crate::device::autodiff_exclusive();
        let dev = Default::default();
        let q = Tensor::<AB, 4>::from_data(TensorData::new(vec![0.5f32, 1.0], [1, 1, 2, 1]), &dev).require_grad();
        let k = Tensor::<AB, 4>::from_data(TensorData::new(vec![1.0f32, 2.0], [1, 1, 2, 1]), &dev).require_grad();
        let v = Tensor::<AB, 4>::from_data(TensorData::new(vec![3.0f32, 5.0], [1, 1, 2, 1]), &dev).require_grad();
        let out = causal(q.clone(), k.clone(), v.clone(), Mask::Causal { start: 0 }, 2);
        let o = out.clone().into_data().to_vec::<f32>().unwrap();
        let (p0, p1) = (1.0 / (1.0 + 1f32.exp()), 1f32.exp() / (1.0 + 1f32.exp()));
        assert!((o[0] - 3.0).abs() < 1e-6 && (o[1] - (3.0 * p0 + 5.0 * p1)).abs() < 1e-5, "{o:?}");
        // loss = o0 + o1: dV = (1 + p0, p1); dS1 = P1 * (V - O1) (dO = 1), dQ1 = dS1 . K, dK = q1 dS1
        let grads = out.sum().backward();
        let g = |x: &Tensor<AB, 4>| x.grad(&grads).unwrap().into_data().to_vec::<f32>().unwrap();
        let o1 = 3.0 * p0 + 5.0 * p1;
        let (ds0, ds1) = (p0 * (3.0 - o1), p1 * (5.0 - o1));
        let close = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-5);
        assert!(close(&g(&v), &[1.0 + p0, p1]), "dv {:?}", g(&v));
        assert!(close(&g(&q), &[0.0, ds0 * 1.0 + ds1 * 2.0]), "dq {:?}", g(&q));
        assert!(close(&g(&k), &[ds0 * 1.0, ds1 * 1.0]), "dk {:?}", g(&k));
    }

    /// The recomputing operation against the composed ops under autodiff: grouped heads (kv 2, rep 3), queries
    /// after a prefix (start 3, so keys = 3 + t), f32 and bf16.
    #[test]
    fn recomputing_backward_equals_the_composed_ops() {
        let _exclusive = crate::device::autodiff_exclusive();
        let dev = Default::default();
        for (dtype, tol) in [(DType::F32, 1e-5), (DType::BF16, 2e-2)] {
            let (b, kv, rep, t, start, hd) = (2, 2, 3, 5, 3, 8);
            let keys = start + t;
            let rnd =
                |shape: [usize; 4]| Tensor::<Flex, 4>::random(shape, Distribution::Normal(0.0, 1.0), &dev).cast(dtype);
            let (q0, k0, v0) = (rnd([b, kv, rep * t, hd]), rnd([b, kv, keys, hd]), rnd([b, kv, keys, hd]));
            let w = rnd([b, kv, rep * t, hd]); // a loss that weights each output differently
            let run = |recompute: bool| {
                let lift = |x: &Tensor<Flex, 4>| Tensor::<AB, 4>::from_inner(x.clone()).require_grad();
                let (q, k, v) = (lift(&q0), lift(&k0), lift(&v0));
                let out = if recompute {
                    causal(q.clone(), k.clone(), v.clone(), Mask::Causal { start }, t)
                } else {
                    apply(probs(q.clone(), k.clone(), &Mask::Causal { start }, t), v.clone())
                };
                let loss = (to_dtype(out.clone(), DType::F32) * Tensor::from_inner(w.clone().cast(DType::F32))).sum();
                let grads = loss.backward();
                let vec = |x: Tensor<Flex, 4>| x.cast(DType::F32).into_data().to_vec::<f32>().unwrap();
                [
                    vec(out.inner()),
                    vec(q.grad(&grads).unwrap()),
                    vec(k.grad(&grads).unwrap()),
                    vec(v.grad(&grads).unwrap()),
                ]
            };
            let (ours, composed) = (run(true), run(false));
            assert_close(&format!("{dtype:?}"), &["out", "dq", "dk", "dv"], &ours, &composed, tol);
        }
    }

    /// A given mask (packed rows: two sequences in a row, each causal within itself) through the recomputing
    /// operation against the composed ops; and a given mask equal to the causal one gives the causal results.
    #[test]
    fn a_given_mask_is_kept_for_the_recomputed_backward() {
        let _exclusive = crate::device::autodiff_exclusive();
        let dev = Default::default();
        let (b, kv, rep, t, hd) = (2, 2, 2, 6, 4);
        let rnd = |shape: [usize; 4]| Tensor::<Flex, 4>::random(shape, Distribution::Normal(0.0, 1.0), &dev);
        let (q0, k0, v0, w) =
            (rnd([b, kv, rep * t, hd]), rnd([b, kv, t, hd]), rnd([b, kv, t, hd]), rnd([b, kv, rep * t, hd]));
        // row 0: sequences of 2 and 4 cells; row 1: one of 6 (causal)
        let first = |r: usize, i: usize| if r == 0 && i >= 2 { 2 } else { 0 };
        let hide: Vec<bool> =
            (0..b).flat_map(|r| (0..t).flat_map(move |i| (0..t).map(move |j| j > i || j < first(r, i)))).collect();
        let hide = Tensor::<AB, 4, Bool>::from_data(TensorData::new(hide, [b, 1, t, t]), &dev);
        let run = |mask: Mask<AB>, recompute: bool| {
            let lift = |x: &Tensor<Flex, 4>| Tensor::<AB, 4>::from_inner(x.clone()).require_grad();
            let (q, k, v) = (lift(&q0), lift(&k0), lift(&v0));
            let out = if recompute {
                causal(q.clone(), k.clone(), v.clone(), mask, t)
            } else {
                apply(probs(q.clone(), k.clone(), &mask, t), v.clone())
            };
            let grads = (out.clone() * Tensor::from_inner(w.clone())).sum().backward();
            let vec = |x: Tensor<Flex, 4>| x.into_data().to_vec::<f32>().unwrap();
            [vec(out.inner()), vec(q.grad(&grads).unwrap()), vec(k.grad(&grads).unwrap()), vec(v.grad(&grads).unwrap())]
        };
        let names = ["out", "dq", "dk", "dv"];
        let ours = run(Mask::Hide(hide.clone()), true);
        assert_close("packed", &names, &ours, &run(Mask::Hide(hide), false), 1e-5);
        // row 1 is plain causal: its half of every result is the causal mask's
        let causal_run = run(Mask::Causal { start: 0 }, true);
        let half = |x: &Vec<f32>| x[x.len() / 2..].to_vec();
        let (a, c): (Vec<_>, Vec<_>) = ours.iter().zip(&causal_run).map(|(a, c)| (half(a), half(c))).unzip();
        assert_close("row 1", &names, &a, &c, 1e-6);
        // row 0's second sequence does not see its first: its outputs differ from the causal mask's
        let (o, oc) = (&ours[0], &causal_run[0]);
        assert!((0..o.len() / 2).any(|i| (o[i] - oc[i]).abs() > 1e-3));
    }

    /// Queries at positions 2 and 3 over 5 keys: query 0 (position 2) hides keys 3 and 4, query 1 key 4.
    #[test]
    fn causal_mask_hides_the_keys_after_each_query() {
        let hide = causal_hide::<Flex>(2, 2, 5, &Default::default()).into_data().to_vec::<bool>().unwrap();
        assert_eq!(hide, [false, false, false, true, true, false, false, false, false, true]);
    }

    /// Without autodiff (inference), `causal` is the composed ops.
    #[test]
    fn inference_backend_uses_the_composed_ops() {
        let _exclusive = crate::device::autodiff_exclusive();
        let dev = Default::default();
        let rnd = |shape: [usize; 4]| Tensor::<Flex, 4>::random(shape, Distribution::Normal(0.0, 1.0), &dev);
        let (q, k, v) = (rnd([1, 1, 4, 4]), rnd([1, 1, 4, 4]), rnd([1, 1, 4, 4]));
        let a = causal(q.clone(), k.clone(), v.clone(), Mask::Causal { start: 0 }, 4).into_data();
        let b = apply(probs(q, k, &Mask::Causal { start: 0 }, 4), v).into_data();
        assert_eq!(a, b);
    }
}
