//! Where weights come from: a GGUF file or a safetensors directory, both seen as Hugging Face-named f32 tensors;
//! in-memory weights and random ones (tests, tiny demos) through the same [`WeightSource`] trait.

use anyhow::{bail, Result};

/// A tensor in host memory, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct HostTensor {
    pub data: Vec<f32>,
    pub shape: Vec<usize>,
}

/// A store of named tensors (Hugging Face names and layout, `[out, in]` for linear weights).
pub trait WeightSource {
    /// For error messages: the file or folder.
    fn describe(&self) -> String;
    /// The tensor, or `None` when the file has no tensor of that name.
    fn tensor(&self, hf_name: &str) -> Result<Option<HostTensor>>;

    /// The tensor's integer copy for CPU decoding ([`super::quant::QMatrix`]), when the file stores it in a
    /// quantized block format that has one. `None` for f32/f16/bf16 sources.
    fn quantized(&self, _hf_name: &str) -> Result<Option<super::quant::QMatrix>> {
        Ok(None)
    }

    /// The tensor, which must exist with exactly this shape.
    fn require(&self, hf_name: &str, shape: &[usize]) -> Result<HostTensor> {
        match self.tensor(hf_name)? {
            None => bail!("{}: tensor '{hf_name}' is missing", self.describe()),
            Some(t) if t.shape != shape => {
                bail!("{}: tensor '{hf_name}' has shape {:?}, the config says {:?}", self.describe(), t.shape, shape)
            }
            Some(t) => Ok(t),
        }
    }
}

/// Random weights in Hugging Face layout (normal(0, 0.02), norms at 1) for tests and tiny demos.
pub fn random_weights(cfg: &super::ModelConfig, seed: u64) -> Vec<(String, HostTensor)> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut normal = |shape: Vec<usize>, std: f32| -> HostTensor {
        let n: usize = shape.iter().product();
        // Box-Muller
        let data = (0..n)
            .map(|_| {
                let u1: f32 = rng.random::<f32>().max(1e-7);
                let u2: f32 = rng.random::<f32>();
                std * (-2.0 * u1.ln()).sqrt() * (2.0 * std::f32::consts::PI * u2).cos()
            })
            .collect();
        HostTensor { data, shape }
    };
    let ones = |n: usize| HostTensor { data: vec![1.0; n], shape: vec![n] };
    let d = cfg.hidden_size;
    let mut w = vec![(super::params::EMBED.to_string(), normal(vec![cfg.vocab_size, d], 0.5))];
    for l in 0..cfg.num_layers {
        let p = super::params::block_prefix(l);
        for (n, _) in super::params::BLOCK_NORMS {
            w.push((format!("{p}.{n}.weight"), ones(d)));
        }
        for spec in &super::params::BLOCK_LINEARS {
            let [o, i] = (spec.shape)(cfg);
            w.push((format!("{p}.{}.weight", spec.path), normal(vec![o, i], 0.2)));
            if spec.has_bias(cfg) {
                w.push((format!("{p}.{}.bias", spec.path), normal(vec![o], 0.1)));
            }
        }
    }
    w.push((super::params::FINAL_NORM.into(), ones(d)));
    if !cfg.tie_word_embeddings {
        w.push((super::params::LM_HEAD.into(), normal(vec![cfg.vocab_size, d], 0.2)));
    }
    w
}

/// In-memory weights as a [`WeightSource`].
pub struct MemoryWeights(pub std::collections::HashMap<String, HostTensor>);

impl WeightSource for MemoryWeights {
    fn describe(&self) -> String {
        "<in-memory weights>".into()
    }
    fn tensor(&self, name: &str) -> Result<Option<HostTensor>> {
        Ok(self.0.get(name).cloned())
    }
}
