//! Helpers shared by the integration tests (each test file uses some of them).
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Mutex;

use anyhow::Result;
use candle_core::quantized::{GgmlDType, QTensor};
use ragtime::device::DeviceKind;
use ragtime::model::quant::QMatrix;
use ragtime::model::weights::{HostTensor, WeightSource};
use ragtime::model::{random_weights, Arch, Lm, ModelConfig, Tokenizer};
use ragtime::retrieval::{Passage, Retriever};

/// Word-overlap retrieval over a few passages: a passage scores the number of its words that are in the query.
/// Records the queries it saw.
pub struct Tiny(pub Vec<Passage>, pub Mutex<Vec<String>>);

impl Retriever for Tiny {
    fn search(&self, query: &str, k: usize) -> Result<Vec<Passage>> {
        self.1.lock().unwrap().push(query.to_string());
        let q: Vec<String> = query.split_whitespace().map(|w| w.to_lowercase()).collect();
        let mut hits: Vec<Passage> = self
            .0
            .iter()
            .map(|p| {
                let s = p.text.split_whitespace().filter(|w| q.contains(&w.to_lowercase())).count() as f32;
                Passage { score: s, ..p.clone() }
            })
            .collect();
        hits.sort_by(|a, b| b.score.total_cmp(&a.score));
        hits.truncate(k);
        Ok(hits)
    }
}

impl Tiny {
    /// Passages `0`, `1`, ... with these texts.
    pub fn from_texts(texts: &[&str]) -> Tiny {
        let passages = texts
            .iter()
            .enumerate()
            .map(|(i, t)| Passage { id: i.to_string(), title: format!("doc {i}"), text: t.to_string(), score: 0.0 })
            .collect();
        Tiny(passages, Mutex::new(vec![]))
    }
}

/// Random weights stored as Q4_1 blocks: `tensor` gives the de-quantized values, `quantized` the blocks.
pub struct Q4Weights(HashMap<String, HostTensor>, HashMap<String, QMatrix>);

impl Q4Weights {
    pub fn new(cfg: &ModelConfig, seed: u64) -> Self {
        let mut f32s = HashMap::new();
        let mut blocks = HashMap::new();
        for (name, t) in random_weights(cfg, seed) {
            if t.shape.len() == 2 && t.shape[1] % 32 == 0 {
                let (rows, cols) = (t.shape[0], t.shape[1]);
                let ct =
                    candle_core::Tensor::from_vec(t.data.clone(), (rows, cols), &candle_core::Device::Cpu).unwrap();
                let q = QTensor::quantize(&ct, GgmlDType::Q4_1).unwrap();
                let m = QMatrix::from_ggml(GgmlDType::Q4_1, &q.data().unwrap(), rows, cols).unwrap();
                f32s.insert(name.clone(), HostTensor { data: m.dequantize(), shape: t.shape.clone() });
                blocks.insert(name, m);
            } else {
                f32s.insert(name, t);
            }
        }
        Q4Weights(f32s, blocks)
    }
}

impl WeightSource for Q4Weights {
    fn describe(&self) -> String {
        "<tiny Q4_1 weights>".into()
    }
    fn tensor(&self, name: &str) -> Result<Option<HostTensor>> {
        Ok(self.0.get(name).cloned())
    }
    fn quantized(&self, name: &str) -> Result<Option<QMatrix>> {
        Ok(self.1.get(name).cloned())
    }
}

/// SmolLM2's tokenizer (from the shared data; `None` after reporting the skip when it is missing).
pub fn tokenizer() -> Option<Tokenizer> {
    Some(Tokenizer::from_file(&ragtime::testing::require("models/smollm2-135m-instruct/tokenizer.json")?).unwrap())
}

/// A tiny random Llama stored as Q4_1 blocks, as a Q4_1 GGUF is: decoding rows use the integer weights, so the
/// decoding rows of several sequences fed together share their products (the two-vector kernels on AVX2).
pub fn tiny_q4(seed: u64) -> Option<Lm> {
    Some(tiny_q4_with(seed, tokenizer()?))
}

/// [`tiny_q4`] with this tokenizer (for example one with more stop tokens).
pub fn tiny_q4_with(seed: u64, tokenizer: Tokenizer) -> Lm {
    let cfg = ModelConfig::tiny(Arch::Llama, 49152);
    let lm = Lm::from_source(&Q4Weights::new(&cfg, seed), cfg, tokenizer, "tiny-q4".into(), DeviceKind::Cpu).unwrap();
    assert!(lm.int8_decode_bytes > 0, "the tiny model decodes on integer weights");
    lm
}
