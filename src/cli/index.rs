//! `ragtime index`: build a BM25 index of a passage corpus and, with `--encoder`, a dense index beside it.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use ragtime::corpus::passages::{CorpusFormat, CorpusOptions, OnBadLine};
use ragtime::device::DeviceKind;
use ragtime::encoder::{Prefixes, SentenceEncoder};
use ragtime::retrieval::hnsw::HnswParams;
use ragtime::retrieval::index::{build_index, FieldMode, IndexOptions, MANIFEST};
use ragtime::retrieval::vectors::{build_dense, DenseKind, DenseOptions, VectorDtype};
use ragtime::shard::{Shard, ShardRun};

#[derive(Args, Debug)]
pub struct IndexArgs {
    /// Corpus file or folder: DPR psgs_w100.tsv, WikiExtractor dump (JSON or <doc>, AA/wiki_00 trees, .bz2), JSON lines.
    #[arg(long)]
    corpus: PathBuf,
    /// Index directory to create (or resume).
    #[arg(long)]
    out: PathBuf,
    /// Split articles into passages of this many words (DPR: 100); 0 = keep whole. DPR rows are never re-split.
    #[arg(long, default_value_t = 100, value_parser = super::ranges::int::<1, 100_000>)]
    passage_words: usize,
    /// Indexing threads (default: all cores, at most 8).
    #[arg(long, value_parser = super::ranges::int::<1, 1024>)]
    threads: Option<usize>,
    /// Memory budget of the indexing threads, in MB (at least 16 per thread).
    #[arg(long, default_value_t = 1024, value_parser = super::ranges::int::<15, 1_048_576>)]
    memory_mb: usize,
    /// Corpus layout: dpr, jsonl, wikidoc (default: detected per file).
    #[arg(long)]
    format: Option<CorpusFormat>,
    /// Indexed fields: combined (title + text in one field, like FlashRAG/bm25s) or separate (ES multi_match).
    #[arg(long, default_value = "combined")]
    fields: FieldMode,
    /// Skip (and count) corpus lines that do not parse instead of stopping.
    #[arg(long)]
    skip_bad_lines: bool,
    /// Rebuild from scratch even if a complete or resumable index is there.
    #[arg(long)]
    force: bool,
    /// Commit a resumable checkpoint every this many passages.
    #[arg(long, default_value_t = 1_000_000)]
    commit_every: u64,
    /// No progress on stderr.
    #[arg(long, short)]
    quiet: bool,
    /// Also build a dense index (in OUT/dense) with this sentence-transformers folder, e.g.
    /// checkpoints/all-MiniLM-L6-v2. A complete BM25 index already in OUT is kept (it stores the passages).
    #[arg(long)]
    encoder: Option<PathBuf>,
    /// Dense search: flat (exact inner product, for small corpora) or hnsw (usearch graph, for large ones).
    #[arg(long, default_value = "flat")]
    dense_kind: DenseKind,
    /// Stored embedding type: f32 or f16 (half the disk and memory, ~1e-3 relative error).
    #[arg(long, default_value = "f32")]
    dtype: VectorDtype,
    /// HNSW: neighbours per node (M).
    #[arg(long, default_value_t = HnswParams::default().m, value_parser = super::ranges::int::<2, 1024>)]
    hnsw_m: usize,
    /// HNSW: candidate list while inserting (efConstruction).
    #[arg(long, default_value_t = HnswParams::default().ef_construction, value_parser = super::ranges::int::<1, 100_000>)]
    ef_construction: usize,
    /// HNSW: candidate list while searching (efSearch; `search --ef-search` overrides it).
    #[arg(long, default_value_t = HnswParams::default().ef_search, value_parser = super::ranges::int::<1, 100_000>)]
    ef_search: usize,
    /// HNSW: queries of the build-time recall@10 check against exact search (0: skip it).
    #[arg(long, default_value_t = 1000, value_parser = super::ranges::int::<0, 1_000_000>)]
    recall_sample: usize,
    /// Passages per encoder batch.
    #[arg(long, default_value_t = 32, value_parser = super::ranges::int::<1, 4096>)]
    batch: usize,
    /// Passages per embedding chunk file (a re-run resumes after the last complete chunk).
    #[arg(long, default_value_t = 4096, value_parser = super::ranges::int::<1, 10_000_000>)]
    chunk_rows: usize,
    /// Encoder prefixes: folder, none, e5 or bge (see `ragtime embed --help`).
    #[arg(long, default_value = "folder")]
    prefixes: String,
    /// Where the encoder runs: cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    device: DeviceKind,
    /// i/n: index shard i of n (the passages whose id hashes to i) into OUT/part-IIIII-of-NNNNN, all n shards
    /// into the same --out; `ragtime merge OUT` then writes the whole index. Default: from Slurm's
    /// SLURM_ARRAY_TASK_ID and RAGTIME_SHARD_COUNT (or SLURM_ARRAY_TASK_COUNT) when set.
    #[arg(long)]
    shard: Option<Shard>,
}

