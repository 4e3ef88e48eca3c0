//! Command-line interface: one file per subcommand, each with an `Args` struct and a `run` function.

use anyhow::Result;
use clap::{Parser, Subcommand};

mod data;
mod dataset_args;
mod embed;
pub mod entities;
mod eval;
mod generate;
mod index;
mod inspect;
mod merge;
pub mod model_args;
mod ranges;
mod report;
pub mod retriever_args;
mod search;
mod sweep;
mod synth;
mod synth_autorag;
mod synth_hallucination;
mod synth_qa_labels;
pub mod train;
mod train_autorag;

#[derive(Parser, Debug)]
#[command(name = "ragtime", version, about = "Train and evaluate retrieval controllers for dynamic RAG")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Answer a QA dataset with one retrieval controller in the shared decode loop; write a run directory.
    Eval(eval::Args),
    /// Continue a prompt with the model.
    Generate(generate::Args),
    /// Print per-token internals (entropy, top-5 logits, last-layer attention, hidden states) as JSON lines.
    Inspect(inspect::Args),
    /// Compare evaluation runs: Markdown table; with --baseline, matched-budget tables with paired-bootstrap
    /// intervals; optional HTML page with the plot and generations.
    Report(report::Args),
    /// Run controllers over a grid of their thresholds on a validation split: one run per setting, sweep.jsonl,
    /// pareto.svg; with --pick, the settings nearest each retrieval budget for `eval --budget`.
    Sweep(sweep::Args),
    /// Entities found in a WikiExtractor dump (or, with --reference, P/R/F1 against spaCy's).
    Entities(entities::Args),
    /// Train a learned controller (`detector`: MIND's hallucination detector).
    Train(train::TrainArgs),
    /// Build a BM25 index of a passage corpus (DPR tsv, WikiExtractor dump, JSON lines); with --encoder also a
    /// dense (sentence-embedding) index beside it.
    Index(index::IndexArgs),
    /// Search an index: --retriever bm25 (default), dense or hybrid.
    Search(search::SearchArgs),
    /// Sentence embeddings of JSON lines {id, text} with a sentence-transformers model folder.
    Embed(embed::EmbedArgs),
    /// Synthesize training data for a learned controller (`hallucination`: MIND/RaDIO labels; `autorag`:
    /// Auto-RAG's iterative-retrieval dialogues).
    Synth(synth::SynthArgs),
    /// Put the shards of a sharded job (`--shard i/n`, or a Slurm array) back together: a synthesized dataset,
    /// an eval run, an index.
    Merge(merge::Args),
    /// Datasets: `fetch NAME` downloads one (sha256-verified) into datasets/data/; `list` shows where each is.
    Data(data::DataArgs),
}

pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Eval(a) => eval::run(a),
        Command::Generate(a) => generate::run(a),
        Command::Inspect(a) => inspect::run(a),
        Command::Report(args) => report::run(args),
        Command::Sweep(a) => sweep::run(a),
        Command::Entities(a) => entities::run(a),
        Command::Train(args) => train::run(args),
        Command::Index(a) => index::run(a),
        Command::Search(a) => search::run(a),
        Command::Embed(a) => embed::run(a),
        Command::Synth(a) => synth::run(a),
        Command::Merge(a) => merge::run(a),
        Command::Data(a) => data::run(a),
    }
}
