//! The sentence encoder's CPU engine: [`super::bert::Bert`]'s forward pass on plain f32 buffers, through the CPU
//! kernels the decoder's engine uses ([`crate::model::engine::kernels`]). The burn model stays the reference
//! (CUDA runs it; the tests below hold this engine to it).
//!
//! Why: on the flex backend the encoder spent about a quarter of its time outside the matrix products: strided
//! copies around attention (`swap_dims` + `reshape` of Q, K, V and the context), a libm `erff` per element in GELU,
//! and one pass and one allocation per element-wise op of each LayerNorm. Here:
//! - Q, K and V come from one matrix product with the three weights side by side (`[d, 3d]`), and attention reads
//!   the heads where they lie ([`kernels::bidirectional_attention`]) and writes the context in the layout the output
//!   projection reads;
//! - GELU runs in place with a branch-free erf ([`kernels::gelu`]);
//! - each LayerNorm adds its residual and normalises in one pass ([`kernels::layer_norm`]).
//!
//! The results equal the burn model's up to the order of f32 additions inside reductions and erf's approximation
//! (within 1e-6 of libm).

use anyhow::{bail, Result};
use burn::backend::Flex;
use burn::tensor::Tensor;

use super::bert::{Bert, LayerNorm};
use crate::model::engine::kernels::{self, Strided};
use crate::model::llama::Linear;

fn host<const D: usize>(t: Tensor<Flex, D>) -> Vec<f32> {
    t.into_data().convert::<f32>().to_vec::<f32>().expect("f32 tensor")
}

/// A LayerNorm's parameters.
struct Norm {
    w: Vec<f32>,
    b: Vec<f32>,
    eps: f64,
}

impl Norm {
    fn from_burn(n: &LayerNorm<Flex>) -> Self {
        Norm { w: host(n.weight.val()), b: host(n.bias.val()), eps: n.eps }
    }

    /// `x = LayerNorm(x + res)` on `[rows, d]`.
    fn apply(&self, x: &mut [f32], res: Option<&[f32]>) {
        kernels::layer_norm(x, res, self.w.len(), &self.w, &self.b, self.eps);
    }
}

/// A dense layer: `w [in, out]` row-major, `b [out]`.
struct Dense {
    w: Vec<f32>,
    b: Vec<f32>,
    n_in: usize,
    n_out: usize,
}

impl Dense {
    /// Dense layers side by side: one `[in, sum of outs]` matrix (the fused Q, K, V projection).
    fn concat(ls: &[&Linear<Flex>]) -> Result<Self> {
        let n_in = ls[0].weight.val().dims()[0];
        let outs: Vec<usize> = ls.iter().map(|l| l.weight.val().dims()[1]).collect();
        let n_out = outs.iter().sum();
        let mut w = vec![0f32; n_in * n_out];
        let mut b = Vec::with_capacity(n_out);
        let mut col = 0;
        for (l, &o) in ls.iter().zip(&outs) {
            if l.lora.is_some() {
                bail!("the encoder's CPU engine does not apply LoRA adapters");
            }
            let lw = host(l.weight.val()); // [in, o]
            for r in 0..n_in {
                w[r * n_out + col..r * n_out + col + o].copy_from_slice(&lw[r * o..(r + 1) * o]);
            }
            match &l.bias {
                Some(lb) => b.extend(host(lb.val())),
                None => b.extend(std::iter::repeat_n(0.0, o)),
            }
            col += o;
        }
        Ok(Dense { w, b, n_in, n_out })
    }

    /// `x [rows, in] @ w + b` -> `[rows, out]`.
    fn forward(&self, x: &[f32]) -> Vec<f32> {
        let rows = x.len() / self.n_in;
        kernels::matmul(x, rows, self.n_in, Strided::rows(&self.w, self.n_out), self.n_out, Some(&self.b))
    }
}

struct Layer {
    /// `[d, 3d]`: query, key, value
    qkv: Dense,
    attn_out: Dense,
    attn_norm: Norm,
    intermediate: Dense,
    output: Dense,
    out_norm: Norm,
}

/// BERT on the CPU, weights as plain buffers.
pub struct BertCpu {
    /// `[vocab, d]`
    word: Vec<f32>,
    /// `[max_positions, d]`
    position: Vec<f32>,
    /// `[type_vocab, d]`
    token_type: Vec<f32>,
    emb_norm: Norm,
    layers: Vec<Layer>,
    heads: usize,
    head_dim: usize,
    tanh_gelu: bool,
}

impl BertCpu {
    /// Takes the weights of a burn model on the flex backend (built and shape-checked by
    /// [`super::bert::build_bert`]).
    pub fn from_burn(m: &Bert<Flex>) -> Result<Self> {
        let layers = m
            .layers
            .iter()
            .map(|l| -> Result<Layer> {
                Ok(Layer {
                    qkv: Dense::concat(&[&l.query, &l.key, &l.value])?,
                    attn_out: Dense::concat(&[&l.attn_out])?,
                    attn_norm: Norm::from_burn(&l.attn_norm),
                    intermediate: Dense::concat(&[&l.intermediate])?,
                    output: Dense::concat(&[&l.output])?,
                    out_norm: Norm::from_burn(&l.out_norm),
                })
            })
            .collect::<Result<_>>()?;
        Ok(BertCpu {
            word: host(m.word.val()),
            position: host(m.position.val()),
            token_type: host(m.token_type.val()),
            emb_norm: Norm::from_burn(&m.emb_norm),
            layers,
            heads: m.num_heads,
            head_dim: m.head_dim,
            tanh_gelu: m.tanh_gelu,
        })
    }

