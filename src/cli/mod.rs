//! Command-line interface: one file per subcommand, each with an `Args` struct and a `run` function.

use anyhow::Result;
use clap::{Parser, Subcommand};

mod index;
mod search;

#[derive(Parser, Debug)]
#[command(name = "ragtime", version, about = "Train and evaluate retrieval controllers for dynamic RAG")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Build a BM25 index of a passage corpus (DPR tsv, WikiExtractor dump, JSON lines).
    Index(index::IndexArgs),
    /// Search a BM25 index.
    Search(search::SearchArgs),
}

pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Index(a) => index::run(a),
        Command::Search(a) => search::run(a),
    }
}
