//! Saving a fine-tuned decoder as a Hugging Face folder that both ragtime (`Lm::load`) and transformers
//! (`AutoModelForCausalLM.from_pretrained`) load: `config.json`, `model.safetensors` (f32, HF names and
//! `[out, in]` layout, `{"format": "pt"}` metadata, which transformers requires), `tokenizer.json`,
//! `tokenizer_config.json` (ChatML template with the base model's default system prompt, so ragtime reads the
//! same default back; a Llama 3 base's own template) and `generation_config.json`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use burn::prelude::Backend;

use crate::model::llama::Llama;
use crate::model::safetensors::write_safetensors;
use crate::model::tokenizer::ChatFormat;
use crate::model::weights::HostTensor;
use crate::model::{export_llama, ModelConfig, Tokenizer};

/// Writes f32 tensors (atomically) with the metadata transformers expects.
pub fn write_tensors(path: &Path, tensors: &[(String, HostTensor)]) -> Result<()> {
    let meta: HashMap<String, String> = [("format".to_string(), "pt".to_string())].into_iter().collect();
    write_safetensors(path, tensors, Some(meta))
}

pub use crate::model::safetensors::read_tensors;

/// `config.json` for the exported weights: [`ModelConfig::to_hf_config`] with the float fields written as
/// their shortest decimal (`1e-5`, not the f32 widening `9.999999747378752e-6`).
pub fn hf_config(cfg: &ModelConfig) -> Result<serde_json::Value> {
    let mut v = cfg.to_hf_config()?;
    let short = |x: f32| -> serde_json::Value { serde_json::json!(format!("{x}").parse::<f64>().unwrap_or(x as f64)) };
    v["rms_norm_eps"] = short(cfg.rms_norm_eps);
    v["rope_theta"] = short(cfg.rope_theta);
    if let Some(scaling) = v["rope_scaling"].as_object_mut() {
        for k in ["factor", "low_freq_factor", "high_freq_factor", "beta_fast", "beta_slow", "attention_factor"] {
            if let Some(x) = scaling.get(k).and_then(|x| x.as_f64()) {
                scaling.insert(k.to_string(), short(x as f32));
            }
        }
    }
    Ok(v)
}

/// ChatML as a Jinja template (SmolLM2 / Qwen2 style), inserting `default_system` when the conversation has no
/// system message.
pub fn chatml_template(default_system: Option<&str>) -> String {
    let sys = match default_system {
        Some(s) => format!(
            "{{% if messages[0]['role'] != 'system' %}}{{{{ '<|im_start|>system\\n{}<|im_end|>\\n' }}}}{{% endif %}}",
            s.replace('\'', "\\'").replace('\n', "\\n")
        ),
        None => String::new(),
    };
    format!(
        "{sys}{{% for message in messages %}}{{{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}}}{{% endfor %}}{{% if add_generation_prompt %}}{{{{ '<|im_start|>assistant\\n' }}}}{{% endif %}}"
    )
}

/// The exported folder's `tokenizer.json`: a file to copy, or the document itself (a GGUF's own vocabulary,
/// [`Tokenizer::gguf_json`], when no tokenizer.json comes with the model).
pub enum TokenizerJson {
    File(PathBuf),
    Text(String),
}

/// Writes the Hugging Face folder. `tokenizer_json` is copied or written; `tok` supplies special tokens and the
/// default system prompt for `tokenizer_config.json`.
pub fn export_hf<B: Backend>(
    model: &Llama<B>,
    cfg: &ModelConfig,
    tokenizer_json: &TokenizerJson,
    tok: &Tokenizer,
    out: &Path,
) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("{}: cannot create", out.display()))?;
    write_tensors(&out.join("model.safetensors"), &export_llama(model))?;
    std::fs::write(out.join("config.json"), serde_json::to_string_pretty(&hf_config(cfg)?)?)?;
    // The source may be read-only (shared data): replace any earlier copy and make ours writable.
    let tj = out.join("tokenizer.json");
    if crate::io::exists(&tj)? {
        std::fs::remove_file(&tj).with_context(|| format!("{}: cannot replace", tj.display()))?;
    }
    match tokenizer_json {
        TokenizerJson::File(src) => {
            std::fs::copy(src, &tj).with_context(|| format!("{}: cannot copy to {}", src.display(), out.display()))?;
        }
        TokenizerJson::Text(text) => {
            std::fs::write(&tj, text).with_context(|| format!("{}: cannot write", tj.display()))?
        }
    }
    let mut perm = std::fs::metadata(&tj)?.permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perm.set_readonly(false);
    std::fs::set_permissions(&tj, perm)?;
    let name = |id: Option<u32>| id.map(|i| tok.decode(&[i]));
    let eos = tok.token_id("<|im_end|>").or_else(|| tok.stop_ids.first().copied());
    let pad = tok.token_id("<|endoftext|>").or(eos);
    let tc = serde_json::json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": cfg.max_position_embeddings,
        "add_bos_token": tok.add_bos,
        "bos_token": name(tok.bos_id.or(cfg.bos_token_id)),
        "eos_token": name(eos),
        "pad_token": name(pad),
        "chat_template": match (tok.chat, &tok.chat_template) {
            // the base model's own template, in the layout the fine-tune was trained on
            (ChatFormat::Llama3 { .. }, Some(own)) => own.clone(),
            _ => chatml_template(tok.default_system.as_deref()),
        },
        "clean_up_tokenization_spaces": false,
    });
    std::fs::write(out.join("tokenizer_config.json"), serde_json::to_string_pretty(&tc)?)?;
    let gc = serde_json::json!({
        "bos_token_id": tok.bos_id.or(cfg.bos_token_id),
        "eos_token_id": tok.stop_ids,
        "pad_token_id": pad,
    });
    std::fs::write(out.join("generation_config.json"), serde_json::to_string_pretty(&gc)?)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_renders_the_default_system_prompt_readably() {
        let t = chatml_template(Some("You are a helpful AI assistant named SmolLM, trained by Hugging Face"));
        assert!(t.contains(
            "<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>"
        ));
        assert!(t.contains("add_generation_prompt"));
    }
}
