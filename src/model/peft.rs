//! PEFT LoRA adapter folders: `adapter_config.json` + `adapter_model.safetensors`, as PEFT's `save_pretrained`
//! and `ragtime train autorag --lora` (`OUT/adapter/`) write them, loaded onto their base model.
//!
//! Each adapted weight is `W + scale * B A` (Hugging Face layout: `W [out, in]`, `A [r, in]`, `B [out, r]`;
//! `scale = lora_alpha / r`, or `lora_alpha / sqrt(r)` with `use_rslora`): what PEFT's `merge_and_unload()`
//! computes. Every other weight is the base's as it is: a quantized GGUF's integer blocks stay integer, while an
//! adapted matrix is held in f32. So an adapter of a few MB stands for a fine-tuned model of the base's size, and
//! `--model DIR/adapter` evaluates it without a merged copy on disk.
//!
//! The base is `base_model_name_or_path` of the config: a path (as given when training; relative to the working
//! directory, else to the adapter folder). Hub model ids are not fetched.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context, Result};

use super::config::ModelConfig;
use super::params::BLOCK_LINEARS;
use super::weights::{HostTensor, WeightSource};

pub const ADAPTER_CONFIG: &str = "adapter_config.json";
pub const ADAPTER_WEIGHTS: &str = "adapter_model.safetensors";

/// Whether `dir` is an adapter folder: an `adapter_config.json` and no model `config.json`.
pub fn is_adapter_dir(dir: &Path) -> Result<bool> {
    Ok(crate::io::is_dir(dir)?
        && crate::io::is_file(&dir.join(ADAPTER_CONFIG))?
        && !crate::io::exists(&dir.join("config.json"))?)
}

/// What ragtime reads of `adapter_config.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct AdapterConfig {
    /// `base_model_name_or_path`, resolved to a path that exists.
    pub base: PathBuf,
    pub r: usize,
    pub alpha: f64,
    pub rslora: bool,
}

impl AdapterConfig {
    /// Reads and checks `DIR/adapter_config.json`: a LoRA adapter without bias terms, whose base is on disk.
    pub fn read(dir: &Path) -> Result<AdapterConfig> {
        let path = dir.join(ADAPTER_CONFIG);
        let text = std::fs::read_to_string(&path).with_context(|| format!("{}: cannot read", path.display()))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("{}: not valid JSON", path.display()))?;
        let field = |k: &str| v.get(k).filter(|x| !x.is_null());
        if let Some(t) = field("peft_type").and_then(|t| t.as_str()).filter(|t| *t != "LORA") {
            bail!("{}: peft_type is {t:?}; only LORA adapters load", path.display());
        }
        if let Some(b) = field("bias").and_then(|b| b.as_str()).filter(|b| *b != "none") {
            bail!("{}: bias is {b:?}; only adapters without bias terms (\"none\") load", path.display());
        }
        if field("fan_in_fan_out").and_then(|f| f.as_bool()) == Some(true) {
            bail!(
                "{}: fan_in_fan_out is true (a GPT-2-style Conv1D layout), not a Llama/Qwen2 adapter",
                path.display()
            );
        }
        let r = field("r").and_then(|r| r.as_u64()).filter(|&r| r > 0);
        let r = r.with_context(|| format!("{}: 'r' (the rank) must be a positive integer", path.display()))? as usize;
        let alpha = field("lora_alpha")
            .and_then(|a| a.as_f64())
            .with_context(|| format!("{}: 'lora_alpha' must be a number", path.display()))?;
        let rslora = field("use_rslora").and_then(|x| x.as_bool()).unwrap_or(false);
        let named = field("base_model_name_or_path")
            .and_then(|b| b.as_str())
            .with_context(|| format!("{}: no base_model_name_or_path", path.display()))?;
        let base = [PathBuf::from(named), dir.join(named)]
            .into_iter()
            .find(|p| crate::io::exists(p).unwrap_or(false))
            .with_context(|| {
                format!(
                    "{}: the base model {named:?} (base_model_name_or_path) is neither a path from here nor from {}; \
                     point it at the base's .gguf file or folder",
                    path.display(),
                    dir.display()
                )
            })?;
        if is_adapter_dir(&base)? {
            bail!(
                "{}: the base model {} is itself an adapter folder; point base_model_name_or_path at the base's \
                 .gguf file or model folder",
                path.display(),
                base.display()
            );
        }
        Ok(AdapterConfig { base, r, alpha, rslora })
    }

    /// The factor of `B A`.
    pub fn scale(&self) -> f64 {
        if self.rslora {
            self.alpha / (self.r as f64).sqrt()
        } else {
            self.alpha / self.r as f64
        }
    }
}

/// The base model's weights with an adapter folded in (see the module doc).
pub struct LoraMerged {
    base: Box<dyn WeightSource>,
    dir: PathBuf,
    /// Hugging Face weight name (`model.layers.L.self_attn.q_proj.weight`) -> (`A [r, in]`, `B [out, r]`)
    adapters: HashMap<String, (HostTensor, HostTensor)>,
    scale: f32,
}

