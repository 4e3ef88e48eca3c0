//! Architecture hyper-parameters, read from GGUF metadata or a Hugging Face `config.json`.

use std::path::Path;

use anyhow::{Context, Result};

use super::rope::{yarn_attention_factor, RopeScaling};
use super::ModelError;

/// The decoder families ragtime runs: they differ only in biases and in how GGUF stores Q/K.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// Llama 2/3, SmolLM, Mistral-style: no q/k/v bias.
    Llama,
    /// Qwen2 / Qwen2.5: bias on q, k and v projections.
    Qwen2,
}

impl Arch {
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
        }
    }
    pub fn qkv_bias(self) -> bool {
        matches!(self, Arch::Qwen2)
    }
}

/// Everything the forward pass needs to know about the shapes.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ModelConfig {
    pub arch: Arch,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub vocab_size: usize,
    pub max_position_embeddings: usize,
    pub rope_theta: f32,
    /// How the checkpoint rescales RoPE's frequencies ([`RopeScaling`]); `None`: plain `theta^(-2i/d)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_scaling: Option<RopeScaling>,
    pub rms_norm_eps: f32,
    pub tie_word_embeddings: bool,
    pub bos_token_id: Option<u32>,
    pub eos_token_ids: Vec<u32>,
}

impl ModelConfig {
    /// Reads a Hugging Face `config.json` (LlamaForCausalLM, Qwen2ForCausalLM and look-alikes).
    pub fn from_hf_config(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("{}: cannot read", path.display()))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("{}: not valid JSON", path.display()))?;
        let get = |k: &str| -> Result<usize> {
            v.get(k)
                .and_then(|x| x.as_u64())
                .map(|x| x as usize)
                .with_context(|| format!("{}: missing or non-integer field '{k}'", path.display()))
        };
        let model_type = v.get("model_type").and_then(|x| x.as_str()).unwrap_or("llama");
        let arch = match model_type {
            "llama" | "mistral" => Arch::Llama,
            "qwen2" => Arch::Qwen2,
            other => {
                return Err(ModelError::unsupported(
                    path.display(),
                    format!("model_type '{other}'"),
                    "llama, mistral, qwen2",
                )
                .into())
            }
        };
        // options these families can carry that the forward pass does not implement: refused, not ignored
        let refuse = |what: String, supported: &str| -> anyhow::Error {
            ModelError::unsupported(path.display(), what, supported).into()
        };
        let flag = |k: &str| v.get(k).and_then(|x| x.as_bool()).unwrap_or(false);
        if let Some(act) = v.get("hidden_act").and_then(|x| x.as_str()).filter(|a| *a != "silu") {
            return Err(refuse(format!("hidden_act '{act}'"), "silu"));
        }
        if arch == Arch::Llama && flag("attention_bias") {
            return Err(refuse(
                "attention_bias true".into(),
                "llama's projections without biases, qwen2's q/k/v biases",
            ));
        }
        if flag("mlp_bias") {
            return Err(refuse("mlp_bias true".into(), "MLP projections without biases"));
        }
        if let Some(f) = v.get("partial_rotary_factor").and_then(|x| x.as_f64()).filter(|f| *f != 1.0) {
            return Err(refuse(format!("partial_rotary_factor {f} (RoPE on part of a head)"), "1"));
        }
        // sliding-window attention equals full attention while the sequence fits in the window: ragtime runs
        // sequences up to the window (a longer one is a context overflow, not another model's attention)
        let window = match model_type {
            "mistral" => v.get("sliding_window").and_then(|x| x.as_u64()),
            "qwen2" if flag("use_sliding_window") => v.get("sliding_window").and_then(|x| x.as_u64()),
            _ => None,
        }
        .filter(|&w| w > 0);
        let hidden_size = get("hidden_size")?;
        let num_heads = get("num_attention_heads")?;
        let num_kv_heads =
            v.get("num_key_value_heads").and_then(|x| x.as_u64()).map(|x| x as usize).unwrap_or(num_heads);
        let head_dim = v
            .get("head_dim")
            .and_then(|x| x.as_u64())
            .map(|x| x as usize)
            .unwrap_or_else(|| hidden_size.checked_div(num_heads).unwrap_or(0));
        let rope_theta = v
            .get("rope_theta")
            .and_then(|x| x.as_f64())
            .or_else(|| v.get("rope_parameters").and_then(|r| r.get("rope_theta")).and_then(|x| x.as_f64()))
            .unwrap_or(10000.0) as f32;
        let rope_scaling = hf_rope_scaling(&v, path)?;
        let eos_token_ids = match v.get("eos_token_id") {
            Some(serde_json::Value::Number(n)) => vec![n.as_u64().unwrap_or(0) as u32],
            Some(serde_json::Value::Array(a)) => a.iter().filter_map(|x| x.as_u64()).map(|x| x as u32).collect(),
            _ => vec![],
        };
        let cfg = ModelConfig {
            arch,
            hidden_size,
            intermediate_size: get("intermediate_size")?,
            num_layers: get("num_hidden_layers")?,
            num_heads,
            num_kv_heads,
            head_dim,
            vocab_size: get("vocab_size")?,
            max_position_embeddings: v
                .get("max_position_embeddings")
                .and_then(|x| x.as_u64())
                .unwrap_or(4096)
                .min(window.unwrap_or(u64::MAX)) as usize,
            rope_theta,
            rope_scaling,
            rms_norm_eps: v.get("rms_norm_eps").and_then(|x| x.as_f64()).unwrap_or(1e-6) as f32,
            tie_word_embeddings: v.get("tie_word_embeddings").and_then(|x| x.as_bool()).unwrap_or(false),
            bos_token_id: v.get("bos_token_id").and_then(|x| x.as_u64()).map(|x| x as u32),
            eos_token_ids,
        };
        cfg.validate(&path.display().to_string(), |k| k.to_string())?;
        Ok(cfg)
    }

    /// Checks the whole config once, at load, so that a bad value is an error naming the file and its key instead
    /// of a division by zero or an absurd allocation later. `key` maps a Hugging Face `config.json` key to the
    /// file's own name for it (GGUF metadata keys differ).
    pub fn validate(&self, file: &str, key: impl Fn(&str) -> String) -> Result<(), ModelError> {
        let bad = |k: &str, value: String, detail: String| ModelError::BadValue {
            file: file.to_string(),
            key: key(k),
            value,
            detail,
        };
        let count = |k: &str, v: usize, max: usize| -> Result<(), ModelError> {
            if v == 0 || v > max {
                return Err(bad(k, v.to_string(), format!("expected 1..={max}")));
            }
            Ok(())
        };
        count("hidden_size", self.hidden_size, 1 << 16)?;
        count("intermediate_size", self.intermediate_size, 1 << 18)?;
        count("num_hidden_layers", self.num_layers, 1 << 10)?;
        count("num_attention_heads", self.num_heads, 1 << 10)?;
        count("num_key_value_heads", self.num_kv_heads, 1 << 10)?;
        count("head_dim", self.head_dim, 1 << 12)?;
        count("vocab_size", self.vocab_size, 1 << 22)?;
        count("max_position_embeddings", self.max_position_embeddings, 1 << 24)?;
        if !self.num_heads.is_multiple_of(self.num_kv_heads) {
            let detail = format!(
                "not a multiple of {} = {} (each key/value head serves a whole group of heads)",
                key("num_key_value_heads"),
                self.num_kv_heads
            );
            return Err(bad("num_attention_heads", self.num_heads.to_string(), detail));
        }
        if !self.head_dim.is_multiple_of(2) {
            let detail = "rotary embeddings need an even head size".to_string();
            return Err(bad("head_dim", self.head_dim.to_string(), detail));
        }
        for (k, v) in [("rope_theta", self.rope_theta), ("rms_norm_eps", self.rms_norm_eps)] {
            if !(v.is_finite() && v > 0.0) {
                return Err(bad(k, v.to_string(), "expected a finite number above 0".into()));
            }
        }
        if let Some(s) = &self.rope_scaling {
            s.check(self.head_dim).map_err(|(k, value, detail)| bad(k, value, detail))?;
        }
        Ok(())
    }

    /// The `config.json` transformers expects for these weights. A RoPE scaling that `config.json` cannot state
    /// (GGUF's per-frequency factors) is an error: written without it, the file would load as another model.
    pub fn to_hf_config(&self) -> Result<serde_json::Value, ModelError> {
        let (archs, model_type) = match self.arch {
            Arch::Llama => ("LlamaForCausalLM", "llama"),
            Arch::Qwen2 => ("Qwen2ForCausalLM", "qwen2"),
        };
        let rope_scaling = match &self.rope_scaling {
            None => serde_json::Value::Null,
            Some(s) => s.to_hf().ok_or_else(|| {
                ModelError::unsupported(
                    "config.json",
                    "RoPE scaled by per-frequency factors (a GGUF's rope_freqs.weight)",
                    "config.json states linear, llama3 and yarn scaling by their parameters; start from the model's \
                     Hugging Face folder, whose config.json has them",
                )
            })?,
        };
        Ok(serde_json::json!({
            "architectures": [archs],
            "model_type": model_type,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "vocab_size": self.vocab_size,
            "max_position_embeddings": self.max_position_embeddings,
            "rope_theta": self.rope_theta,
            "rope_scaling": rope_scaling,
            "rms_norm_eps": self.rms_norm_eps,
            "tie_word_embeddings": self.tie_word_embeddings,
            "hidden_act": "silu",
            "attention_bias": self.arch.qkv_bias(),
            "bos_token_id": self.bos_token_id,
            "eos_token_id": if self.eos_token_ids.len() == 1 { serde_json::json!(self.eos_token_ids[0]) } else { serde_json::json!(self.eos_token_ids) },
            "torch_dtype": "float32",
        }))
    }

    /// A tiny configuration for tests (random weights).
    pub fn tiny(arch: Arch, vocab_size: usize) -> Self {
        ModelConfig {
            arch,
            hidden_size: 32,
            intermediate_size: 64,
            num_layers: 2,
            num_heads: 4,
            num_kv_heads: 2,
            head_dim: 8,
            vocab_size,
            max_position_embeddings: 2048,
            rope_theta: 10000.0,
            rope_scaling: None,
            rms_norm_eps: 1e-5,
            tie_word_embeddings: true,
            bos_token_id: None,
            eos_token_ids: vec![],
        }
    }
}

