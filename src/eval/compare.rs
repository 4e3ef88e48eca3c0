//! Matched-budget comparison: `ragtime report --baseline NAME RUN...`.
//!
//! Runs made with `eval --budget B` record the budget (retrievals per question) their threshold was calibrated
//! for; runs without one (no retrieval, single retrieval, the oracle context) are *references* shown beside
//! every budget. For each budget, each run's quality (F1, or accuracy where the dataset has it) and its actual
//! retrievals per question are listed with the paired-bootstrap 95% interval of its difference to the baseline
//! run of that budget ([`crate::eval::bootstrap`]), over the questions both answered.

use std::collections::HashMap;
use std::fmt::Write as _;

use anyhow::Result;

use super::bootstrap::{paired_bootstrap, PairedDiff};
use super::report::LoadedRun;

/// Resamples of the bootstrap, and its seed, unless told otherwise.
pub const RESAMPLES: usize = 10_000;
pub const SEED: u64 = 0x5EED;

/// One row of a budget's table.
#[derive(Debug, Clone)]
pub struct Row {
    /// The run's label (method, or label).
    pub name: String,
    pub run: String,
    pub questions: usize,
    pub score: f64,
    pub retrievals_per_question: f64,
    /// Difference to the baseline; `None` for the baseline itself.
    pub diff: Option<PairedDiff>,
    pub reference: bool,
}

/// The table of one budget (`None`: runs without a budget only).
#[derive(Debug, Clone)]
pub struct BudgetTable {
    pub budget: Option<f64>,
    pub baseline: String,
    /// "F1" or "accuracy".
    pub metric: &'static str,
    pub rows: Vec<Row>,
}

fn name_of(r: &LoadedRun) -> &str {
    &r.summary.method
}

/// The row label of each of one table's runs: its method, with its run (or folder) name added where two of them
/// share the method, as the report's other tables label runs, so that two runs of one controller (two prompts,
/// two seeds) are told apart. `label(r)` for a run of `rows`.
fn labeller<'a>(rows: &[&'a LoadedRun]) -> impl Fn(&LoadedRun) -> String + 'a {
    let labels = super::report::labels_of(rows);
    let rows = rows.to_vec();
    move |r| {
        let i = rows.iter().position(|x| std::ptr::eq(*x, r)).expect("a run of the table");
        labels[i].clone()
    }
}

fn matches(r: &LoadedRun, name: &str) -> bool {
    r.summary.method == name || r.summary.controller == name || r.summary.run == name
}

/// Per-question scores by id: accuracy where the record has one, else F1.
fn scores(r: &LoadedRun) -> HashMap<&str, f64> {
    r.predictions.iter().map(|p| (p.id.as_str(), p.metrics.accuracy.unwrap_or(p.metrics.f1))).collect()
}

/// The budget tables of `runs` against the run named `baseline` (method, label, controller or directory name).
pub fn budget_tables(runs: &[LoadedRun], baseline: &str, resamples: usize, seed: u64) -> Result<Vec<BudgetTable>> {
    let mut budgets: Vec<f64> = runs.iter().filter_map(|r| r.summary.budget).collect();
    budgets.sort_by(f64::total_cmp);
    budgets.dedup();
    let references: Vec<&LoadedRun> = runs.iter().filter(|r| r.summary.budget.is_none()).collect();
    let groups: Vec<Option<f64>> =
        if budgets.is_empty() { vec![None] } else { budgets.into_iter().map(Some).collect() };
    let metric = if runs.iter().any(|r| r.summary.accuracy.is_some()) { "accuracy" } else { "F1" };
    let mut out = Vec::new();
    for b in groups {
        let in_group: Vec<&LoadedRun> = match b {
            Some(b) => runs.iter().filter(|r| r.summary.budget == Some(b)).collect(),
            None => Vec::new(),
        };
        let base = in_group.iter().chain(&references).find(|r| matches(r, baseline)).copied();
        let Some(base) = base else {
            let names: Vec<&str> = in_group.iter().chain(&references).map(|r| name_of(r)).collect();
            let at = b.map(|b| format!(" at budget {b}")).unwrap_or_default();
            crate::usage_bail!("--baseline {baseline}: no such run{at} (runs: {})", names.join(", "));
        };
        let label = labeller(&in_group.iter().chain(&references).copied().collect::<Vec<_>>());
        let base_scores = scores(base);
        let mut rows = Vec::new();
        for (r, reference) in in_group.iter().map(|r| (*r, false)).chain(references.iter().map(|r| (*r, true))) {
            let diff = if std::ptr::eq(r, base) {
                None
            } else {
                let s = scores(r);
                // pair by question id, in the baseline's order
                let (mut a, mut c) = (Vec::new(), Vec::new());
                for p in &base.predictions {
                    if let Some(v) = s.get(p.id.as_str()) {
                        a.push(*v);
                        c.push(base_scores[p.id.as_str()]);
                    }
                }
                Some(paired_bootstrap(&a, &c, resamples, seed))
            };
            rows.push(Row {
                name: label(r),
                run: r.dir.display().to_string(),
                questions: r.summary.questions,
                score: r.summary.accuracy.unwrap_or(r.summary.f1),
                retrievals_per_question: r.summary.retrievals_per_question,
                diff,
                reference,
            });
        }
        out.push(BudgetTable { budget: b, baseline: label(base), metric, rows });
    }
    Ok(out)
}

