//! `ragtime report RUN_DIR... [--baseline NAME] [--at R1,R2] [--mean-over LO..HI] [--html out.html] [--questions N]
//! [--ids a,b]`: the comparison table (Markdown, to stdout) of runs written by `ragtime eval` or `ragtime sweep`, and
//! where their retrievals land (first retrieval's token, repeated passages, distinct passages); with `--baseline`,
//! the matched-budget tables with paired-bootstrap intervals; with `--at`, every controller's settings read at those
//! retrieval rates ([`ragtime::eval::curves`]), with `--mean-over`, their mean over a range of rates; optionally an
//! HTML page with the tables, the quality-against-retrievals plot and the generations.

use std::path::PathBuf;

use anyhow::Result;
use ragtime::eval::curves::Reading;
use ragtime::eval::pareto::Point;
use ragtime::eval::plot::{pareto_svg, Series};
use ragtime::eval::report::{
    answer_picks_table, claim_html, escape, load_runs, retrieval_places_table, runs_table, unequal_settings,
    write_html, LoadedRun, Selection,
};
use ragtime::eval::{compare, curves};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Run directories written by `ragtime eval` (e.g. runs/*, or a sweep's DIR/runs/*); other paths are skipped
    /// with a warning.
    #[arg(required = true)]
    pub runs: Vec<PathBuf>,
    /// Compare every run with this one (a method, label or run directory name), per retrieval budget (the
    /// `--budget` each run was made with; runs without one, such as none, single and oracle, appear beside every
    /// budget): F1 (accuracy for yes/no datasets), retrievals/question, and the paired-bootstrap 95% interval of
    /// the difference on the questions both answered.
    #[arg(long)]
    pub baseline: Option<String>,
    /// Read each controller's settings (a sweep's runs, or eval runs under one label) as a curve of quality
    /// against retrievals per question at these rates, e.g. `--at 1,2`: between the two settings on either side,
    /// with `--baseline` naming the curve the others are compared with (paired bootstrap). Replaces the
    /// matched-budget tables.
    #[arg(long, value_delimiter = ',', value_parser = super::ranges::non_negative)]
    pub at: Vec<f64>,
    /// Read the same curves over ranges of rates, e.g. `--mean-over 1.2..1.9`: each curve's mean over the range
    /// (the area under its straight lines between settings, divided by the range's width), compared with the
    /// `--baseline` curve by paired bootstrap; with `--at` or alone. Replaces the matched-budget tables.
    #[arg(long, value_delimiter = ',', value_parser = super::ranges::rate_range)]
    pub mean_over: Vec<(f64, f64)>,
    /// Bootstrap resamples.
    #[arg(long, default_value_t = compare::RESAMPLES, value_parser = super::ranges::int::<1, 1_000_000>)]
    pub resamples: usize,
    /// Bootstrap seed.
    #[arg(long, default_value_t = compare::SEED)]
    pub seed: u64,
    /// Also write a self-contained HTML page here: a new file, or a page `ragtime report` wrote before (any other
    /// file is refused and left as it was).
    #[arg(long)]
    pub html: Option<PathBuf>,
    /// How many questions the HTML page shows (the first N of the first run).
    #[arg(long, default_value_t = 5)]
    pub questions: usize,
    /// Show these question ids in the HTML page instead (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub ids: Vec<String>,
}

/// Each controller's runs ([`curves::curves`]) as a series of points of the quality-against-retrievals plot.
pub fn plot_series(runs: &[LoadedRun]) -> Vec<Series> {
    curves::curves(runs)
        .into_iter()
        .map(|c| {
            let mut series = Series::new(&c.name);
            series.points = c
                .runs
                .iter()
                .map(|r| Point {
                    cost: r.summary.retrievals_per_question,
                    value: r.summary.accuracy.unwrap_or(r.summary.f1),
                })
                .collect();
            series
        })
        .collect()
}

pub fn run(args: Args) -> Result<()> {
    if let Some(path) = &args.html {
        claim_html(path)?;
    }
    let runs = load_runs(&args.runs)?;
    print!("{}", runs_table(&runs));
    let unequal = unequal_settings(&runs)?;
    if !unequal.is_empty() {
        print!("\nNot held equal across these runs (compare with care):\n\n");
        for line in &unequal {
            println!("- {line}");
        }
    }
    let picks = answer_picks_table(&runs);
    if !picks.is_empty() {
        print!("\nWhat the answers pick on the yes/no(/maybe) questions:\n\n{picks}");
    }
    let places = retrieval_places_table(&runs);
    if !places.is_empty() {
        print!("\nWhere the retrievals land and what they bring (per question):\n\n{places}");
    }
    let mut curve_html = String::new();
    let readings: Vec<Reading> = (args.at.iter().map(|&r| Reading::At(r)))
        .chain(args.mean_over.iter().map(|&(lo, hi)| Reading::Over(lo, hi)))
        .collect();
    if !readings.is_empty() {
        let t = curves::tables(&runs, &readings, args.baseline.as_deref(), args.resamples, args.seed)?;
        print!("{}", curves::markdown(&t));
        curve_html = curves::html(&t);
    }
    let tables = match &args.baseline {
        Some(_) if !readings.is_empty() => None,
        Some(b) => {
            let t = compare::budget_tables(&runs, b, args.resamples, args.seed)?;
            print!("{}", compare::markdown(&t, args.resamples));
            if let Some(s) = compare::silence(&runs) {
                print!("{}", s.markdown());
            }
            Some(t)
        }
        None => None,
    };
    if let Some(path) = &args.html {
        let selection =
            if args.ids.is_empty() { Selection::First(args.questions) } else { Selection::Ids(args.ids.clone()) };
        let mut extra = String::new();
        if !unequal.is_empty() {
            extra.push_str("<p>Not held equal across these runs (compare with care):</p><ul>");
            for line in &unequal {
                extra.push_str(&format!("<li>{}</li>", escape(line)));
            }
            extra.push_str("</ul>\n");
        }
        if runs.len() > 1 {
            let mut datasets: Vec<&str> = runs.iter().map(|r| r.summary.dataset.as_str()).collect();
            datasets.dedup();
            let metric = if runs.iter().any(|r| r.summary.accuracy.is_some()) { "accuracy" } else { "F1" };
            let svg = pareto_svg(
                &format!("{metric} against retrievals: {}", datasets.join(", ")),
                metric,
                &plot_series(&runs),
            )?;
            extra.push_str("<figure>");
            extra.push_str(&svg);
            extra.push_str("</figure>\n");
        }
        if let Some(t) = &tables {
            extra.push_str(&compare::html(t, args.resamples));
        }
        extra.push_str(&curve_html);
        write_html(path, &runs, &selection, &extra)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
