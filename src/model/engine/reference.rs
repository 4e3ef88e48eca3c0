//! The reference engine: the burn decoder ([`Llama`], the forward pass training uses) on any burn backend, with
//! burn's tensor ops only. It is the ground truth the CPU engine is tested against, `--engine reference` on
//! either device, and the CUDA engine.

use anyhow::Result;
use burn::prelude::Backend;
use burn::tensor::{Int, Tensor, TensorData};

use super::{check_positions, Cache, ChunkOut, Engine, SeqIn};
use crate::model::config::ModelConfig;
use crate::model::llama::{Capture, KvCache, Llama, Rope, Segment};

/// The burn decoder on one backend.
pub struct ReferenceEngine<B: Backend> {
    pub model: Llama<B>,
    pub rope: Rope<B>,
    pub cfg: ModelConfig,
    pub device: B::Device,
}

impl<B: Backend> Cache for KvCache<B> {
    fn truncate(&mut self, len: usize) {
        KvCache::truncate(self, len);
    }

    fn len(&self) -> usize {
        self.len
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

/// `[1, n, d]` -> n rows of d.
fn rows<B: Backend>(t: Tensor<B, 3>) -> Vec<Vec<f32>> {
    let [_, n, d] = t.dims();
    super::host_rows(t.reshape([n, d]))
}

impl<B: Backend> Engine for ReferenceEngine<B>
where
    Llama<B>: Send + Sync,
    Rope<B>: Send + Sync,
    KvCache<B>: Send,
{
    fn new_cache(&self, capacity: usize) -> Box<dyn Cache> {
        Box::new(KvCache::<B>::new(&self.cfg, 1, capacity, &self.device))
    }

    fn max_positions(&self) -> usize {
        self.rope.max_pos()
    }

    fn describe(&self) -> String {
        format!("reference ({})", std::any::type_name::<B>().rsplit("::").next().unwrap_or("burn"))
    }

    fn copy_prefix(&self, from: &dyn Cache, to: &mut dyn Cache, len: usize) -> Result<()> {
        let (from, to) = super::cache_pair::<KvCache<B>>(from, to, len)?;
        // burn's tensors are values: the copy shares the buffers until either cache writes to them
        *to = from.clone();
        to.truncate(len);
        Ok(())
    }

    fn forward(&self, seqs: &mut [SeqIn<'_>]) -> Result<Vec<ChunkOut>> {
        check_positions(seqs, self.max_positions())?;
        let d = self.cfg.hidden_size;
        let meta: Vec<_> = seqs.iter().map(|s| (s.cache.len(), s.ids.len(), s.want)).collect();
        let mut segs = Vec::with_capacity(seqs.len());
        for s in seqs.iter_mut() {
            let (start, t) = (s.cache.len(), s.ids.len());
            let data: Vec<i32> = s.ids.iter().map(|&i| i as i32).collect();
            let ids = Tensor::<B, 2, Int>::from_data(TensorData::new(data, [1, t]), &self.device);
            let capture = Capture { attn_from: s.want.capture_from, layer_sum: s.want.capture_from.is_some() };
            let cache = s.cache.as_any_mut().downcast_mut::<KvCache<B>>().expect("a cache made by this engine");
            segs.push(Segment { ids, start, cache: Some(cache), capture });
        }
        let outs = self.model.forward_many(segs, &self.rope);
        let mut res = Vec::with_capacity(outs.len());
        for (out, (start, t, want)) in outs.into_iter().zip(meta) {
            let mut r = ChunkOut::default();
            if want.logits_from < t {
                let logits = self.model.logits(out.hidden.clone().slice([0..1, want.logits_from..t, 0..d]));
                r.logits = rows(logits).into_iter().map(super::dist::NextDist::host).collect();
            }
            if let Some(from) = want.capture_from.filter(|&f| f < t) {
                r.hidden_final = rows(out.hidden.slice([0..1, from..t, 0..d]));
                let n = self.cfg.num_layers as f64;
                r.hidden_mean = rows(out.layer_sum.unwrap().slice([0..1, from..t, 0..d]).div_scalar(n));
                let a = out.attn.unwrap(); // [1, h, rows, keys]
                let [_, nh, nr, nk] = a.dims();
                let v = a.into_data().convert::<f32>().to_vec::<f32>().unwrap();
                for row in 0..nr {
                    let pos = start + from + row;
                    r.attn.push(
                        (0..nh).map(|hh| v[(hh * nr + row) * nk..(hh * nr + row) * nk + pos + 1].to_vec()).collect(),
                    );
                }
            }
            res.push(r);
        }
        Ok(res)
    }
}