    /// Last hidden states `[b * t, d]` of a padded batch, as [`Bert::forward`] computes them. `ids`, `types`:
    /// `[b * t]`; `mask`: `[b * t]`, 1 for real tokens, 0 for padding.
    pub fn forward(&self, ids: &[u32], types: &[u32], mask: &[f32], b: usize, t: usize) -> Result<Vec<f32>> {
        let d = self.heads * self.head_dim;
        let (vocab, npos, ntypes) = (self.word.len() / d, self.position.len() / d, self.token_type.len() / d);
        if ids.len() != b * t || types.len() != b * t || mask.len() != b * t {
            bail!(
                "encoder: {b}x{t} tokens expected, got {} ids, {} types, {} mask",
                ids.len(),
                types.len(),
                mask.len()
            );
        }
        if t > npos {
            bail!("encoder: {t} tokens, the model has {npos} positions");
        }
        // embeddings: LayerNorm(word[id] + position[i] + token_type[type]) -> x [b * t, d]
        let mut x = vec![0f32; b * t * d];
        for (r, row) in x.chunks_mut(d).enumerate() {
            let (id, ty, i) = (ids[r] as usize, types[r] as usize, r % t);
            if id >= vocab || ty >= ntypes {
                bail!("encoder: token {id} (type {ty}) outside the model's {vocab} tokens ({ntypes} types)");
            }
            let (w, p, ty) = (&self.word[id * d..][..d], &self.position[i * d..][..d], &self.token_type[ty * d..][..d]);
            for j in 0..d {
                row[j] = w[j] + p[j] + ty[j];
            }
        }
        self.emb_norm.apply(&mut x, None);
        for l in &self.layers {
            let qkv = l.qkv.forward(&x); // [b * t, 3d]
            let ctx = kernels::bidirectional_attention(&qkv, b, t, self.heads, self.head_dim, mask); // [b * t, d]
            let mut h = l.attn_out.forward(&ctx); // [b * t, d]
            l.attn_norm.apply(&mut h, Some(&x)); // h = LayerNorm(x + Wo . ctx)
            let mut inner = l.intermediate.forward(&h); // [b * t, ff]
            kernels::gelu(&mut inner, self.tanh_gelu);
            x = l.output.forward(&inner); // [b * t, d]
            l.out_norm.apply(&mut x, Some(&h)); // x = LayerNorm(h + W2 . gelu(W1 h))
        }
        Ok(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoder::bert::{build_bert, random_bert_weights, BertConfig};
    use crate::model::weights::MemoryWeights;
    use burn::tensor::{Int, TensorData};

    fn config(act: &str) -> BertConfig {
        BertConfig {
            vocab_size: 60,
            hidden_size: 24,
            num_hidden_layers: 2,
            num_attention_heads: 3,
            intermediate_size: 40,
            max_position_embeddings: 16,
            type_vocab_size: 2,
            layer_norm_eps: 1e-12,
            hidden_act: act.into(),
            pad_token_id: 0,
            position_embedding_type: "absolute".into(),
            model_type: Some("bert".into()),
        }
    }

    /// Three sequences of 7, 4 and 2 tokens, padded to 7 (the second with type-1 tokens), through the burn model
    /// and through this engine: every position's state (padding rows included) within 1e-5; both GELU forms.
    #[test]
    fn cpu_engine_equals_the_burn_model() {
        for act in ["gelu", "gelu_new"] {
            let cfg = config(act);
            let m = build_bert::<Flex>(
                &MemoryWeights(random_bert_weights(&cfg, 5).into_iter().collect()),
                &cfg,
                &Default::default(),
            )
            .unwrap();
            let cpu = BertCpu::from_burn(&m).unwrap();
            let (b, t) = (3, 7);
            let lens = [7, 4, 2];
            let mut ids = vec![0u32; b * t];
            let mut types = vec![0u32; b * t];
            let mut mask = vec![0f32; b * t];
            for (s, &n) in lens.iter().enumerate() {
                for i in 0..n {
                    ids[s * t + i] = (7 * s + 3 * i + 1) as u32 % 60;
                    types[s * t + i] = u32::from(s == 1 && i >= 2);
                    mask[s * t + i] = 1.0;
                }
            }
            let got = cpu.forward(&ids, &types, &mask, b, t).unwrap();
            let dev = Default::default();
            let int = |v: &[u32]| {
                Tensor::<Flex, 2, Int>::from_data(TensorData::new(v.iter().map(|&x| x as i64).collect(), [b, t]), &dev)
            };
            let want =
                m.forward(int(&ids), int(&types), Tensor::from_data(TensorData::new(mask.clone(), [b, t]), &dev));
            let want = host(want);
            assert_eq!(got.len(), want.len());
            for (i, (x, y)) in got.iter().zip(&want).enumerate() {
                assert!((x - y).abs() <= 1e-5 * (1.0 + y.abs()), "{act}, at {i}: {x} vs {y}");
            }
            // out-of-range input is an error, not a panic
            let mut bad = ids.clone();
            bad[0] = 60;
            assert!(cpu.forward(&bad, &types, &mask, b, t).is_err());
        }
    }
}
