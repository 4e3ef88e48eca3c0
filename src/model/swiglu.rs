//! The gated activation of the decoder's MLP (SwiGLU, Shazeer 2020): `silu(g) * u` for the gate and up
//! projections `g`, `u` (`[b, t, intermediate]`), `silu(g) = g * sigmoid(g)`.
//!
//! burn's `silu` is `g * sigmoid(g)` in tensor ops, so under autodiff the product keeps `g`, `sigmoid(g)`,
//! `silu(g)` and `u` for its backward: four `[b, t, intermediate]` tensors per layer, where PyTorch's SiLU and
//! product keep three. On the trainer's autodiff backends (`model::autodiff_ops`) it is one operation that keeps
//! `g` and `u` only and recomputes the sigmoid in its backward:
//!
//! ```text
//! s = sigmoid(g)      du = dh * g * s      dg = dh * u * s * (1 + g * (1 - s))
//! ```

use burn::prelude::Backend;
use burn::tensor::activation::{sigmoid, silu};
use burn::tensor::Tensor;
use burn_autodiff::checkpoint::base::Checkpointer;
use burn_autodiff::grads::Gradients;
use burn_autodiff::ops::{Backward, Ops};

use super::autodiff_ops::{dispatch, float, inner, outer, prim, record, AutodiffOp};

/// `silu(gate) * up`, both `[b, t, intermediate]`.
pub fn swiglu<B: Backend>(gate: Tensor<B, 3>, up: Tensor<B, 3>) -> Tensor<B, 3> {
    dispatch(SwiGlu { gate, up })
}

struct SwiGlu<B: Backend> {
    gate: Tensor<B, 3>,
    up: Tensor<B, 3>,
}

impl<B: Backend> AutodiffOp<B> for SwiGlu<B> {
    type Output = Tensor<B, 3>;

    fn fallback(self) -> Tensor<B, 3> {
        silu(self.gate) * self.up
    }

    fn autodiff<I: Backend>(self) -> Tensor<B, 3> {
        let out = record(
            SwiGluBackward,
            [inner::<B, I, 3>(self.gate), inner::<B, I, 3>(self.up)],
            |[g, u]| prim(silu(float::<I, 3>(g)) * float::<I, 3>(u)),
            |[g, u]| (g, u),
        );
        outer::<B, I, 3>(out)
    }
}

#[derive(Debug)]
struct SwiGluBackward;

impl<I: Backend> Backward<I, 2> for SwiGluBackward {
    /// gate, up
    type State = (I::FloatTensorPrimitive, I::FloatTensorPrimitive);

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [g_node, u_node] = ops.parents;
        let dh = float::<I, 3>(grads.consume::<I>(&ops.node));
        let (g, u) = (float::<I, 3>(ops.state.0), float::<I, 3>(ops.state.1));
        let s = sigmoid(g.clone());
        if let Some(node) = u_node {
            grads.register::<I>(node.id, prim(dh.clone() * g.clone() * s.clone()));
        }
        if let Some(node) = g_node {
            // d silu / dg = s + g s (1 - s) = s (1 + g (1 - s))
            let dsilu = s.clone() * (g * (s.neg().add_scalar(1.0))).add_scalar(1.0);
            grads.register::<I>(node.id, prim(dh * u * dsilu));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::autodiff_ops::assert_close;
    use burn::backend::{Autodiff, Flex};
    use burn::tensor::{DType, Distribution, TensorData};

    type AB = Autodiff<Flex>;

    /// Hand-worked: g = (0, 1), u = (2, 3), loss = sum(h). At g = 0: s = 1/2, silu = 0, so du = 0 and
    /// dg = u * 1/2 = 1. At g = 1: s = 0.7311, du = 0.7311, dg = 3 * 0.7311 * (1 + 0.2689) = 2.7828.
    #[test]
    fn hand_worked() {
        let _exclusive = crate::device::autodiff_exclusive();
        let dev = Default::default();
        let g = Tensor::<AB, 3>::from_data(TensorData::new(vec![0.0f32, 1.0], [1, 1, 2]), &dev).require_grad();
        let u = Tensor::<AB, 3>::from_data(TensorData::new(vec![2.0f32, 3.0], [1, 1, 2]), &dev).require_grad();
        let h = swiglu(g.clone(), u.clone());
        let s1 = 1.0 / (1.0 + (-1f32).exp());
        let hv = h.clone().into_data().to_vec::<f32>().unwrap();
        assert!(hv[0].abs() < 1e-7 && (hv[1] - 3.0 * s1).abs() < 1e-6, "{hv:?}");
        let grads = h.sum().backward();
        let dg = g.grad(&grads).unwrap().into_data().to_vec::<f32>().unwrap();
        let du = u.grad(&grads).unwrap().into_data().to_vec::<f32>().unwrap();
        assert!((du[0]).abs() < 1e-7 && (du[1] - s1).abs() < 1e-6, "du {du:?}");
        assert!((dg[0] - 1.0).abs() < 1e-6 && (dg[1] - 3.0 * s1 * (2.0 - s1)).abs() < 1e-5, "dg {dg:?}");
    }

    /// The operation's gradients against burn's composed `silu(g) * u`, f32 and bf16.
    #[test]
    fn backward_equals_the_composed_ops() {
        let _exclusive = crate::device::autodiff_exclusive();
        let dev = Default::default();
        for (dtype, tol) in [(DType::F32, 1e-6), (DType::BF16, 1e-2)] {
            let rnd = |s: f64| Tensor::<Flex, 3>::random([2, 3, 16], Distribution::Normal(0.0, s), &dev).cast(dtype);
            let (g0, u0, w) = (rnd(3.0), rnd(1.0), rnd(1.0));
            let run = |own: bool| {
                let lift = |x: &Tensor<Flex, 3>| Tensor::<AB, 3>::from_inner(x.clone()).require_grad();
                let (g, u) = (lift(&g0), lift(&u0));
                let h = if own { swiglu(g.clone(), u.clone()) } else { silu(g.clone()) * u.clone() };
                let grads =
                    (h.clone().cast(DType::F32) * Tensor::from_inner(w.clone().cast(DType::F32))).sum().backward();
                let vec = |x: Tensor<Flex, 3>| x.cast(DType::F32).into_data().to_vec::<f32>().unwrap();
                [vec(h.inner()), vec(g.grad(&grads).unwrap()), vec(u.grad(&grads).unwrap())]
            };
            let (ours, composed) = (run(true), run(false));
            assert_close(&format!("{dtype:?}"), &["h", "dg", "du"], &ours, &composed, tol);
        }
    }
}
