//! The objective: the summed negative log-likelihood of the model tokens of a batch (Eq. 3), and the mean per
//! target token over a set of examples for validation.

use burn::prelude::Backend;
use burn::tensor::{DType, Int, Tensor, TensorData};

use super::data::{eval_batches, make_batch, Batch, Example, Shapes};
use crate::model::llama::{to_dtype, At, Capture, Llama, Packed, Rope};
use crate::model::reduce;

/// Sum over the batch's targets of `-log p(target | prefix)`: `[1]`. The entries of a padded batch's target
/// list past `real` are weighted 0.
pub fn nll_sum<B: Backend>(model: &Llama<B>, rope: &Rope<B>, batch: &Batch, device: &B::Device) -> Tensor<B, 1> {
    let ids = batch_ids(batch, device);
    let hidden = match at(rope, batch) {
        At::Packed(p) => model.forward_packed(ids, rope, &p),
        At::Start(_) => model.forward(ids, rope, 0, None, Capture::default()).hidden, // [b, t, d]
    };
    nll_of_hidden(model, hidden, batch, device)
}

/// Where the batch's tokens sit: packed rows ([`Batch::seq`]), or one dialogue per row from position 0.
pub(super) fn at<B: Backend>(rope: &Rope<B>, batch: &Batch) -> At<B> {
    match &batch.seq {
        Some(seq) => At::Packed(Packed::new(rope, seq, batch.b, batch.t)),
        None => At::Start(0),
    }
}

/// The batch's token ids: `[b, t]`.
pub(super) fn batch_ids<B: Backend>(batch: &Batch, device: &B::Device) -> Tensor<B, 2, Int> {
    Tensor::<B, 2, Int>::from_data(TensorData::new(batch.ids.clone(), [batch.b, batch.t]), device)
}

/// [`nll_sum`] from the final hidden states (after the final norm, `[b, t, d]`): the LM head and the loss.
pub(super) fn nll_of_hidden<B: Backend>(
    model: &Llama<B>,
    hidden: Tensor<B, 3>,
    batch: &Batch,
    device: &B::Device,
) -> Tensor<B, 1> {
    let (b, t, n) = (batch.b, batch.t, batch.positions.len());
    let d = hidden.dims()[2];
    let pos = Tensor::<B, 1, Int>::from_data(TensorData::new(batch.positions.clone(), [n]), device);
    // Only the positions that predict a model token go through the LM head: [1, n, d] -> [1, n, vocab]
    let h = hidden.reshape([b * t, d]).select(0, pos).unsqueeze::<3>();
    // the LM head in the model's dtype, the loss in f32: -log p(target) = log sum exp(logits) - logit(target), the
    // normaliser summed over the vocabulary in stages (model::reduce: one GPU thread per row would read the whole row)
    let logits = to_dtype(model.logits(h), DType::F32); // [1, n, vocab]
    let vocab = logits.dims()[2];
    let logits = logits.reshape([n, vocab]);
    let tgt = Tensor::<B, 2, Int>::from_data(TensorData::new(batch.targets.clone(), [n, 1]), device);
    let lse = reduce::log_sum_exp_rows(logits.clone(), reduce::CHUNK); // [n, 1]
    let nll = (lse - logits.gather(1, tgt)).reshape([1, n, 1]);
    if batch.real == n {
        return nll.sum();
    }
    let weight: Vec<f32> = (0..n).map(|k| if k < batch.real { 1.0 } else { 0.0 }).collect();
    (nll * Tensor::<B, 3>::from_data(TensorData::new(weight, [1, n, 1]), device)).sum()
}

pub(super) fn scalar<B: Backend>(t: Tensor<B, 1>) -> f64 {
    t.into_data().convert::<f64>().to_vec::<f64>().unwrap()[0]
}

/// Mean NLL per target token over `examples` (no gradients).
pub fn evaluate<B: Backend>(
    model: &Llama<B>,
    rope: &Rope<B>,
    examples: &[Example],
    batch: usize,
    shapes: Shapes,
    pad_id: u32,
    device: &B::Device,
) -> f64 {
    let lengths: Vec<usize> = examples.iter().map(|e| e.len()).collect();
    let (mut sum, mut n) = (0.0, 0usize);
    for idx in eval_batches(&lengths, batch) {
        let exs: Vec<&Example> = idx.iter().map(|&i| &examples[i]).collect();
        let b = shapes.apply(make_batch(&exs, pad_id), pad_id);
        n += b.real;
        sum += scalar(nll_sum(model, rope, &b, device));
    }
    if n == 0 {
        f64::NAN
    } else {
        sum / n as f64
    }
}

#[cfg(test)]
mod tests {
    use super::super::data::make_packed_batch;
    use super::super::fixtures::setup;
    use super::*;
    use crate::model::build_llama;
    use burn::backend::Flex;

