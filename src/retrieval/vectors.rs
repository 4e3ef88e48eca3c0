//! The dense index on disk: passage embeddings beside the BM25 index, in `INDEX/dense/`.
//!
//! - `chunks/NNNNNN.ids` (passage ids, one a line) and `chunks/NNNNNN.bin` (their embeddings, row-major
//!   little-endian f32 or f16): `chunk_rows` passages each, in corpus-stream order. Each file is written through a
//!   temporary file and renamed, the `.bin` last, so a `.bin` present means a complete chunk.
//! - `progress.json`: the settings the chunks were made with. A re-run with the same settings continues after the
//!   last complete chunk; with other settings it starts clean.
//! - `hnsw.usearch`: the HNSW graph ([`super::hnsw`]), when `kind` is hnsw.
//! - `dense.json` ([`DenseManifest`]): written last, atomically; its presence means the dense index is complete.
//!
//! Passage text is embedded as `title + "\n" + text` (what the BM25 index's combined field holds), with the
//! encoder's passage prefix. Titles and texts are not stored again: the dense retriever reads them from the BM25
//! index by id.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::flat::FlatIndex;
use super::hnsw::{recall_at_k, HnswIndex, HnswParams};
pub use super::matrix::{random_unit_vectors, Matrix, VectorSearch};
use crate::corpus::passages::{for_each_passage_at, CorpusFormat, CorpusOptions, OwnStart};
use crate::encoder::{Prefixes, SentenceEncoder, TextKind};
use crate::io::write_atomic;
use crate::shard::Shard;

/// Folder of the dense index inside an index directory.
pub const DENSE_DIR: &str = "dense";
/// Manifest file of a complete dense index.
pub const DENSE_MANIFEST: &str = "dense.json";
const PROGRESS: &str = "progress.json";
const HNSW_FILE: &str = "hnsw.usearch";

/// How the dense index searches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum DenseKind {
    /// Exact scan of every vector.
    #[default]
    Flat,
    /// HNSW graph (usearch).
    Hnsw,
}

impl std::str::FromStr for DenseKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "flat" => Ok(Self::Flat),
            "hnsw" => Ok(Self::Hnsw),
            _ => Err(format!("unknown dense index kind {s:?} (expected flat or hnsw)")),
        }
    }
}

/// Stored element type of the embeddings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum VectorDtype {
    #[default]
    F32,
    F16,
}

impl std::str::FromStr for VectorDtype {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "f32" => Ok(Self::F32),
            "f16" => Ok(Self::F16),
            _ => Err(format!("unknown vector type {s:?} (expected f32 or f16)")),
        }
    }
}

/// Settings of the dense part of `ragtime index`.
#[derive(Debug, Clone)]
pub struct DenseOptions {
    pub corpus: CorpusOptions,
    pub kind: DenseKind,
    pub dtype: VectorDtype,
    pub hnsw: HnswParams,
    /// Texts per encoder batch.
    pub batch: usize,
    /// Passages per chunk file (the resume granularity).
    pub chunk_rows: usize,
    /// Queries of the build-time HNSW recall check (0: no check).
    pub recall_sample: usize,
    pub force: bool,
    pub progress: bool,
    /// Embed only the passages of this shard (by passage id, see [`crate::shard`]).
    pub shard: Option<Shard>,
}

impl Default for DenseOptions {
    fn default() -> Self {
        Self {
            corpus: CorpusOptions {
                format: None,
                passage_words: 100,
                on_bad: crate::corpus::passages::OnBadLine::Stop,
            },
            kind: DenseKind::Flat,
            dtype: VectorDtype::F32,
            hnsw: HnswParams::default(),
            batch: 32,
            chunk_rows: 4096,
            recall_sample: 1000,
            force: false,
            progress: false,
            shard: None,
        }
    }
}

/// What a set of chunks was made with; a re-run resumes only when this matches.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Progress {
    corpus: PathBuf,
    format: Option<CorpusFormat>,
    passage_words: usize,
    encoder: PathBuf,
    dim: usize,
    prefixes: Prefixes,
    dtype: VectorDtype,
    chunk_rows: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    shard: Option<Shard>,
}

