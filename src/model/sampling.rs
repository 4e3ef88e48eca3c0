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
                let w: Vec<f32> = logits.iter().map(|&l| ((l - m) / t).exp()).collect();
                let z: f32 = w.iter().sum();
                if *top_p >= 1.0 {
                    // no nucleus: the inverse of the cumulative distribution, in token order
                    return walk(w.iter().enumerate().map(|(i, &p)| (i as u32, p)), z, rng.random::<f32>());
                }
                let nucleus = nucleus(&w, z, *top_p);
                let total: f32 = nucleus.iter().map(|p| p.1).sum();
                walk(nucleus.into_iter(), total, rng.random::<f32>())
            }
        }
    }
}

/// The token at which the running sum of the weights `(id, weight)` (summing to `total`) first passes `u * total`,
/// `u` in [0, 1); where rounding leaves it unpassed, the last token of non-zero weight.
fn walk(weights: impl Iterator<Item = (u32, f32)>, total: f32, u: f32) -> u32 {
    let mut r = u * total;
    let mut last = 0;
    for (id, p) in weights {
        if r < p {
            return id;
        }
        if p > 0.0 {
            last = id;
        }
        r -= p;
    }
    last
}

/// The nucleus of top-p sampling: the tokens by weight `w` (softmax numerators summing to `z`), largest first (the
/// lower id first on ties), up to the first whose running mass `sum w / z` reaches `top_p`. Sorted a block at a time
/// (the 64 largest, then the next 192, ...) so that a nucleus of a few tokens costs one selection over the
/// vocabulary rather than a sort of all of it; the same tokens, order and sums as sorting everything.
fn nucleus(w: &[f32], z: f32, top_p: f32) -> Vec<(u32, f32)> {
    let desc = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    let mut all: Vec<(u32, f32)> = w.iter().enumerate().map(|(i, &p)| (i as u32, p)).collect();
    let (mut sorted, mut mass) = (0, 0f32);
    while sorted < all.len() {
        // all[..sorted] are the largest, in order; bring the next block of largest into all[sorted..end]
        let end = (sorted.max(16) * 4).min(all.len());
        if end < all.len() {
            all[sorted..].select_nth_unstable_by(end - sorted - 1, desc);
        }
        all[sorted..end].sort_by(desc);
        for i in sorted..end {
            mass += all[i].1 / z;
            if mass >= top_p {
                all.truncate(i + 1);
                return all;
            }
        }
        sorted = end;
    }
    all
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
    SoftmaxStats::of(logits).entropy_and_prob(logits, id)
}

/// What a row's entropy and its tokens' probabilities are read from (in f64, over the full vocabulary): the
/// largest logit `m`, `z = sum exp(l - m)` and `s = sum exp(l - m) (l - m)`, each summed in token order (the exps
/// [`super::exp`]'s, eight at a time with AVX-512, four with AVX2). An engine can work them out beside the forward
/// pass, many rows at once ([`super::engine::dist::NextDist::host_scored`]), and give the same numbers as working
/// them out later.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SoftmaxStats {
    pub m: f64,
    pub z: f64,
    pub s: f64,
}

impl SoftmaxStats {
    pub fn of(logits: &[f32]) -> Self {
        let m = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        let (mut z, mut s) = (0f64, 0f64);
        super::exp::for_each_exp(logits, m, |e, d| {
            z += e;
            s += e * d;
        });
        SoftmaxStats { m, z, s }
    }

    /// Entropy in nats: `H = log z - s / z`.
    pub fn entropy(&self) -> f32 {
        (self.z.ln() - self.s / self.z) as f32
    }

    /// The probability of a token with this logit.
    pub fn prob(&self, logit: f32) -> f32 {
        (super::exp::exp((logit as f64) - self.m) / self.z) as f32
    }

    /// The entropy, and the probability of token `id` of `logits` (the row these are the statistics of; 0 for an
    /// id outside it).
    pub fn entropy_and_prob(&self, logits: &[f32], id: u32) -> (f32, f32) {
        (self.entropy(), self.prob(logits.get(id as usize).copied().unwrap_or(f32::NEG_INFINITY)))
    }
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

