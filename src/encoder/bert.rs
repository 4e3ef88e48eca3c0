//! BERT, the encoder half of a transformer, as Hugging Face's `BertModel` computes it in float32 (no pooler: the
//! sentence-transformers pooling in [`super::sentence`] reads the last hidden states). Written like the decoder in
//! [`crate::model::llama`]: one forward pass, shapes in comments.
//!
//! - embeddings: `LayerNorm(word[id] + position[i] + token_type[type])`
//! - each layer (post-norm): `h = LayerNorm(x + Wo . attention(x))`, `out = LayerNorm(h + W2 . gelu(W1 h))`
//! - attention: every token sees every non-padding token of its sequence (padding keys get -1e9 before softmax,
//!   so their weight is exactly 0 in f32).
//!
//! Weights are Hugging Face-named (`embeddings.word_embeddings.weight`, `encoder.layer.N.attention.self.query.weight`,
//! ...), with or without the `bert.` prefix that `BertFor*` checkpoints carry.

use anyhow::{bail, Context, Result};
use burn::module::{Module, Param};
use burn::prelude::Backend;
use burn::tensor::activation::{gelu, softmax};
use burn::tensor::{Int, Tensor, TensorData};
use serde::Deserialize;

use crate::model::engine::kernels;
use crate::model::llama::Linear;
use crate::model::weights::{HostTensor, WeightSource};

/// The fields of a BERT `config.json` the forward pass needs.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BertConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub max_position_embeddings: usize,
    #[serde(default = "default_type_vocab")]
    pub type_vocab_size: usize,
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    #[serde(default = "default_act")]
    pub hidden_act: String,
    #[serde(default)]
    pub pad_token_id: u32,
    #[serde(default = "default_pos_type")]
    pub position_embedding_type: String,
    #[serde(default)]
    pub model_type: Option<String>,
}

fn default_type_vocab() -> usize {
    2
}
fn default_eps() -> f64 {
    1e-12
}
fn default_act() -> String {
    "gelu".into()
}
fn default_pos_type() -> String {
    "absolute".into()
}

impl BertConfig {
    /// Reads and checks a BERT-family `config.json`.
    pub fn from_file(path: &std::path::Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("{}: cannot read the model config", path.display()))?;
        let cfg: BertConfig =
            serde_json::from_str(&text).with_context(|| format!("{}: not a BERT config", path.display()))?;
        cfg.check().with_context(|| format!("{}: unsupported model config", path.display()))?;
        Ok(cfg)
    }

    fn check(&self) -> Result<()> {
        if let Some(t) = &self.model_type {
            if !matches!(t.as_str(), "bert" | "roberta" | "xlm-roberta" | "distilbert" | "mpnet" | "electra")
                && !t.contains("bert")
            {
                bail!("model_type {t:?} is not a BERT-family encoder");
            }
        }
        if self.num_attention_heads == 0 || !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            bail!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                self.hidden_size,
                self.num_attention_heads
            );
        }
        if !matches!(self.hidden_act.as_str(), "gelu" | "gelu_new" | "gelu_pytorch_tanh") {
            bail!("hidden_act {:?} is not supported (gelu, gelu_new, gelu_pytorch_tanh)", self.hidden_act);
        }
        if self.position_embedding_type != "absolute" {
            bail!("position_embedding_type {:?} is not supported (absolute)", self.position_embedding_type);
        }
        Ok(())
    }

    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }
}

/// `LayerNorm(x) = (x - mean) / sqrt(var + eps) * w + b` over the last dimension (biased variance, like torch).
#[derive(Module, Debug)]
pub struct LayerNorm<B: Backend> {
    pub weight: Param<Tensor<B, 1>>,
    pub bias: Param<Tensor<B, 1>>,
    pub eps: f64,
}

impl<B: Backend> LayerNorm<B> {
    pub fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        // x: [b, t, d]
        let mean = x.clone().mean_dim(2); // [b, t, 1]
        let centered = x - mean;
        let var = centered.clone().powi_scalar(2).mean_dim(2); // [b, t, 1]
        centered / var.add_scalar(self.eps).sqrt() * self.weight.val().unsqueeze::<3>()
            + self.bias.val().unsqueeze::<3>()
    }
}

#[derive(Module, Debug)]
pub struct BertLayer<B: Backend> {
    pub query: Linear<B>,
    pub key: Linear<B>,
    pub value: Linear<B>,
    pub attn_out: Linear<B>,
    pub attn_norm: LayerNorm<B>,
    pub intermediate: Linear<B>,
    pub output: Linear<B>,
    pub out_norm: LayerNorm<B>,
}

