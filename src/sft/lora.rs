//! LoRA adapters on the decoder's linear layers, written by hand on burn (no PEFT on this side).
//!
//! `W' = W + (alpha / r) A B` with `A [in, r]`, `B [r, out]` (our `[in, out]` layout; PEFT stores the
//! transposes `lora_A.weight [r, in]`, `lora_B.weight [out, r]`). As PEFT: `A ~ U(-1/sqrt(in), 1/sqrt(in))`
//! (kaiming-uniform with `a = sqrt(5)`), `B = 0`, no dropout. Attaching freezes every base parameter; only
//! the adapters train. [`merge`] folds the adapters into the weights for export and inference.

use anyhow::{bail, Result};
use burn::module::{Module, Param};
use burn::prelude::Backend;
use burn::tensor::{Tensor, TensorData};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::model::llama::{Block, Linear, Llama, LoraAdapter};
use crate::model::params::BLOCK_LINEARS;
use crate::model::weights::{HostTensor, WeightSource};

/// Which projections get adapters, and their rank and alpha.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoraConfig {
    pub rank: usize,
    pub alpha: f64,
    /// Module names: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj.
    pub targets: Vec<String>,
}

/// Module names LoRA may target: those of [`BLOCK_LINEARS`].
pub fn all_targets() -> [&'static str; 7] {
    BLOCK_LINEARS.map(|l| l.module())
}

impl LoraConfig {
    pub fn scale(&self) -> f64 {
        self.alpha / self.rank as f64
    }
    pub fn validate(&self) -> Result<()> {
        if self.rank == 0 {
            bail!("LoRA rank must be positive");
        }
        for t in &self.targets {
            if !all_targets().contains(&t.as_str()) {
                bail!("unknown LoRA target '{t}' (expected some of {})", all_targets().join(", "));
            }
        }
        if self.targets.is_empty() {
            bail!("LoRA needs at least one target module");
        }
        Ok(())
    }
}

/// The linear layers of a block with their Hugging Face module paths (relative to the block).
pub fn block_linears<B: Backend>(b: &Block<B>) -> impl Iterator<Item = (&'static str, &Linear<B>)> {
    BLOCK_LINEARS.iter().map(|l| l.path).zip(b.linears())
}

fn block_linears_mut<B: Backend>(b: &mut Block<B>) -> impl Iterator<Item = (&'static str, &mut Linear<B>)> {
    BLOCK_LINEARS.iter().map(|l| l.path).zip(b.linears_mut())
}

fn targeted(cfg: &LoraConfig, path: &str) -> bool {
    let short = path.rsplit('.').next().unwrap_or(path);
    cfg.targets.iter().any(|t| t == short)
}

/// Freezes the model and adds fresh adapters (`B = 0`) to the target layers. `seed` fixes `A`.
pub fn attach<B: Backend>(model: Llama<B>, cfg: &LoraConfig, seed: u64, device: &B::Device) -> Result<Llama<B>> {
    cfg.validate()?;
    let mut model = model.no_grad();
    let mut rng = StdRng::seed_from_u64(seed);
    let r = cfg.rank;
    for block in model.layers.iter_mut() {
        for (path, lin) in block_linears_mut(block) {
            if !targeted(cfg, path) {
                continue;
            }
            let [inp, out] = lin.weight.dims();
            let bound = 1.0 / (inp as f32).sqrt();
            let a: Vec<f32> = (0..inp * r).map(|_| rng.random_range(-bound..bound)).collect();
            lin.lora = Some(LoraAdapter {
                a: Param::from_tensor(Tensor::from_data(TensorData::new(a, [inp, r]), device)),
                b: Param::from_tensor(Tensor::zeros([r, out], device)),
                scale: cfg.scale(),
            });
        }
    }
    Ok(model)
}

/// Folds every adapter into its weight (`W + scale * A B`) and removes it.
pub fn merge<B: Backend>(mut model: Llama<B>) -> Llama<B> {
    for block in model.layers.iter_mut() {
        for (_, lin) in block_linears_mut(block) {
            if lin.lora.is_some() {
                let w = lin.merged_weight();
                lin.lora = None;
                lin.weight = Param::initialized(lin.weight.id, w);
            }
        }
    }
    model
}

fn host2<B: Backend>(t: Tensor<B, 2>) -> HostTensor {
    let [r, c] = t.dims();
    HostTensor { data: t.into_data().convert::<f32>().to_vec::<f32>().unwrap(), shape: vec![r, c] }
}

