//! Command-line interface: one file per subcommand, each with an `Args` struct and a `run` function.

use anyhow::Result;
use clap::{Parser, Subcommand};

pub mod entities;

#[derive(Parser, Debug)]
#[command(name = "ragtime", version, about = "Train and evaluate retrieval controllers for dynamic RAG")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Entities found in a WikiExtractor dump (or, with --reference, P/R/F1 against spaCy's).
    Entities(entities::Args),
}

pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Entities(a) => entities::run(a),
    }
}