/// `dense/dense.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DenseManifest {
    pub ragtime_version: String,
    pub corpus: PathBuf,
    /// The sentence-transformers folder the passages were embedded with (queries must use the same).
    pub encoder: PathBuf,
    pub dim: usize,
    pub pooling: crate::encoder::Pooling,
    pub normalize: bool,
    pub max_seq_length: usize,
    pub prefixes: Prefixes,
    pub passages: u64,
    pub chunks: usize,
    pub chunk_rows: usize,
    pub dtype: VectorDtype,
    pub kind: DenseKind,
    pub hnsw: Option<HnswParams>,
    /// HNSW recall@10 against exact search measured at build time (queries: midpoints of random passage pairs).
    pub hnsw_recall_at_10: Option<f64>,
    pub encode_seconds: f64,
    pub hnsw_seconds: f64,
}

fn chunk_path(dir: &Path, i: usize, ext: &str) -> PathBuf {
    dir.join("chunks").join(format!("{i:06}.{ext}"))
}

fn encode_rows(v: &[Vec<f32>], dtype: VectorDtype) -> Vec<u8> {
    match dtype {
        VectorDtype::F32 => v.iter().flatten().flat_map(|x| x.to_le_bytes()).collect(),
        VectorDtype::F16 => v.iter().flatten().flat_map(|x| half::f16::from_f32(*x).to_le_bytes()).collect(),
    }
}

/// Count of complete chunks (a `.bin` present for 0..n, each with its `.ids`).
fn complete_chunks(dir: &Path) -> Result<usize> {
    let mut n = 0;
    while crate::io::exists(&chunk_path(dir, n, "bin"))? && crate::io::exists(&chunk_path(dir, n, "ids"))? {
        n += 1;
    }
    Ok(n)
}

/// Removes what a dense build writes in `dir` (the settings, the manifest, the HNSW graph, the chunk files and
/// their temporary files) and nothing else: a file someone else put in the folder stays.
fn clear_own_files(dir: &Path) -> Result<()> {
    let remove = |p: &Path| -> Result<()> {
        match std::fs::remove_file(p) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(anyhow::Error::new(e).context(format!("cannot remove {}", p.display())))
            }
            _ => Ok(()),
        }
    };
    for name in [PROGRESS, DENSE_MANIFEST, HNSW_FILE] {
        remove(&dir.join(name))?;
        remove(&crate::io::tmp_path(&dir.join(name)))?;
    }
    let chunks = dir.join("chunks");
    if crate::io::is_dir(&chunks)? {
        for entry in std::fs::read_dir(&chunks).with_context(|| format!("cannot list {}", chunks.display()))? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            // NNNNNN.ids / NNNNNN.bin, or their temporary `.NNNNNN.bin.tmp`
            let stem = name.trim_start_matches('.').trim_end_matches(".tmp");
            let own = stem.len() == 10
                && stem[..6].bytes().all(|b| b.is_ascii_digit())
                && matches!(&stem[6..], ".ids" | ".bin");
            if own {
                remove(&entry.path())?;
            }
        }
    }
    Ok(())
}

