//! Where the trainer's own autodiff operations meet the generic model code.
//!
//! The decoder ([`super::llama`]) is generic over burn's `Backend`; training runs it on `Autodiff<Flex>` (and
//! `Autodiff<Cuda>` in a CUDA build), where a few layers ([`super::attention`], [`super::swiglu`]) use one
//! autodiff operation of their own, written with burn-autodiff's `Backward` interface, instead of the tensor ops
//! whose intermediates autodiff would keep. Rust has no specialization, so [`dispatch`] finds those backends by
//! type at run time: an operation is an [`AutodiffOp`], run on the inner backend's tensors when `B` is one of
//! them, and through its generic fallback (the same formula in burn's tensor ops) otherwise.

use std::any::{Any, TypeId};

use burn::prelude::Backend;
use burn::tensor::{Bool, Tensor, TensorPrimitive};
use burn_autodiff::checkpoint::strategy::NoCheckpointing;
use burn_autodiff::ops::{Backward, OpsKind};
use burn_autodiff::Autodiff;

/// An autodiff backend's float tensor over inner backend `I`.
pub(crate) type AdTensor<I> = <Autodiff<I> as burn::tensor::backend::BackendTypes>::FloatTensorPrimitive;

/// An operation with its own backward on `Autodiff<I>` and burn's tensor ops on any other backend `B`.
pub(crate) trait AutodiffOp<B: Backend> {
    type Output;
    /// On `Autodiff<I>` (`B` is `Autodiff<I>`: [`inner`] and [`outer`] convert the tensors).
    fn autodiff<I: Backend>(self) -> Self::Output;
    /// On any other backend.
    fn fallback(self) -> Self::Output;
}

/// Runs `op` with its own backward on the training backends, through its fallback elsewhere.
pub(crate) fn dispatch<B: Backend, O: AutodiffOp<B>>(op: O) -> O::Output {
    if is_autodiff_of::<B, burn::backend::Flex>() {
        return op.autodiff::<burn::backend::Flex>();
    }
    #[cfg(feature = "cuda")]
    if is_autodiff_of::<B, burn::backend::Cuda>() {
        return op.autodiff::<burn::backend::Cuda>();
    }
    op.fallback()
}

fn is_autodiff_of<B: Backend, I: Backend>() -> bool {
    TypeId::of::<B::FloatTensorPrimitive>() == TypeId::of::<AdTensor<I>>()
}

/// `x` as `Autodiff<I>`'s tensor; `B` must be `Autodiff<I>` (checked by [`dispatch`]).
pub(crate) fn inner<B: Backend, I: Backend, const D: usize>(x: Tensor<B, D>) -> AdTensor<I> {
    same_type(x.into_primitive().tensor())
}

/// The inverse of [`inner`].
pub(crate) fn outer<B: Backend, I: Backend, const D: usize>(x: AdTensor<I>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(same_type::<_, B::FloatTensorPrimitive>(x)))
}

/// A bool tensor of `B` (`Autodiff<I>`, checked by [`dispatch`]) as `I`'s: autodiff keeps no graph for them, so the
/// primitive is the inner backend's.
pub(crate) fn inner_bool<B: Backend, I: Backend, const D: usize>(x: Tensor<B, D, Bool>) -> Tensor<I, D, Bool> {
    Tensor::from_primitive(same_type::<B::BoolTensorPrimitive, I::BoolTensorPrimitive>(x.into_primitive()))
}

/// Records `op` in the autodiff graph over `inputs`: `forward` computes the output from the inputs' primitives and,
/// when a gradient is wanted, `state` makes the backward's state from them (what it keeps).
pub(crate) fn record<I: Backend, O: Backward<I, N>, const N: usize>(
    op: O,
    inputs: [AdTensor<I>; N],
    forward: impl FnOnce([I::FloatTensorPrimitive; N]) -> I::FloatTensorPrimitive,
    state: impl FnOnce([I::FloatTensorPrimitive; N]) -> O::State,
) -> AdTensor<I> {
    let nodes = inputs.each_ref().map(|x| x.node.clone());
    let prims = inputs.map(|x| x.primitive);
    match op.prepare::<NoCheckpointing>(nodes).compute_bound().stateful() {
        OpsKind::Tracked(prep) => {
            let out = forward(prims.clone());
            prep.finish(state(prims), out)
        }
        OpsKind::UnTracked(prep) => prep.finish(forward(prims)),
    }
}

/// A primitive of the inner backend as a tensor.
pub(crate) fn float<I: Backend, const D: usize>(p: I::FloatTensorPrimitive) -> Tensor<I, D> {
    Tensor::from_primitive(TensorPrimitive::Float(p))
}

/// A tensor's primitive.
pub(crate) fn prim<I: Backend, const D: usize>(x: Tensor<I, D>) -> I::FloatTensorPrimitive {
    x.into_primitive().tensor()
}

/// A value of type `T` as type `U`, which the caller has checked is the same type.
fn same_type<T: 'static, U: 'static>(x: T) -> U {
    *(Box::new(x) as Box<dyn Any>).downcast::<U>().expect("the same type, checked by TypeId")
}

/// Test helper: each of `ours` within `tol` times the largest magnitude (at least 1) of its `composed` twin.
#[cfg(test)]
pub(crate) fn assert_close(what: &str, names: &[&str], ours: &[Vec<f32>], composed: &[Vec<f32>], tol: f32) {
    for (name, (a, c)) in names.iter().zip(ours.iter().zip(composed)) {
        let scale = c.iter().fold(1f32, |m, x| m.max(x.abs()));
        let worst = a.iter().zip(c).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
        assert!(worst <= tol * scale, "{what} {name}: off by {worst} (scale {scale})");
    }
}