#[derive(Module, Debug)]
pub struct Bert<B: Backend> {
    /// `[vocab, d]`
    pub word: Param<Tensor<B, 2>>,
    /// `[max_positions, d]`
    pub position: Param<Tensor<B, 2>>,
    /// `[type_vocab, d]`
    pub token_type: Param<Tensor<B, 2>>,
    pub emb_norm: LayerNorm<B>,
    pub layers: Vec<BertLayer<B>>,
    pub num_heads: usize,
    pub head_dim: usize,
    /// The tanh approximation of GELU (`gelu_new`, `gelu_pytorch_tanh`) instead of the erf one (`gelu`).
    pub tanh_gelu: bool,
}

impl<B: Backend> Bert<B> {
    /// Last hidden states `[b, t, d]` of a padded batch. `ids`, `types`: `[b, t]`; `mask`: `[b, t]`, 1 for real
    /// tokens, 0 for padding.
    pub fn forward(&self, ids: Tensor<B, 2, Int>, types: Tensor<B, 2, Int>, mask: Tensor<B, 2>) -> Tensor<B, 3> {
        let [b, t] = ids.dims();
        let d = self.num_heads * self.head_dim;
        let word = self.word.val().select(0, ids.reshape([b * t])).reshape([b, t, d]); // [b, t, d]
        let pos = self.position.val().narrow(0, 0, t).unsqueeze::<3>(); // [1, t, d]
        let typ = self.token_type.val().select(0, types.reshape([b * t])).reshape([b, t, d]); // [b, t, d]
        let mut x = self.emb_norm.forward(word + pos + typ); // [b, t, d]
                                                             // Additive key mask: 0 where the key is a token, -1e9 where it is padding. [b, 1, 1, t]
        let key_bias = (mask.reshape([b, 1, 1, t]) - 1.0) * 1e9;
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        for layer in &self.layers {
            let heads = |y: Tensor<B, 3>| y.reshape([b, t, self.num_heads, self.head_dim]).swap_dims(1, 2); // [b, h, t, hd]
            let q = heads(dense(&layer.query, x.clone()));
            let k = heads(dense(&layer.key, x.clone()));
            let v = heads(dense(&layer.value, x.clone()));
            let scores = q.matmul(k.swap_dims(2, 3)) * scale + key_bias.clone(); // [b, h, t, t]
            let probs = softmax(scores, 3);
            let ctx = probs.matmul(v).swap_dims(1, 2).reshape([b, t, d]); // [b, t, d]
            let h = layer.attn_norm.forward(x + dense(&layer.attn_out, ctx)); // [b, t, d]
            let inner = dense(&layer.intermediate, h.clone()); // [b, t, ff]
            let inner = if self.tanh_gelu { burn::tensor::activation::gelu_approximate(inner) } else { gelu(inner) };
            x = layer.out_norm.forward(h + dense(&layer.output, inner)); // [b, t, d]
        }
        x
    }
}

/// `l.forward(x)`, through the CPU engine's column-split gemm ([`kernels::flex_linear`]) on the flex backend.
fn dense<B: Backend>(l: &Linear<B>, x: Tensor<B, 3>) -> Tensor<B, 3> {
    let fast =
        l.lora.is_none().then(|| kernels::flex_linear(&x, &l.weight.val(), l.bias.as_ref().map(|b| b.val()).as_ref()));
    fast.flatten().unwrap_or_else(|| l.forward(x))
}

/// The weight prefix of `src`: "" for `BertModel` checkpoints, "bert." for `BertFor*` ones.
fn prefix(src: &dyn WeightSource) -> Result<&'static str> {
    for p in ["", "bert."] {
        if src.tensor(&format!("{p}embeddings.word_embeddings.weight"))?.is_some() {
            return Ok(p);
        }
    }
    bail!(
        "{}: no tensor 'embeddings.word_embeddings.weight' (nor 'bert.embeddings...'): not a BERT checkpoint",
        src.describe()
    )
}

fn tensor1<B: Backend>(t: HostTensor, device: &B::Device) -> Tensor<B, 1> {
    let n = t.data.len();
    Tensor::from_data(TensorData::new(t.data, [n]), device)
}

fn tensor2<B: Backend>(t: HostTensor, device: &B::Device) -> Tensor<B, 2> {
    let shape = [t.shape[0], t.shape[1]];
    Tensor::from_data(TensorData::new(t.data, shape), device)
}