/// Build (or resume) the dense index of `corpus` in `index_dir/dense` with `encoder`.
pub fn build_dense(
    corpus: &Path,
    index_dir: &Path,
    encoder: &SentenceEncoder,
    opts: &DenseOptions,
) -> Result<DenseManifest> {
    let corpus_abs =
        std::fs::canonicalize(corpus).with_context(|| format!("cannot read corpus {}", corpus.display()))?;
    let dir = index_dir.join(DENSE_DIR);
    if crate::io::exists(&dir.join(DENSE_MANIFEST))? && !opts.force {
        bail!("{}: a complete dense index is already there (remove it, or pass --force to rebuild)", dir.display());
    }
    let want = Progress {
        corpus: corpus_abs.clone(),
        format: opts.corpus.format,
        passage_words: opts.corpus.passage_words,
        encoder: std::fs::canonicalize(&encoder.dir).unwrap_or_else(|_| encoder.dir.clone()),
        dim: encoder.dim(),
        prefixes: encoder.prefixes.clone(),
        dtype: opts.dtype,
        chunk_rows: opts.chunk_rows.max(1),
        shard: opts.shard,
    };
    let have: Option<Progress> = std::fs::read(dir.join(PROGRESS)).ok().and_then(|b| serde_json::from_slice(&b).ok());
    let mut done_chunks = if !opts.force && have.as_ref() == Some(&want) { complete_chunks(&dir)? } else { 0 };
    if done_chunks == 0 {
        if crate::io::exists(&dir)? {
            let ours = crate::io::exists(&dir.join(PROGRESS))?
                || crate::io::exists(&dir.join(DENSE_MANIFEST))?
                || std::fs::read_dir(&dir)?.next().is_none();
            if !ours {
                bail!("{}: exists and is not a ragtime dense index; refusing to overwrite it", dir.display());
            }
            clear_own_files(&dir)?;
        }
        std::fs::create_dir_all(dir.join("chunks")).with_context(|| format!("cannot create {}", dir.display()))?;
        write_atomic(&dir.join(PROGRESS), serde_json::to_string_pretty(&want)?.as_bytes())?;
    } else if opts.progress {
        eprintln!("dense: resuming {} after {done_chunks} complete chunks", dir.display());
    }
    // Rows already embedded: the ids of the complete chunks (the last one may be short).
    let mut skip = 0u64;
    for i in 0..done_chunks {
        let p = chunk_path(&dir, i, "ids");
        skip += std::fs::read_to_string(&p).with_context(|| format!("{}: cannot read", p.display()))?.lines().count()
            as u64;
    }

    let t_enc = Instant::now();
    let mut seen: u64 = 0;
    let mut skipped_lines = 0u64;
    let mut ids: Vec<String> = Vec::with_capacity(want.chunk_rows);
    let mut texts: Vec<String> = Vec::with_capacity(want.chunk_rows);
    let mut last_report = Instant::now();
    let flush = |ids: &mut Vec<String>, texts: &mut Vec<String>, done_chunks: &mut usize| -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let vecs = encoder.encode(&refs, TextKind::Passage, opts.batch)?;
        let mut id_text = String::new();
        for id in ids.iter() {
            if id.contains('\n') {
                bail!("passage id {id:?} contains a line break");
            }
            id_text.push_str(id);
            id_text.push('\n');
        }
        write_atomic(&chunk_path(&dir, *done_chunks, "ids"), id_text.as_bytes())?;
        write_atomic(&chunk_path(&dir, *done_chunks, "bin"), &encode_rows(&vecs, want.dtype))?;
        *done_chunks += 1;
        ids.clear();
        texts.clear();
        Ok(())
    };
    let mut own = OwnStart::default();
    for_each_passage_at(corpus, opts.corpus, &mut skipped_lines, |p, at| {
        if opts.shard.is_some_and(|s| !s.owns(&p.id)) {
            return Ok(true);
        }
        seen += 1;
        if seen <= skip {
            return Ok(true);
        }
        own.mark(at);
        ids.push(p.id);
        texts.push(format!("{}\n{}", p.title, p.text));
        if ids.len() == want.chunk_rows {
            flush(&mut ids, &mut texts, &mut done_chunks)?;
            if opts.progress && last_report.elapsed().as_secs_f64() >= 2.0 {
                last_report = Instant::now();
                let rate = (seen - skip) as f64 / t_enc.elapsed().as_secs_f64();
                eprint!("\rdense: embedded {seen} passages ({rate:.0}/s), {}   ", own.describe(at));
            }
        }
        Ok(true)
    })?;
    flush(&mut ids, &mut texts, &mut done_chunks)?;
    let encode_seconds = t_enc.elapsed().as_secs_f64();
    if opts.progress {
        eprintln!(
            "\rdense: embedded {seen} passages ({} this run) in {encode_seconds:.1} s            ",
            seen.saturating_sub(skip)
        );
    }

    let (_, matrix) = read_chunks(&dir, want.dim, want.dtype, done_chunks)?;
    if matrix.rows() as u64 != seen {
        bail!(
            "{}: the chunks hold {} vectors but the corpus stream has {seen} passages; not writing the manifest",
            dir.display(),
            matrix.rows()
        );
    }
    let (hnsw_seconds, hnsw_recall, hnsw_params) = graph(&dir, matrix, opts)?;
    let manifest = DenseManifest {
        ragtime_version: env!("CARGO_PKG_VERSION").to_string(),
        corpus: corpus_abs,
        encoder: want.encoder.clone(),
        dim: want.dim,
        pooling: encoder.pooling,
        normalize: encoder.normalize,
        max_seq_length: encoder.max_seq_length,
        prefixes: want.prefixes.clone(),
        passages: seen,
        chunks: done_chunks,
        chunk_rows: want.chunk_rows,
        dtype: want.dtype,
        kind: opts.kind,
        hnsw: hnsw_params,
        hnsw_recall_at_10: hnsw_recall,
        encode_seconds,
        hnsw_seconds,
    };
    write_atomic(&dir.join(DENSE_MANIFEST), serde_json::to_string_pretty(&manifest)?.as_bytes())?;
    Ok(manifest)
}

