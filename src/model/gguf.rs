//! GGUF files: metadata, tokenizer vocabulary and tensors de-quantized to f32 (through candle-core, which knows
//! every ggml block format: F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q8_K).
//!
//! Tensors are handed out under Hugging Face names (`model.layers.3.self_attn.q_proj.weight`) in Hugging Face
//! layout (`[out, in]`). llama.cpp's converter permutes the rows of Q and K for the `llama` architecture (it
//! stores them for GPT-J-style interleaved RoPE); [`GgufFile::tensor`] undoes that so the forward pass applies
//! RoPE exactly as transformers does (rotate-half). `qwen2` files are stored unpermuted.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use candle_core::quantized::gguf_file::{Content, Value};

use super::config::{Arch, ModelConfig};
use super::params::gguf_name;
use super::rope::RopeScaling;
use super::weights::{HostTensor, WeightSource};
use super::ModelError;

pub struct GgufFile {
    path: PathBuf,
    content: Content,
    arch: Arch,
    config: ModelConfig,
}

fn meta_u64(c: &Content, key: &str) -> Option<u64> {
    c.metadata.get(key).and_then(|v| {
        v.to_u64().ok().or_else(|| v.to_u32().ok().map(|x| x as u64)).or_else(|| v.to_i32().ok().map(|x| x as u64))
    })
}

fn meta_f32(c: &Content, key: &str) -> Option<f32> {
    c.metadata.get(key).and_then(|v| v.to_f32().ok().or_else(|| v.to_f64().ok().map(|x| x as f32)))
}

