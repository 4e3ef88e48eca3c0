//! The decoder's parameters in one table: Hugging Face names, llama.cpp (GGUF) names and shapes.
//!
//! The loader ([`super::build_llama`]), the GGUF name mapping, the integer decode copies, the exporter
//! ([`super::export_llama`]), LoRA and the random test weights all read it, so each parameter is named once.
//! Names follow Hugging Face's `LlamaForCausalLM` / `Qwen2ForCausalLM`: block parameters live under
//! `model.layers.{l}.`, and a linear layer's weight is `[out, in]`.

use burn::prelude::Backend;

use super::config::ModelConfig;
use super::llama::{Block, Linear};

/// One linear layer of a decoder block.
#[derive(Debug, Clone, Copy)]
pub struct BlockLinear {
    /// Path inside a block (`self_attn.q_proj`); its last part is the module name LoRA targets (`q_proj`).
    pub path: &'static str,
    /// llama.cpp's name inside `blk.{l}.` (`attn_q`).
    pub gguf: &'static str,
    /// `[out, in]` for a model config.
    pub shape: fn(&ModelConfig) -> [usize; 2],
    /// Carries a bias in architectures with Q/K/V biases (Qwen2).
    pub qkv: bool,
}

impl BlockLinear {
    /// The module name (`q_proj`).
    pub fn module(&self) -> &'static str {
        self.path.rsplit('.').next().unwrap_or(self.path)
    }

    /// Whether this layer has a bias in models of `cfg`'s architecture.
    pub fn has_bias(&self, cfg: &ModelConfig) -> bool {
        self.qkv && cfg.arch.qkv_bias()
    }
}

/// The linear layers of a block, in the order of [`Block::linears`].
pub const BLOCK_LINEARS: [BlockLinear; 7] = [
    BlockLinear {
        path: "self_attn.q_proj",
        gguf: "attn_q",
        shape: |c| [c.num_heads * c.head_dim, c.hidden_size],
        qkv: true,
    },
    BlockLinear {
        path: "self_attn.k_proj",
        gguf: "attn_k",
        shape: |c| [c.num_kv_heads * c.head_dim, c.hidden_size],
        qkv: true,
    },
    BlockLinear {
        path: "self_attn.v_proj",
        gguf: "attn_v",
        shape: |c| [c.num_kv_heads * c.head_dim, c.hidden_size],
        qkv: true,
    },
    BlockLinear {
        path: "self_attn.o_proj",
        gguf: "attn_output",
        shape: |c| [c.hidden_size, c.num_heads * c.head_dim],
        qkv: false,
    },
    BlockLinear {
        path: "mlp.gate_proj",
        gguf: "ffn_gate",
        shape: |c| [c.intermediate_size, c.hidden_size],
        qkv: false,
    },
    BlockLinear { path: "mlp.up_proj", gguf: "ffn_up", shape: |c| [c.intermediate_size, c.hidden_size], qkv: false },
    BlockLinear {
        path: "mlp.down_proj",
        gguf: "ffn_down",
        shape: |c| [c.hidden_size, c.intermediate_size],
        qkv: false,
    },
];

/// A block's RMSNorm weights, `[hidden]` each: (path inside the block, llama.cpp name).
pub const BLOCK_NORMS: [(&str, &str); 2] = [("input_layernorm", "attn_norm"), ("post_attention_layernorm", "ffn_norm")];

/// The token embedding, `[vocab, hidden]`.
pub const EMBED: &str = "model.embed_tokens.weight";
/// The final RMSNorm, `[hidden]`.
pub const FINAL_NORM: &str = "model.norm.weight";
/// The output projection, `[vocab, hidden]`; absent when tied to [`EMBED`].
pub const LM_HEAD: &str = "lm_head.weight";
/// The model-level tensors: (Hugging Face name, llama.cpp name).
pub const TOP_LEVEL: [(&str, &str); 3] =
    [(EMBED, "token_embd.weight"), (FINAL_NORM, "output_norm.weight"), (LM_HEAD, "output.weight")];

/// `model.layers.{l}`, the prefix of block `l`'s parameters.
pub fn block_prefix(l: usize) -> String {
    format!("model.layers.{l}")
}

