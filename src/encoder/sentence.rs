//! A sentence-transformers model folder read as sentence-transformers reads it, and the encoder built from it.
//!
//! The folder (what `SentenceTransformer.save` writes):
//! - `modules.json`: the pipeline. A `Transformer` module (its `path`, usually the folder itself, holds
//!   `config.json`, `model.safetensors`, `tokenizer.json`), a `Pooling` module (`1_Pooling/config.json`) and
//!   optionally `Normalize` (unit-length embeddings). Other modules (Dense, ...) are refused, not ignored.
//! - `sentence_bert_config.json`: `max_seq_length` (word pieces, special tokens included) and `do_lower_case`.
//!   This length, not the truncation baked into `tokenizer.json` (128 for all-MiniLM-L6-v2, whose folder says 256),
//!   decides truncation; the tokenizer's own padding is turned off (batches pad to their longest sequence).
//! - `config_sentence_transformers.json`: optional `prompts` {query, passage|document}: the prefixes e5/bge-style
//!   models expect (e.g. "query: " / "passage: "). [`Prefixes`] can also set them by hand.
//!
//! Texts are encoded longest first in batches (as sentence-transformers does), so a batch pads little; results come
//! back in input order.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use burn::prelude::Backend;
#[cfg(feature = "cuda")]
use burn::tensor::Int;
use burn::tensor::{Tensor, TensorData};
use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors};
use serde::Deserialize;

#[cfg(feature = "cuda")]
use super::bert::Bert;
use super::bert::{build_bert, BertConfig};
use super::bert_cpu::BertCpu;
use crate::device::DeviceKind;
use crate::model::weights::{HostTensor, WeightSource};

/// How token states become one vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooling {
    /// Average of the non-padding tokens' states.
    Mean,
    /// The first token's (`[CLS]`) state.
    Cls,
    /// Element-wise maximum over the non-padding tokens.
    Max,
}

/// Which side of a retrieval pair a text is: models trained with prefixes (e5, bge) embed queries and passages
/// differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextKind {
    Query,
    Passage,
    /// No prefix at all.
    Plain,
}

/// Prefixes put before queries and passages.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, Deserialize)]
pub struct Prefixes {
    pub query: String,
    pub passage: String,
}

impl Prefixes {
    /// Named presets: `none`, `e5` ("query: " / "passage: "), `bge` (the bge-*-en-v1.5 query instruction, passages
    /// bare). `folder` is resolved by [`SentenceEncoder::load`] (the folder's own prompts, else none).
    pub fn preset(name: &str) -> Result<Option<Prefixes>> {
        Ok(match name {
            "folder" => None,
            "none" => Some(Prefixes::default()),
            "e5" => Some(Prefixes { query: "query: ".into(), passage: "passage: ".into() }),
            "bge" => Some(Prefixes {
                query: "Represent this sentence for searching relevant passages: ".into(),
                passage: String::new(),
            }),
            other => crate::usage_bail!("--prefixes {other:?}: expected folder, none, e5 or bge"),
        })
    }

    pub fn for_kind(&self, kind: TextKind) -> &str {
        match kind {
            TextKind::Query => &self.query,
            TextKind::Passage => &self.passage,
            TextKind::Plain => "",
        }
    }
}

#[derive(Deserialize)]
struct ModuleEntry {
    #[serde(default)]
    path: String,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct PoolingConfig {
    word_embedding_dimension: usize,
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_sqrt_len_tokens: bool,
    #[serde(default)]
    pooling_mode_weightedmean_tokens: bool,
    #[serde(default)]
    pooling_mode_lasttoken: bool,
}

#[derive(Deserialize, Default)]
struct SbertConfig {
    max_seq_length: Option<usize>,
    #[serde(default)]
    do_lower_case: bool,
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path, what: &str) -> Result<T> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{}: cannot read the {what}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}: not a valid {what}", path.display()))
}

/// One `model.safetensors` file, memory-mapped, seen as Hugging Face-named f32 tensors.
pub struct SafetensorsFile {
    path: PathBuf,
    mmap: Mmap,
}

impl SafetensorsFile {
    pub fn open(path: &Path) -> Result<Self> {
        let file =
            std::fs::File::open(path).with_context(|| format!("{}: cannot open the model weights", path.display()))?;
        // SAFETY: read-only map of a file nothing here modifies while it is mapped.
        let mmap = unsafe { Mmap::map(&file) }.with_context(|| format!("{}: cannot map", path.display()))?;
        SafeTensors::deserialize(&mmap)
            .map_err(|e| anyhow::anyhow!("{}: not a valid safetensors file ({e})", path.display()))?;
        Ok(Self { path: path.to_path_buf(), mmap })
    }
}