/// PEFT name prefix of layer `l`'s module `path`.
fn peft_name(l: usize, path: &str) -> String {
    format!("base_model.model.model.layers.{l}.{path}")
}

/// The adapters in PEFT's names and layout (`lora_A.weight [r, in]`, `lora_B.weight [out, r]`), ready for
/// `adapter_model.safetensors`.
pub fn adapter_tensors<B: Backend>(model: &Llama<B>) -> Vec<(String, HostTensor)> {
    let mut out = Vec::new();
    for (l, block) in model.layers.iter().enumerate() {
        for (path, lin) in block_linears(block) {
            if let Some(a) = &lin.lora {
                out.push((format!("{}.lora_A.weight", peft_name(l, path)), host2(a.a.val().transpose())));
                out.push((format!("{}.lora_B.weight", peft_name(l, path)), host2(a.b.val().transpose())));
            }
        }
    }
    out
}

/// Loads adapter values written by [`adapter_tensors`] into a model that already has adapters of the same
/// shapes (from [`attach`]), keeping them trainable.
pub fn load_adapters<B: Backend>(mut model: Llama<B>, src: &dyn WeightSource, device: &B::Device) -> Result<Llama<B>> {
    for (l, block) in model.layers.iter_mut().enumerate() {
        for (path, lin) in block_linears_mut(block) {
            let Some(ad) = lin.lora.as_mut() else { continue };
            let [inp, r] = ad.a.dims();
            let [_, out] = ad.b.dims();
            let a = src.require(&format!("{}.lora_A.weight", peft_name(l, path)), &[r, inp])?;
            let b = src.require(&format!("{}.lora_B.weight", peft_name(l, path)), &[out, r])?;
            let a = Tensor::<B, 2>::from_data(TensorData::new(a.data, [r, inp]), device).transpose();
            let b = Tensor::<B, 2>::from_data(TensorData::new(b.data, [out, r]), device).transpose();
            ad.a = Param::from_tensor(a);
            ad.b = Param::from_tensor(b);
        }
    }
    Ok(model)
}