/// The HNSW graph of `matrix` in `dir` when `opts.kind` is hnsw, with the build-time recall check: (seconds,
/// recall@10 against exact search, parameters).
fn graph(dir: &Path, matrix: Matrix, opts: &DenseOptions) -> Result<(f64, Option<f64>, Option<HnswParams>)> {
    if opts.kind != DenseKind::Hnsw {
        return Ok((0.0, None, None));
    }
    let t = Instant::now();
    let h = HnswIndex::build(&matrix, opts.hnsw, opts.progress)?;
    h.save(&dir.join(HNSW_FILE))?;
    let seconds = t.elapsed().as_secs_f64();
    let mut recall = None;
    if opts.recall_sample > 0 && matrix.rows() > 0 {
        let queries = pair_midpoints(&matrix, opts.recall_sample, 17);
        let r = recall_at_k(&h, &FlatIndex::new(matrix), &queries, 10)?;
        if opts.progress {
            eprintln!(
                "dense: HNSW recall@10 vs exact search: {r:.4} on {} queries (midpoints of random passage pairs)",
                queries.len()
            );
        }
        recall = Some(r);
    }
    Ok((seconds, recall, Some(opts.hnsw)))
}

/// The dense indexes of a sharded `ragtime index --encoder` (in `parts[i]/dense`) merged into `out/dense`: the
/// chunks copied in shard order (embeddings are not recomputed), then the HNSW graph built over all of them when
/// the shards are hnsw (with the shards' parameters and `recall_sample`). The shards must share encoder, prefixes,
/// dtype and kind.
pub fn merge_dense(parts: &[PathBuf], out: &Path, recall_sample: usize, progress: bool) -> Result<DenseManifest> {
    let read = |p: &Path| -> Result<(DenseManifest, Progress)> {
        let d = p.join(DENSE_DIR);
        let m: DenseManifest = serde_json::from_slice(
            &std::fs::read(d.join(DENSE_MANIFEST))
                .with_context(|| format!("{}: cannot read", d.join(DENSE_MANIFEST).display()))?,
        )
        .with_context(|| format!("{}: malformed", d.join(DENSE_MANIFEST).display()))?;
        let g: Progress = serde_json::from_slice(
            &std::fs::read(d.join(PROGRESS)).with_context(|| format!("{}: cannot read", d.join(PROGRESS).display()))?,
        )
        .with_context(|| format!("{}: malformed", d.join(PROGRESS).display()))?;
        Ok((m, g))
    };
    let all: Vec<(DenseManifest, Progress)> = parts.iter().map(|p| read(p)).collect::<Result<_>>()?;
    let Some((first, first_progress)) = all.first().cloned() else { bail!("no dense index to merge") };
    for (p, (m, g)) in parts.iter().zip(&all) {
        let same = Progress { shard: None, ..g.clone() } == Progress { shard: None, ..first_progress.clone() }
            && (m.kind, m.hnsw) == (first.kind, first.hnsw);
        if !same {
            bail!("{}: its dense index was built with other settings than {}'s", p.display(), parts[0].display());
        }
    }
    let dir = out.join(DENSE_DIR);
    if crate::io::exists(&dir)? {
        clear_own_files(&dir)?;
    }
    std::fs::create_dir_all(dir.join("chunks")).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut chunks = 0;
    for (p, (m, _)) in parts.iter().zip(&all) {
        for i in 0..m.chunks {
            for ext in ["ids", "bin"] {
                let from = chunk_path(&p.join(DENSE_DIR), i, ext);
                let to = chunk_path(&dir, chunks, ext);
                let bytes = std::fs::read(&from).with_context(|| format!("{}: cannot read", from.display()))?;
                write_atomic(&to, &bytes)?;
            }
            chunks += 1;
        }
    }
    write_atomic(
        &dir.join(PROGRESS),
        serde_json::to_string_pretty(&Progress { shard: None, ..first_progress.clone() })?.as_bytes(),
    )?;
    let (_, matrix) = read_chunks(&dir, first.dim, first.dtype, chunks)?;
    let passages: u64 = all.iter().map(|(m, _)| m.passages).sum();
    if matrix.rows() as u64 != passages {
        bail!("{}: merged chunks hold {} vectors, the shards {passages}", dir.display(), matrix.rows());
    }
    let opts = DenseOptions {
        kind: first.kind,
        dtype: first.dtype,
        hnsw: first.hnsw.unwrap_or_default(),
        recall_sample,
        progress,
        ..DenseOptions::default()
    };
    let (hnsw_seconds, hnsw_recall_at_10, hnsw) = graph(&dir, matrix, &opts)?;
    let manifest = DenseManifest {
        ragtime_version: env!("CARGO_PKG_VERSION").to_string(),
        passages,
        chunks,
        hnsw,
        hnsw_recall_at_10,
        encode_seconds: all.iter().map(|(m, _)| m.encode_seconds).sum(),
        hnsw_seconds,
        ..first
    };
    write_atomic(&dir.join(DENSE_MANIFEST), serde_json::to_string_pretty(&manifest)?.as_bytes())?;
    Ok(manifest)
}

