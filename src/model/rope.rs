//! Rotary position embeddings (RoPE, Su et al. 2021) and the frequency scalings long-context checkpoints ship
//! with. Position `p` rotates the pair `(i, i + d/2)` of every query and key head by the angle `p * inv_freq[i]`,
//! `inv_freq[i] = theta^(-2i/d)` (rotate-half, as transformers). A scaling changes `inv_freq` (YaRN also the
//! scale of `cos` and `sin`):
//!
//! - `linear` (position interpolation, Chen et al. 2023): every frequency divided by `factor`;
//! - `llama3` (Llama 3.1 and 3.2): frequencies whose wavelength `2 pi / inv_freq` exceeds
//!   `original_max_position_embeddings / low_freq_factor` divided by `factor`, those shorter than
//!   `original_max_position_embeddings / high_freq_factor` kept, the ones between blended linearly in
//!   `original_max_position_embeddings / wavelength` (transformers' `_compute_llama3_parameters`);
//! - `yarn` (YaRN, Peng et al. 2023; Qwen2.5's long-context option): pairs that turn more than `beta_fast` times
//!   over `original_max_position_embeddings` positions kept, fewer than `beta_slow` times divided by `factor`, a
//!   linear ramp between (transformers' `_compute_yarn_parameters`), and `cos` and `sin` multiplied by the
//!   attention factor (`0.1 ln(factor) + 1` unless the checkpoint gives one);
//! - per-frequency divisors, as llama.cpp's GGUF converter stores `llama3` (the tensor `rope_freqs.weight`, one
//!   factor per pair: `inv_freq[i] / factors[i]`).
//!
//! Scalings that depend on the sequence length (`dynamic`) or switch between factor tables with it (`longrope`)
//! are refused at load ([`super::config`], [`super::gguf`]), and so is YaRN in a GGUF, whose llama.cpp variant
//! ragtime has no reference for.

/// How a checkpoint rescales RoPE's frequencies (`None` in [`super::ModelConfig`]: the plain `theta^(-2i/d)`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "rope_type", rename_all = "lowercase")]
pub enum RopeScaling {
    /// transformers' `linear`: `inv_freq / factor`.
    Linear { factor: f32 },
    /// transformers' `llama3`.
    Llama3 { factor: f32, low_freq_factor: f32, high_freq_factor: f32, original_max_position_embeddings: usize },
    /// transformers' `yarn`; `attention_factor` already resolved from the checkpoint's `attention_factor`,
    /// `mscale` and `mscale_all_dim` ([`yarn_attention_factor`]).
    Yarn {
        factor: f32,
        original_max_position_embeddings: usize,
        beta_fast: f32,
        beta_slow: f32,
        attention_factor: f32,
        truncate: bool,
    },
    /// One divisor per rotated pair (`head_dim / 2` of them), as GGUF's `rope_freqs.weight`.
    Factors { factors: Vec<f32> },
}

/// YaRN's attention factor as transformers infers it when a checkpoint gives none: `mscale(factor, mscale) /
/// mscale(factor, mscale_all_dim)` where both are given (and not 0), else `mscale(factor, 1)`, with `mscale(s, m) =
/// 0.1 m ln(s) + 1` (1 for `s <= 1`).
pub fn yarn_attention_factor(factor: f64, mscale: Option<f64>, mscale_all_dim: Option<f64>) -> f64 {
    let get = |m: f64| if factor <= 1.0 { 1.0 } else { 0.1 * m * factor.ln() + 1.0 };
    match (mscale.filter(|m| *m != 0.0), mscale_all_dim.filter(|m| *m != 0.0)) {
        (Some(m), Some(all)) => get(m) / get(all),
        _ => get(1.0),
    }
}

