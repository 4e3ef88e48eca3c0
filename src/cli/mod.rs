//! Command-line interface: one file per subcommand, each with an `Args` struct and a `run` function.

use anyhow::Result;
use clap::{Parser, Subcommand};

pub mod train;

#[derive(Parser, Debug)]
#[command(name = "ragtime", version, about = "Train and evaluate retrieval controllers for dynamic RAG")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Train a learned controller (`detector`: MIND's hallucination detector).
    Train(train::TrainArgs),
}

pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Train(args) => train::run(args),
    }
}
