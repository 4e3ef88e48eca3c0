//! Casting between the float dtypes the decoder computes in.

use burn::prelude::Backend;
use burn::tensor::{DType, Tensor};

/// `x` in `dtype`; `x` itself where it is already (under autodiff no cast joins the graph).
pub fn to_dtype<B: Backend, const D: usize>(x: Tensor<B, D>, dtype: DType) -> Tensor<B, D> {
    if x.dtype() == dtype {
        x
    } else {
        x.cast(dtype)
    }
}