/// `n` queries, each the normalised midpoint of two random stored vectors: near the data, but not in it.
pub fn pair_midpoints(m: &Matrix, n: usize, seed: u64) -> Vec<Vec<f32>> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let (a, b) = (rng.random_range(0..m.rows()), rng.random_range(0..m.rows()));
            let v: Vec<f32> = m.row_f32(a).iter().zip(m.row_f32(b).iter()).map(|(x, y)| x + y).collect();
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
            v.iter().map(|x| x / norm).collect()
        })
        .collect()
}

/// Ids and vectors of chunks `0..n`.
fn read_chunks(dir: &Path, dim: usize, dtype: VectorDtype, n: usize) -> Result<(Vec<String>, Matrix)> {
    let mut ids = Vec::new();
    let mut f32s = Vec::new();
    let mut f16s = Vec::new();
    for i in 0..n {
        let ip = chunk_path(dir, i, "ids");
        let text = std::fs::read_to_string(&ip).with_context(|| format!("{}: cannot read", ip.display()))?;
        let before = ids.len();
        ids.extend(text.lines().map(String::from));
        let bp = chunk_path(dir, i, "bin");
        let bytes = std::fs::read(&bp).with_context(|| format!("{}: cannot read", bp.display()))?;
        let width = match dtype {
            VectorDtype::F32 => 4,
            VectorDtype::F16 => 2,
        };
        if bytes.len() != (ids.len() - before) * dim * width {
            bail!(
                "{}: {} bytes, expected {} vectors of {dim} x {width} bytes (corrupt chunk: rebuild with --force)",
                bp.display(),
                bytes.len(),
                ids.len() - before
            );
        }
        match dtype {
            VectorDtype::F32 => {
                f32s.extend(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            }
            VectorDtype::F16 => f16s.extend(bytes.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]))),
        }
    }
    let m = match dtype {
        VectorDtype::F32 => Matrix::F32 { data: f32s, dim },
        VectorDtype::F16 => Matrix::F16 { data: f16s, dim },
    };
    Ok((ids, m))
}