/// Builds BERT from Hugging Face-named weights, checking every shape against the config.
pub fn build_bert<B: Backend>(src: &dyn WeightSource, cfg: &BertConfig, device: &B::Device) -> Result<Bert<B>> {
    let p = prefix(src)?;
    let (d, ff) = (cfg.hidden_size, cfg.intermediate_size);
    let lin = |name: &str, out: usize, inp: usize| -> Result<Linear<B>> {
        let w = src.require(&format!("{p}{name}.weight"), &[out, inp])?;
        let bias = src.require(&format!("{p}{name}.bias"), &[out])?;
        // [out, in] -> [in, out], the layout `Linear` multiplies with.
        let mut wt = vec![0f32; out * inp];
        for r in 0..out {
            for c in 0..inp {
                wt[c * out + r] = w.data[r * inp + c];
            }
        }
        Ok(Linear {
            weight: Param::from_tensor(Tensor::from_data(TensorData::new(wt, [inp, out]), device)),
            bias: Some(Param::from_tensor(tensor1(bias, device))),
            lora: None,
        })
    };
    let norm = |name: &str| -> Result<LayerNorm<B>> {
        // Old TF-converted checkpoints name LayerNorm parameters gamma/beta.
        let get = |a: &str, b: &str| -> Result<HostTensor> {
            match src.tensor(&format!("{p}{name}.{a}"))? {
                Some(_) => src.require(&format!("{p}{name}.{a}"), &[d]),
                None => src.require(&format!("{p}{name}.{b}"), &[d]),
            }
        };
        Ok(LayerNorm {
            weight: Param::from_tensor(tensor1(get("weight", "gamma")?, device)),
            bias: Param::from_tensor(tensor1(get("bias", "beta")?, device)),
            eps: cfg.layer_norm_eps,
        })
    };
    let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
    for i in 0..cfg.num_hidden_layers {
        let l = format!("encoder.layer.{i}");
        layers.push(BertLayer {
            query: lin(&format!("{l}.attention.self.query"), d, d)?,
            key: lin(&format!("{l}.attention.self.key"), d, d)?,
            value: lin(&format!("{l}.attention.self.value"), d, d)?,
            attn_out: lin(&format!("{l}.attention.output.dense"), d, d)?,
            attn_norm: norm(&format!("{l}.attention.output.LayerNorm"))?,
            intermediate: lin(&format!("{l}.intermediate.dense"), ff, d)?,
            output: lin(&format!("{l}.output.dense"), d, ff)?,
            out_norm: norm(&format!("{l}.output.LayerNorm"))?,
        });
    }
    Ok(Bert {
        word: Param::from_tensor(tensor2(
            src.require(&format!("{p}embeddings.word_embeddings.weight"), &[cfg.vocab_size, d])?,
            device,
        )),
        position: Param::from_tensor(tensor2(
            src.require(&format!("{p}embeddings.position_embeddings.weight"), &[cfg.max_position_embeddings, d])?,
            device,
        )),
        token_type: Param::from_tensor(tensor2(
            src.require(&format!("{p}embeddings.token_type_embeddings.weight"), &[cfg.type_vocab_size, d])?,
            device,
        )),
        emb_norm: norm("embeddings.LayerNorm")?,
        layers,
        num_heads: cfg.num_attention_heads,
        head_dim: cfg.head_dim(),
        tanh_gelu: cfg.hidden_act != "gelu",
    })
}

/// Random BERT weights (Hugging Face names, no prefix) for tests: normal(0, 0.02) matrices, unit LayerNorms.
pub fn random_bert_weights(cfg: &BertConfig, seed: u64) -> Vec<(String, HostTensor)> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut out = Vec::new();
    let mut mat = |name: String, shape: Vec<usize>, rng: &mut rand::rngs::StdRng| {
        let n = shape.iter().product();
        let data = (0..n).map(|_| (rng.random::<f32>() - 0.5) * 0.04).collect();
        out.push((name, HostTensor { data, shape }));
    };
    let (d, ff) = (cfg.hidden_size, cfg.intermediate_size);
    mat("embeddings.word_embeddings.weight".into(), vec![cfg.vocab_size, d], &mut rng);
    mat("embeddings.position_embeddings.weight".into(), vec![cfg.max_position_embeddings, d], &mut rng);
    mat("embeddings.token_type_embeddings.weight".into(), vec![cfg.type_vocab_size, d], &mut rng);
    let mut norms = vec!["embeddings.LayerNorm".to_string()];
    for i in 0..cfg.num_hidden_layers {
        let l = format!("encoder.layer.{i}");
        for (n, o, inp) in [
            ("attention.self.query", d, d),
            ("attention.self.key", d, d),
            ("attention.self.value", d, d),
            ("attention.output.dense", d, d),
            ("intermediate.dense", ff, d),
            ("output.dense", d, ff),
        ] {
            mat(format!("{l}.{n}.weight"), vec![o, inp], &mut rng);
            mat(format!("{l}.{n}.bias"), vec![o], &mut rng);
        }
        norms.push(format!("{l}.attention.output.LayerNorm"));
        norms.push(format!("{l}.output.LayerNorm"));
    }
    for n in norms {
        out.push((format!("{n}.weight"), HostTensor { data: vec![1.0; d], shape: vec![d] }));
        out.push((format!("{n}.bias"), HostTensor { data: vec![0.0; d], shape: vec![d] }));
    }
    out
}