/// The kind of a sharded index output (`ragtime::shard`).
pub const SHARD_KIND: &str = "index";

/// What every shard of one sharded index build must share.
fn job_settings(a: &IndexArgs) -> Result<serde_json::Value> {
    let corpus = std::fs::canonicalize(&a.corpus).unwrap_or_else(|_| a.corpus.clone());
    Ok(serde_json::json!({
        "corpus": corpus,
        "format": a.format,
        "passage_words": a.passage_words,
        "fields": a.fields,
        "skip_bad_lines": a.skip_bad_lines,
        "encoder": a.encoder,
        "dense_kind": a.dense_kind,
        "dtype": a.dtype,
        "hnsw": [a.hnsw_m, a.ef_construction, a.ef_search],
        "prefixes": a.prefixes,
    }))
}

pub fn run(mut a: IndexArgs) -> Result<()> {
    let shard = Shard::resolve(a.shard)?;
    let part = match shard {
        None => None,
        Some(s) => {
            let run = ShardRun::begin(&a.out, "--out", s, SHARD_KIND, job_settings(&a)?)?;
            a.out = run.part_dir();
            Some(run)
        }
    };
    // held for the BM25 and the dense build: a second `index` into the same --out is refused
    let _lock = ragtime::retrieval::index::lock_index_dir(&a.out, "--out")?;
    let defaults = IndexOptions::default();
    let opts = IndexOptions {
        corpus: CorpusOptions {
            format: a.format,
            passage_words: a.passage_words,
            on_bad: if a.skip_bad_lines { OnBadLine::Skip } else { OnBadLine::Stop },
        },
        fields: a.fields,
        threads: a.threads.unwrap_or(defaults.threads).max(1),
        memory_bytes: a.memory_mb << 20,
        commit_every: a.commit_every.max(1),
        force: a.force,
        progress: !a.quiet,
        shard,
    };
    let dense_done = a.encoder.is_none()
        || ragtime::io::exists(&a.out.join("dense").join(ragtime::retrieval::vectors::DENSE_MANIFEST))?;
    if part.is_some() && !a.force && ragtime::io::exists(&a.out.join(MANIFEST))? && dense_done {
        // a rerun of a finished shard (a requeued array task): nothing to build, the marker is written again
        if !a.quiet {
            eprintln!("{}: shard already complete", a.out.display());
        }
    } else {
        build(&a, &opts)?;
    }
    if let Some(run) = part {
        let n = ragtime::retrieval::bm25::Bm25Index::open(&a.out)?.len() as usize;
        run.finish(n, n, vec![])?;
    }
    Ok(())
}

/// The BM25 index (unless complete and only the dense one is asked for), then the dense one.
fn build(a: &IndexArgs, opts: &IndexOptions) -> Result<()> {
    let keep_bm25 = a.encoder.is_some() && !a.force && ragtime::io::exists(&a.out.join(MANIFEST))?;
    if keep_bm25 {
        if !a.quiet {
            eprintln!("{}: BM25 index already complete; adding the dense index", a.out.display());
        }
    } else {
        bm25(a, opts)?;
    }
    if let Some(enc_dir) = &a.encoder {
        let enc = SentenceEncoder::load(enc_dir, a.device, Prefixes::preset(&a.prefixes)?)?;
        let dopts = DenseOptions {
            corpus: opts.corpus,
            kind: a.dense_kind,
            dtype: a.dtype,
            hnsw: HnswParams { m: a.hnsw_m, ef_construction: a.ef_construction, ef_search: a.ef_search },
            batch: a.batch.max(1),
            chunk_rows: a.chunk_rows.max(1),
            recall_sample: a.recall_sample,
            force: a.force,
            progress: !a.quiet,
            shard: opts.shard,
        };
        let d = build_dense(&a.corpus, &a.out, &enc, &dopts)?;
        let recall = d.hnsw_recall_at_10.map(|r| format!(", HNSW recall@10 vs exact {r:.4}")).unwrap_or_default();
        println!(
            "dense: {} passages x {} dims ({:?}, {:?}) with {} in {:.1} s embedding + {:.1} s HNSW{recall}",
            d.passages,
            d.dim,
            d.dtype,
            d.kind,
            enc_dir.display(),
            d.encode_seconds,
            d.hnsw_seconds
        );
    }
    Ok(())
}

fn bm25(a: &IndexArgs, opts: &IndexOptions) -> Result<()> {
    let m = build_index(&a.corpus, &a.out, opts)?;
    let resumed = if m.resumed_after > 0 {
        format!(", {} of them committed by an earlier run", m.resumed_after)
    } else {
        String::new()
    };
    println!(
        "indexed {} passages{resumed} from {} into {} in {:.1} s ({:.0} passages/s, {} skipped lines, {} threads)",
        m.passages,
        m.corpus.display(),
        a.out.display(),
        m.index_seconds,
        (m.passages - m.resumed_after) as f64 / m.index_seconds.max(1e-9),
        m.skipped_lines,
        opts.threads
    );
    Ok(())
}