impl RopeScaling {
    /// Checks the values once, at load: `Err(key, value, what was expected)`.
    pub fn check(&self, head_dim: usize) -> Result<(), (&'static str, String, String)> {
        let positive = |k: &'static str, v: f32| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err((k, v.to_string(), "expected a finite number above 0".to_string()))
            }
        };
        let at_least_one = |positions: usize| {
            let k = "rope_scaling.original_max_position_embeddings";
            if positions == 0 {
                Err((k, "0".to_string(), "expected 1 or more".to_string()))
            } else {
                Ok(())
            }
        };
        match self {
            RopeScaling::Linear { factor } => positive("rope_scaling.factor", *factor),
            RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position_embeddings } => {
                positive("rope_scaling.factor", *factor)?;
                positive("rope_scaling.low_freq_factor", *low_freq_factor)?;
                positive("rope_scaling.high_freq_factor", *high_freq_factor)?;
                if high_freq_factor <= low_freq_factor {
                    let detail = format!("expected more than rope_scaling.low_freq_factor = {low_freq_factor}");
                    return Err(("rope_scaling.high_freq_factor", high_freq_factor.to_string(), detail));
                }
                at_least_one(*original_max_position_embeddings)
            }
            RopeScaling::Yarn {
                factor,
                original_max_position_embeddings,
                beta_fast,
                beta_slow,
                attention_factor,
                ..
            } => {
                positive("rope_scaling.factor", *factor)?;
                positive("rope_scaling.beta_fast", *beta_fast)?;
                positive("rope_scaling.beta_slow", *beta_slow)?;
                positive("rope_scaling.attention_factor", *attention_factor)?;
                at_least_one(*original_max_position_embeddings)
            }
            RopeScaling::Factors { factors } => {
                if factors.len() != head_dim / 2 {
                    let detail = format!("expected one factor per rotated pair: head_dim / 2 = {}", head_dim / 2);
                    return Err(("rope_freqs", format!("{} factors", factors.len()), detail));
                }
                factors.iter().try_for_each(|&f| positive("rope_freqs", f))
            }
        }
    }

    /// Scales `inv_freq` (the plain `theta^(-2i/d)`, one per rotated pair of a head of `head_dim`) in place, in
    /// f32 as transformers.
    pub fn apply(&self, inv_freq: &mut [f32], head_dim: usize, theta: f32) {
        match self {
            RopeScaling::Linear { factor } => inv_freq.iter_mut().for_each(|f| *f /= factor),
            RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position_embeddings } => {
                let old = *original_max_position_embeddings as f32;
                let (low_wavelen, high_wavelen) = (old / low_freq_factor, old / high_freq_factor);
                for f in inv_freq.iter_mut() {
                    let wavelen = 2.0 * std::f32::consts::PI / *f;
                    if wavelen > low_wavelen {
                        *f /= factor;
                    } else if wavelen >= high_wavelen {
                        let smooth = (old / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
                        *f = (1.0 - smooth) * *f / factor + smooth * *f;
                    }
                }
            }
            RopeScaling::Yarn { factor, original_max_position_embeddings, beta_fast, beta_slow, truncate, .. } => {
                // the pair that turns `rotations` times over the original positions (in f64, as Python's math)
                let (dim, base, old) = (head_dim as f64, theta as f64, *original_max_position_embeddings as f64);
                let pair =
                    |rotations: f64| dim * (old / (rotations * 2.0 * std::f64::consts::PI)).ln() / (2.0 * base.ln());
                let (mut low, mut high) = (pair(*beta_fast as f64), pair(*beta_slow as f64));
                if *truncate {
                    (low, high) = (low.floor(), high.ceil());
                }
                let (low, mut high) = (low.max(0.0) as f32, high.min(dim - 1.0) as f32);
                if low == high {
                    high += 0.001;
                }
                for (i, f) in inv_freq.iter_mut().enumerate() {
                    // 1: keep the frequency (extrapolate), 0: divide it by the factor (interpolate)
                    let keep = 1.0 - ((i as f32 - low) / (high - low)).clamp(0.0, 1.0);
                    let pos_freq = theta.powf((2 * i) as f32 / head_dim as f32);
                    *f = 1.0 / (factor * pos_freq) * (1.0 - keep) + 1.0 / pos_freq * keep;
                }
            }
            RopeScaling::Factors { factors } => inv_freq.iter_mut().zip(factors).for_each(|(f, d)| *f /= d),
        }
    }

    /// What `cos` and `sin` are multiplied by (YaRN's attention factor; 1 for the others).
    pub fn attention_factor(&self) -> f32 {
        match self {
            RopeScaling::Yarn { attention_factor, .. } => *attention_factor,
            _ => 1.0,
        }
    }

    /// The `rope_scaling` entry of a Hugging Face `config.json`, where it has one (per-frequency factors have
    /// none).
    pub fn to_hf(&self) -> Option<serde_json::Value> {
        match self {
            RopeScaling::Factors { .. } => None,
            other => serde_json::to_value(other).ok(),
        }
    }
}