/// A `config.json`'s RoPE scaling: `rope_scaling` (or, in the newer layout, `rope_parameters`) with `rope_type`
/// (or `type`) `linear`, `llama3` or `yarn`, their defaults as transformers'; `default` or none: no scaling. Any
/// other type is refused by name.
fn hf_rope_scaling(v: &serde_json::Value, path: &Path) -> Result<Option<RopeScaling>> {
    let Some(s) = v.get("rope_scaling").filter(|s| !s.is_null()).or_else(|| v.get("rope_parameters")) else {
        return Ok(None);
    };
    let kind = s.get("rope_type").or_else(|| s.get("type")).and_then(|x| x.as_str()).unwrap_or("default");
    let opt = |k: &str| s.get(k).and_then(|x| x.as_f64());
    let num = |k: &str| -> Result<f64> {
        opt(k).with_context(|| format!("{}: rope_scaling of type '{kind}' lacks the number '{k}'", path.display()))
    };
    let max_pos = v.get("max_position_embeddings").and_then(|x| x.as_u64()).unwrap_or(0);
    // transformers: a top-level original_max_position_embeddings (Phi-3 keeps one there) wins, then the scaling's
    // own, then max_position_embeddings
    let original = v
        .get("original_max_position_embeddings")
        .or_else(|| s.get("original_max_position_embeddings"))
        .and_then(|x| x.as_u64())
        .unwrap_or(max_pos) as usize;
    Ok(match kind {
        "default" => None,
        "linear" => Some(RopeScaling::Linear { factor: num("factor")? as f32 }),
        "llama3" => Some(RopeScaling::Llama3 {
            factor: num("factor")? as f32,
            low_freq_factor: num("low_freq_factor")? as f32,
            high_freq_factor: num("high_freq_factor")? as f32,
            original_max_position_embeddings: original,
        }),
        "yarn" => {
            // transformers: without a factor, the ratio of the positions
            let factor = opt("factor").unwrap_or(max_pos as f64 / original.max(1) as f64);
            let attention_factor = opt("attention_factor")
                .unwrap_or_else(|| yarn_attention_factor(factor, opt("mscale"), opt("mscale_all_dim")));
            Some(RopeScaling::Yarn {
                factor: factor as f32,
                original_max_position_embeddings: original,
                beta_fast: opt("beta_fast").filter(|b| *b != 0.0).unwrap_or(32.0) as f32,
                beta_slow: opt("beta_slow").filter(|b| *b != 0.0).unwrap_or(1.0) as f32,
                attention_factor: attention_factor as f32,
                truncate: s.get("truncate").and_then(|x| x.as_bool()).unwrap_or(true),
            })
        }
        other => {
            let what = format!("rope_scaling type '{other}'");
            return Err(ModelError::unsupported(path.display(), what, "default, linear, llama3, yarn").into());
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Options the forward pass does not implement are refused by name; a sliding window bounds the positions.
    #[test]
    fn unimplemented_options_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        for (fields, want) in [
            (r#""hidden_act": "gelu""#, "hidden_act 'gelu' is not supported (silu)"),
            (r#""attention_bias": true"#, "attention_bias true is not supported"),
            (r#""mlp_bias": true"#, "mlp_bias true is not supported"),
            (r#""partial_rotary_factor": 0.5"#, "partial_rotary_factor 0.5 (RoPE on part of a head) is not supported"),
        ] {
            let p = hf_config(dir.path(), &format!(r#""num_attention_heads": 4, {fields}"#));
            let e = format!("{:#}", ModelConfig::from_hf_config(&p).unwrap_err());
            assert!(e.contains("config.json") && e.contains(want), "{fields}: {e}");
        }
        let ok =
            r#""num_attention_heads": 4, "hidden_act": "silu", "attention_bias": false, "partial_rotary_factor": 1.0"#;
        assert!(ModelConfig::from_hf_config(&hf_config(dir.path(), ok)).is_ok());
        let max_pos = |fields: &str| {
            let p = hf_config(
                dir.path(),
                &format!(r#""num_attention_heads": 4, "max_position_embeddings": 32768, {fields}"#),
            );
            ModelConfig::from_hf_config(&p).unwrap().max_position_embeddings
        };
        // Mistral 7B v0.1: a 4,096-position window; Qwen2.5 ships one switched off; llama has none
        assert_eq!(max_pos(r#""model_type": "mistral", "sliding_window": 4096"#), 4096);
        assert_eq!(max_pos(r#""model_type": "mistral", "sliding_window": null"#), 32768);
        assert_eq!(max_pos(r#""model_type": "qwen2", "use_sliding_window": false, "sliding_window": 4096"#), 32768);
        assert_eq!(max_pos(r#""model_type": "qwen2", "use_sliding_window": true, "sliding_window": 4096"#), 4096);
    }

    /// Qwen2.5's YaRN setting as its model card gives it (factor 4 over 32,768 positions), with transformers'
    /// defaults; a top-level original_max_position_embeddings wins over the scaling's own.
    #[test]
    fn yarn_reads_with_transformers_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let qwen = r#""num_attention_heads": 4, "max_position_embeddings": 131072, "rope_scaling": {"factor": 4.0,
            "original_max_position_embeddings": 32768, "type": "yarn"}"#;
        let c = ModelConfig::from_hf_config(&hf_config(dir.path(), qwen)).unwrap();
        let want = RopeScaling::Yarn {
            factor: 4.0,
            original_max_position_embeddings: 32768,
            beta_fast: 32.0,
            beta_slow: 1.0,
            attention_factor: (0.1 * 4f64.ln() + 1.0) as f32,
            truncate: true,
        };
        assert_eq!(c.rope_scaling, Some(want));
        let phi = r#""num_attention_heads": 4, "max_position_embeddings": 4096, "original_max_position_embeddings": 1024,
            "rope_scaling": {"rope_type": "yarn", "original_max_position_embeddings": 2048}"#;
        let c = ModelConfig::from_hf_config(&hf_config(dir.path(), phi)).unwrap();
        let Some(RopeScaling::Yarn { factor, original_max_position_embeddings, .. }) = c.rope_scaling else { panic!() };
        // no factor: the ratio of the positions, with the top-level original
        assert_eq!((factor, original_max_position_embeddings), (4.0, 1024));
    }

    /// A config.json ragtime writes (checkpoints, exports) reads back with the same RoPE scaling.
    #[test]
    fn rope_scaling_round_trips_through_config_json() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.json");
        for scaling in [
            None,
            Some(RopeScaling::Linear { factor: 4.0 }),
            Some(RopeScaling::Llama3 {
                factor: 32.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position_embeddings: 8192,
            }),
            Some(RopeScaling::Yarn {
                factor: 4.0,
                original_max_position_embeddings: 32768,
                beta_fast: 32.0,
                beta_slow: 1.0,
                attention_factor: 1.25,
                truncate: false,
            }),
        ] {
            let c = ModelConfig { rope_scaling: scaling, ..ModelConfig::tiny(Arch::Llama, 10) };
            std::fs::write(&p, c.to_hf_config().unwrap().to_string()).unwrap();
            assert_eq!(ModelConfig::from_hf_config(&p).unwrap(), c);
        }
    }

    fn hf_config(dir: &Path, fields: &str) -> std::path::PathBuf {
        let p = dir.join("config.json");
        let base = r#""model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
            "vocab_size": 100, "rms_norm_eps": 1e-5"#;
        std::fs::write(&p, format!("{{{base}, {fields}}}")).unwrap();
        p
    }

    /// Bad metadata is an error naming the file and the key, never a division by zero or a huge allocation.
    #[test]
    fn bad_values_name_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let ok = hf_config(dir.path(), r#""num_attention_heads": 4, "num_key_value_heads": 2"#);
        assert_eq!(ModelConfig::from_hf_config(&ok).unwrap().head_dim, 8);
        for (fields, want) in [
            (r#""num_attention_heads": 0"#, "num_attention_heads = 0: expected 1..=1024"),
            (
                r#""num_attention_heads": 4, "num_key_value_heads": 3"#,
                "num_attention_heads = 4: not a multiple of num_key_value_heads = 3",
            ),
            (r#""num_attention_heads": 4, "head_dim": 7"#, "head_dim = 7: rotary embeddings need an even head size"),
            (r#""num_attention_heads": 4, "rope_theta": -1.0"#, "rope_theta = -1: expected a finite number above 0"),
            (r#""num_attention_heads": 4, "max_position_embeddings": 1099511627776"#, "max_position_embeddings = "),
        ] {
            let p = hf_config(dir.path(), fields);
            let err = ModelConfig::from_hf_config(&p).unwrap_err();
            assert!(matches!(err.downcast_ref::<ModelError>(), Some(ModelError::BadValue { .. })), "{err:#}");
            let e = format!("{err:#}");
            assert!(e.contains("config.json") && e.contains(want), "{fields}: {e}");
        }
        let mut c = ModelConfig::tiny(Arch::Llama, 10);
        c.rope_scaling = Some(RopeScaling::Factors { factors: vec![1.0, 2.0] });
        let e = c.validate("m", |k| k.to_string()).unwrap_err().to_string();
        assert!(e.contains("m: rope_freqs = 2 factors: expected one factor per rotated pair: head_dim / 2 = 4"), "{e}");
        c.rope_scaling = None;
        c.rms_norm_eps = f32::NAN;
        assert!(c.validate("m", |k| k.to_string()).unwrap_err().to_string().contains("m: rms_norm_eps = NaN"));
    }
}
