//! `ragtime index`: build a BM25 index of a passage corpus.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use ragtime::corpus::passages::{CorpusFormat, CorpusOptions, OnBadLine};
use ragtime::retrieval::index::{build_index, FieldMode, IndexOptions};

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
}

pub fn run(a: IndexArgs) -> Result<()> {
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
    };
    let m = build_index(&a.corpus, &a.out, &opts)?;
    let resumed = if m.resumed_after > 0 { format!(", {} of them committed by an earlier run", m.resumed_after) } else { String::new() };
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