impl WeightSource for SafetensorsFile {
    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn tensor(&self, name: &str) -> Result<Option<HostTensor>> {
        let st = SafeTensors::deserialize(&self.mmap).map_err(|e| anyhow::anyhow!("{}: {e}", self.path.display()))?;
        let Ok(view) = st.tensor(name) else { return Ok(None) };
        let b = view.data();
        let data: Vec<f32> = match view.dtype() {
            Dtype::F32 => b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
            Dtype::F16 => b.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
            Dtype::BF16 => b.chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
            other => bail!("{}: tensor '{name}' has dtype {other:?} (f32, f16, bf16 supported)", self.path.display()),
        };
        Ok(Some(HostTensor { data, shape: view.shape().to_vec() }))
    }
}

/// The model on the device it runs on. One per encoder, built once: the size difference of the variants costs
/// nothing.
#[allow(clippy::large_enum_variant)]
enum Engine {
    Cpu(BertCpu),
    #[cfg(feature = "cuda")]
    Cuda(Bert<burn::backend::Cuda>, burn::backend::cuda::CudaDevice),
}

/// A loaded sentence encoder: BERT + tokenizer + pooling (+ normalisation).
pub struct SentenceEncoder {
    engine: Engine,
    tokenizer: tokenizers::Tokenizer,
    pub config: BertConfig,
    pub pooling: Pooling,
    pub normalize: bool,
    /// Word pieces per text, special tokens included; longer texts are truncated.
    pub max_seq_length: usize,
    pub do_lower_case: bool,
    pub prefixes: Prefixes,
    pub dir: PathBuf,
}

impl SentenceEncoder {
    /// Loads a sentence-transformers folder. `prefixes`: `None` = the folder's own prompts (else none).
    pub fn load(dir: &Path, device: DeviceKind, prefixes: Option<Prefixes>) -> Result<Self> {
        let hint = "for all-MiniLM-L6-v2 run scripts/setup.sh --minilm";
        crate::io::require_dir(dir, "sentence-transformers model folder", hint)?;
        let modules_path = dir.join("modules.json");
        if !crate::io::exists(&modules_path)? {
            bail!("{}: missing: {} is not a sentence-transformers folder", modules_path.display(), dir.display());
        }
        let modules: Vec<ModuleEntry> = read_json(&modules_path, "sentence-transformers module list")?;
        let mut transformer = None;
        let mut pooling_dir = None;
        let mut normalize = false;
        for m in &modules {
            let kind = m.kind.rsplit('.').next().unwrap_or(&m.kind);
            match kind {
                "Transformer" => transformer = Some(dir.join(&m.path)),
                "Pooling" => pooling_dir = Some(dir.join(&m.path)),
                "Normalize" => normalize = true,
                other => bail!(
                    "{}: module type {other:?} is not supported (Transformer, Pooling, Normalize)",
                    modules_path.display()
                ),
            }
        }
        let Some(tdir) = transformer else { bail!("{}: no Transformer module", modules_path.display()) };
        let Some(pdir) = pooling_dir else { bail!("{}: no Pooling module", modules_path.display()) };

        let config = BertConfig::from_file(&tdir.join("config.json"))?;

        let pool_path = pdir.join("config.json");
        if !crate::io::exists(&pool_path)? {
            bail!(
                "{}: missing: the Pooling module's config (modules.json names {})",
                pool_path.display(),
                pdir.display()
            );
        }
        let pc: PoolingConfig = read_json(&pool_path, "pooling config")?;
        if pc.word_embedding_dimension != config.hidden_size {
            bail!(
                "{}: word_embedding_dimension {} differs from hidden_size {} in {}",
                pool_path.display(),
                pc.word_embedding_dimension,
                config.hidden_size,
                tdir.join("config.json").display()
            );
        }
        let modes = [
            (pc.pooling_mode_mean_tokens, Some(Pooling::Mean)),
            (pc.pooling_mode_cls_token, Some(Pooling::Cls)),
            (pc.pooling_mode_max_tokens, Some(Pooling::Max)),
            (
                pc.pooling_mode_mean_sqrt_len_tokens
                    || pc.pooling_mode_weightedmean_tokens
                    || pc.pooling_mode_lasttoken,
                None,
            ),
        ];
        let on: Vec<_> = modes.iter().filter(|(set, _)| *set).collect();
        let pooling = match on.as_slice() {
            [(_, Some(p))] => *p,
            [] => bail!("{}: no pooling mode is set", pool_path.display()),
            [(_, None)] => bail!("{}: only mean, cls and max pooling are supported", pool_path.display()),
            _ => bail!(
                "{}: more than one pooling mode is set (concatenated poolings are not supported)",
                pool_path.display()
            ),
        };

        let sb_path = tdir.join("sentence_bert_config.json");
        let sb: SbertConfig = if crate::io::exists(&sb_path)? {
            read_json(&sb_path, "sentence-transformers config")?
        } else {
            SbertConfig::default()
        };
        let max_seq_length =
            sb.max_seq_length.unwrap_or(config.max_position_embeddings).min(config.max_position_embeddings);

        let tok_path = tdir.join("tokenizer.json");
        if !crate::io::exists(&tok_path)? {
            bail!(
                "{}: missing: the model's tokenizer (a Hugging Face tokenizer.json) must be in the folder",
                tok_path.display()
            );
        }
        let mut tokenizer = tokenizers::Tokenizer::from_file(&tok_path)
            .map_err(|e| anyhow::anyhow!("{}: cannot load the tokenizer: {e}", tok_path.display()))?;
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(tokenizers::TruncationParams { max_length: max_seq_length, ..Default::default() }))
            .map_err(|e| anyhow::anyhow!("{}: cannot set truncation: {e}", tok_path.display()))?;
        let tv = tokenizer.get_vocab_size(true);
        if tv > config.vocab_size {
            bail!(
                "{}: {tv} tokens, but the model's embedding has {} rows: wrong tokenizer for this model?",
                tok_path.display(),
                config.vocab_size
            );
        }

