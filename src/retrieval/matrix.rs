//! Row vectors in memory (f32 or f16) and the search trait the flat and HNSW indexes implement.

use anyhow::Result;

/// Nearest-neighbour search over row vectors: `(row, inner product)`, best first.
pub trait VectorSearch: Send + Sync {
    fn search(&self, q: &[f32], k: usize) -> Result<Vec<(u64, f32)>>;
    /// One line for logs and manifests.
    fn describe(&self) -> String;
}

/// Row vectors in memory.
#[derive(Debug, Clone, PartialEq)]
pub enum Matrix {
    F32 { data: Vec<f32>, dim: usize },
    F16 { data: Vec<half::f16>, dim: usize },
}

impl Matrix {
    pub fn dim(&self) -> usize {
        match self {
            Matrix::F32 { dim, .. } | Matrix::F16 { dim, .. } => *dim,
        }
    }

    pub fn rows(&self) -> usize {
        match self {
            Matrix::F32 { data, dim } => data.len() / dim.max(&1),
            Matrix::F16 { data, dim } => data.len() / dim.max(&1),
        }
    }

    pub fn is_f16(&self) -> bool {
        matches!(self, Matrix::F16 { .. })
    }

    /// `<row r, q>`, eight partial sums (so the compiler vectorises it).
    pub fn dot(&self, r: usize, q: &[f32]) -> f32 {
        fn dot8(a: impl Iterator<Item = f32>, q: &[f32]) -> f32 {
            let mut acc = [0f32; 8];
            for (i, (x, y)) in a.zip(q).enumerate() {
                acc[i & 7] += x * y;
            }
            acc.iter().sum()
        }
        match self {
            Matrix::F32 { data, dim } => {
                let row = &data[r * dim..(r + 1) * dim];
                let mut acc = [0f32; 8];
                let (a8, at) = row.split_at(dim / 8 * 8);
                let (q8, qt) = q.split_at(dim / 8 * 8);
                for (a, b) in a8.chunks_exact(8).zip(q8.chunks_exact(8)) {
                    for j in 0..8 {
                        acc[j] += a[j] * b[j];
                    }
                }
                acc.iter().sum::<f32>() + at.iter().zip(qt).map(|(x, y)| x * y).sum::<f32>()
            }
            Matrix::F16 { data, dim } => dot8(data[r * dim..(r + 1) * dim].iter().map(|x| x.to_f32()), q),
        }
    }

    pub fn row_f32(&self, r: usize) -> std::borrow::Cow<'_, [f32]> {
        match self {
            Matrix::F32 { data, dim } => std::borrow::Cow::Borrowed(&data[r * dim..(r + 1) * dim]),
            Matrix::F16 { data, dim } => {
                std::borrow::Cow::Owned(data[r * dim..(r + 1) * dim].iter().map(|x| x.to_f32()).collect())
            }
        }
    }
}

/// `n` random unit vectors of `dim` floats (normal entries, normalised), row-major: synthetic sets for tests and
/// benchmarks.
pub fn random_unit_vectors(n: usize, dim: usize, seed: u64) -> Vec<f32> {
    use rand::SeedableRng;
    use rand_distr_free::normal;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(n * dim);
    for _ in 0..n {
        let v: Vec<f32> = (0..dim).map(|_| normal(&mut rng)).collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
        out.extend(v.iter().map(|x| x / norm));
    }
    out
}

/// A standard normal sample by Box-Muller (rand 0.9 has no normal distribution without rand_distr).
mod rand_distr_free {
    use rand::Rng;
    pub fn normal(rng: &mut impl Rng) -> f32 {
        let u1: f64 = rng.random::<f64>().max(1e-300);
        let u2: f64 = rng.random();
        ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
    }
}
