//! Training MIND's detector on a label store read shard by shard from disk (`train detector --stream`), for
//! stores larger than memory: memory is one shard plus a shuffle buffer, whatever the number of rows. Splits,
//! class weights, standardisation, the network, the optimizer and the choice of the best epoch are
//! [`super::train`]'s; only the batch order differs (see [`train_stream`]).

use std::collections::BTreeMap;

use anyhow::{ensure, Result};
use burn::module::AutodiffModule;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Tensor, TensorData};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::metrics::Metrics;
use super::train::{check_config, predict, split_of, Index, Moments, Run, Split, TrainConfig, Trained};
use crate::labels::FeatureStream;

/// Trains on `stream` without holding its rows: memory is one shard plus a shuffle buffer of `buffer` rows,
/// whatever the number of rows. Each epoch visits the shards in a new seeded order and passes the train rows
/// through the buffer (as tf.data's and webdataset's shuffle buffers: once full, each arriving row replaces a
/// uniformly drawn one, which goes to the batch). With a buffer at least as large as the train split this is a
/// full shuffle, but not the same permutation as [`train`](super::train::train)'s, so the two give different
/// (equally valid) networks. Splits, class weights and standardisation are computed exactly as
/// [`train`](super::train::train) does; evaluation scores every row each epoch, keeping one probability per row.
pub fn train_stream<B: AutodiffBackend>(
    stream: &FeatureStream,
    buffer: usize,
    cfg: &TrainConfig,
    device: &B::Device,
    log: &mut dyn FnMut(&str),
) -> Result<Trained<B::InnerBackend>> {
    check_config(cfg, &stream.columns)?;
    ensure!(buffer > 0, "the shuffle buffer must hold at least one row");
    let dim = stream.dim;
    let mut index = Index::default();
    stream.for_each_label(|ids, labels| {
        index.add(&ids, &labels);
        Ok(())
    })?;
    let sizes = index.sizes(log)?;
    let norm = match cfg.standardize {
        false => None,
        true => {
            let mut m = Moments::new(dim);
            stream.for_each(&stream.in_order(), |b| {
                for (row, a) in b.x.chunks(dim).zip(&b.article_ids) {
                    if split_of(a) == Split::Train {
                        m.add(row);
                    }
                }
                Ok(())
            })?;
            Some(m.norm())
        }
    };
    let normalize = |mut x: Vec<f32>| {
        if let Some(n) = &norm {
            x = x.chunks(dim).flat_map(|row| n.apply(row)).collect();
        }
        x
    };

    let mut run = Run::<B>::start(cfg, dim, &sizes, device, log);
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let mut shards = stream.in_order();
    for epoch in 1..=cfg.epochs {
        shards.shuffle(&mut rng);
        let mut shuffle = ShuffleBuffer::new(buffer, dim);
        let mut batch = (Vec::with_capacity(cfg.batch_size * dim), Vec::with_capacity(cfg.batch_size));
        let mut emit = |row: &[f32], label: u8, run: &mut Run<B>| {
            batch.0.extend_from_slice(row);
            batch.1.push(label as i64);
            if batch.1.len() == cfg.batch_size {
                let (x, y) = std::mem::take(&mut batch);
                let n = y.len();
                run.step(Tensor::from_data(TensorData::new(normalize(x), [n, dim]), device), y, device);
            }
        };
        // the shuffle buffer draws from its own generator, seeded per epoch from the run's
        let mut draw = StdRng::seed_from_u64(rng.random());
        stream.for_each(&shards, |b| {
            for ((row, &label), a) in b.x.chunks(dim).zip(&b.labels).zip(&b.article_ids) {
                if split_of(a) == Split::Train {
                    if let Some((r, l)) = shuffle.push(row, label, &mut draw) {
                        emit(&r, l, &mut run);
                    }
                }
            }
            Ok(())
        })?;
        while let Some((r, l)) = shuffle.pop(&mut draw) {
            emit(&r, l, &mut run);
        }
        let (x, y) = batch;
        if !y.is_empty() {
            let n = y.len();
            run.step(Tensor::from_data(TensorData::new(normalize(x), [n, dim]), device), y, device);
        }

        let eval = run.model.valid();
        let mut scored: BTreeMap<Split, (Vec<u8>, Vec<f32>)> = BTreeMap::new();
        stream.for_each(&stream.in_order(), |b| {
            let x = normalize(b.x);
            let all: Vec<usize> = (0..b.labels.len()).collect();
            let p = predict(&eval, &x, dim, &all, device);
            for ((a, &label), p) in b.article_ids.iter().zip(&b.labels).zip(p) {
                let (y, ps) = scored.entry(split_of(a)).or_default();
                y.push(label);
                ps.push(p);
            }
            Ok(())
        })?;
        let metrics = Split::ALL
            .iter()
            .map(|&s| {
                let (y, p) = scored.get(&s).map(|(y, p)| (y.as_slice(), p.as_slice())).unwrap_or_default();
                (s, Metrics::compute(y, p))
            })
            .collect();
        run.end_epoch(epoch, metrics, eval, log);
    }
    run.finish(&stream.model_id, stream.hidden, &stream.columns, norm, sizes)
}