        let prefixes = match prefixes {
            Some(p) => p,
            None => folder_prompts(&dir.join("config_sentence_transformers.json"))?,
        };

        let weights_path = tdir.join("model.safetensors");
        if !crate::io::exists(&weights_path)? {
            bail!("{}: missing: the model weights (safetensors) must be in the folder", weights_path.display());
        }
        let src = SafetensorsFile::open(&weights_path)?;
        let engine = match device {
            DeviceKind::Cpu => {
                Engine::Cpu(BertCpu::from_burn(&build_bert(&src, &config, &burn::backend::flex::FlexDevice)?)?)
            }
            DeviceKind::Cuda(n) => {
                crate::device::check_cuda(n)?;
                #[cfg(feature = "cuda")]
                {
                    let dev = burn::backend::cuda::CudaDevice::new(n);
                    let m = crate::device::guard("CUDA initialisation failed", || build_bert(&src, &config, &dev))??;
                    Engine::Cuda(m, dev)
                }
                #[cfg(not(feature = "cuda"))]
                unreachable!()
            }
        };
        Ok(Self {
            engine,
            tokenizer,
            config,
            pooling,
            normalize,
            max_seq_length,
            do_lower_case: sb.do_lower_case,
            prefixes,
            dir: dir.to_path_buf(),
        })
    }

    /// Embedding width.
    pub fn dim(&self) -> usize {
        self.config.hidden_size
    }

    /// Word-piece ids of `text` as the encoder sees it (prefix added, lower-cased if the folder says so, truncated).
    pub fn token_ids(&self, text: &str, kind: TextKind) -> Result<Vec<u32>> {
        Ok(self.tokenize(&[text], kind)?.remove(0).0)
    }

    fn tokenize(&self, texts: &[&str], kind: TextKind) -> Result<Vec<(Vec<u32>, Vec<u32>)>> {
        let prefix = self.prefixes.for_kind(kind);
        let inputs: Vec<String> = texts
            .iter()
            .map(|t| {
                let s = format!("{prefix}{t}");
                if self.do_lower_case {
                    s.to_lowercase()
                } else {
                    s
                }
            })
            .collect();
        let enc = self.tokenizer.encode_batch(inputs, true).map_err(|e| anyhow::anyhow!("tokenizing failed: {e}"))?;
        Ok(enc.into_iter().map(|e| (e.get_ids().to_vec(), e.get_type_ids().to_vec())).collect())
    }

    /// Embeds `texts` (`batch` at a time, longest first), in input order: one `dim()`-long vector per text.
    pub fn encode(&self, texts: &[&str], kind: TextKind, batch: usize) -> Result<Vec<Vec<f32>>> {
        let tokens = self.tokenize(texts, kind)?;
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(tokens[i].0.len()));
        let mut out = vec![Vec::new(); texts.len()];
        for chunk in order.chunks(batch.max(1)) {
            let seqs: Vec<&(Vec<u32>, Vec<u32>)> = chunk.iter().map(|&i| &tokens[i]).collect();
            let vecs = self.encode_tokens(&seqs)?;
            for (&i, v) in chunk.iter().zip(vecs) {
                out[i] = v;
            }
        }
        Ok(out)
    }

    /// One padded batch through the model and the pooling.
    fn encode_tokens(&self, seqs: &[&(Vec<u32>, Vec<u32>)]) -> Result<Vec<Vec<f32>>> {
        let b = seqs.len();
        let t = seqs.iter().map(|s| s.0.len()).max().unwrap_or(0).max(1);
        let mut ids = vec![self.config.pad_token_id; b * t];
        let mut types = vec![0u32; b * t];
        let mut mask = vec![0f32; b * t];
        for (r, (sid, sty)) in seqs.iter().map(|s| (&s.0, &s.1)).enumerate() {
            for (j, (&id, &ty)) in sid.iter().zip(sty).enumerate() {
                ids[r * t + j] = id;
                types[r * t + j] = ty;
                mask[r * t + j] = 1.0;
            }
        }
        let pooled = match &self.engine {
            Engine::Cpu(m) => {
                let dev = burn::backend::flex::FlexDevice;
                let x = m.forward(&ids, &types, &mask, b, t)?; // [b * t, d]
                let x = Tensor::<burn::backend::Flex, 3>::from_data(TensorData::new(x, [b, t, self.dim()]), &dev);
                pool(x, Tensor::from_data(TensorData::new(mask, [b, t]), &dev), self.pooling)
            }
            #[cfg(feature = "cuda")]
            Engine::Cuda(m, dev) => pool_batch(m, dev, &ids, &types, mask, b, t, self.pooling),
        };
        let d = self.dim();
        Ok(pooled
            .chunks_exact(d)
            .map(|v| {
                let mut v = v.to_vec();
                if self.normalize {
                    // torch.nn.functional.normalize: v / max(||v||, 1e-12)
                    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
                    v.iter_mut().for_each(|x| *x /= n);
                }
                v
            })
            .collect())
    }
}

