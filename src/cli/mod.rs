//! Command-line interface: one file per subcommand, each with an `Args` struct and a `run` function.

use anyhow::Result;
use clap::{Parser, Subcommand};

mod report;

#[derive(Parser, Debug)]
#[command(name = "ragtime", version, about = "Train and evaluate retrieval controllers for dynamic RAG")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Compare evaluation runs: Markdown table, optional HTML page with generations.
    Report(report::Args),
}

pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Report(args) => report::run(args),
    }
}