impl GgufFile {
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).with_context(|| format!("{}: cannot open model file", path.display()))?;
        let file_len = file.metadata()?.len();
        let mut reader = BufReader::new(file);
        // candle's reader divides by `general.alignment` unchecked: a 0 there is a panic, caught as an error.
        let content = crate::io::catch_decoder_panic(path, "GGUF file", || {
            Content::read(&mut reader)
                .map_err(|e| anyhow::anyhow!("{}: not a readable GGUF file ({e})", path.display()))
        })?;
        // A truncated download keeps a valid header: check every tensor fits before trusting the file. The sizes
        // come from the file, so the arithmetic is checked.
        for (name, info) in &content.tensor_infos {
            let dims = info.shape.dims();
            let elems = dims.iter().try_fold(1u64, |n, &d| n.checked_mul(d as u64));
            let (block, size) = (info.ggml_dtype.block_size() as u64, info.ggml_dtype.type_size() as u64);
            let end = elems
                .filter(|e| e % block == 0)
                .and_then(|e| (e / block).checked_mul(size))
                .and_then(|bytes| content.tensor_data_offset.checked_add(info.offset)?.checked_add(bytes));
            let Some(end) = end else {
                bail!(
                    "{}: tensor '{name}' has an impossible shape {dims:?} or offset {} for {:?}",
                    path.display(),
                    info.offset,
                    info.ggml_dtype
                );
            };
            if end > file_len {
                bail!(
                    "{}: file is truncated: tensor '{name}' needs bytes up to {end} but the file has {file_len}",
                    path.display()
                );
            }
        }
        let arch_name = content
            .metadata
            .get("general.architecture")
            .and_then(|v| v.to_string().ok().cloned())
            .with_context(|| format!("{}: GGUF metadata lacks general.architecture", path.display()))?;
        let arch = match arch_name.as_str() {
            "llama" => Arch::Llama,
            "qwen2" => Arch::Qwen2,
            other => {
                return Err(ModelError::unsupported(
                    path.display(),
                    format!("GGUF architecture '{other}'"),
                    "llama, qwen2",
                )
                .into())
            }
        };
        let a = arch_name.as_str();
        // llama's projections have no biases in ragtime's forward pass: a file that carries some is refused, not
        // run without them
        if arch == Arch::Llama {
            if let Some(name) = content.tensor_infos.keys().filter(|n| n.ends_with(".bias")).min() {
                let what = format!("a llama file with biases ({name})");
                let supported = "llama's projections without biases, qwen2's q/k/v biases";
                return Err(ModelError::unsupported(path.display(), what, supported).into());
            }
        }
        let need = |key: String| -> Result<usize> {
            meta_u64(&content, &key)
                .map(|x| x as usize)
                .with_context(|| format!("{}: GGUF metadata lacks {key}", path.display()))
        };
        let hidden_size = need(format!("{a}.embedding_length"))?;
        let num_heads = need(format!("{a}.attention.head_count"))?;
        let num_kv_heads =
            meta_u64(&content, &format!("{a}.attention.head_count_kv")).map(|x| x as usize).unwrap_or(num_heads);
        let head_dim = meta_u64(&content, &format!("{a}.attention.key_length"))
            .map(|x| x as usize)
            .unwrap_or_else(|| hidden_size.checked_div(num_heads).unwrap_or(0));
        let vocab_size = match content.metadata.get("tokenizer.ggml.tokens") {
            Some(Value::Array(v)) => v.len(),
            _ => content
                .tensor_infos
                .get("token_embd.weight")
                .with_context(|| format!("{}: no token_embd.weight", path.display()))?
                .shape
                .dims()
                .first()
                .copied()
                .with_context(|| format!("{}: token_embd.weight has no dimensions", path.display()))?,
        };
        let eos = meta_u64(&content, "tokenizer.ggml.eos_token_id").map(|x| x as u32);
        let mut eos_token_ids: Vec<u32> = eos.into_iter().collect();
        if let Some(eot) = meta_u64(&content, "tokenizer.ggml.eot_token_id").map(|x| x as u32) {
            if !eos_token_ids.contains(&eot) {
                eos_token_ids.push(eot);
            }
        }
        let config = ModelConfig {
            arch,
            hidden_size,
            intermediate_size: need(format!("{a}.feed_forward_length"))?,
            num_layers: need(format!("{a}.block_count"))?,
            num_heads,
            num_kv_heads,
            head_dim,
            vocab_size,
            max_position_embeddings: meta_u64(&content, &format!("{a}.context_length")).unwrap_or(4096) as usize,
            rope_theta: meta_f32(&content, &format!("{a}.rope.freq_base")).unwrap_or(10000.0),
            rope_scaling: rope_scaling(&content, path, a, head_dim)?,
            rms_norm_eps: meta_f32(&content, &format!("{a}.attention.layer_norm_rms_epsilon")).unwrap_or(1e-5),
            tie_word_embeddings: !content.tensor_infos.contains_key("output.weight"),
            bos_token_id: meta_u64(&content, "tokenizer.ggml.bos_token_id").map(|x| x as u32),
            eos_token_ids,
        };
        config.validate(&path.display().to_string(), |k| gguf_key(a, k))?;
        Ok(GgufFile { path: path.to_path_buf(), content, arch, config })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn metadata(&self) -> &HashMap<String, Value> {
        &self.content.metadata
    }

    pub fn meta_str(&self, key: &str) -> Option<String> {
        self.content.metadata.get(key).and_then(|v| v.to_string().ok().cloned())
    }

    pub fn meta_u64(&self, key: &str) -> Option<u64> {
        meta_u64(&self.content, key)
    }

    pub fn meta_bool(&self, key: &str) -> Option<bool> {
        self.content.metadata.get(key).and_then(|v| v.to_bool().ok())
    }

    pub fn meta_strings(&self, key: &str) -> Option<Vec<String>> {
        match self.content.metadata.get(key) {
            Some(Value::Array(v)) => v.iter().map(|x| x.to_string().ok().cloned()).collect(),
            _ => None,
        }
    }

    pub fn meta_i32s(&self, key: &str) -> Option<Vec<i32>> {
        match self.content.metadata.get(key) {
            Some(Value::Array(v)) => {
                v.iter().map(|x| x.to_i32().ok().or_else(|| x.to_u32().ok().map(|u| u as i32))).collect()
            }
            _ => None,
        }
    }

    /// Tensor storage formats present, with counts (for `ragtime inspect`-style summaries).
    pub fn dtype_summary(&self) -> Vec<(String, usize)> {
        let mut m: HashMap<String, usize> = HashMap::new();
        for info in self.content.tensor_infos.values() {
            *m.entry(format!("{:?}", info.ggml_dtype)).or_default() += 1;
        }
        let mut v: Vec<_> = m.into_iter().collect();
        v.sort();
        v
    }

    fn read_qtensor(&self, gguf_name: &str) -> Result<Option<candle_core::quantized::QTensor>> {
        read_qtensor(&self.content, &self.path, gguf_name)
    }

    fn read_raw(&self, gguf_name: &str) -> Result<Option<HostTensor>> {
        read_raw(&self.content, &self.path, gguf_name)
    }
}

