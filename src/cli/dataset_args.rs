//! The flags that name a QA dataset, shared by every command that reads one (`eval`, `sweep`, `synth autorag`,
//! `synth qa-labels`).

use anyhow::Result;
use clap::Args;

use ragtime::eval::DatasetSpec;
use ragtime::qa::Layout;

#[derive(Args, Debug, Clone)]
pub struct DatasetArgs {
    /// Dataset name (datasets/NAME.toml), a spec file (*.toml), or a data file.
    #[arg(long)]
    pub dataset: String,
    /// Layout of a data file given as --dataset PATH (default: detected from its first record): hotpotqa-ircot,
    /// hotpotqa-simple, 2wiki, strategyqa-bigbench, strategyqa, iirc, musique, nq-open, triviaqa, popqa, pubmedqa,
    /// bioasq.
    #[arg(long)]
    pub layout: Option<Layout>,
}

impl DatasetArgs {
    /// The dataset's spec (see [`DatasetSpec::load_as`]).
    pub fn load(&self) -> Result<DatasetSpec> {
        DatasetSpec::load_as(&self.dataset, self.layout)
    }
}