impl LoraMerged {
    /// The adapter of folder `dir` (its `adapter_model.safetensors`, config `acfg`) on `base`, a model of
    /// config `cfg`. Every adapter tensor must name a linear layer of the model, in pairs of A and B of the
    /// config's rank and the layer's shape.
    pub fn open(dir: &Path, acfg: &AdapterConfig, base: Box<dyn WeightSource>, cfg: &ModelConfig) -> Result<Self> {
        let path = dir.join(ADAPTER_WEIGHTS);
        let mut halves: HashMap<String, (Option<HostTensor>, Option<HostTensor>)> = HashMap::new();
        for (name, t) in super::safetensors::read_tensors(&path)? {
            // PEFT: base_model.model.<HF module path>.lora_A.weight (older files: .lora_A.default.weight)
            let module = name.strip_prefix("base_model.model.").unwrap_or(&name);
            let half = |ab: &str| {
                let plain = module.strip_suffix(&format!(".lora_{ab}.weight"));
                plain.or_else(|| module.strip_suffix(&format!(".lora_{ab}.default.weight")))
            };
            let (module, a) = if let Some(m) = half("A") {
                (m, true)
            } else if let Some(m) = half("B") {
                (m, false)
            } else {
                bail!("{}: tensor {name:?} is neither a lora_A nor a lora_B weight", path.display());
            };
            let [out, inp] = layer_shape(module, cfg).with_context(|| {
                format!("{}: tensor {name:?} adapts {module:?}, not a linear layer of the base model", path.display())
            })?;
            let want = if a { [acfg.r, inp] } else { [out, acfg.r] };
            ensure!(
                t.shape == want,
                "{}: tensor {name:?} has shape {:?}, expected {want:?} (rank {} of adapter_config.json)",
                path.display(),
                t.shape,
                acfg.r
            );
            let slot = halves.entry(format!("{module}.weight")).or_default();
            if a {
                slot.0 = Some(t);
            } else {
                slot.1 = Some(t);
            }
        }
        ensure!(!halves.is_empty(), "{}: holds no adapter tensors", path.display());
        let mut adapters = HashMap::new();
        for (w, (a, b)) in halves {
            let (Some(a), Some(b)) = (a, b) else { bail!("{}: {w} has only one of lora_A and lora_B", path.display()) };
            adapters.insert(w, (a, b));
        }
        Ok(LoraMerged { base, dir: dir.to_path_buf(), adapters, scale: acfg.scale() as f32 })
    }

    /// How many weight matrices the adapter changes.
    pub fn adapted(&self) -> usize {
        self.adapters.len()
    }
}

/// `[out, in]` of the linear layer `model.layers.L.<path>` of a model of config `cfg`.
fn layer_shape(module: &str, cfg: &ModelConfig) -> Option<[usize; 2]> {
    let rest = module.strip_prefix("model.layers.")?;
    let (layer, path) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    (layer < cfg.num_layers).then_some(())?;
    BLOCK_LINEARS.iter().find(|l| l.path == path).map(|l| (l.shape)(cfg))
}

impl WeightSource for LoraMerged {
    fn describe(&self) -> String {
        format!("{} (LoRA adapter on {})", self.dir.display(), self.base.describe())
    }

    fn tensor(&self, hf_name: &str) -> Result<Option<HostTensor>> {
        let Some(mut w) = self.base.tensor(hf_name)? else { return Ok(None) };
        if let Some((a, b)) = self.adapters.get(hf_name) {
            // W [out, in] += scale * B [out, r] A [r, in], row by row
            let (r, inp) = (a.shape[0], a.shape[1]);
            ensure!(w.shape == [b.shape[0], inp], "{}: '{hf_name}' has shape {:?}", self.base.describe(), w.shape);
            for (o, row) in w.data.chunks_exact_mut(inp).enumerate() {
                for k in 0..r {
                    let f = self.scale * b.data[o * r + k];
                    for (x, &ak) in row.iter_mut().zip(&a.data[k * inp..(k + 1) * inp]) {
                        *x += f * ak;
                    }
                }
            }
        }
        Ok(Some(w))
    }

