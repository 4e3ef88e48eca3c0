//! Gradient checkpointing (`train autorag --gradient-checkpointing`): the backward pass of one micro-batch with
//! only each decoder layer's input kept, every layer's activations recomputed when its gradient is needed.
//!
//! **The method** (Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost"; what Hugging Face's
//! `gradient_checkpointing_enable()` does for a decoder: one checkpoint per layer). A plain backward keeps every
//! intermediate of every layer: for each layer the attention scores and probabilities `[b, h, t, t]` and the
//! MLP's `[b, t, ffn]` tensors, so memory grows as layers x t^2. Here:
//!
//! 1. a forward pass without a graph (the inner backend) keeps the L layer inputs `h_0 ... h_{L-1}` `[b, t, d]`
//!    and the last layer's output `h_L`;
//! 2. the head (final norm, LM head, masked NLL) runs with a graph from `h_L`, and its backward gives the
//!    head's gradients and `g_L = dLoss/dh_L`;
//! 3. for l = L-1 ... 0, layer l runs again from `h_l` with a graph, and the backward of `sum(layer_l(h_l) *
//!    g_{l+1})` gives layer l's gradients and `g_l = dLoss/dh_l` (the vector-Jacobian product);
//! 4. the embedding's gradient is the backward of `sum(embed(ids) * g_0)` (skipped when it is frozen).
//!
//! Memory: the L layer inputs plus one layer's graph, against L layers' graphs; work: one more forward pass
//! (about a third more arithmetic per update; the CPU runs of `scripts/bench-train-memory.sh` were no slower). The loss and the gradients are the plain backward's up to float rounding:
//! the first forward pass runs on the inner backend (burn's flex kernels may order a product's additions
//! differently there), and each parameter's partial gradients are summed across the separate backward passes.
//! With tied embeddings the LM head's and the embedding's parts of `embed_tokens`' gradient are added.

use burn::module::AutodiffModule;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::Tensor;

use super::data::Batch;
use super::loss::{at, batch_ids, nll_of_hidden, scalar};
use super::optim::GradAccum;
use crate::model::llama::{in_dtype, Llama, Rope};
use crate::model::Precision;