/// The prompts a folder's `config_sentence_transformers.json` names (none when it names none).
fn folder_prompts(path: &Path) -> Result<Prefixes> {
    if !crate::io::exists(path)? {
        return Ok(Prefixes::default());
    }
    let v: serde_json::Value = read_json(path, "sentence-transformers config")?;
    let prompts: HashMap<String, String> = v
        .get("prompts")
        .and_then(|p| p.as_object())
        .map(|o| o.iter().filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string()))).collect())
        .unwrap_or_default();
    let get = |keys: &[&str]| keys.iter().find_map(|k| prompts.get(*k).cloned()).unwrap_or_default();
    Ok(Prefixes { query: get(&["query"]), passage: get(&["passage", "document", "corpus"]) })
}

/// Forward pass + pooling on backend `B`: `[b * d]` pooled vectors.
#[cfg(feature = "cuda")]
#[allow(clippy::too_many_arguments)]
fn pool_batch<B: Backend>(
    m: &Bert<B>,
    dev: &B::Device,
    ids: &[u32],
    types: &[u32],
    mask: Vec<f32>,
    b: usize,
    t: usize,
    pooling: Pooling,
) -> Vec<f32> {
    let int =
        |v: &[u32]| Tensor::<B, 2, Int>::from_data(TensorData::new(v.iter().map(|&x| x as i64).collect(), [b, t]), dev);
    let mask = Tensor::<B, 2>::from_data(TensorData::new(mask, [b, t]), dev);
    let x = m.forward(int(ids), int(types), mask.clone()); // [b, t, d]
    pool(x, mask, pooling)
}

/// Token states `x [b, t, d]` pooled over the tokens of `mask [b, t]` (1 token, 0 padding): `[b * d]`.
fn pool<B: Backend>(x: Tensor<B, 3>, mask: Tensor<B, 2>, pooling: Pooling) -> Vec<f32> {
    let [b, _, d] = x.dims();
    let pooled = match pooling {
        Pooling::Cls => x.narrow(1, 0, 1).reshape([b, d]),
        Pooling::Mean => {
            // sum(x * mask) / max(sum(mask), 1e-9), as sentence-transformers computes it
            let m3 = mask.clone().unsqueeze_dim::<3>(2); // [b, t, 1]
            let sum = (x * m3).sum_dim(1).reshape([b, d]);
            let count = mask.sum_dim(1).clamp_min(1e-9); // [b, 1]
            sum / count
        }
        Pooling::Max => {
            // padding set to -1e9 so it never wins (sentence-transformers' value)
            let m3 = mask.unsqueeze_dim::<3>(2); // [b, t, 1]
            let x = x * m3.clone() + (m3 - 1.0) * 1e9;
            x.max_dim(1).reshape([b, d])
        }
    };
    pooled.into_data().convert::<f32>().to_vec::<f32>().expect("f32 tensor")
}