/// Tensor `gguf_name` of the file at `path` (described by `content`) as stored, or `None` when it has none.
fn read_qtensor(content: &Content, path: &Path, gguf_name: &str) -> Result<Option<candle_core::quantized::QTensor>> {
    let Some(info) = content.tensor_infos.get(gguf_name) else { return Ok(None) };
    let file = File::open(path).with_context(|| format!("{}: cannot open", path.display()))?;
    let mut reader = BufReader::new(file);
    let q = info
        .read(&mut reader, content.tensor_data_offset, &candle_core::Device::Cpu)
        .map_err(|e| anyhow::anyhow!("{}: tensor '{gguf_name}': {e}", path.display()))?;
    Ok(Some(q))
}

/// Tensor `gguf_name` de-quantized to f32, with its GGUF shape, or `None` when the file has none.
fn read_raw(content: &Content, path: &Path, gguf_name: &str) -> Result<Option<HostTensor>> {
    let Some(q) = read_qtensor(content, path, gguf_name)? else { return Ok(None) };
    let t = q
        .dequantize(&candle_core::Device::Cpu)
        .map_err(|e| anyhow::anyhow!("{}: tensor '{gguf_name}': cannot de-quantize ({e})", path.display()))?;
    let shape = t.dims().to_vec();
    let data = t
        .flatten_all()
        .and_then(|t| t.to_dtype(candle_core::DType::F32))
        .and_then(|t| t.to_vec1::<f32>())
        .map_err(|e| anyhow::anyhow!("{}: tensor '{gguf_name}': {e}", path.display()))?;
    Ok(Some(HostTensor { data, shape }))
}

/// The file's RoPE scaling ([`RopeScaling`]): `{arch}.rope.scaling.type` `linear` (or the older
/// `{arch}.rope.scale_linear`) with its factor, and the per-frequency divisors of the tensor `rope_freqs.weight`
/// (how llama.cpp's converter stores Llama 3.1's `llama3` scaling); both where both are given. Other scaling types
/// (`yarn`, `longrope`) and rotating fewer dimensions than a head has are refused by name.
fn rope_scaling(content: &Content, path: &Path, a: &str, head_dim: usize) -> Result<Option<RopeScaling>> {
    let unsupported = |what: String, supported: &str| -> anyhow::Error {
        ModelError::unsupported(path.display(), what, supported).into()
    };
    if let Some(rotated) = meta_u64(content, &format!("{a}.rope.dimension_count")) {
        if rotated != head_dim as u64 {
            let hd = head_dim;
            let what = format!("RoPE on {rotated} of a head's {hd} dimensions ({a}.rope.dimension_count)");
            return Err(unsupported(what, "every dimension of the head"));
        }
    }
    let kind = content.metadata.get(&format!("{a}.rope.scaling.type")).and_then(|v| v.to_string().ok().cloned());
    let linear = match kind.as_deref() {
        None | Some("none") => meta_f32(content, &format!("{a}.rope.scale_linear")).filter(|&f| f != 1.0),
        Some("linear") => Some(meta_f32(content, &format!("{a}.rope.scaling.factor")).with_context(|| {
            format!("{}: {a}.rope.scaling.type is linear but {a}.rope.scaling.factor is missing", path.display())
        })?),
        Some(other) => {
            let what = format!("RoPE scaling type '{other}' ({a}.rope.scaling.type)");
            return Err(unsupported(what, "none, linear, and per-frequency factors in rope_freqs.weight"));
        }
    };
    let factors = read_raw(content, path, "rope_freqs.weight")?.map(|t| t.data);
    Ok(match (factors, linear) {
        (Some(f), Some(l)) => Some(RopeScaling::Factors { factors: f.iter().map(|x| x * l).collect() }),
        (Some(factors), None) => Some(RopeScaling::Factors { factors }),
        (None, Some(factor)) => Some(RopeScaling::Linear { factor }),
        (None, None) => None,
    })
}

