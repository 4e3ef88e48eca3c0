//! Hugging Face model folders: `config.json` + `model.safetensors` (or shards listed in
//! `model.safetensors.index.json`), weights in f32, f16 or bf16.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors};

use super::config::ModelConfig;
use super::weights::{HostTensor, WeightSource};

pub struct SafetensorsDir {
    dir: PathBuf,
    /// Memory maps of the shard files.
    shards: Vec<(PathBuf, Mmap)>,
    /// Tensor name -> shard index.
    index: HashMap<String, usize>,
    config: ModelConfig,
}

impl SafetensorsDir {
    pub fn open(dir: &Path) -> Result<Self> {
        let config = ModelConfig::from_hf_config(&dir.join("config.json"))?;
        let index_path = dir.join("model.safetensors.index.json");
        let files: Vec<PathBuf> = if crate::io::exists(&index_path)? {
            let text = std::fs::read_to_string(&index_path)?;
            let v: serde_json::Value =
                serde_json::from_str(&text).with_context(|| format!("{}: not valid JSON", index_path.display()))?;
            let map = v
                .get("weight_map")
                .and_then(|m| m.as_object())
                .with_context(|| format!("{}: no weight_map", index_path.display()))?;
            let mut names: Vec<String> = map.values().filter_map(|x| x.as_str().map(String::from)).collect();
            names.sort();
            names.dedup();
            names.into_iter().map(|n| dir.join(n)).collect()
        } else if crate::io::exists(&dir.join("model.safetensors"))? {
            vec![dir.join("model.safetensors")]
        } else {
            bail!("{}: no model.safetensors or model.safetensors.index.json", dir.display());
        };
        let mut shards = Vec::new();
        let mut index = HashMap::new();
        for (i, f) in files.iter().enumerate() {
            let file = std::fs::File::open(f).with_context(|| format!("{}: cannot open", f.display()))?;
            // SAFETY: read-only map of a file we do not modify while it is mapped.
            let mmap = unsafe { Mmap::map(&file) }.with_context(|| format!("{}: cannot map", f.display()))?;
            let st = SafeTensors::deserialize(&mmap)
                .map_err(|e| anyhow::anyhow!("{}: not a valid safetensors file ({e})", f.display()))?;
            for name in st.names() {
                index.insert(name.to_string(), i);
            }
            shards.push((f.clone(), mmap));
        }
        Ok(SafetensorsDir { dir: dir.to_path_buf(), shards, index, config })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }
}

impl WeightSource for SafetensorsDir {
    fn describe(&self) -> String {
        self.dir.display().to_string()
    }

    fn tensor(&self, name: &str) -> Result<Option<HostTensor>> {
        let Some(&i) = self.index.get(name) else { return Ok(None) };
        let (path, mmap) = &self.shards[i];
        let st = SafeTensors::deserialize(mmap).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let view = st.tensor(name).map_err(|e| anyhow::anyhow!("{}: tensor '{name}': {e}", path.display()))?;
        Ok(Some(host(&view, name, path)?))
    }
}

/// A tensor of a safetensors file as f32 (from f32, f16 or bf16).
fn host(view: &safetensors::tensor::TensorView<'_>, name: &str, path: &Path) -> Result<HostTensor> {
    let bytes = view.data();
    let data: Vec<f32> = match view.dtype() {
        Dtype::F32 => bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
        Dtype::F16 => bytes.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
        Dtype::BF16 => bytes.chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
        other => bail!("{}: tensor '{name}' has dtype {other:?} (f32, f16, bf16 supported)", path.display()),
    };
    Ok(HostTensor { data, shape: view.shape().to_vec() })
}

/// Reads every tensor of one safetensors file (f32, f16 or bf16) as f32, sorted by name.
pub fn read_tensors(path: &Path) -> Result<Vec<(String, HostTensor)>> {
    let bytes = std::fs::read(path).with_context(|| format!("{}: cannot read", path.display()))?;
    let st = SafeTensors::deserialize(&bytes)
        .map_err(|e| anyhow::anyhow!("{}: not a valid safetensors file ({e})", path.display()))?;
    let mut out = Vec::new();
    for (name, view) in st.tensors() {
        let t = host(&view, &name, path)?;
        out.push((name, t));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Writes f32 tensors as a safetensors file (Hugging Face names), atomically ([`crate::io::write_atomic_with`]).
/// Each tensor becomes bytes only when the writer reaches it, so writing costs one tensor's bytes beside
/// `tensors`, not a second copy of them all (a checkpoint's optimizer state is twice the model).
pub fn write_safetensors(
    path: &Path,
    tensors: &[(String, HostTensor)],
    metadata: Option<HashMap<String, String>>,
) -> Result<()> {
    for (name, t) in tensors {
        if t.shape.iter().product::<usize>() != t.data.len() {
            bail!("{}: tensor '{name}' has shape {:?} but {} values", path.display(), t.shape, t.data.len());
        }
    }
    let views = tensors.iter().map(|(n, t)| (n.as_str(), F32Bytes(t)));
    crate::io::write_atomic_with(path, |tmp| {
        safetensors::serialize_to_file(views, metadata, tmp).map_err(|e| anyhow::anyhow!("{}: {e}", tmp.display()))
    })
}

/// A host tensor as safetensors' little-endian f32 bytes, made when asked for.
struct F32Bytes<'a>(&'a HostTensor);

impl safetensors::View for F32Bytes<'_> {
    fn dtype(&self) -> Dtype {
        Dtype::F32
    }
    fn shape(&self) -> &[usize] {
        &self.0.shape
    }
    fn data(&self) -> std::borrow::Cow<'_, [u8]> {
        std::borrow::Cow::Owned(self.0.data.iter().flat_map(|x| x.to_le_bytes()).collect())
    }
    fn data_len(&self) -> usize {
        self.0.data.len() * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_tensors_read_back_bit_for_bit_and_a_wrong_shape_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.safetensors");
        let a = HostTensor { data: vec![1.5, -0.0, f32::MIN_POSITIVE, 3.25e7, -2.0, 0.1], shape: vec![2, 3] };
        let b = HostTensor { data: vec![7.0], shape: vec![1] };
        let meta = Some([("format".to_string(), "pt".to_string())].into_iter().collect());
        write_safetensors(&path, &[("a".into(), a.clone()), ("b".into(), b.clone())], meta).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let st = SafeTensors::deserialize(&bytes).unwrap();
        for (name, t) in [("a", &a), ("b", &b)] {
            let v = st.tensor(name).unwrap();
            assert_eq!((v.dtype(), v.shape()), (Dtype::F32, t.shape.as_slice()));
            let back: Vec<u32> = v.data().chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
            assert_eq!(back, t.data.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), "{name}");
        }
        let bad = HostTensor { data: vec![1.0; 5], shape: vec![2, 3] };
        let err = write_safetensors(&dir.path().join("bad.safetensors"), &[("w".into(), bad)], None).unwrap_err();
        assert!(format!("{err:#}").contains("tensor 'w' has shape [2, 3] but 5 values"), "{err:#}");
    }
}