/// One side of a controller's questions (those it answered without retrieving, or those it retrieved on): how
/// many, its score there, and each reference run's score on the same questions.
#[derive(Debug, Clone, PartialEq)]
pub struct Side {
    pub questions: usize,
    pub score: f64,
    /// In [`Silence::references`] order.
    pub references: Vec<f64>,
}

/// Where a controller's score comes from: the questions its trigger never fired on (answered as with no
/// retrieval) and those it retrieved on, each beside the references on the same questions. A trigger that stays
/// silent where the model is confidently wrong loses there what single retrieval gains.
#[derive(Debug, Clone, PartialEq)]
pub struct Silence {
    pub metric: &'static str,
    /// Names of the reference runs (runs without a budget).
    pub references: Vec<String>,
    /// One per run with a budget: its name, budget, silent side, retrieving side.
    pub rows: Vec<(String, f64, Side, Side)>,
}

/// [`Silence`] over `runs`: every run with a budget against every run without one, over the questions each
/// reference answered too. `None` without both kinds of run.
pub fn silence(runs: &[LoadedRun]) -> Option<Silence> {
    let references: Vec<&LoadedRun> = runs.iter().filter(|r| r.summary.budget.is_none()).collect();
    let controllers: Vec<&LoadedRun> = runs.iter().filter(|r| r.summary.budget.is_some()).collect();
    if references.is_empty() || controllers.is_empty() {
        return None;
    }
    let metric = if runs.iter().any(|r| r.summary.accuracy.is_some()) { "accuracy" } else { "F1" };
    let ref_scores: Vec<HashMap<&str, f64>> = references.iter().map(|r| scores(r)).collect();
    let label = labeller(&controllers.iter().chain(&references).copied().collect::<Vec<_>>());
    let side = |qs: &[(&str, f64)]| {
        let n = qs.len().max(1) as f64;
        Side {
            questions: qs.len(),
            score: qs.iter().map(|q| q.1).sum::<f64>() / n,
            references: ref_scores.iter().map(|s| qs.iter().map(|q| s[q.0]).sum::<f64>() / n).collect(),
        }
    };
    let rows = controllers
        .iter()
        .map(|c| {
            let (mut quiet, mut loud) = (Vec::new(), Vec::new());
            for p in c.predictions.iter().filter(|p| ref_scores.iter().all(|s| s.contains_key(p.id.as_str()))) {
                let q = (p.id.as_str(), p.metrics.accuracy.unwrap_or(p.metrics.f1));
                if p.retrievals.is_empty() {
                    quiet.push(q)
                } else {
                    loud.push(q)
                }
            }
            (label(c), c.summary.budget.unwrap_or_default(), side(&quiet), side(&loud))
        })
        .collect();
    Some(Silence { metric, references: references.iter().map(|r| label(r)).collect(), rows })
}

