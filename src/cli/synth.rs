//! `ragtime synth ...`: training-data synthesis for the learned controllers.

use anyhow::Result;
use clap::{Args, Subcommand};

use super::synth_hallucination;

#[derive(Args, Debug)]
pub struct SynthArgs {
    #[command(subcommand)]
    pub what: SynthCommand,
}

#[derive(Subcommand, Debug)]
pub enum SynthCommand {
    /// MIND/RaDIO hallucination labels: truncate Wikipedia openings at entities, let the model continue,
    /// compare the entity it writes with the real one, store labels and hidden states (Parquet).
    Hallucination(synth_hallucination::Args),
}

pub fn run(args: SynthArgs) -> Result<()> {
    match args.what {
        SynthCommand::Hallucination(a) => synth_hallucination::run(a),
    }
}
