//! `ragtime embed`: sentence embeddings of JSON lines `{id, text}` -> JSON lines `{id, embedding}`, with a
//! sentence-transformers model folder. Written to `OUT.partial` as it goes (a re-run continues after the lines
//! already there), renamed to `OUT` at the end.

use std::io::{BufRead, BufWriter, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;

use ragtime::corpus::passages::{CorpusPosition, OwnStart};
use ragtime::device::DeviceKind;
use ragtime::encoder::{Prefixes, SentenceEncoder, TextKind};

#[derive(Args, Debug)]
pub struct EmbedArgs {
    /// sentence-transformers model folder (modules.json, config.json, model.safetensors, tokenizer.json,
    /// 1_Pooling/config.json), e.g. checkpoints/all-MiniLM-L6-v2 from `scripts/setup.sh --minilm`.
    #[arg(long)]
    model: PathBuf,
    /// JSON lines, each {"id": ..., "text": "..."}.
    #[arg(long)]
    input: PathBuf,
    /// Output JSON lines, each {"id": ..., "embedding": [...]}, in input order.
    #[arg(long)]
    out: PathBuf,
    /// Texts per forward pass.
    #[arg(long, default_value_t = 32, value_parser = super::ranges::int::<1, 4096>)]
    batch: usize,
    /// The texts are queries: put the query prefix before them.
    #[arg(long, conflicts_with = "passage")]
    query: bool,
    /// The texts are passages: put the passage prefix before them.
    #[arg(long)]
    passage: bool,
    /// Prefixes: folder (the folder's config_sentence_transformers.json prompts, else none), none, e5
    /// ("query: " / "passage: ") or bge (its query instruction, passages bare).
    #[arg(long, default_value = "folder")]
    prefixes: String,
    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    device: DeviceKind,
    /// Replace an existing --out file.
    #[arg(long)]
    force: bool,
    /// No progress on stderr.
    #[arg(long, short)]
    quiet: bool,
}

/// Input lines read and embedded at a time (each group sorted by length inside the encoder).
const GROUP: usize = 1024;

#[derive(serde::Deserialize)]
struct InLine {
    id: serde_json::Value,
    text: String,
}

pub fn run(a: EmbedArgs) -> Result<()> {
    if ragtime::io::exists(&a.out)? && !a.force {
        bail!("--out {}: exists (pass --force to replace it)", a.out.display());
    }
    let kind = if a.query {
        TextKind::Query
    } else if a.passage {
        TextKind::Passage
    } else {
        TextKind::Plain
    };
    let enc = SentenceEncoder::load(&a.model, a.device, Prefixes::preset(&a.prefixes)?)?;
    let partial = PathBuf::from(format!("{}.partial", a.out.display()));
    // locked while this process appends: a second `embed` to the same --out is refused, not interleaved
    let mut file = ragtime::io::open_locked(&partial, "--out")?;
    let (done, keep) = complete_lines(&file).with_context(|| format!("{}: cannot read", partial.display()))?;
    // A kill mid-line leaves a torn last line: cut the partial file after the complete lines.
    file.set_len(keep)
        .and_then(|_| file.seek(SeekFrom::End(0)))
        .with_context(|| format!("{}: cannot drop a torn last line", partial.display()))?;
    if done > 0 && !a.quiet {
        eprintln!("embed: resuming after {done} lines already in {}", partial.display());
    }
    let mut out = BufWriter::new(file);
    let (reader, read) = ragtime::corpus::open_text_counted(&a.input)?;
    let bytes_total = std::fs::metadata(&a.input).with_context(|| format!("cannot read {}", a.input.display()))?.len();
    let start = Instant::now();
    let at = || CorpusPosition { bytes_read: read.get(), bytes_total };
    let mut own = OwnStart::default(); // this process's first line, for its rate
    let mut group: Vec<InLine> = Vec::with_capacity(GROUP);
    let mut n = 0usize;
    let mut embedded = 0usize;
    let flush = |group: &mut Vec<InLine>,
                 out: &mut BufWriter<std::fs::File>,
                 embedded: &mut usize,
                 own: &OwnStart|
     -> Result<()> {
        if group.is_empty() {
            return Ok(());
        }
        let texts: Vec<&str> = group.iter().map(|l| l.text.as_str()).collect();
        let vecs = enc.encode(&texts, kind, a.batch)?;
        for (l, v) in group.iter().zip(vecs) {
            writeln!(out, "{}", serde_json::json!({ "id": l.id, "embedding": v }))?;
        }
        out.flush()?;
        *embedded += group.len();
        group.clear();
        if !a.quiet {
            eprint!(
                "\rembed: {} texts ({:.1}/s), {}   ",
                done + *embedded,
                *embedded as f64 / start.elapsed().as_secs_f64(),
                own.describe(at())
            );
        }
        Ok(())
    };
    for (i, line) in reader.lines().enumerate() {
        let line = line.with_context(|| format!("{}:{}: cannot read", a.input.display(), i + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        n += 1;
        if n <= done {
            continue;
        }
        own.mark(at());
        let l: InLine = serde_json::from_str(&line)
            .with_context(|| format!("{}:{}: expected {{\"id\": ..., \"text\": \"...\"}}", a.input.display(), i + 1))?;
        group.push(l);
        if group.len() == GROUP {
            flush(&mut group, &mut out, &mut embedded, &own)?;
        }
    }
    flush(&mut group, &mut out, &mut embedded, &own)?;
    // renamed while still locked, so that no second process takes the partial file in between
    let file =
        out.into_inner().map_err(|e| e.into_error()).with_context(|| format!("{}: cannot write", partial.display()))?;
    std::fs::rename(&partial, &a.out).with_context(|| format!("{}: cannot rename into place", a.out.display()))?;
    drop(file);
    let secs = start.elapsed().as_secs_f64();
    if !a.quiet {
        eprintln!();
    }
    println!(
        "embedded {embedded} texts ({} in all) with {} into {} in {secs:.1} s ({:.1} texts/s, {} dims)",
        n,
        a.model.display(),
        a.out.display(),
        embedded as f64 / secs.max(1e-9),
        enc.dim()
    );
    Ok(())
}

/// The complete lines at the start of a partial output (each a JSON object ending in a newline) and their length
/// in bytes; what follows them is a line torn by a kill.
fn complete_lines(file: &std::fs::File) -> std::io::Result<(usize, u64)> {
    let mut r = std::io::BufReader::new(file);
    let (mut lines, mut bytes, mut line) = (0usize, 0u64, Vec::new());
    loop {
        line.clear();
        if r.read_until(b'\n', &mut line)? == 0 || !line.ends_with(b"}\n") {
            return Ok((lines, bytes));
        }
        lines += 1;
        bytes += line.len() as u64;
    }
}