/// Adds to `grads` the gradients of `nll_sum(batch) / n_targets` with one checkpoint per decoder layer (module
/// doc) and returns that loss. `rope` and `rope_inner` hold the same tables on the autodiff and inner backends,
/// in the compute dtype `precision`. In bf16 each part (the head, each layer, the embedding) runs on a copy cast
/// for its own backward pass, so that each backward reaches the f32 parameters through casts of its own.
#[allow(clippy::too_many_arguments)]
pub fn backward_checkpointed<AB: AutodiffBackend>(
    model: &Llama<AB>,
    precision: Precision,
    rope: &Rope<AB>,
    rope_inner: &Rope<AB::InnerBackend>,
    batch: &Batch,
    n_targets: usize,
    grads: &mut GradAccum<AB::InnerBackend>,
    device: &AB::Device,
) -> f64 {
    let dtype = precision.dtype();
    // 1. Forward without a graph, keeping each layer's input: inputs[l] = h_l, [b, t, d]
    let inner = in_dtype(model.valid(), dtype);
    let mut h = inner.embed(batch_ids(batch, device));
    let mut inputs = Vec::with_capacity(inner.layers.len());
    let at_inner = at(rope_inner, batch);
    for block in &inner.layers {
        inputs.push(h.clone());
        h = block.forward(h, rope_inner, &at_inner, None, false).0;
    }
    drop(inner);

    // 2. The head from h_L: its gradients, and g_L = dLoss/dh_L
    let h_last = Tensor::<AB, 3>::from_inner(h).require_grad();
    let head = in_dtype(model.clone(), dtype);
    let loss = nll_of_hidden(&head, head.norm.forward(h_last.clone()), batch, device).div_scalar(n_targets as f64);
    let value = scalar(loss.clone().inner());
    let mut g = loss.backward();
    let mut upstream = h_last.grad_remove(&mut g).expect("the loss depends on the last hidden state");
    grads.add::<AB, _>(model, g);

    // 3. Layers last to first: recompute layer l from h_l, then the product of its Jacobian with g_{l+1}
    let at = at(rope, batch);
    for (block, x) in model.layers.iter().zip(inputs).rev() {
        let x = Tensor::<AB, 3>::from_inner(x).require_grad();
        let block = in_dtype(block.clone(), dtype);
        let y = block.forward(x.clone(), rope, &at, None, false).0;
        let mut g = (y * Tensor::<AB, 3>::from_inner(upstream)).sum().backward();
        upstream = x.grad_remove(&mut g).expect("a layer's output depends on its input");
        grads.add::<AB, _>(model, g);
    }

    // 4. The embedding (frozen under LoRA: nothing to do)
    if model.embed_tokens.val().is_require_grad() {
        let e = in_dtype(model.clone(), dtype).embed(batch_ids(batch, device));
        let g = (e * Tensor::<AB, 3>::from_inner(upstream)).sum().backward();
        grads.add::<AB, _>(model, g);
    }
    value
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{setup, small_cfg, AB};
    use super::super::loss::nll_sum;
    use super::super::{data::make_batch, lora};
    use super::*;
    use crate::model::build_llama;

    /// The checkpointed backward gives the plain backward's loss and gradients, for full fine-tuning (every
    /// parameter, the tied embedding included) and for LoRA (adapters only), on a padded two-row batch.
    #[test]
    fn checkpointed_gradients_equal_the_plain_ones() {
        let _exclusive = crate::device::autodiff_exclusive();
        let Some((mcfg, w, data)) = setup() else { return };
        let dev = Default::default();
        // two dialogues of different lengths: the shorter one is padded
        let a = &data.train[0];
        let b = data.train.iter().find(|e| e.len() != a.len()).expect("toy dialogues of two lengths");
        let batch = make_batch(&[a, b], data.pad_id);
        let n = batch.real;
        let rope = Rope::<AB>::new(&mcfg, 256, &dev);
        let rope_inner = Rope::new(&mcfg, 256, &dev);
        for use_lora in [false, true] {
            let base = build_llama::<AB>(&w, &mcfg, &dev).unwrap();
            let model = match small_cfg(use_lora).lora {
                Some(l) => lora::attach(base, &l, 7, &dev).unwrap(),
                None => base,
            };
            let mut plain = GradAccum::default();
            let loss = nll_sum(&model, &rope, &batch, &dev).div_scalar(n as f64);
            let plain_loss = scalar(loss.clone().inner());
            plain.add::<AB, _>(&model, loss.backward());
            let mut ckpt = GradAccum::default();
            let ckpt_loss =
                backward_checkpointed(&model, Precision::F32, &rope, &rope_inner, &batch, n, &mut ckpt, &dev);
            assert!((plain_loss - ckpt_loss).abs() < 1e-6 * plain_loss, "lora={use_lora}: {plain_loss} vs {ckpt_loss}");
            let count = plain.sums.iter().flatten().count();
            assert_eq!(count, ckpt.sums.iter().flatten().count(), "lora={use_lora}: the same parameters");
            // full: the (tied) embedding, the final norm, and per layer two norms and seven projections; LoRA:
            // A and B of q, v and up per layer
            let expected = if use_lora { 6 * mcfg.num_layers } else { 2 + 9 * mcfg.num_layers };
            assert_eq!(count, expected, "lora={use_lora}: trainable tensors");
            let mut worst = 0.0f64;
            for (a, b) in plain.sums.iter().zip(&ckpt.sums) {
                let (Some(a), Some(b)) = (a, b) else {
                    assert!(a.is_none() && b.is_none());
                    continue;
                };
                let a = a.clone().into_data().to_vec::<f32>().unwrap();
                let b = b.clone().into_data().to_vec::<f32>().unwrap();
                let scale = a.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-12);
                for (x, y) in a.iter().zip(&b) {
                    worst = worst.max(((x - y).abs() / scale) as f64);
                }
            }
            eprintln!("lora={use_lora}: loss {plain_loss:.6}, {count} gradients, worst difference {worst:.2e} of the largest entry");
            assert!(worst < 1e-4, "lora={use_lora}: gradients differ by {worst:.2e} of their largest entry");
        }
    }
}
