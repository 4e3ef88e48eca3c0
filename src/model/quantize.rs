//! Rounding a model's f32 weights to a ggml block format at load (`--quantize q8_0`), as llama.cpp's
//! `llama-quantize` does to a file: for an f32, f16 or bf16 model (a Hugging Face folder such as a fine-tune's
//! export, or a LoRA adapter's merged weights) the CPU engine then decodes from integer blocks as it does for a
//! quantized GGUF (about 1.1 bytes per weight read per token instead of 4; `--int8-dot` applies too).
//!
//! Q8_0 (llama.cpp's `quantize_row_q8_0`, through candle): per block of 32 weights of a row, `d = max|w| / 127`
//! stored as f16, `q = round(w / d)` (with the f32 `d`); a weight becomes `f16(d) * q`, within `d / 2` of its
//! f32 value plus `127 |d - f16(d)|`. Rounded are the decoder layers' seven linear weights, the token embedding and
//! an untied output projection, each only when the source holds it without an integer form and its rows are whole
//! blocks; norms and biases stay f32. Every engine sees the rounded values ([`WeightSource::tensor`] gives them back
//! de-quantized), so the CPU, batched and reference engines still compute the same model.

use anyhow::Result;
use candle_core::quantized::{GgmlDType, QTensor};

use super::config::ModelConfig;
use super::params::{self, BLOCK_LINEARS};
use super::quant::QMatrix;
use super::weights::{HostTensor, WeightSource};

/// A ggml block format to round f32 weights to (`--quantize`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Quantize {
    /// 8-bit integers, one f16 scale per 32 weights (llama.cpp's Q8_0: 8.5 bits per weight).
    #[value(name = "q8_0")]
    Q8_0,
}

impl Quantize {
    fn dtype(self) -> GgmlDType {
        match self {
            Quantize::Q8_0 => GgmlDType::Q8_0,
        }
    }
}

/// `base` with its f32 weight matrices rounded to `format` (see the module doc).
pub struct Quantized {
    base: Box<dyn WeightSource>,
    format: Quantize,
    /// The Hugging Face names of the matrices this source rounds.
    names: std::collections::HashSet<String>,
}

impl Quantized {
    pub fn new(base: Box<dyn WeightSource>, cfg: &ModelConfig, format: Quantize) -> Quantized {
        let mut names: std::collections::HashSet<String> = (0..cfg.num_layers)
            .flat_map(|l| BLOCK_LINEARS.iter().map(move |s| format!("{}.{}.weight", params::block_prefix(l), s.path)))
            .collect();
        names.insert(params::EMBED.to_string());
        if !cfg.tie_word_embeddings {
            names.insert(params::LM_HEAD.to_string());
        }
        Quantized { base, format, names }
    }

    /// The integer blocks of matrix `name`, rounded from the base's values, when this source rounds it: `None`
    /// when it is not one of the matrices or its rows are not whole blocks. The caller has found that the base
    /// holds no integer blocks of it.
    fn round(&self, name: &str) -> Result<Option<QMatrix>> {
        if !self.names.contains(name) {
            return Ok(None);
        }
        let Some(t) = self.base.tensor(name)? else { return Ok(None) };
        let [rows, cols] = t.shape[..] else { return Ok(None) };
        if !cols.is_multiple_of(self.format.dtype().block_size()) {
            return Ok(None);
        }
        let dense = candle_core::Tensor::from_vec(t.data, (rows, cols), &candle_core::Device::Cpu)?;
        let q = QTensor::quantize(&dense, self.format.dtype())?;
        Ok(Some(QMatrix::from_ggml(self.format.dtype(), &q.data()?, rows, cols)?))
    }
}

impl WeightSource for Quantized {
    fn describe(&self) -> String {
        format!("{} (rounded to {:?})", self.base.describe(), self.format)
    }

    fn tensor(&self, hf_name: &str) -> Result<Option<HostTensor>> {
        if self.names.contains(hf_name) && self.base.quantized(hf_name)?.is_none() {
            if let Some(m) = self.round(hf_name)? {
                return Ok(Some(HostTensor { data: m.dequantize(), shape: vec![m.rows, m.cols] }));
            }
        }
        self.base.tensor(hf_name)
    }

    fn quantized(&self, hf_name: &str) -> Result<Option<QMatrix>> {
        match self.base.quantized(hf_name)? {
            Some(q) => Ok(Some(q)),
            None => self.round(hf_name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{random_weights, Arch, MemoryWeights};

    /// One row of 32 weights worked by hand: max |w| = 1.27, so d = 0.01 (f16: 0.010002136), q = round(w / d);
    /// w = 0.5 -> q = 50 (49.99) -> 0.5001068; w = -1.27 -> q = -127 -> -1.2702713; w = 0.004 -> q = 0 -> 0.
    #[test]
    fn q8_0_rounds_as_worked_by_hand_and_leaves_the_rest() {
        let mut cfg = ModelConfig::tiny(Arch::Llama, 64);
        cfg.num_layers = 1;
        let mut w: std::collections::HashMap<String, HostTensor> = random_weights(&cfg, 2).into_iter().collect();
        let q = "model.layers.0.self_attn.q_proj.weight";
        let mut row = vec![0.0f32; 32];
        (row[0], row[1], row[2]) = (0.5, -1.27, 0.004);
        let mut m = w[q].clone();
        m.data[..32].copy_from_slice(&row);
        w.insert(q.into(), m.clone());
        let src = Quantized::new(Box::new(MemoryWeights(w.clone())), &cfg, Quantize::Q8_0);
        let got = src.tensor(q).unwrap().unwrap();
        let d = half::f16::from_f32(0.01).to_f32();
        assert_eq!(d, 0.010002136);
        assert_eq!(&got.data[..3], &[50.0 * d, -127.0 * d, 0.0]);
        // every weight within d/2 of its value, d = max|w| / 127 of its own block, plus what storing d as f16
        // moves q * d (q is rounded with the f32 d, as llama.cpp does; |q| <= 127)
        for (blk, (a, b)) in got.data.chunks(32).zip(m.data.chunks(32)).enumerate() {
            let d = b.iter().fold(0.0f32, |x, y| x.max(y.abs())) / 127.0;
            let bound = d / 2.0 + 127.0 * (d - half::f16::from_f32(d).to_f32()).abs() + 1e-7;
            for (x, y) in a.iter().zip(b) {
                assert!((x - y).abs() <= bound, "block {blk}: {x} vs {y} (d {d})");
            }
        }
        // the integer blocks hold exactly what tensor() gives back
        let blocks = src.quantized(q).unwrap().unwrap();
        assert_eq!((blocks.rows, blocks.cols), (m.shape[0], m.shape[1]));
        assert_eq!(blocks.dequantize(), got.data);
        assert!(src.quantized(params::EMBED).unwrap().is_some(), "the embedding is rounded");
        // norms stay f32 and untouched
        let norm = "model.layers.0.input_layernorm.weight";
        assert!(src.quantized(norm).unwrap().is_none());
        assert_eq!(src.tensor(norm).unwrap(), Some(w[norm].clone()));
    }
}