/// The GGUF metadata key that holds a Hugging Face `config.json` key, for error messages.
fn gguf_key(arch: &str, hf: &str) -> String {
    let k = match hf {
        "hidden_size" => "embedding_length",
        "intermediate_size" => "feed_forward_length",
        "num_hidden_layers" => "block_count",
        "num_attention_heads" => "attention.head_count",
        "num_key_value_heads" => "attention.head_count_kv",
        "head_dim" => "attention.key_length",
        "max_position_embeddings" => "context_length",
        "rope_theta" => "rope.freq_base",
        "rope_scaling.factor" => "rope.scaling.factor",
        "rope_freqs" => return "rope_freqs.weight".to_string(),
        "rms_norm_eps" => "attention.layer_norm_rms_epsilon",
        "vocab_size" => return "tokenizer.ggml.tokens (its length)".to_string(),
        other => other,
    };
    format!("{arch}.{k}")
}

/// For undoing llama.cpp's Q/K row permutation: the stored row that holds each original row. Rows were reordered
/// from `[n_head, 2, hd/2]` to `[n_head, hd/2, 2]`: stored row (h, i, j) holds original row (h, j, i).
fn unpermuted_sources(rows: usize, n_head: usize) -> Vec<usize> {
    let hd = rows / n_head;
    let half = hd / 2;
    let mut src_of = vec![0; rows];
    for h in 0..n_head {
        for i in 0..half {
            for j in 0..2 {
                src_of[h * hd + j * half + i] = h * hd + i * 2 + j;
            }
        }
    }
    src_of
}

/// Undo llama.cpp's Q/K row permutation (see `unpermuted_sources`).
pub fn unpermute_rows(t: &HostTensor, n_head: usize) -> HostTensor {
    let rows = t.shape[0];
    // (a bias has no dimension past the rows: the empty product, 1; a zero-width tensor has no columns to move)
    let cols: usize = t.shape[1..].iter().product();
    let mut out = vec![0f32; t.data.len()];
    for (dst, &src) in unpermuted_sources(rows, n_head).iter().enumerate() {
        out[dst * cols..(dst + 1) * cols].copy_from_slice(&t.data[src * cols..(src + 1) * cols]);
    }
    HostTensor { data: out, shape: t.shape.clone() }
}

impl GgufFile {
    /// The heads whose Q/K rows llama.cpp permuted in `hf_name` (a Llama q_proj or k_proj weight or bias; `None` for
    /// every other tensor), once `shape` (the stored tensor `name`'s) is checked to split into them.
    fn permuted_heads(&self, hf_name: &str, name: &str, shape: &[usize]) -> Result<Option<usize>> {
        if self.arch != Arch::Llama {
            return Ok(None);
        }
        let heads = if hf_name.ends_with("q_proj.weight") || hf_name.ends_with("q_proj.bias") {
            self.config.num_heads
        } else if hf_name.ends_with("k_proj.weight") || hf_name.ends_with("k_proj.bias") {
            self.config.num_kv_heads
        } else {
            return Ok(None);
        };
        // The permutation moves whole rows within each head's pairs of halves.
        if !shape.first().is_some_and(|&rows| heads > 0 && rows > 0 && rows.is_multiple_of(2 * heads)) {
            bail!(
                "{}: tensor '{name}' has shape {shape:?}: its rows do not split into {heads} heads of even, non-zero size",
                self.path.display(),
            );
        }
        Ok(Some(heads))
    }
}