    #[test]
    fn nll_counts_only_targets_and_ignores_padding() {
        let Some((mcfg, w, data)) = setup() else { return };
        let dev: burn::backend::flex::FlexDevice = Default::default();
        let m = build_llama::<Flex>(&w, &mcfg, &dev).unwrap();
        let rope = Rope::<Flex>::new(&mcfg, 256, &dev);
        let (a, b) = (&data.train[0], &data.train[1]);
        let alone = scalar(nll_sum(&m, &rope, &make_batch(&[a], data.pad_id), &dev))
            + scalar(nll_sum(&m, &rope, &make_batch(&[b], data.pad_id), &dev));
        let together = scalar(nll_sum(&m, &rope, &make_batch(&[a, b], data.pad_id), &dev));
        assert!((alone - together).abs() < 1e-3 * alone.abs(), "{alone} vs {together}");
        // Changing a prompt token changes the loss only through context; changing a target changes it.
        let mut c = a.clone();
        let j = c.loss.iter().rposition(|&l| l).unwrap();
        c.ids[j] = (c.ids[j] + 1) % 49152;
        let changed = scalar(nll_sum(&m, &rope, &make_batch(&[&c], data.pad_id), &dev));
        let orig = scalar(nll_sum(&m, &rope, &make_batch(&[a], data.pad_id), &dev));
        assert!((changed - orig).abs() > 1e-6);
        // All-false mask except one token: the loss is that token's NLL alone.
        let mut one = a.clone();
        one.loss = vec![false; one.len()];
        one.loss[5] = true;
        let b1 = make_batch(&[&one], data.pad_id);
        assert_eq!(b1.targets.len(), 1);
        assert!(scalar(nll_sum(&m, &rope, &b1, &dev)) > 0.0);
        // Padded to a fixed shape (more rows, a longer row, a longer target list): the same loss.
        let padded = make_batch(&[a, b], data.pad_id).padded(4, 256, data.pad_id);
        assert!(padded.real < padded.targets.len() && padded.b == 2 && padded.t > a.len().max(b.len()));
        let three = make_batch(&[a, b, b], data.pad_id);
        let (tight3, padded3) = (scalar(nll_sum(&m, &rope, &three, &dev)), three.padded(4, 256, data.pad_id));
        assert_eq!(padded3.b, 4, "an all-pad row added");
        let at_four_rows = scalar(nll_sum(&m, &rope, &padded3, &dev));
        assert!((at_four_rows - tight3).abs() < 1e-4 * tight3.abs(), "{at_four_rows} vs {tight3}");
        let at_fixed_shape = scalar(nll_sum(&m, &rope, &padded, &dev));
        assert!((at_fixed_shape - together).abs() < 1e-4 * together.abs(), "{at_fixed_shape} vs {together}");
    }

    /// Dialogues packed into rows, each at its own positions and attending to itself only, have the losses they
    /// have alone: the packed rows' sum is the dialogues' sum, at a tight and at a fixed shape. Without the mask,
    /// the second dialogue of a row would see the first one (the positions starting again alone would change
    /// nothing: RoPE's scores depend only on the distance between positions).
    #[test]
    fn packed_rows_give_each_dialogue_its_own_loss() {
        let Some((mcfg, w, data)) = setup() else { return };
        let dev: burn::backend::flex::FlexDevice = Default::default();
        let m = build_llama::<Flex>(&w, &mcfg, &dev).unwrap();
        let rope = Rope::<Flex>::new(&mcfg, 512, &dev);
        let (a, b, c) = (&data.train[0], &data.train[1], &data.train[2]);
        let alone: f64 =
            [a, b, c].iter().map(|e| scalar(nll_sum(&m, &rope, &make_batch(&[e], data.pad_id), &dev))).sum();
        let packed = make_packed_batch(&[vec![a, b], vec![c]], data.pad_id);
        assert_eq!(packed.t, a.len() + b.len());
        let together = scalar(nll_sum(&m, &rope, &packed, &dev));
        assert!((alone - together).abs() < 1e-4 * alone.abs(), "{alone} vs {together}");
        let fixed = scalar(nll_sum(&m, &rope, &packed.padded(4, 512, data.pad_id), &dev));
        assert!((alone - fixed).abs() < 1e-4 * alone.abs(), "{alone} vs {fixed}");
        // the same tokens as one dialogue per row of the packed layout, without the packing: b sees a
        let mut unpacked = packed.clone();
        unpacked.seq = None;
        let leaked = scalar(nll_sum(&m, &rope, &unpacked, &dev));
        assert!((alone - leaked).abs() > 1e-3 * alone.abs(), "{alone} vs {leaked}");
    }
}
