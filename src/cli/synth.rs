//! `ragtime synth ...`: synthesize training data for learned controllers.

use anyhow::Result;
use clap::{Args, Subcommand};

#[derive(Args, Debug)]
pub struct SynthArgs {
    #[command(subcommand)]
    pub what: SynthCommand,
}

#[derive(Subcommand, Debug)]
pub enum SynthCommand {
    /// Auto-RAG's iterative-retrieval dialogues (the paper's Algorithm 1), as JSON lines and Parquet.
    Autorag(super::synth_autorag::Args),
}

pub fn run(args: SynthArgs) -> Result<()> {
    match args.what {
        SynthCommand::Autorag(a) => super::synth_autorag::run(a),
    }
}
