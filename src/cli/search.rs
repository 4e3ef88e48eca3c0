//! `ragtime search`: query an index built by `ragtime index`, with BM25, dense or hybrid retrieval.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;

use ragtime::retrieval::bm25::{Bm25Index, MultiField, TopK};
use ragtime::retrieval::truncate::truncate_to_last_tokens;
use ragtime::retrieval::{Retriever, RetrieverKind};

use super::retriever_args::RetrieverArgs;

#[derive(Args, Debug)]
pub struct SearchArgs {
    /// Index directory.
    #[arg(long)]
    index: PathBuf,
    /// The query.
    #[arg(long, required_unless_present = "queries", conflicts_with = "queries")]
    query: Option<String>,
    /// A file of queries, one a line: prints one JSON line per query and the throughput on stderr.
    #[arg(long)]
    queries: Option<PathBuf>,
    /// Passages to return.
    #[arg(short, long, default_value_t = 3, value_parser = super::ranges::int::<1, 10_000>)]
    k: usize,
    /// Print JSON (a list of {id, title, text, score}).
    #[arg(long)]
    json: bool,
    /// Threads for --queries (1 = one query after another on this thread).
    #[arg(long, default_value_t = 1, value_parser = super::ranges::int::<1, 1024>)]
    threads: usize,
    /// Multi-field scoring for an index built with --fields separate: best (ES best_fields) or most.
    #[arg(long, default_value = "best")]
    multi_field: String,
    /// best_fields tie breaker: max(title, text) + T x the other (ES default 0; DRAGIN's query uses 0.5).
    #[arg(long, default_value_t = 0.0, value_parser = super::ranges::non_negative_f32)]
    tie_breaker: f32,
    /// How the top k are found: auto, exhaustive (term at a time) or wand (tantivy's block-max WAND).
    #[arg(long, default_value = "auto")]
    strategy: String,
    /// Keep only the last N tokens of each query (DRAGIN: 64), as counted by --tokenizer.
    #[arg(long, requires = "tokenizer", value_parser = super::ranges::int::<1, 1_000_000>)]
    last_tokens: Option<usize>,
    /// tokenizer.json of the LLM whose tokens --last-tokens counts.
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    #[command(flatten)]
    retr: RetrieverArgs,
}

pub fn run(a: SearchArgs) -> Result<()> {
    let mf = match a.multi_field.as_str() {
        "best" => MultiField::Best,
        "most" => MultiField::Most,
        other => ragtime::usage_bail!("--multi-field {other:?}: expected best or most"),
    };
    let strategy = match a.strategy.as_str() {
        "auto" => TopK::Auto,
        "exhaustive" => TopK::Exhaustive,
        "wand" => TopK::BlockWand,
        other => ragtime::usage_bail!("--strategy {other:?}: expected auto, exhaustive or wand"),
    };
    let index: Box<dyn Retriever> = match a.retr.retriever {
        RetrieverKind::Bm25 => Box::new(
            Bm25Index::open(&a.index)?.with_multi_field(mf).with_tie_breaker(a.tie_breaker).with_top_k(strategy),
        ),
        _ => a.retr.open(&a.index)?,
    };
    let tok = match &a.tokenizer {
        Some(p) => Some(
            tokenizers::Tokenizer::from_file(p)
                .map_err(|e| anyhow::anyhow!("{}: cannot load tokenizer: {e}", p.display()))?,
        ),
        None => None,
    };
    let prepare = |q: &str| -> String {
        match (&tok, a.last_tokens) {
            (Some(t), Some(n)) => truncate_to_last_tokens(q, n, |s| {
                t.encode(s, false).map(|e| e.get_offsets().to_vec()).unwrap_or_default()
            })
            .to_string(),
            _ => q.to_string(),
        }
    };
    if let Some(q) = &a.query {
        let hits = index.search(&prepare(q), a.k)?;
        if a.json {
            println!("{}", serde_json::to_string_pretty(&hits)?);
        } else if hits.is_empty() {
            println!("no passage matches (after analysis the query has no searchable term)");
        } else {
            for (i, p) in hits.iter().enumerate() {
                println!("{}. [{:.3}] {} (id {})\n   {}", i + 1, p.score, p.title, p.id, p.text);
            }
        }
        return Ok(());
    }
    let path = a.queries.as_ref().expect("clap requires --query or --queries");
    let reader = ragtime::corpus::open_text(path)?;
    let mut queries = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        queries.push(prepare(&line.with_context(|| format!("{}:{}: cannot read line", path.display(), i + 1))?));
    }
    let start = Instant::now();
    let mut latencies = Vec::with_capacity(queries.len());
    let results = if a.threads <= 1 {
        let mut results = Vec::with_capacity(queries.len());
        for q in &queries {
            let t = Instant::now();
            results.push(index.search(q, a.k)?);
            latencies.push(t.elapsed().as_secs_f64());
        }
        results
    } else {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(a.threads).build()?;
        pool.install(|| index.search_batch(&queries, a.k))?
    };
    let secs = start.elapsed().as_secs_f64();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for (q, hits) in queries.iter().zip(&results) {
        writeln!(out, "{}", serde_json::json!({ "query": q, "passages": hits }))?;
    }
    out.flush()?;
    eprintln!(
        "searched {} queries in {:.3} s: {:.0} queries/s on {} thread(s), k = {}",
        queries.len(),
        secs,
        queries.len() as f64 / secs.max(1e-9),
        a.threads.max(1),
        a.k
    );
    if !latencies.is_empty() {
        latencies.sort_by(f64::total_cmp);
        let pct = |p: f64| latencies[((latencies.len() - 1) as f64 * p).round() as usize] * 1e3;
        eprintln!(
            "latency: p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
            pct(0.5),
            pct(0.9),
            pct(0.99),
            pct(1.0)
        );
    }
    Ok(())
}
