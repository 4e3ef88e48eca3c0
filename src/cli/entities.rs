//! `ragtime entities --wiki DUMP [--json] [--reference FILE]`: the entities the extractor finds in
//! each article (id, then label, character offsets into the article text and the span), or, with
//! `--reference`, precision/recall/F1 against a spaCy reference of the same dump.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;
use clap::Args as ClapArgs;

use ragtime::corpus::wikiextractor::read_dump;
use ragtime::entities::eval::{evaluate, read_reference};
use ragtime::entities::wordnet::WordNet;
use ragtime::entities::{CombinedExtractor, EntityExtractor};

#[derive(ClapArgs, Debug)]
pub struct Args {
    /// WikiExtractor dump (file or folder); its titles form the gazetteer.
    #[arg(long)]
    pub wiki: PathBuf,
    /// One JSON object per article: {"id", "entities": [{"start", "end", "text", "label"}]}.
    #[arg(long)]
    pub json: bool,
    /// Reference entities (JSONL {id, text, entities[{text,label,start,end}]}): print P/R/F1 instead.
    #[arg(long)]
    pub reference: Option<PathBuf>,
    /// Do not use WordNet instance nouns even if WordNet is installed.
    #[arg(long)]
    pub no_wordnet: bool,
}

pub fn run(args: Args) -> Result<()> {
    match print(args) {
        // `ragtime entities ... | head` is fine.
        Err(e) if broken_pipe(&e) => Ok(()),
        other => other,
    }
}

fn broken_pipe(e: &anyhow::Error) -> bool {
    use std::io::ErrorKind::BrokenPipe;
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == BrokenPipe)
            || c.downcast_ref::<serde_json::Error>().is_some_and(|j| j.io_error_kind() == Some(BrokenPipe))
    })
}

fn print(args: Args) -> Result<()> {
    let articles = read_dump(&args.wiki)?;
    let wordnet = if args.no_wordnet { None } else { WordNet::load_default()? };
    let extractor = CombinedExtractor::from_articles(&articles, wordnet.as_ref());
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if let Some(reference) = &args.reference {
        let refs = read_reference(reference)?;
        let report = evaluate(&extractor, &articles, &refs)?;
        let resources = if wordnet.is_some() {
            "rules + names + title gazetteer + WordNet instances"
        } else {
            "rules + names + title gazetteer (no WordNet)"
        };
        if args.json {
            writeln!(out, "{}", serde_json::to_string(&report)?)?;
        } else {
            writeln!(out, "extractor: {resources}")?;
            write!(out, "{report}")?;
        }
        out.flush()?;
        return Ok(());
    }
    for a in &articles {
        let ents = extractor.extract(&a.text);
        if args.json {
            serde_json::to_writer(&mut out, &serde_json::json!({"id": a.id, "entities": ents}))?;
            writeln!(out)?;
        } else {
            writeln!(out, "{}\t{}", a.id, a.title)?;
            for e in ents {
                writeln!(out, "\t{}\t{}..{}\t{}", e.label.as_str(), e.start, e.end, e.text)?;
            }
        }
    }
    out.flush()?;
    Ok(())
}