impl WeightSource for GgufFile {
    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn tensor(&self, hf_name: &str) -> Result<Option<HostTensor>> {
        let Some(name) = gguf_name(hf_name) else { return Ok(None) };
        let Some(t) = self.read_raw(&name)? else { return Ok(None) };
        Ok(Some(match self.permuted_heads(hf_name, &name, &t.shape)? {
            Some(heads) => unpermute_rows(&t, heads),
            None => t,
        }))
    }

    fn quantized(&self, hf_name: &str) -> Result<Option<super::quant::QMatrix>> {
        let Some(name) = gguf_name(hf_name) else { return Ok(None) };
        if !hf_name.ends_with(".weight") {
            return Ok(None);
        }
        let Some(q) = self.read_qtensor(&name)? else { return Ok(None) };
        let dims = q.shape().dims().to_vec();
        if dims.len() != 2 || !super::quant::supported(q.dtype()) {
            return Ok(None);
        }
        let bytes = q.data().map_err(|e| anyhow::anyhow!("{}: tensor '{name}': {e}", self.path.display()))?;
        let m = super::quant::QMatrix::from_ggml(q.dtype(), &bytes, dims[0], dims[1])
            .with_context(|| format!("{}: tensor '{name}'", self.path.display()))?;
        Ok(Some(match self.permuted_heads(hf_name, &name, &dims)? {
            Some(heads) => m.permute_rows(&unpermuted_sources(dims[0], heads)),
            None => m,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpermute_inverts_llama_cpp_permute() {
        // llama.cpp: w.reshape(n_head, 2, hd/2, cols).swapaxes(1, 2). One head, hd = 4, one column:
        // original rows [a0 a1 | b0 b1] (halves a, b) are stored interleaved as [a0 b0 a1 b1].
        let stored = HostTensor { data: vec![0.0, 2.0, 1.0, 3.0], shape: vec![4, 1] };
        assert_eq!(unpermute_rows(&stored, 1).data, vec![0.0, 1.0, 2.0, 3.0]);
        // two heads, two columns
        let stored = HostTensor {
            data: vec![0., 0., 2., 2., 1., 1., 3., 3., 4., 4., 6., 6., 5., 5., 7., 7.],
            shape: vec![8, 2],
        };
        assert_eq!(
            unpermute_rows(&stored, 2).data,
            vec![0., 0., 1., 1., 2., 2., 3., 3., 4., 4., 5., 5., 6., 6., 7., 7.]
        );
    }

    /// A zero-width Q/K tensor (a mutated file's shape) has nothing to move: no panic, no data.
    #[test]
    fn unpermute_of_a_zero_width_tensor_is_empty() {
        let stored = HostTensor { data: vec![], shape: vec![4, 0] };
        assert_eq!(unpermute_rows(&stored, 2).data, Vec::<f32>::new());
    }

    /// Bad GGUF metadata is named by its GGUF key.
    #[test]
    fn validation_names_gguf_keys() {
        let mut c = ModelConfig::tiny(Arch::Qwen2, 10);
        c.num_layers = 0;
        let e = c.validate("m.gguf", |k| gguf_key("qwen2", k)).unwrap_err().to_string();
        assert!(e.contains("m.gguf: qwen2.block_count = 0"), "{e}");
        let mut c = ModelConfig::tiny(Arch::Llama, 10);
        c.num_kv_heads = 3;
        let e = c.validate("m.gguf", |k| gguf_key("llama", k)).unwrap_err().to_string();
        assert!(
            e.contains("llama.attention.head_count = 4: not a multiple of llama.attention.head_count_kv = 3"),
            "{e}"
        );
    }

    #[test]
    fn names_map_to_gguf() {
        assert_eq!(gguf_name("model.layers.12.self_attn.k_proj.bias").unwrap(), "blk.12.attn_k.bias");
        assert_eq!(gguf_name("model.embed_tokens.weight").unwrap(), "token_embd.weight");
        assert!(gguf_name("model.rotary_emb.inv_freq").is_none());
    }
}