/// PEFT's `adapter_config.json` for these adapters.
pub fn adapter_config_json(cfg: &LoraConfig, base_model: &str) -> serde_json::Value {
    serde_json::json!({
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model,
        "r": cfg.rank,
        "lora_alpha": cfg.alpha,
        "lora_dropout": 0.0,
        "target_modules": cfg.targets,
        "bias": "none",
        "fan_in_fan_out": false,
        "inference_mode": true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::llama::{Capture, Rope};
    use crate::model::{build_llama, random_weights, Arch, MemoryWeights, ModelConfig};
    use burn::backend::{Autodiff, Flex};
    use burn::tensor::Int;

    type B = Flex;

    fn tiny() -> (ModelConfig, Llama<B>) {
        let cfg = ModelConfig::tiny(Arch::Qwen2, 97);
        let w = MemoryWeights(random_weights(&cfg, 3).into_iter().collect());
        (cfg.clone(), build_llama::<B>(&w, &cfg, &Default::default()).unwrap())
    }

    fn vec2(t: Tensor<B, 2>) -> Vec<f32> {
        t.into_data().convert::<f32>().to_vec::<f32>().unwrap()
    }

    fn logits(m: &Llama<B>, cfg: &ModelConfig) -> Vec<f32> {
        let dev = Default::default();
        let rope = Rope::new(cfg, 16, &dev);
        let ids = Tensor::<B, 2, Int>::from_data(TensorData::new(vec![1i32, 5, 9, 40, 2, 77], [1, 6]), &dev);
        let h = m.forward(ids, &rope, 0, None, Capture::default()).hidden;
        m.logits(h).into_data().convert::<f32>().to_vec::<f32>().unwrap()
    }

    /// Sets every adapter's B to non-zero values so that the adapters change the output.
    fn perturb(mut m: Llama<B>, seed: u64) -> Llama<B> {
        let mut rng = StdRng::seed_from_u64(seed);
        for block in m.layers.iter_mut() {
            for (_, lin) in block_linears_mut(block) {
                if let Some(ad) = lin.lora.as_mut() {
                    let [r, out] = ad.b.dims();
                    let v: Vec<f32> = (0..r * out).map(|_| rng.random_range(-0.5..0.5)).collect();
                    ad.b = Param::from_tensor(Tensor::from_data(TensorData::new(v, [r, out]), &Default::default()));
                }
            }
        }
        m
    }

    #[test]
    fn merged_weights_are_base_plus_scaled_ba() {
        let (cfg, base) = tiny();
        let lcfg = LoraConfig { rank: 4, alpha: 8.0, targets: vec!["q_proj".into(), "down_proj".into()] };
        let before = logits(&base, &cfg);
        let m = attach(base.clone(), &lcfg, 1, &Default::default()).unwrap();
        // B = 0: a fresh adapter changes nothing.
        let fresh = logits(&m, &cfg);
        assert!(before.iter().zip(&fresh).all(|(a, b)| (a - b).abs() < 1e-5));
        let m = perturb(m, 2);
        let with_adapters = logits(&m, &cfg);
        assert!(before.iter().zip(&with_adapters).any(|(a, b)| (a - b).abs() > 1e-3), "adapters had no effect");

        // Host-side expectation for layer 1's q_proj: W + (alpha / r) A B, scale 2.
        let lin = &m.layers[1].self_attn.q_proj;
        let ad = lin.lora.as_ref().unwrap();
        let (w, a, b) = (vec2(lin.weight.val()), vec2(ad.a.val()), vec2(ad.b.val()));
        let [inp, out] = lin.weight.dims();
        let r = 4;
        let mut want = w.clone();
        for i in 0..inp {
            for o in 0..out {
                let s: f32 = (0..r).map(|k| a[i * r + k] * b[k * out + o]).sum();
                want[i * out + o] += 2.0 * s;
            }
        }
        let merged = merge(m);
        assert!(merged.layers.iter().all(|b| block_linears(b).all(|(_, l)| l.lora.is_none())));
        let got = vec2(merged.layers[1].self_attn.q_proj.weight.val());
        let diff = got.iter().zip(&want).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max);
        assert!(diff < 1e-5, "merged weight differs from W + scale A B by {diff}");
        // untargeted layers untouched
        assert_eq!(vec2(merged.layers[1].self_attn.k_proj.weight.val()), vec2(base_k(&cfg)));
        // the merged model computes what the adapted one did
        let after = logits(&merged, &cfg);
        let diff = after.iter().zip(&with_adapters).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max);
        assert!(diff < 1e-4, "merged logits differ by {diff}");
    }

    fn base_k(cfg: &ModelConfig) -> Tensor<B, 2> {
        let w = MemoryWeights(random_weights(cfg, 3).into_iter().collect());
        build_llama::<B>(&w, cfg, &Default::default()).unwrap().layers[1].self_attn.k_proj.weight.val()
    }

    #[test]
    fn only_adapters_are_trainable_and_round_trip_through_peft_names() {
        let cfg = ModelConfig::tiny(Arch::Llama, 97);
        let w = MemoryWeights(random_weights(&cfg, 3).into_iter().collect());
        let dev = Default::default();
        let base = build_llama::<Autodiff<Flex>>(&w, &cfg, &dev).unwrap();
        let lcfg = LoraConfig { rank: 2, alpha: 4.0, targets: all_targets().map(String::from).to_vec() };
        let m = attach(base, &lcfg, 5, &dev).unwrap();
        struct Count(usize, usize);
        impl<B: Backend> burn::module::ModuleVisitor<B> for Count {
            fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<B, D>>) {
                if p.val().is_require_grad() {
                    self.0 += p.val().shape().num_elements();
                } else {
                    self.1 += p.val().shape().num_elements();
                }
            }
        }
        let mut c = Count(0, 0);
        m.visit(&mut c);
        // per layer: r * (in + out) for q(32->32) k(32->16) v(32->16) o(32->32) gate/up(32->64) down(64->32)
        let per_layer = 2 * ((32 + 32) + (32 + 16) * 2 + (32 + 32) + (32 + 64) * 2 + (64 + 32));
        assert_eq!(c.0, 2 * per_layer);
        assert!(c.1 > 0);
        let tensors = adapter_tensors(&m);
        assert_eq!(tensors.len(), 2 * 7 * 2);
        assert!(tensors[0].0.starts_with("base_model.model.model.layers.0.self_attn.q_proj.lora_A"));
        let src = MemoryWeights(tensors.clone().into_iter().collect());
        let fresh = attach(build_llama::<Autodiff<Flex>>(&w, &cfg, &dev).unwrap(), &lcfg, 99, &dev).unwrap();
        let loaded = load_adapters(fresh, &src, &dev).unwrap();
        assert_eq!(adapter_tensors(&loaded), tensors);
    }
}