impl Silence {
    /// The table in Markdown, with a heading.
    pub fn markdown(&self) -> String {
        let refs = self.references.join(" | ");
        let dashes = vec!["---:"; 2 + self.references.len()].join("|");
        let mut s = format!(
            "\n### Where each controller stays silent ({m} on the questions it answered without retrieving) and \
             where it retrieves, beside the references on the same questions\n\n\
             | controller | budget | silent: n | {m} | {refs} | retrieved: n | {m} | {refs} |\n|---|---:|{dashes}|{dashes}|\n",
            m = self.metric
        );
        for (name, budget, quiet, loud) in &self.rows {
            let side = |x: &Side| {
                // no question on this side: no mean to show (an empty sum of f64 is -0.0, which printed "-0.000")
                let mean = |m: f64| if x.questions == 0 { "–".to_string() } else { format!("{m:.3}") };
                let mut v = vec![x.questions.to_string(), mean(x.score)];
                v.extend(x.references.iter().map(|&r| mean(r)));
                v.join(" | ")
            };
            let _ = writeln!(s, "| {name} | {budget} | {} | {} |", side(quiet), side(loud));
        }
        s
    }
}

fn cells(t: &BudgetTable) -> (Vec<String>, Vec<Vec<String>>) {
    let header = vec![
        "controller".to_string(),
        "n".into(),
        t.metric.into(),
        format!("Δ {} vs {} [95% CI]", t.metric, t.baseline),
        "p".into(),
        "retrievals/q".into(),
    ];
    let base_n = t.rows.iter().find(|r| r.diff.is_none()).map_or(0, |r| r.questions);
    let rows = t
        .rows
        .iter()
        .map(|r| {
            let name = if r.reference { format!("{} (reference)", r.name) } else { r.name.clone() };
            let (d, p) = match &r.diff {
                None => ("baseline".to_string(), String::new()),
                Some(d) => {
                    let paired =
                        if d.n != r.questions || d.n != base_n { format!(", {} paired", d.n) } else { String::new() };
                    (format!("{:+.3} [{:+.3}, {:+.3}]{paired}", d.mean, d.lo, d.hi), format!("{:.3}", d.p))
                }
            };
            vec![
                name,
                r.questions.to_string(),
                format!("{:.3}", r.score),
                d,
                p,
                format!("{:.2}", r.retrievals_per_question),
            ]
        })
        .collect();
    (header, rows)
}

fn title(t: &BudgetTable, resamples: usize) -> String {
    match t.budget {
        Some(b) => format!("Budget {b} retrievals/question (paired bootstrap, {resamples} resamples)"),
        None => format!("Runs without a budget (paired bootstrap, {resamples} resamples)"),
    }
}

/// The tables in Markdown, one per budget with a heading.
pub fn markdown(tables: &[BudgetTable], resamples: usize) -> String {
    tables.iter().map(|t| markdown_table(&title(t, resamples), &cells(t))).collect()
}

/// The tables as HTML.
pub fn html(tables: &[BudgetTable], resamples: usize) -> String {
    tables.iter().map(|t| html_table(&title(t, resamples), &cells(t))).collect()
}

/// A table of text cells in Markdown under a heading; the first column left-aligned, the others right.
pub fn markdown_table(title: &str, (header, rows): &(Vec<String>, Vec<Vec<String>>)) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\n### {title}\n");
    let _ = writeln!(s, "| {} |", header.join(" | "));
    let _ = writeln!(s, "|---|{}|", vec!["---:"; header.len() - 1].join("|"));
    for r in rows {
        let _ = writeln!(s, "| {} |", r.join(" | "));
    }
    s
}