/// `inv_freq[i] = theta^(-2i/d)` for the `head_dim / 2` rotated pairs, computed in f32 as transformers, then
/// scaled.
pub fn inv_freqs(head_dim: usize, theta: f32, scaling: Option<&RopeScaling>) -> Vec<f32> {
    let mut inv: Vec<f32> = (0..head_dim / 2).map(|i| 1.0f32 / theta.powf((2 * i) as f32 / head_dim as f32)).collect();
    if let Some(s) = scaling {
        s.apply(&mut inv, head_dim, theta);
    }
    inv
}

/// RoPE's `cos` and `sin` tables, `[max_pos, head_dim]` each (the frequencies repeated over both halves, as
/// transformers; times the scaling's attention factor), computed on the host.
pub fn rope_tables(cfg: &super::ModelConfig, max_pos: usize) -> (Vec<f32>, Vec<f32>) {
    let hd = cfg.head_dim;
    let half = hd / 2;
    let inv = inv_freqs(hd, cfg.rope_theta, cfg.rope_scaling.as_ref());
    let scale = cfg.rope_scaling.as_ref().map_or(1.0, RopeScaling::attention_factor);
    let mut cos = vec![0f32; max_pos * hd];
    let mut sin = vec![0f32; max_pos * hd];
    for (i, &inv_freq) in inv.iter().enumerate() {
        for p in 0..max_pos {
            let angle = p as f32 * inv_freq;
            let (s, c) = angle.sin_cos();
            let (s, c) = (s * scale, c * scale);
            cos[p * hd + i] = c;
            cos[p * hd + i + half] = c;
            sin[p * hd + i] = s;
            sin[p * hd + i + half] = s;
        }
    }
    (cos, sin)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Llama 3.1's parameters (factor 8, low 1, high 4, 8,192 positions) on a head of 8 with theta 10,000, worked
    /// by hand: inv_freq = 1, 0.1, 0.01, 0.001; wavelengths 2 pi = 6.28, 62.8, 628, 6,283 against the bounds
    /// 8192 / 4 = 2,048 and 8192 / 1 = 8,192. The first three are below 2,048: kept. The last is between: smooth =
    /// (8192 / 6283.19 - 1) / 3 = 0.101266, inv_freq = 0.001 * ((1 - 0.101266) / 8 + 0.101266) = 0.00021361.
    /// Then fewer original positions, which move the bounds.
    #[test]
    fn llama3_scaling_worked_by_hand() {
        let at = |old: usize| {
            let s = RopeScaling::Llama3 {
                factor: 8.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position_embeddings: old,
            };
            inv_freqs(8, 10_000.0, Some(&s))
        };
        for (old, want) in [
            (8192, [1.0, 0.1, 0.01, 0.000_213_61]),
            // bounds 128 and 512: 62.8 kept, 628 and 6,283 divided by 8
            (512, [1.0, 0.1, 0.001_25, 0.000_125]),
            // bounds 16 and 64: 6.28 kept; 62.8 between: smooth = (64 / 62.832 - 1) / 3 = 0.0061972, inv_freq =
            // 0.1 * ((1 - 0.0061972) / 8 + 0.0061972) = 0.013042; 628 and 6,283 divided by 8
            (64, [1.0, 0.013_042, 0.001_25, 0.000_125]),
        ] {
            let inv = at(old);
            for (got, want) in inv.iter().zip(want) {
                assert!((got - want).abs() <= 1e-4 * want, "{old}: {inv:?}");
            }
        }
    }

    /// YaRN over 32 original positions with factor 4 (beta 32 and 1) on a head of 16, theta 10,000, worked by hand:
    /// the pair that turns r times over 32 positions is 16 ln(32 / (2 pi r)) / (2 ln 10,000): -1.596 for r = 32
    /// and 1.414 for r = 1, truncated to 0 and 2. Pair 0 is kept (inv_freq 1), pair 1 half kept, that is
    /// 0.5 * 0.316228 / 4 plus 0.5 * 0.316228 = 0.197642, pairs 2.. divided by 4. Untruncated, the ramp ends at
    /// 1.41394: pair 1 is 1 / 1.41394 = 0.70725 divided, 0.70725 * 0.079057 plus 0.29275 * 0.316228 = 0.148489.
    /// cos and sin: times 0.1 ln 4 + 1 = 1.138629.
    #[test]
    fn yarn_worked_by_hand() {
        let yarn = |truncate| RopeScaling::Yarn {
            factor: 4.0,
            original_max_position_embeddings: 32,
            beta_fast: 32.0,
            beta_slow: 1.0,
            attention_factor: yarn_attention_factor(4.0, None, None) as f32,
            truncate,
        };
        let inv = inv_freqs(16, 10_000.0, Some(&yarn(true)));
        for (got, want) in inv.iter().zip([1.0, 0.197_642, 0.025, 0.007_905_7, 0.002_5]) {
            assert!((got - want).abs() <= 1e-4 * want, "{inv:?}");
        }
        let inv = inv_freqs(16, 10_000.0, Some(&yarn(false)));
        assert!((inv[1] - 0.148_489).abs() <= 1e-4 * 0.148_489, "{inv:?}");
        assert!((yarn(true).attention_factor() - 1.138_629).abs() < 1e-6);
        // the attention factor from mscale and mscale_all_dim (DeepSeek's configs), ignoring zeros, 1 below factor 1
        assert_eq!(yarn_attention_factor(4.0, Some(1.0), Some(1.0)), 1.0);
        let ratio = (0.1 * 0.707 * 4f64.ln() + 1.0) / (0.1 * 4f64.ln() + 1.0);
        assert!((yarn_attention_factor(4.0, Some(0.707), Some(1.0)) - ratio).abs() < 1e-12);
        assert_eq!(yarn_attention_factor(4.0, Some(0.707), Some(0.0)), 0.1 * 4f64.ln() + 1.0);
        assert_eq!(yarn_attention_factor(0.5, None, None), 1.0);
    }

    #[test]
    fn linear_and_factors_divide() {
        let plain = inv_freqs(8, 10_000.0, None);
        let lin = inv_freqs(8, 10_000.0, Some(&RopeScaling::Linear { factor: 4.0 }));
        let fac = inv_freqs(8, 10_000.0, Some(&RopeScaling::Factors { factors: vec![1.0, 2.0, 4.0, 8.0] }));
        for i in 0..4 {
            assert_eq!(lin[i], plain[i] / 4.0);
            assert_eq!(fac[i], plain[i] / [1.0, 2.0, 4.0, 8.0][i]);
        }
    }

    #[test]
    fn bad_values_are_refused() {
        let l3 = |low, high, old| RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: low,
            high_freq_factor: high,
            original_max_position_embeddings: old,
        };
        assert_eq!(l3(4.0, 1.0, 8192).check(8).unwrap_err().0, "rope_scaling.high_freq_factor");
        assert_eq!(l3(1.0, 4.0, 0).check(8).unwrap_err().0, "rope_scaling.original_max_position_embeddings");
        assert!(l3(1.0, 4.0, 8192).check(8).is_ok());
        assert_eq!(RopeScaling::Linear { factor: 0.0 }.check(8).unwrap_err().0, "rope_scaling.factor");
        let e = RopeScaling::Factors { factors: vec![1.0; 3] }.check(8).unwrap_err();
        assert_eq!((e.0, e.1.as_str()), ("rope_freqs", "3 factors"));
        assert!(RopeScaling::Factors { factors: vec![1.0, f32::NAN, 1.0, 1.0] }.check(8).is_err());
    }

    #[test]
    fn hugging_face_entry() {
        let s = RopeScaling::Llama3 {
            factor: 32.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192,
        };
        let v = s.to_hf().unwrap();
        assert_eq!(v["rope_type"], "llama3");
        assert_eq!(v["original_max_position_embeddings"], 8192);
        assert_eq!(RopeScaling::Linear { factor: 2.0 }.to_hf().unwrap()["rope_type"], "linear");
        assert!(RopeScaling::Factors { factors: vec![1.0] }.to_hf().is_none());
    }
}
