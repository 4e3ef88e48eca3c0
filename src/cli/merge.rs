//! `ragtime merge DIR`: put the shards of a sharded job back together (see `ragtime::shard`). The kind of job
//! comes from the shards' markers; the merged output is what one process would have written.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args as ClapArgs;

use ragtime::shard::{scan, ShardSet};

#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The --out that all shards of the job wrote into (holds part-IIIII-of-NNNNN and their .done markers).
    pub dir: PathBuf,
    /// Where the merged output goes (default: DIR/merged). A merge stopped half-way resumes.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Hallucination and qa-labels datasets: articles (questions) per Parquet file of the merged dataset (default:
    /// the shards' `--flush-every`, which makes the files those of a one-process run).
    #[arg(long, value_parser = super::ranges::int::<1, 1_000_000>)]
    pub flush_every: Option<usize>,
    /// Dense HNSW indexes: queries of the recall@10 check of the merged graph against exact search (0: skip).
    #[arg(long, default_value_t = 1000, value_parser = super::ranges::int::<0, 1_000_000>)]
    pub recall_sample: usize,
    /// No per-shard table on stderr.
    #[arg(long, short)]
    pub quiet: bool,
    /// Only check the shards (all present, finished, unchanged, of one job) and print their table; write
    /// nothing. Exit 0 when they are ready to merge; otherwise the error names the indices to rerun.
    #[arg(long)]
    pub check: bool,
}

pub fn run(a: Args) -> Result<()> {
    // no shard writes its part while it is checked and read
    let _parts = ragtime::shard::lock_parts(&a.dir)?;
    let set = scan(&a.dir)?;
    let out = a.out.clone().unwrap_or_else(|| a.dir.join("merged"));
    if a.check {
        println!("{}", shard_table(&set));
        println!("{}: all {} shards complete ({}); ready to merge", a.dir.display(), set.count, set.kind);
        return Ok(());
    }
    if !a.quiet {
        eprintln!("{}", shard_table(&set));
    }
    let parts: Vec<PathBuf> = set.parts.iter().map(|(p, _)| p.clone()).collect();
    let order = set.input_order();
    let line = match set.kind.as_str() {
        k if k == ragtime::labels::OUTPUT_KIND => {
            use ragtime::labels::{merge::merge, MANIFEST, OUTPUT_KIND};
            let _lock = ragtime::io::claim_output_dir(&out, "--out", OUTPUT_KIND, MANIFEST)?;
            let config = synth_config(&parts[0])?;
            let recorded = set.job["flush_every"].as_u64().or(config["flush_every"].as_u64());
            let flush_every = a.flush_every.or(recorded.map(|n| n as usize)).unwrap_or(16);
            let m = merge(&parts, &order, &out, flush_every.max(1))?;
            write_synth_config(config, &out)?;
            format!(
                "{} articles, {} examples, {} hallucinated ({:.1}%); templates: {}",
                m.articles,
                m.examples,
                m.hallucinated,
                100.0 * m.hallucinated_rate,
                ragtime::labels::template_agreement(&out)?
            )
        }
        k if k == ragtime::eval::run::OUTPUT_KIND => {
            let s = ragtime::eval::merge::merge(&parts, &order, &out)?;
            println!("{}", ragtime::eval::report::markdown_table(std::slice::from_ref(&s)));
            format!("{} predictions", s.questions)
        }
        k if k == ragtime::autorag::synth::store::OUTPUT_KIND => {
            let s = ragtime::autorag::synth::merge::merge(&parts, &order, &out)?;
            format!("{} questions tried, {} dialogues kept", s.tried, s.kept)
        }
        k if k == super::index::SHARD_KIND => {
            let has_dense = |p: &PathBuf| {
                ragtime::io::present_or_refused(&p.join("dense").join(ragtime::retrieval::vectors::DENSE_MANIFEST))
            };
            let dense = parts.iter().filter(|p| has_dense(p)).count();
            if dense > 0 && dense < parts.len() {
                bail!(
                    "{}: {dense} of {} shards have a dense index; rerun the others with --encoder",
                    a.dir.display(),
                    parts.len()
                );
            }
            let m = ragtime::retrieval::index::merge_indexes(&parts, &out)?;
            let mut line = format!("{} passages (BM25)", m.passages);
            if dense > 0 {
                let d = ragtime::retrieval::vectors::merge_dense(&parts, &out, a.recall_sample, !a.quiet)?;
                let recall =
                    d.hnsw_recall_at_10.map(|r| format!(", HNSW recall@10 vs exact {r:.4}")).unwrap_or_default();
                line += &format!(", {} dense vectors ({:?}){recall}", d.passages, d.kind);
            }
            line
        }
        k => bail!("{}: shards of a {k:?}, which `ragtime merge` does not know", a.dir.display()),
    };
    println!("merged {} shards of {} into {}: {line}", set.count, a.dir.display(), out.display());
    Ok(())
}

/// A part's synth-config.json.
fn synth_config(part: &std::path::Path) -> Result<serde_json::Value> {
    let from = part.join("synth-config.json");
    let text = std::fs::read_to_string(&from).with_context(|| format!("{}: cannot read", from.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}: malformed", from.display()))
}

/// The merged dataset's synth-config.json: shard 0's, without the shard (what a one-process run records).
fn write_synth_config(mut v: serde_json::Value, out: &std::path::Path) -> Result<()> {
    if let Some(s) = v.get_mut("shard") {
        *s = serde_json::Value::Null;
    }
    ragtime::io::write_atomic(&out.join("synth-config.json"), serde_json::to_string_pretty(&v)?.as_bytes())
}

/// Per shard: items, rows, seconds and rows per second (from the markers), with the totals.
fn shard_table(set: &ShardSet) -> String {
    let mut t = format!("{:<22} {:>10} {:>10} {:>10} {:>10}\n", "shard", "items", "rows", "seconds", "rows/s");
    let (mut items, mut rows, mut secs) = (0usize, 0usize, 0f64);
    for (p, m) in &set.parts {
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        t += &format!(
            "{name:<22} {:>10} {:>10} {:>10.1} {:>10.2}\n",
            m.items,
            m.rows,
            m.seconds,
            m.rows as f64 / m.seconds.max(1e-9)
        );
        items += m.items;
        rows += m.rows;
        secs = secs.max(m.seconds);
    }
    t += &format!("{:<22} {items:>10} {rows:>10} {secs:>10.1} {:>10.2}", "all (slowest)", rows as f64 / secs.max(1e-9));
    t
}