/// A complete dense index opened for search: row ids and the searcher of its kind.
pub struct DenseIndex {
    pub manifest: DenseManifest,
    pub ids: Vec<String>,
    pub search: Box<dyn VectorSearch>,
    pub dir: PathBuf,
}

impl DenseIndex {
    /// Opens `index_dir/dense`. `kind` overrides the built kind (flat always works; hnsw needs the graph);
    /// `ef_search` overrides the HNSW search width.
    pub fn open(index_dir: &Path, kind: Option<DenseKind>, ef_search: Option<usize>) -> Result<Self> {
        let dir = index_dir.join(DENSE_DIR);
        let mpath = dir.join(DENSE_MANIFEST);
        if !crate::io::exists(&mpath)? {
            return Err(super::IndexError::Incomplete {
                dir: index_dir.to_path_buf(),
                kind: "dense",
                manifest: format!("{DENSE_DIR}/{DENSE_MANIFEST}"),
                hint: format!(
                    "build one with `ragtime index --corpus PATH --encoder MODEL_DIR --out {}`",
                    index_dir.display()
                ),
            }
            .into());
        }
        let manifest: DenseManifest =
            serde_json::from_slice(&std::fs::read(&mpath).with_context(|| format!("cannot read {}", mpath.display()))?)
                .with_context(|| format!("{}: corrupt manifest", mpath.display()))?;
        let kind = kind.unwrap_or(manifest.kind);
        let (ids, matrix) = read_chunks(&dir, manifest.dim, manifest.dtype, manifest.chunks)?;
        if ids.len() as u64 != manifest.passages {
            bail!("{}: {} ids in the chunks, the manifest says {}", dir.display(), ids.len(), manifest.passages);
        }
        let search: Box<dyn VectorSearch> = match kind {
            DenseKind::Flat => Box::new(FlatIndex::new(matrix)),
            DenseKind::Hnsw => {
                let hp = dir.join(HNSW_FILE);
                let Some(mut p) = manifest.hnsw else {
                    bail!("{}: this dense index was built without HNSW (rebuild with --dense-kind hnsw, or search it flat)", dir.display())
                };
                if let Some(ef) = ef_search {
                    p.ef_search = ef;
                }
                drop(matrix);
                let h = HnswIndex::load(&hp, p)?;
                if h.len() != ids.len() {
                    bail!("{}: {} vectors in the graph, {} ids", hp.display(), h.len(), ids.len());
                }
                Box::new(h)
            }
        };
        Ok(Self { manifest, ids, search, dir })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Starting over removes the build's own files and leaves a foreign one in place.
    #[test]
    fn clearing_keeps_foreign_files() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        std::fs::create_dir_all(dir.join("chunks")).unwrap();
        for f in
            [PROGRESS, DENSE_MANIFEST, HNSW_FILE, "chunks/000000.ids", "chunks/000000.bin", "chunks/.000001.bin.tmp"]
        {
            std::fs::write(dir.join(f), b"x").unwrap();
        }
        std::fs::write(dir.join("notes.txt"), b"mine").unwrap();
        std::fs::write(dir.join("chunks/keep.bin"), b"mine").unwrap();
        clear_own_files(dir).unwrap();
        let mut left = vec![];
        for sub in ["", "chunks"] {
            for e in std::fs::read_dir(dir.join(sub)).unwrap() {
                let p = e.unwrap().path();
                if p.is_file() {
                    left.push(p.strip_prefix(dir).unwrap().to_string_lossy().into_owned());
                }
            }
        }
        left.sort();
        assert_eq!(left, ["chunks/keep.bin", "notes.txt"]);
    }
}