/// The llama.cpp name of a Hugging Face parameter name; `None` for a name the decoder does not have.
pub fn gguf_name(hf: &str) -> Option<String> {
    if let Some((_, g)) = TOP_LEVEL.iter().find(|(h, _)| *h == hf) {
        return Some(g.to_string());
    }
    let rest = hf.strip_prefix("model.layers.")?;
    let (layer, rest) = rest.split_once('.')?;
    let (path, kind) = rest.rsplit_once('.')?;
    let mapped = match kind {
        "weight" => BLOCK_LINEARS
            .iter()
            .find(|l| l.path == path)
            .map(|l| l.gguf)
            .or_else(|| BLOCK_NORMS.iter().find(|(p, _)| *p == path).map(|(_, g)| *g)),
        "bias" => BLOCK_LINEARS.iter().find(|l| l.path == path && l.qkv).map(|l| l.gguf),
        _ => None,
    }?;
    Some(format!("blk.{layer}.{mapped}.{kind}"))
}

impl<B: Backend> Block<B> {
    /// The block's linear layers in [`BLOCK_LINEARS`] order.
    pub fn linears(&self) -> [&Linear<B>; 7] {
        let (a, m) = (&self.self_attn, &self.mlp);
        [&a.q_proj, &a.k_proj, &a.v_proj, &a.o_proj, &m.gate_proj, &m.up_proj, &m.down_proj]
    }

    /// [`Block::linears`], mutable.
    pub fn linears_mut(&mut self) -> [&mut Linear<B>; 7] {
        let (a, m) = (&mut self.self_attn, &mut self.mlp);
        [&mut a.q_proj, &mut a.k_proj, &mut a.v_proj, &mut a.o_proj, &mut m.gate_proj, &mut m.up_proj, &mut m.down_proj]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{random_weights, Arch, MemoryWeights};

    fn cfg(arch: Arch) -> ModelConfig {
        ModelConfig {
            arch,
            hidden_size: 8,
            intermediate_size: 12,
            num_layers: 2,
            num_heads: 4,
            num_kv_heads: 2,
            head_dim: 2,
            vocab_size: 10,
            max_position_embeddings: 32,
            rope_theta: 10000.0,
            rope_scaling: None,
            rms_norm_eps: 1e-5,
            tie_word_embeddings: false,
            bos_token_id: None,
            eos_token_ids: vec![],
        }
    }

    /// `Block::linears` lists the fields in the table's order: each built layer has the table's shape.
    #[test]
    fn block_fields_follow_the_table() {
        type Bk = burn::backend::Flex;
        let c = cfg(Arch::Qwen2);
        let src = MemoryWeights(random_weights(&c, 1).into_iter().collect());
        let m = crate::model::build_llama::<Bk>(&src, &c, &Default::default()).unwrap();
        for (spec, lin) in BLOCK_LINEARS.iter().zip(m.layers[1].linears()) {
            let [i, o] = lin.weight.dims();
            assert_eq!([o, i], (spec.shape)(&c), "{}", spec.path);
            assert_eq!(lin.bias.is_some(), spec.has_bias(&c), "{}", spec.path);
        }
    }

    #[test]
    fn gguf_names() {
        assert_eq!(gguf_name("model.embed_tokens.weight").as_deref(), Some("token_embd.weight"));
        assert_eq!(gguf_name("lm_head.weight").as_deref(), Some("output.weight"));
        assert_eq!(gguf_name("model.layers.3.self_attn.q_proj.weight").as_deref(), Some("blk.3.attn_q.weight"));
        assert_eq!(gguf_name("model.layers.3.self_attn.k_proj.bias").as_deref(), Some("blk.3.attn_k.bias"));
        assert_eq!(gguf_name("model.layers.0.self_attn.o_proj.weight").as_deref(), Some("blk.0.attn_output.weight"));
        assert_eq!(gguf_name("model.layers.0.mlp.down_proj.weight").as_deref(), Some("blk.0.ffn_down.weight"));
        assert_eq!(
            gguf_name("model.layers.1.post_attention_layernorm.weight").as_deref(),
            Some("blk.1.ffn_norm.weight")
        );
        assert_eq!(gguf_name("model.layers.1.self_attn.o_proj.bias"), None);
        assert_eq!(gguf_name("model.layers.1.mlp.gate_proj.bias"), None);
        assert_eq!(gguf_name("model.layers.1.rotary.weight"), None);
    }

    #[test]
    fn module_names() {
        let m: Vec<&str> = BLOCK_LINEARS.iter().map(|l| l.module()).collect();
        assert_eq!(m, ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]);
    }
}