    /// The sampler as it was written first: softmax numerators sorted in full, the nucleus cut, then the walk.
    fn pick_by_full_sort(logits: &[f32], t: f32, top_p: f32, rng: &mut StdRng) -> u32 {
        let m = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut probs: Vec<(u32, f32)> =
            logits.iter().enumerate().map(|(i, &l)| (i as u32, ((l - m) / t).exp())).collect();
        let z: f32 = probs.iter().map(|p| p.1).sum();
        probs.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut mass = 0.0;
        let mut cut = probs.len();
        for (i, p) in probs.iter().enumerate() {
            mass += p.1 / z;
            if mass >= top_p {
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

    /// Logits of `n` tokens, pseudo-random; with `ties`, rounded to a coarse grid so that many are equal.
    fn random_logits(n: usize, seed: u64, ties: bool) -> Vec<f32> {
        let mut rng = StdRng::seed_from_u64(seed);
        (0..n)
            .map(|_| {
                let l = rng.random::<f32>() * 20.0 - 10.0;
                if ties {
                    l.round()
                } else {
                    l
                }
            })
            .collect()
    }

    #[test]
    fn walk_by_hand() {
        let w = [(0, 1.0), (1, 2.0), (2, 3.0)];
        // r = 0.1 * 6 = 0.6 < 1
        assert_eq!(walk(w.into_iter(), 6.0, 0.1), 0);
        // r = 3: not < 1 (r = 2), not < 2 (r = 0), 0 < 3
        assert_eq!(walk(w.into_iter(), 6.0, 0.5), 2);
        // r = 2.9: not < 1 (1.9), 1.9 < 2
        assert_eq!(walk(w.into_iter(), 5.8, 0.5), 1);
        // a total larger than the weights' sum (rounding) never passes: the last token of non-zero weight
        assert_eq!(walk([(0, 1.0), (1, 0.0)].into_iter(), 2.0, 0.9), 0);
    }

    #[test]
    fn nucleus_is_the_prefix_of_the_full_sort() {
        for (n, ties) in [(1, false), (5, false), (100, true), (300, false), (5000, true), (20_000, false)] {
            let logits = random_logits(n, n as u64, ties);
            let w: Vec<f32> = logits.iter().map(|&l| (l - 10.0).exp()).collect();
            let z: f32 = w.iter().sum();
            let mut full: Vec<(u32, f32)> = w.iter().enumerate().map(|(i, &p)| (i as u32, p)).collect();
            full.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            for top_p in [1e-6, 0.1, 0.5, 0.9, 0.95, 0.999, 0.999_999, 1.0] {
                let got = nucleus(&w, z, top_p);
                let mut mass = 0f32;
                let cut = full.iter().position(|p| {
                    mass += p.1 / z;
                    mass >= top_p
                });
                let want = &full[..cut.map_or(n, |c| c + 1)];
                assert_eq!(got, want, "n {n}, top_p {top_p}");
            }
        }
    }

    #[test]
    fn nucleus_sampling_picks_what_the_full_sort_picks() {
        for (n, ties) in [(4, false), (1000, true), (50_000, false)] {
            let logits = random_logits(n, 3, ties);
            for (t, top_p) in [(0.7, 0.95), (1.0, 0.5), (1.3, 0.999)] {
                let mut s = Sampler::new(t, top_p, 11);
                let mut rng = StdRng::seed_from_u64(11);
                for _ in 0..200 {
                    assert_eq!(s.pick(&logits), pick_by_full_sort(&logits, t, top_p, &mut rng), "n {n}");
                }
            }
        }
    }

    #[test]
    fn sampling_without_a_nucleus_follows_the_softmax() {
        // temperature 0.5 doubles the logits: softmax(2, 4, 0, -2, 6)
        let logits = [1.0f32, 2.0, 0.0, -1.0, 3.0];
        let e: Vec<f64> = logits.iter().map(|&l| (2.0 * l as f64).exp()).collect();
        let z: f64 = e.iter().sum();
        let mut s = Sampler::new(0.5, 1.0, 5);
        let draws = 100_000;
        let mut count = [0usize; 5];
        for _ in 0..draws {
            count[s.pick(&logits) as usize] += 1;
        }
        for (i, c) in count.iter().enumerate() {
            let (p, f) = (e[i] / z, *c as f64 / draws as f64);
            // 5 standard deviations of a frequency over 100,000 draws
            let sd = (p * (1.0 - p) / draws as f64).sqrt();
            assert!((f - p).abs() <= 5.0 * sd + 1e-9, "token {i}: frequency {f} against p {p}");
        }
        // z = e^2 + e^4 + 1 + e^-2 + e^6 ~ 466.5: token 3 (e^-2 / z ~ 2.9e-4, some 29 draws) and token 2 (1 / z ~
        // 2.1e-3) are drawn too
        assert!(count[2] > 0 && count[3] > 0, "{count:?}");
    }
}
