//! Choosing the next token: greedy, or temperature + top-p with a seed. Also the distribution statistics
//! controllers read (entropy in nats over the full vocabulary, probability of the chosen token).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Greedy or nucleus sampling. The sampling variant carries its RNG inline (one sampler per generation).
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Sampler {
    Greedy,
    Sample { temperature: f32, top_p: f32, rng: StdRng },
}

impl Sampler {
    pub fn greedy() -> Self {
        Sampler::Greedy
    }

    /// Temperature 0 means greedy.
    pub fn new(temperature: f32, top_p: f32, seed: u64) -> Self {
        if temperature <= 0.0 {
            Sampler::Greedy
        } else {
            Sampler::Sample { temperature, top_p: top_p.clamp(1e-6, 1.0), rng: StdRng::seed_from_u64(seed) }
        }
    }

    pub fn pick(&mut self, logits: &[f32]) -> u32 {
        match self {
            Sampler::Greedy => argmax(logits),
            Sampler::Sample { temperature, top_p, rng } => {
                let t = *temperature;
                let m = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let mut probs: Vec<(u32, f32)> =
                    logits.iter().enumerate().map(|(i, &l)| (i as u32, ((l - m) / t).exp())).collect();
                let z: f32 = probs.iter().map(|p| p.1).sum();
                probs.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                // nucleus: smallest prefix whose mass reaches top_p
                let mut mass = 0.0;
                let mut cut = probs.len();
                for (i, p) in probs.iter().enumerate() {
                    mass += p.1 / z;
                    if mass >= *top_p {
                        cut = i + 1;
                        break;
                    }
                }
                probs.truncate(cut);
                let total: f32 = probs.iter().map(|p| p.1).sum();
                let mut r = rng.random::<f32>() * total;
                for (id, p) in &probs {
                    if r < *p {
                        return *id;
                    }
                    r -= p;
                }
                probs.last().map(|p| p.0).unwrap_or(0)
            }
        }
    }
}

/// Index of the largest logit (the first one on ties, as torch.argmax).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}

/// Entropy (nats) of softmax(logits) and the probability of token `id`.
pub fn entropy_and_prob(logits: &[f32], id: u32) -> (f32, f32) {
    let m = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let mut z = 0f64;
    let mut s = 0f64;
    for &l in logits {
        let e = ((l as f64) - m).exp();
        z += e;
        s += e * (l as f64 - m);
    }
    // H = log Z - E[l - m]
    let h = z.ln() - s / z;
    let p = ((logits.get(id as usize).copied().unwrap_or(f32::NEG_INFINITY) as f64 - m).exp()) / z;
    (h as f32, p as f32)
}

/// The `k` largest logits as (id, logit), largest first.
pub fn top_k(logits: &[f32], k: usize) -> Vec<(u32, f32)> {
    let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
    let k = k.min(idx.len());
    idx.select_nth_unstable_by(k.saturating_sub(1), |&a, &b| {
        logits[b as usize].total_cmp(&logits[a as usize]).then(a.cmp(&b))
    });
    let mut top: Vec<(u32, f32)> = idx[..k].iter().map(|&i| (i, logits[i as usize])).collect();
    top.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    top
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entropy_of_uniform_and_peaked() {
        // uniform over 4: H = ln 4, p = 1/4
        let (h, p) = entropy_and_prob(&[0.0; 4], 2);
        assert!((h - 4f32.ln()).abs() < 1e-6);
        assert!((p - 0.25).abs() < 1e-6);
        // logits [ln 3, 0]: p = (3/4, 1/4), H = -(3/4 ln 3/4 + 1/4 ln 1/4) = 0.562335
        let (h, p) = entropy_and_prob(&[3f32.ln(), 0.0], 0);
        assert!((h - 0.562335).abs() < 1e-5, "{h}");
        assert!((p - 0.75).abs() < 1e-6);
    }

    #[test]
    fn greedy_takes_first_max_and_topk_orders() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
        assert_eq!(top_k(&[1.0, 3.0, 0.5, 2.0], 2), vec![(1, 3.0), (3, 2.0)]);
    }

    #[test]
    fn sampling_is_seeded_and_respects_top_p() {
        let logits = [5.0, 4.9, -10.0, -10.0];
        let a: Vec<u32> = {
            let mut s = Sampler::new(1.0, 1.0, 7);
            (0..50).map(|_| s.pick(&logits)).collect()
        };
        let b: Vec<u32> = {
            let mut s = Sampler::new(1.0, 1.0, 7);
            (0..50).map(|_| s.pick(&logits)).collect()
        };
        assert_eq!(a, b);
        assert!(a.contains(&0) && a.contains(&1));
        // top_p 0.3 keeps only the most likely token (p ~ 0.525 >= 0.3)
        let mut s = Sampler::new(1.0, 0.3, 7);
        assert!((0..50).all(|_| s.pick(&logits) == 0));
    }
}
