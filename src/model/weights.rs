//! Where weights come from: a GGUF file or a safetensors directory, both seen as Hugging Face-named f32 tensors.

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
            Some(t) if t.shape != shape => bail!(
                "{}: tensor '{hf_name}' has shape {:?}, the config says {:?}",
                self.describe(),
                t.shape,
                shape
            ),
            Some(t) => Ok(t),
        }
    }
}
