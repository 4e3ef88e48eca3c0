//! `ragtime report RUN_DIR... [--html out.html] [--questions N] [--ids a,b]`: the comparison table (Markdown, to
//! stdout) of runs written by `ragtime eval`, and optionally an HTML page with the table and the generations.

use std::path::PathBuf;

use anyhow::Result;
use ragtime::eval::report::{load_runs, markdown_table, write_html, Selection};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Run directories written by `ragtime eval` (e.g. runs/*); other paths are skipped with a warning.
    #[arg(required = true)]
    pub runs: Vec<PathBuf>,
    /// Also write a self-contained HTML page here.
    #[arg(long)]
    pub html: Option<PathBuf>,
    /// How many questions the HTML page shows (the first N of the first run).
    #[arg(long, default_value_t = 5)]
    pub questions: usize,
    /// Show these question ids in the HTML page instead (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub ids: Vec<String>,
}

pub fn run(args: Args) -> Result<()> {
    let runs = load_runs(&args.runs)?;
    let summaries: Vec<_> = runs.iter().map(|r| r.summary.clone()).collect();
    print!("{}", markdown_table(&summaries));
    if let Some(path) = &args.html {
        let selection =
            if args.ids.is_empty() { Selection::First(args.questions) } else { Selection::Ids(args.ids.clone()) };
        write_html(path, &runs, &selection)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