    /// An adapted matrix has no integer copy (it is held in f32); the others keep the base's.
    fn quantized(&self, hf_name: &str) -> Result<Option<super::quant::QMatrix>> {
        if self.adapters.contains_key(hf_name) {
            return Ok(None);
        }
        self.base.quantized(hf_name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{random_weights, Arch, MemoryWeights};

    fn json(dir: &Path, v: serde_json::Value) {
        std::fs::write(dir.join(ADAPTER_CONFIG), v.to_string()).unwrap();
    }

    /// The merge worked by hand: W = [[1, 2], [3, 4]] (out 2, in 2), A = [[1, 0]] (r 1), B = [[2], [-1]],
    /// alpha 2, r 1: scale 2, B A = [[2, 0], [-1, 0]], W' = [[5, 2], [1, 4]].
    #[test]
    fn lora_merge_by_hand_and_config_checks() {
        let dir = tempfile::tempdir().unwrap();
        let base_file = dir.path().join("base.gguf");
        std::fs::write(&base_file, b"stand-in: only its existence is read here").unwrap();
        json(
            dir.path(),
            serde_json::json!({"peft_type": "LORA", "r": 1, "lora_alpha": 2, "base_model_name_or_path": "base.gguf"}),
        );
        let acfg = AdapterConfig::read(dir.path()).unwrap();
        assert_eq!((acfg.base.clone(), acfg.r, acfg.scale()), (base_file.clone(), 1, 2.0), "base found beside");
        assert!(is_adapter_dir(dir.path()).unwrap());

        let mut cfg = ModelConfig::tiny(Arch::Llama, 11);
        (cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.num_layers) = (2, 1, 1, 2, 1);
        let q = "model.layers.0.self_attn.q_proj";
        let t = |data: Vec<f32>, shape: Vec<usize>| HostTensor { data, shape };
        let mut base = random_weights(&cfg, 1);
        base.retain(|(n, _)| n != &format!("{q}.weight"));
        base.push((format!("{q}.weight"), t(vec![1.0, 2.0, 3.0, 4.0], vec![2, 2])));
        let adapter = |extra: Vec<(String, HostTensor)>| {
            let mut v = vec![
                (format!("base_model.model.{q}.lora_A.weight"), t(vec![1.0, 0.0], vec![1, 2])),
                // PEFT's older name, with the adapter's name "default"
                (format!("base_model.model.{q}.lora_B.default.weight"), t(vec![2.0, -1.0], vec![2, 1])),
            ];
            v.extend(extra);
            crate::model::safetensors::write_safetensors(&dir.path().join(ADAPTER_WEIGHTS), &v, None).unwrap();
        };
        adapter(vec![]);
        let src = || Box::new(MemoryWeights(base.iter().cloned().collect())) as Box<dyn WeightSource>;
        let m = LoraMerged::open(dir.path(), &acfg, src(), &cfg).unwrap();
        assert_eq!(m.adapted(), 1);
        assert_eq!(m.tensor(&format!("{q}.weight")).unwrap().unwrap().data, [5.0, 2.0, 1.0, 4.0]);
        let k = "model.layers.0.self_attn.k_proj.weight";
        assert_eq!(m.tensor(k).unwrap(), src().tensor(k).unwrap(), "a weight without adapter is the base's");
        // rsLoRA: alpha / sqrt(r)
        let rs = AdapterConfig { r: 4, alpha: 8.0, rslora: true, ..acfg.clone() };
        assert_eq!(rs.scale(), 4.0);

        // what is refused, by name
        let err = |extra: Vec<(String, HostTensor)>| {
            adapter(extra);
            format!("{:#}", LoraMerged::open(dir.path(), &acfg, src(), &cfg).err().unwrap())
        };
        let e = err(vec![(
            "base_model.model.model.layers.5.mlp.up_proj.lora_A.weight".into(),
            t(vec![0.0; 2], vec![1, 2]),
        )]);
        assert!(e.contains("not a linear layer"), "{e}");
        let e = err(vec![(
            "base_model.model.model.layers.0.mlp.up_proj.lora_A.weight".into(),
            t(vec![0.0; 2], vec![1, 2]),
        )]);
        assert!(e.contains("only one of lora_A and lora_B"), "{e}");
        let e = err(vec![(
            "base_model.model.model.layers.0.mlp.up_proj.lora_B.weight".into(),
            t(vec![0.0; 3], vec![3, 1]),
        )]);
        assert!(e.contains("expected [") && e.contains("rank 1"), "{e}");
        for (v, want) in [
            (
                serde_json::json!({"peft_type": "IA3", "r": 1, "lora_alpha": 2, "base_model_name_or_path": "base.gguf"}),
                "only LORA",
            ),
            (
                serde_json::json!({"r": 1, "lora_alpha": 2, "bias": "all", "base_model_name_or_path": "base.gguf"}),
                "bias",
            ),
            (serde_json::json!({"r": 0, "lora_alpha": 2, "base_model_name_or_path": "base.gguf"}), "positive integer"),
            (serde_json::json!({"r": 1, "lora_alpha": 2, "base_model_name_or_path": "gone.gguf"}), "\"gone.gguf\""),
            (
                serde_json::json!({"r": 1, "lora_alpha": 2, "base_model_name_or_path": dir.path().to_str().unwrap()}),
                "itself an adapter",
            ),
        ] {
            json(dir.path(), v);
            let e = format!("{:#}", AdapterConfig::read(dir.path()).err().unwrap());
            assert!(e.contains(want) && e.contains(ADAPTER_CONFIG), "{e}");
        }
    }
}