/// The same table as HTML.
pub fn html_table(title: &str, (header, rows): &(Vec<String>, Vec<Vec<String>>)) -> String {
    use super::report::escape;
    let mut s = String::new();
    let _ = write!(s, "<h3>{}</h3><table><tr>", escape(title));
    for h in header {
        let _ = write!(s, "<th>{}</th>", escape(h));
    }
    s.push_str("</tr>\n");
    for r in rows {
        s.push_str("<tr>");
        for (i, c) in r.iter().enumerate() {
            let class = if i > 0 { " class=\"n\"" } else { "" };
            let _ = write!(s, "<td{class}>{}</td>", escape(c));
        }
        s.push_str("</tr>\n");
    }
    s.push_str("</table>\n");
    s
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::eval::metrics::Scores;
    use crate::eval::run::{PredictionRecord, Summary};
    use std::path::PathBuf;

    pub(crate) fn run(method: &str, budget: Option<f64>, f1: &[f64], retr: f64) -> LoadedRun {
        let predictions = f1
            .iter()
            .enumerate()
            .map(|(i, &f)| {
                let mut p: PredictionRecord = serde_json::from_value(serde_json::json!({
                    "id": format!("q{i}"), "question": "?", "gold": ["a"], "prediction": "a", "raw_output": "a",
                    "metrics": Scores::default(), "retrievals": [], "generated_tokens": 0, "forward_tokens": 0,
                    "seconds": 0.0, "trace": []
                }))
                .unwrap();
                p.metrics.f1 = f;
                p
            })
            .collect();
        let summary = Summary {
            run: format!("{method}-{budget:?}"),
            method: method.into(),
            dataset: "hotpotqa".into(),
            questions: f1.len(),
            em: 0.0,
            f1: f1.iter().sum::<f64>() / f1.len() as f64,
            precision: 0.0,
            recall: 0.0,
            accuracy: None,
            contains: 0.0,
            retrievals_per_question: retr,
            supporting_hit_rate: None,
            generated_tokens_per_question: 0.0,
            forward_tokens_per_question: 0.0,
            seconds_per_question: 0.0,
            truncated_tail: false,
            skipped: 0,
            controller: method.into(),
            budget,
        };
        LoadedRun { dir: PathBuf::from(&summary.run), summary, predictions }
    }

    /// Two budgets, each with rind (the baseline) and mlp; `none` as a reference beside both. At budget 1, mlp
    /// beats rind by 0.5 on every question (an interval of one point); at budget 2 they tie.
    #[test]
    fn tables_per_budget_with_references_and_paired_differences() {
        let runs = vec![
            run("rind", Some(1.0), &[0.0, 0.5, 0.0, 0.5], 1.1),
            run("mlp", Some(1.0), &[0.5, 1.0, 0.5, 1.0], 0.9),
            run("rind", Some(2.0), &[1.0, 0.0, 1.0, 0.0], 2.1),
            run("mlp", Some(2.0), &[1.0, 0.0, 1.0, 0.0], 1.8),
            run("none", None, &[0.0, 0.0, 0.0, 0.0], 0.0),
        ];
        let t = budget_tables(&runs, "rind", 1000, 1).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].budget, Some(1.0));
        let names: Vec<&str> = t[0].rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, vec!["rind", "mlp", "none"]);
        assert!(t[0].rows[0].diff.is_none());
        let d = t[0].rows[1].diff.unwrap();
        assert_eq!((d.mean, d.lo, d.hi, d.p), (0.5, 0.5, 0.5, 0.0));
        let d = t[0].rows[2].diff.unwrap();
        assert_eq!(d.mean, -0.25);
        let d = t[1].rows[1].diff.unwrap();
        assert_eq!((d.mean, d.lo, d.hi, d.p), (0.0, 0.0, 0.0, 1.0));
        let md = markdown(&t, 1000);
        assert!(md.contains("### Budget 1 retrievals/question"), "{md}");
        assert!(md.contains("| mlp | 4 | 0.750 | +0.500 [+0.500, +0.500] | 0.000 | 0.90 |"), "{md}");
        assert!(md.contains("| none (reference) | 4 | 0.000 |"), "{md}");
        assert!(html(&t, 1000).contains("<td class=\"n\">+0.500 [+0.500, +0.500]</td>"));
        // a baseline that is not there names the runs that are
        let e = budget_tables(&runs, "etc", 100, 1).unwrap_err().to_string();
        assert!(e.contains("--baseline etc") && e.contains("rind, mlp, none"), "{e}");
        // the baseline may be a reference (single retrieval, say)
        let t = budget_tables(&runs, "none", 100, 1).unwrap();
        assert_eq!(t[0].rows[1].diff.unwrap().mean, 0.75);
    }

    /// Two runs of one controller in one table (two prompts, say) are labelled by their run names, in the rows,
    /// the baseline and the silence table; a method alone in its table keeps its bare name.
    #[test]
    fn two_runs_of_one_controller_are_told_apart() {
        let mut runs = vec![
            run("oracle", None, &[1.0, 0.0], 1.0),
            run("oracle", None, &[1.0, 1.0], 1.0),
            run("rind", Some(1.0), &[0.0, 1.0], 1.0),
        ];
        runs[0].summary.run = "oracle-plain".into();
        runs[1].summary.run = "oracle-options".into();
        let t = budget_tables(&runs, "oracle-plain", 100, 1).unwrap();
        let names: Vec<&str> = t[0].rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, vec!["rind", "oracle (oracle-plain)", "oracle (oracle-options)"]);
        assert_eq!(t[0].baseline, "oracle (oracle-plain)");
        let s = silence(&runs).unwrap();
        assert_eq!(s.references, vec!["oracle (oracle-plain)", "oracle (oracle-options)"]);
        assert_eq!(s.rows[0].0, "rind");
    }

    /// By hand: mlp retrieves on q0 and q1, not on q2 and q3; none and single are the references (single did not
    /// answer q3, so q3 is left out of both sides).
    #[test]
    fn silence_splits_questions_by_whether_the_controller_retrieved() {
        let mut mlp = run("mlp", Some(1.0), &[1.0, 0.5, 0.0, 0.25], 0.5);
        for p in &mut mlp.predictions[..2] {
            p.retrievals.push(
                serde_json::from_value(
                    serde_json::json!({"token_pos": 3, "query": "q", "passage_ids": ["p"], "hit_supporting": null}),
                )
                .unwrap(),
            );
        }
        let none = run("none", None, &[0.0, 0.5, 0.0, 1.0], 0.0);
        let single = run("single", None, &[1.0, 1.0, 0.75], 1.0); // q0..q2 only
        let rind = run("rind", Some(2.0), &[0.0, 0.0, 0.0, 0.0], 0.0);
        let runs = [mlp, none, single, rind];
        let s = silence(&runs).unwrap();
        assert_eq!(s.references, vec!["none", "single"]);
        let (name, budget, quiet, loud) = &s.rows[0];
        assert_eq!((name.as_str(), *budget), ("mlp", 1.0));
        assert_eq!(*quiet, Side { questions: 1, score: 0.0, references: vec![0.0, 0.75] });
        assert_eq!(*loud, Side { questions: 2, score: 0.75, references: vec![0.25, 1.0] });
        assert_eq!(s.rows[1].2.questions, 3, "rind never retrieved: every paired question is silent");
        let md = s.markdown();
        assert!(
            md.contains("| controller | budget | silent: n | F1 | none | single | retrieved: n | F1 | none | single |"),
            "{md}"
        );
        assert!(md.contains("| mlp | 1 | 1 | 0.000 | 0.000 | 0.750 | 2 | 0.750 | 0.250 | 1.000 |"), "{md}");
        // rind retrieved on none: its retrieving side has no question and so no means
        assert!(md.contains("| rind | 2 | 3 | 0.000 | 0.167 | 0.917 | 0 | – | – | – |"), "{md}");
        assert!(silence(&runs[..1]).is_none() && silence(&runs[1..3]).is_none(), "needs both kinds of run");
    }

    /// Runs over different question sets are paired on the questions both answered.
    #[test]
    fn pairs_by_question_id() {
        let a = run("rind", None, &[1.0, 0.0, 1.0], 1.0);
        let mut b = run("mlp", None, &[0.0, 0.0], 1.0);
        b.predictions[0].id = "q2".into(); // mlp answered q2 (0.0) and q1 (0.0)
        let t = budget_tables(&[a, b], "rind", 100, 1).unwrap();
        let d = t[0].rows[1].diff.unwrap();
        assert_eq!(d.n, 2);
        assert_eq!(d.mean, -0.5); // q1: 0 - 0, q2: 0 - 1
        assert!(markdown(&t, 100).contains(", 2 paired"));
    }
}
