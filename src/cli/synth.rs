//! `ragtime synth ...`: training-data synthesis for the learned controllers.

use anyhow::Result;
use clap::{Args, Subcommand};

use super::{synth_autorag, synth_hallucination, synth_qa_labels};

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
    /// Auto-RAG's iterative-retrieval dialogues (the paper's Algorithm 1), as JSON lines and Parquet: training data,
    /// so HotpotQA, 2WikiMultihopQA and MuSiQue are refused (their questions are reserved for testing controllers).
    Autorag(Box<synth_autorag::Args>),
    /// Labels from QA itself (Probing-RAG/UAR): closed-book answers to training questions, each generated
    /// sentence labelled by whether the final answer was wrong, with the same hidden-state features (Parquet).
    /// --dataset names a pool of training questions (NQ-open, TriviaQA, ...); HotpotQA, 2WikiMultihopQA and
    /// MuSiQue are refused (their questions are reserved for testing controllers).
    QaLabels(synth_qa_labels::Args),
}

pub fn run(args: SynthArgs) -> Result<()> {
    match args.what {
        SynthCommand::Hallucination(a) => synth_hallucination::run(a),
        SynthCommand::Autorag(a) => synth_autorag::run(*a),
        SynthCommand::QaLabels(a) => synth_qa_labels::run(a),
    }
}