/// A shuffle buffer of `cap` rows: rows enter in stream order; while it is not full a row is kept, after that
/// each arriving row takes the place of a uniformly drawn one, which leaves. [`ShuffleBuffer::pop`] empties it
/// in random order at the end. Every row leaves exactly once.
struct ShuffleBuffer {
    cap: usize,
    dim: usize,
    x: Vec<f32>,
    y: Vec<u8>,
}

impl ShuffleBuffer {
    fn new(cap: usize, dim: usize) -> Self {
        ShuffleBuffer { cap, dim, x: Vec::new(), y: Vec::new() }
    }

    /// Adds a row; once full, returns the row it displaced.
    fn push(&mut self, row: &[f32], label: u8, rng: &mut StdRng) -> Option<(Vec<f32>, u8)> {
        if self.y.len() < self.cap {
            self.x.extend_from_slice(row);
            self.y.push(label);
            return None;
        }
        let i = rng.random_range(0..self.y.len());
        let out = self.x[i * self.dim..(i + 1) * self.dim].to_vec();
        self.x[i * self.dim..(i + 1) * self.dim].copy_from_slice(row);
        Some((out, std::mem::replace(&mut self.y[i], label)))
    }

    /// Takes a uniformly drawn row out; `None` when empty.
    fn pop(&mut self, rng: &mut StdRng) -> Option<(Vec<f32>, u8)> {
        if self.y.is_empty() {
            return None;
        }
        let i = rng.random_range(0..self.y.len());
        let last = self.y.len() - 1;
        let out = self.x[i * self.dim..(i + 1) * self.dim].to_vec();
        self.x.copy_within(last * self.dim..(last + 1) * self.dim, i * self.dim);
        self.x.truncate(last * self.dim);
        let label = self.y.swap_remove(i);
        Some((out, label))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detector::train::tests::gaussian_setup;
    use crate::detector::train::train;
    use crate::labels::read_features;
    use burn::backend::{Autodiff, Flex};

    /// Every row leaves the shuffle buffer exactly once; a buffer of one keeps the stream's order; a buffer as
    /// large as the stream permutes it; the same seed gives the same order.
    #[test]
    fn shuffle_buffer_is_a_permutation() {
        let order = |cap: usize, n: usize, seed: u64| -> Vec<u8> {
            let mut b = ShuffleBuffer::new(cap, 2);
            let mut rng = StdRng::seed_from_u64(seed);
            let mut out = Vec::new();
            for i in 0..n {
                let row = [i as f32, -(i as f32)];
                if let Some((r, l)) = b.push(&row, i as u8, &mut rng) {
                    assert_eq!(r, vec![l as f32, -(l as f32)], "a row leaves with its own label");
                    out.push(l);
                }
            }
            while let Some((r, l)) = b.pop(&mut rng) {
                assert_eq!(r, vec![l as f32, -(l as f32)]);
                out.push(l);
            }
            out
        };
        let n = 200;
        for cap in [1, 7, 64, 200, 1000] {
            let mut o = order(cap, n, 3);
            assert_eq!(o, order(cap, n, 3), "cap {cap}: seeded");
            if cap == 1 {
                assert_eq!(o, (0..n as u8).collect::<Vec<_>>());
            } else {
                assert_ne!(o, (0..n as u8).collect::<Vec<_>>(), "cap {cap}: shuffled");
            }
            o.sort();
            assert_eq!(o, (0..n as u8).collect::<Vec<_>>(), "cap {cap}: every row once");
        }
    }

    /// Training from the stream sees the same splits, class weights and standardisation as training in memory,
    /// and learns as well; a small buffer (smaller than a shard) still trains. (Two runs in one process are not
    /// compared: the backend's seed is global, and other tests train beside this one.)
    #[test]
    fn streaming_matches_in_memory_statistics_and_learns() {
        let (data, cfg) = gaussian_setup();
        let device = Default::default();
        let table = read_features(data.path(), &["hidden_mean_last"]).unwrap();
        let stream = crate::labels::FeatureStream::open(&[data.path()], &["hidden_mean_last"]).unwrap();
        assert_eq!(stream.shards.len(), 3, "150 articles flushed every 50");
        let memory = train::<Autodiff<Flex>>(&table, &cfg, &device, &mut |_| {}).unwrap();
        let streamed = train_stream::<Autodiff<Flex>>(&stream, 1000, &cfg, &device, &mut |_| {}).unwrap();
        let (m, s) = (memory.detector.info(), streamed.detector.info());
        let (mr, sr) = (m.training.as_ref().unwrap(), s.training.as_ref().unwrap());
        assert_eq!(mr.splits, sr.splits);
        assert_eq!(mr.class_weights, sr.class_weights);
        assert_eq!(memory.detector.norm(), streamed.detector.norm());
        assert_eq!(
            (m.columns.clone(), m.hidden, m.model_id.clone()),
            (s.columns.clone(), s.hidden, s.model_id.clone())
        );
        assert_ne!(memory.detector.weights(), streamed.detector.weights(), "another batch order");
        let auc = sr.best[&Split::Test].roc_auc;
        assert!(auc > 0.9, "streamed test ROC-AUC {auc}");
        let small = train_stream::<Autodiff<Flex>>(&stream, 16, &cfg, &device, &mut |_| {}).unwrap();
        let auc = small.detector.info().training.as_ref().unwrap().best[&Split::Test].roc_auc;
        assert!(auc > 0.9, "buffer 16: test ROC-AUC {auc}");
    }
}
