//! Reports over run directories: a Markdown comparison table, and a self-contained HTML page with the table and,
//! for chosen questions, each run's generated tokens coloured by entropy, underlined by trigger score, with the
//! retrieval points marked.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

use super::metrics::CHOICES;
#[cfg(test)]
use super::run::RetrievalRecord;
use super::run::{read_config, read_predictions, summarise, PredictionRecord, Summary, PREDICTIONS_FILE};

/// A run loaded for reporting.
pub struct LoadedRun {
    pub dir: PathBuf,
    pub summary: Summary,
    pub predictions: Vec<PredictionRecord>,
}

/// Loads every run directory in `dirs`; paths that are not run directories (no predictions.jsonl; e.g. the
/// HTML page itself when called as `report runs/*`) are skipped with a warning on stderr.
pub fn load_runs(dirs: &[PathBuf]) -> Result<Vec<LoadedRun>> {
    let mut out = Vec::new();
    for d in dirs {
        if !crate::io::is_file(&d.join(PREDICTIONS_FILE))? {
            eprintln!("warning: {}: not a run directory (no {PREDICTIONS_FILE}), skipped", d.display());
            continue;
        }
        out.push(LoadedRun { dir: d.clone(), summary: summarise(d)?, predictions: read_predictions(d)? });
    }
    if out.is_empty() {
        bail!("no run directories among the {} paths given", dirs.len());
    }
    Ok(out)
}

/// The settings of a run's config.toml (dotted keys) that a comparison of controllers on one dataset holds equal:
/// the model, the split, the instruction before the question, the answer length, the passages per retrieval and
/// the loop's other limits.
pub const HELD_EQUAL: &[&str] = &[
    "model",
    "split",
    "question_prefix",
    "int8_dot",
    "cpu_kernels",
    "loop.max_new_tokens",
    "loop.top_k",
    "loop.max_retrievals",
    "loop.suffix_tokens",
    "loop.answer_pattern",
    "loop.loop_guard",
];

/// The [`HELD_EQUAL`] settings that differ between runs on one dataset, one line per setting and dataset: each
/// value with the runs that used it (`unset` where a run's config.toml lacks the key). Runs without a
/// config.toml are left out.
pub fn unequal_settings(runs: &[LoadedRun]) -> Result<Vec<String>> {
    let labels = run_labels(runs);
    let mut configs: Vec<(usize, toml::Value)> = Vec::new();
    for (i, r) in runs.iter().enumerate() {
        if let Some(cfg) = read_config(&r.dir)? {
            configs.push((i, cfg));
        }
    }
    let mut datasets: Vec<&str> = configs.iter().map(|(i, _)| runs[*i].summary.dataset.as_str()).collect();
    datasets.sort();
    datasets.dedup();
    let mut out = Vec::new();
    for dataset in datasets {
        let on: Vec<&(usize, toml::Value)> =
            configs.iter().filter(|(i, _)| runs[*i].summary.dataset == dataset).collect();
        for key in HELD_EQUAL {
            // (value, the runs that used it), in the order the values are first met
            let mut values: Vec<(String, Vec<&str>)> = Vec::new();
            for (i, cfg) in &on {
                let v = key.split('.').try_fold(cfg, |v, k| v.get(k)).map_or_else(
                    || "unset".to_string(),
                    |v| match v {
                        // one line whatever the text holds (TOML writes a string with a newline over lines)
                        toml::Value::String(s) => format!("{s:?}"),
                        v => v.to_string(),
                    },
                );
                match values.iter_mut().find(|(x, _)| *x == v) {
                    Some((_, names)) => names.push(&labels[*i]),
                    None => values.push((v, vec![&labels[*i]])),
                }
            }
            if values.len() > 1 {
                let parts: Vec<String> =
                    values.iter().map(|(v, names)| format!("{v} ({})", names.join(", "))).collect();
                let on = if dataset.is_empty() { String::new() } else { format!(" on {dataset}") };
                out.push(format!("{key}{on}: {}", parts.join("; ")));
            }
        }
    }
    Ok(out)
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "–".to_string(), |x| format!("{x:.digits$}"))
}

/// The row label: the method, with the run directory's name added when two runs share method and dataset, or
/// (with `dirs`) the folder the run lies in when that name is shared too.
fn labels(summaries: &[&Summary], dirs: Option<&[&Path]>) -> Vec<String> {
    let mut out: Vec<String> = summaries
        .iter()
        .map(|s| {
            let dup = summaries.iter().filter(|o| o.method == s.method && o.dataset == s.dataset).count() > 1;
            if dup && s.run != s.method {
                format!("{} ({})", s.method, s.run)
            } else {
                s.method.clone()
            }
        })
        .collect();
    // runs still named alike (one setting folder name in two sweeps) are told apart by the folder they lie in
    let Some(dirs) = dirs else { return out };
    let alike: Vec<bool> = (0..out.len())
        .map(|i| (0..out.len()).any(|j| j != i && out[j] == out[i] && summaries[j].dataset == summaries[i].dataset))
        .collect();
    for (i, label) in out.iter_mut().enumerate() {
        if alike[i] {
            *label = format!("{} ({})", summaries[i].method, folder(dirs[i]));
        }
    }
    out
}

/// [`labels`] of loaded runs, their folders known.
fn run_labels(runs: &[LoadedRun]) -> Vec<String> {
    labels_of(&runs.iter().collect::<Vec<_>>())
}

/// [`run_labels`] of runs that need not lie in one slice (one table's rows).
pub(crate) fn labels_of(runs: &[&LoadedRun]) -> Vec<String> {
    let summaries: Vec<&Summary> = runs.iter().map(|r| &r.summary).collect();
    let dirs: Vec<&Path> = runs.iter().map(|r| r.dir.as_path()).collect();
    labels(&summaries, Some(&dirs))
}

/// The folder a run lies in: the sweep's for a sweep's setting (`SWEEP/runs/SETTING`), else its parent's path.
fn folder(dir: &Path) -> String {
    let parent = dir.parent().unwrap_or(Path::new(""));
    match (parent.file_name(), parent.parent()) {
        (Some(runs), Some(sweep)) if runs == "runs" && sweep.file_name().is_some() => sweep.display().to_string(),
        _ => parent.display().to_string(),
    }
}

/// The question count, with the skipped ones (too long for the context window, scored 0) when there are any.
fn questions(s: &Summary) -> String {
    if s.skipped == 0 {
        s.questions.to_string()
    } else {
        format!("{} ({} skipped)", s.questions, s.skipped)
    }
}

/// The comparison table in Markdown. The accuracy column appears when some run has yes/no questions.
pub fn markdown_table(summaries: &[Summary]) -> String {
    let refs: Vec<&Summary> = summaries.iter().collect();
    cells_markdown(table_cells(&refs, labels(&refs, None)))
}

/// [`markdown_table`] of loaded runs: runs whose labels would coincide are named by the folder they lie in.
pub fn runs_table(runs: &[LoadedRun]) -> String {
    let refs: Vec<&Summary> = runs.iter().map(|r| &r.summary).collect();
    cells_markdown(table_cells(&refs, run_labels(runs)))
}

fn cells_markdown((header, rows): (Vec<String>, Vec<Vec<String>>)) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "| {} |", header.join(" | "));
    let _ = writeln!(
        s,
        "|{}|",
        header.iter().enumerate().map(|(i, _)| if i < 2 { "---" } else { "---:" }).collect::<Vec<_>>().join("|")
    );
    for r in rows {
        let _ = writeln!(s, "| {} |", r.join(" | "));
    }
    s
}

/// Where a run's retrievals land and what they bring, per question: the generated token before which it first
/// retrieved (the median over questions that retrieved), the share of retrievals that returned exactly the
/// passages of the retrieval before them in the same question, and the distinct passages a question was shown.
#[derive(Debug, Clone, PartialEq)]
pub struct RetrievalPlaces {
    pub questions: usize,
    pub retrievals_per_question: f64,
    /// `None` when no question retrieved.
    pub first_token_median: Option<f64>,
    /// `None` when there was no retrieval.
    pub repeat_share: Option<f64>,
    /// The share of retrievals made at the same generated token with the same query as the retrieval before
    /// them: the trigger fired again on what the model wrote again, a loop only the retrieval cap ends under
    /// greedy decoding. `None` when there was no retrieval.
    pub same_place_share: Option<f64>,
    pub distinct_passages_per_question: f64,
}

impl RetrievalPlaces {
    pub fn of(predictions: &[PredictionRecord]) -> Self {
        let n = predictions.len().max(1) as f64;
        let retrievals: usize = predictions.iter().map(|p| p.retrievals.len()).sum();
        let mut firsts: Vec<usize> =
            predictions.iter().filter_map(|p| p.retrievals.first().map(|r| r.token_pos)).collect();
        firsts.sort_unstable();
        let first_token_median = match firsts.len() {
            0 => None,
            k if k % 2 == 1 => Some(firsts[k / 2] as f64),
            k => Some((firsts[k / 2 - 1] + firsts[k / 2]) as f64 / 2.0),
        };
        // each retrieval against the one before it in its question, once
        let (mut repeats, mut same_place) = (0usize, 0usize);
        for w in predictions.iter().flat_map(|p| p.retrievals.windows(2)) {
            repeats += usize::from(w[0].passage_ids == w[1].passage_ids);
            same_place += usize::from(w[0].token_pos == w[1].token_pos && w[0].query == w[1].query);
        }
        let distinct: usize = predictions
            .iter()
            .map(|p| {
                let mut ids: Vec<&str> =
                    p.retrievals.iter().flat_map(|r| r.passage_ids.iter().map(String::as_str)).collect();
                ids.sort_unstable();
                ids.dedup();
                ids.len()
            })
            .sum();
        RetrievalPlaces {
            questions: predictions.len(),
            retrievals_per_question: retrievals as f64 / n,
            first_token_median,
            repeat_share: (retrievals > 0).then(|| repeats as f64 / retrievals as f64),
            same_place_share: (retrievals > 0).then(|| same_place as f64 / retrievals as f64),
            distinct_passages_per_question: distinct as f64 / n,
        }
    }
}

fn percent(v: Option<f64>) -> String {
    v.map_or_else(|| "–".into(), |x| format!("{:.0}%", 100.0 * x))
}

/// [`RetrievalPlaces`] of each run that retrieved, as a Markdown table (empty when none did).
pub fn retrieval_places_table(runs: &[LoadedRun]) -> String {
    let mut s = String::new();
    for (r, label) in runs.iter().zip(run_labels(runs)) {
        let p = RetrievalPlaces::of(&r.predictions);
        if p.repeat_share.is_none() {
            continue;
        }
        if s.is_empty() {
            s.push_str(
                "| method | n | retrievals/q | first retrieval at token (median) | repeats the previous passages | \
                 at the same token with the same query | distinct passages/q |\n|---|---:|---:|---:|---:|---:|---:|\n",
            );
        }
        let _ = writeln!(
            s,
            "| {label} | {} | {:.2} | {} | {} | {} | {:.1} |",
            p.questions,
            p.retrievals_per_question,
            opt(p.first_token_median, 0),
            percent(p.repeat_share),
            percent(p.same_place_share),
            p.distinct_passages_per_question
        );
    }
    s
}

/// What a run answered on its yes/no(/maybe) questions (those scored by accuracy): how many answers pick each
/// choice ([`crate::eval::metrics::yes_no_label`]) and how many pick none, beside the gold choices of the same
/// questions and what always answering the most common of them would score. A run that answers "yes" to nearly
/// every question scores near that share whatever it retrieved, and one whose answers often pick nothing loses
/// those questions to its prompt rather than to its controller.
#[derive(Debug, Clone, PartialEq)]
pub struct AnswerPicks {
    pub questions: usize,
    /// Answers picking yes, no, maybe.
    pub picks: [usize; 3],
    pub no_pick: usize,
    /// Gold yes, no, maybe.
    pub gold: [usize; 3],
    pub accuracy: f64,
    /// The most common gold choice and the share of questions it is the gold of.
    pub majority: (&'static str, f64),
}

impl AnswerPicks {
    /// `None` when the run has no question scored by accuracy. "maybe" is read as a pick only where some gold is
    /// "maybe" (a yes/no/maybe dataset), as the accuracy does on a yes/no one.
    pub fn of(predictions: &[PredictionRecord]) -> Option<Self> {
        let scored: Vec<&PredictionRecord> = predictions.iter().filter(|p| p.metrics.accuracy.is_some()).collect();
        if scored.is_empty() {
            return None;
        }
        let mut gold = [0usize; 3];
        for p in &scored {
            let g = p.gold.iter().find_map(|g| CHOICES.iter().position(|c| super::metrics::normalize_answer(g) == *c));
            if let Some(i) = g {
                gold[i] += 1;
            }
        }
        let with_maybe = gold[2] > 0;
        let (mut picks, mut no_pick) = ([0usize; 3], 0usize);
        for p in &scored {
            match super::metrics::yes_no_label(&p.prediction, with_maybe) {
                Some(l) => picks[CHOICES.iter().position(|c| *c == l).expect("a choice")] += 1,
                None => no_pick += 1,
            }
        }
        let n = scored.len() as f64;
        // the first of the most common (yes before no before maybe on a tie)
        let top = (0..3).fold(0, |best, i| if gold[i] > gold[best] { i } else { best });
        Some(AnswerPicks {
            questions: scored.len(),
            picks,
            no_pick,
            gold,
            accuracy: scored.iter().filter_map(|p| p.metrics.accuracy).sum::<f64>() / n,
            majority: (CHOICES[top], gold[top] as f64 / n),
        })
    }
}

/// [`AnswerPicks`] of each run with yes/no(/maybe) questions, as a Markdown table (empty when none has any).
pub fn answer_picks_table(runs: &[LoadedRun]) -> String {
    let mut s = String::new();
    for (r, label) in runs.iter().zip(run_labels(runs)) {
        let Some(a) = AnswerPicks::of(&r.predictions) else { continue };
        if s.is_empty() {
            s.push_str(
                "| method | n | answers yes / no / maybe | no pick | gold yes / no / maybe | accuracy | \
                 always the most common gold |\n|---|---:|---:|---:|---:|---:|---:|\n",
            );
        }
        let three = |v: [usize; 3]| format!("{} / {} / {}", v[0], v[1], v[2]);
        let _ = writeln!(
            s,
            "| {label} | {} | {} | {} | {} | {:.3} | {:.3} ({}) |",
            a.questions,
            three(a.picks),
            a.no_pick,
            three(a.gold),
            a.accuracy,
            a.majority.1,
            a.majority.0
        );
    }
    s
}

/// The comparison table's header and rows, each row under its label ([`labels`]).
fn table_cells(summaries: &[&Summary], labels: Vec<String>) -> (Vec<String>, Vec<Vec<String>>) {
    let with_acc = summaries.iter().any(|s| s.accuracy.is_some());
    let mut header: Vec<&str> = vec!["method", "dataset", "n", "EM", "F1"];
    if with_acc {
        header.push("accuracy");
    }
    header.extend(["retrievals/q", "supporting hit", "gen tokens/q", "fwd tokens/q", "s/q"]);
    let rows = summaries
        .iter()
        .zip(labels)
        .map(|(s, label)| {
            let mut r = vec![label, s.dataset.clone(), questions(s), format!("{:.3}", s.em), format!("{:.3}", s.f1)];
            if with_acc {
                r.push(opt(s.accuracy, 3));
            }
            r.push(format!("{:.2}", s.retrievals_per_question));
            r.push(opt(s.supporting_hit_rate, 3));
            r.push(format!("{:.1}", s.generated_tokens_per_question));
            r.push(format!("{:.1}", s.forward_tokens_per_question));
            r.push(format!("{:.3}", s.seconds_per_question));
            r
        })
        .collect();
    (header.into_iter().map(str::to_string).collect(), rows)
}

/// Which questions the HTML page shows.
#[derive(Debug, Clone)]
pub enum Selection {
    /// The first n questions of the first run.
    First(usize),
    /// These ids, in this order.
    Ids(Vec<String>),
}

/// Escapes text for HTML element content and attribute values.
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            _ => o.push(c),
        }
    }
    o
}

/// Entropy (nats) at which the colour saturates.
pub const ENTROPY_SCALE: f32 = 4.0;

const CSS: &str = "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}\
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px}td.n{text-align:right}\
th{background:#f3f3f3}.q{border-top:2px solid #888;margin-top:2em;padding-top:.5em}\
.gen{font-family:ui-monospace,monospace;white-space:pre-wrap;line-height:1.9;border:1px solid #ddd;padding:.5em;background:#fff}\
.tok{border-radius:2px}.ret{background:#268bd2;color:#fff;border-radius:3px;padding:0 3px;margin:0 2px;font-size:.8em;cursor:help}\
.ok{color:#2a7}.bad{color:#c33}.legend span{padding:0 6px;margin-right:4px}small{color:#666}";

fn token_span(text: &str, entropy: f32, score: Option<f32>, max_score: f32) -> String {
    let a = if entropy.is_finite() { (entropy / ENTROPY_SCALE).clamp(0.0, 1.0) } else { 0.0 };
    let mut style = format!("background:rgba(220,50,47,{a:.2})");
    let mut title = format!("entropy {entropy:.3}");
    if let Some(sc) = score {
        let u = if max_score > 0.0 { (sc / max_score).clamp(0.0, 1.0) } else { 0.0 };
        let _ = write!(
            style,
            ";text-decoration:underline;text-decoration-thickness:3px;text-decoration-color:rgba(38,139,210,{u:.2})"
        );
        let _ = write!(title, " · trigger score {sc:.3}");
    }
    format!("<span class=\"tok\" style=\"{style}\" title=\"{}\">{}</span>", escape(&title), escape(text))
}

fn generation_html(p: &PredictionRecord) -> String {
    let mut s = String::from("<div class=\"gen\">");
    let marker = |i: usize, r: &super::run::RetrievalRecord| {
        let t = format!("retrieval {}: query \"{}\" → {}", i + 1, r.query, r.passage_ids.join(", "));
        format!("<span class=\"ret\" title=\"{}\">⟲R{}</span>", escape(&t), i + 1)
    };
    if p.trace.is_empty() {
        for (i, r) in p.retrievals.iter().enumerate() {
            s.push_str(&marker(i, r));
        }
        s.push_str(&escape(&p.raw_output));
    } else {
        let max_score = p.trace.iter().filter_map(|t| t.score).fold(0.0f32, f32::max);
        for (pos, t) in p.trace.iter().enumerate() {
            for (i, r) in p.retrievals.iter().enumerate().filter(|(_, r)| r.token_pos == pos) {
                s.push_str(&marker(i, r));
            }
            s.push_str(&token_span(&t.text, t.entropy, t.score, max_score));
        }
        for (i, r) in p.retrievals.iter().enumerate().filter(|(_, r)| r.token_pos >= p.trace.len()) {
            s.push_str(&marker(i, r));
        }
    }
    s.push_str("</div>");
    if !p.retrievals.is_empty() {
        s.push_str("<table><tr><th>#</th><th>at token</th><th>query</th><th>passages</th><th>supporting</th></tr>");
        for (i, r) in p.retrievals.iter().enumerate() {
            let hit = match r.hit_supporting {
                Some(true) => "<span class=\"ok\">yes</span>",
                Some(false) => "<span class=\"bad\">no</span>",
                None => "–",
            };
            let _ = write!(
                s,
                "<tr><td>R{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td><td>{hit}</td></tr>",
                i + 1,
                r.token_pos,
                escape(&r.query),
                escape(&r.passage_ids.join(", "))
            );
        }
        s.push_str("</table>");
    }
    s
}

/// How every page [`html_page`] writes begins; [`write_html`] replaces only a file that begins so.
pub const HTML_START: &str = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>ragtime report</title>";

/// The HTML page: the comparison table, `extra` (HTML: the plot and the matched-budget tables, see
/// `ragtime report`), a legend, and the selected questions with every run's generation.
pub fn html_page(runs: &[LoadedRun], selection: &Selection, extra: &str) -> String {
    let mut s = String::from(HTML_START);
    s.push_str("<style>");
    s.push_str(CSS);
    s.push_str("</style></head><body>\n<h1>ragtime report</h1>\n");
    let refs: Vec<&Summary> = runs.iter().map(|r| &r.summary).collect();
    let labels = run_labels(runs);
    let (header, rows) = table_cells(&refs, labels.clone());
    s.push_str("<table><tr>");
    for h in &header {
        let _ = write!(s, "<th>{}</th>", escape(h));
    }
    s.push_str("</tr>\n");
    for (row, run) in rows.iter().zip(runs) {
        s.push_str("<tr>");
        for (i, c) in row.iter().enumerate() {
            let class = if i >= 2 { " class=\"n\"" } else { "" };
            let cell = if i == 0 {
                format!("{} <small>{}</small>", escape(c), escape(&run.dir.display().to_string()))
            } else {
                escape(c)
            };
            let _ = write!(s, "<td{class}>{cell}</td>");
        }
        s.push_str("</tr>\n");
    }
    s.push_str("</table>\n");
    s.push_str(extra);
    let _ = writeln!(
        s,
        "<p class=\"legend\">Token background: entropy, <span style=\"background:rgba(220,50,47,0.05)\">0</span>\
         <span style=\"background:rgba(220,50,47,0.5)\">{:.1}</span><span style=\"background:rgba(220,50,47,1)\">≥ {:.1} nats</span>; \
         blue underline: trigger score (relative to the question's highest); <span class=\"ret\">⟲R1</span> retrieval \
         (hover for the query). Hover a token for its numbers.</p>",
        ENTROPY_SCALE / 2.0,
        ENTROPY_SCALE
    );
    let ids: Vec<String> = match selection {
        Selection::First(n) => runs[0].predictions.iter().take(*n).map(|p| p.id.clone()).collect(),
        Selection::Ids(ids) => ids.clone(),
    };
    let maps: Vec<HashMap<&str, &PredictionRecord>> =
        runs.iter().map(|r| r.predictions.iter().map(|p| (p.id.as_str(), p)).collect()).collect();
    for id in &ids {
        let Some(first) = maps.iter().find_map(|m| m.get(id.as_str())) else {
            let _ = writeln!(s, "<div class=\"q\"><h3>{}</h3><p>not in any run</p></div>", escape(id));
            continue;
        };
        let _ = writeln!(
            s,
            "<div class=\"q\"><h3>{}</h3><p><small>id {}</small> · gold: <b>{}</b></p>",
            escape(&first.question),
            escape(id),
            escape(&first.gold.join(" | "))
        );
        for ((m, label), run) in maps.iter().zip(&labels).zip(runs) {
            let _ = write!(s, "<h4>{} <small>{}</small></h4>", escape(label), escape(&run.summary.dataset));
            match m.get(id.as_str()) {
                None => s.push_str("<p><small>not answered in this run</small></p>"),
                Some(p) => {
                    let cls = if p.metrics.em >= 1.0 { "ok" } else { "bad" };
                    let acc = p.metrics.accuracy.map(|a| format!(" · acc {a:.0}")).unwrap_or_default();
                    let _ = write!(
                        s,
                        "<p>prediction: <b class=\"{cls}\">{}</b> · EM {:.0} · F1 {:.3}{acc} · {} retrievals · {} generated tokens · {:.2} s</p>",
                        escape(&p.prediction),
                        p.metrics.em,
                        p.metrics.f1,
                        p.retrievals.len(),
                        p.generated_tokens,
                        p.seconds
                    );
                    s.push_str(&generation_html(p));
                }
            }
        }
        s.push_str("</div>\n");
    }
    s.push_str("</body></html>\n");
    s
}

/// Writes the HTML page to `path`.
pub fn write_html(path: &Path, runs: &[LoadedRun], selection: &Selection, extra: &str) -> Result<()> {
    crate::io::write_atomic(path, html_page(runs, selection, extra).as_bytes())
}

/// Checks that `report --html PATH` may write `path`: nothing there, or a page it wrote before (see
/// [`crate::io::claim_output_file`]).
pub fn claim_html(path: &Path) -> Result<()> {
    crate::io::claim_output_file(path, "--html", "a page `ragtime report` wrote", |head| {
        head.starts_with(HTML_START.as_bytes())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::run::tests::fake_run;

    #[test]
    fn markdown_table_by_hand() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("dragin-hotpot");
        let b = dir.path().join("dragin-hotpot-2");
        fake_run(&a, "dragin").unwrap();
        fake_run(&b, "dragin").unwrap();
        let runs = load_runs(&[a, b, dir.path().join("report.html")]).unwrap();
        assert_eq!(runs.len(), 2, "the non-run path is skipped");
        let t = markdown_table(&runs.iter().map(|r| r.summary.clone()).collect::<Vec<_>>());
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "| method | dataset | n | EM | F1 | accuracy | retrievals/q | supporting hit | gen tokens/q | fwd tokens/q | s/q |");
        assert_eq!(lines[1], "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        // EM 2/3, F1 20/21 = 0.952, accuracy 1, 1 retrieval/q, hit 1/3, 20 / 300 tokens, 1 s (see run::tests).
        assert_eq!(
            lines[2],
            "| dragin (dragin-hotpot) | hotpotqa | 3 | 0.667 | 0.952 | 1.000 | 1.00 | 0.333 | 20.0 | 300.0 | 1.000 |"
        );
        assert_eq!(lines.len(), 4);
    }

    /// Three runs on one dataset: rind and etc answered within 64 tokens, mlp within 100, all on one model; a
    /// fourth run on another dataset is not compared with them, and one without config.toml is left out.
    #[test]
    fn unequal_settings_name_the_runs_by_value() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = |dataset: &str, n: usize| {
            format!("dataset = \"{dataset}\"\nmodel = \"m.gguf\"\n\n[loop]\nmax_new_tokens = {n}\ntop_k = 3\n")
        };
        let runs: Vec<(&str, String)> = vec![
            ("rind", cfg("pubmedqa", 64)),
            ("mlp", cfg("pubmedqa", 100)),
            ("etc", cfg("pubmedqa", 64)),
            ("none", cfg("hotpotqa", 32)),
            ("bare", String::new()),
        ];
        let mut paths = Vec::new();
        for (name, text) in &runs {
            let p = dir.path().join(name);
            fake_run(&p, name).unwrap();
            if text.is_empty() {
                std::fs::remove_file(p.join("config.toml")).unwrap();
            } else {
                std::fs::write(p.join("config.toml"), text).unwrap();
            }
            paths.push(p);
        }
        let loaded = load_runs(&paths).unwrap();
        assert_eq!(
            unequal_settings(&loaded).unwrap(),
            vec!["loop.max_new_tokens on pubmedqa: 64 (rind, etc); 100 (mlp)".to_string()]
        );
        // a key one run lacks is `unset` there
        std::fs::write(paths[2].join("config.toml"), "dataset = \"pubmedqa\"\nmodel = \"m.gguf\"\n").unwrap();
        let loaded = load_runs(&paths[..3]).unwrap();
        assert_eq!(
            unequal_settings(&loaded).unwrap(),
            vec![
                "loop.max_new_tokens on pubmedqa: 64 (rind); 100 (mlp); unset (etc)".to_string(),
                "loop.top_k on pubmedqa: 3 (rind, mlp); unset (etc)".to_string(),
            ]
        );
        // equal settings: nothing to say
        let loaded = load_runs(&paths[..1]).unwrap();
        assert!(unequal_settings(&loaded).unwrap().is_empty());
        // the instruction before the question is part of the prompt; a run without one reads `unset`
        let prefixed = format!("question_prefix = \"Answer yes or no.\\n\"\n{}", cfg("pubmedqa", 64));
        std::fs::write(paths[1].join("config.toml"), prefixed).unwrap();
        let loaded = load_runs(&paths[..2]).unwrap();
        assert_eq!(
            unequal_settings(&loaded).unwrap(),
            vec![r#"question_prefix on pubmedqa: unset (rind); "Answer yes or no.\n" (mlp)"#.to_string()]
        );
    }

    /// One setting's folder name in two sweeps (`SWEEP/runs/SETTING`), and one run name in two plain folders: the
    /// run names alone would label each pair alike, so the folder they lie in names them.
    #[test]
    fn runs_named_alike_in_two_folders_are_named_by_folder() {
        let dir = tempfile::tempdir().unwrap();
        let paths = [
            dir.path().join("ens/runs/mlp@t=1"),
            dir.path().join("seed/runs/mlp@t=1"),
            dir.path().join("x/rind"),
            dir.path().join("y/rind"),
            dir.path().join("z/etc"),
        ];
        for (p, m) in paths.iter().zip(["mlp t=1", "mlp t=1", "rind", "rind", "etc"]) {
            fake_run(p, m).unwrap();
        }
        let runs = load_runs(&paths).unwrap();
        let label = |line: &str| line.split(" | ").next().unwrap().trim_start_matches("| ").to_string();
        let got: Vec<String> = runs_table(&runs).lines().skip(2).map(label).collect();
        let d = dir.path().display();
        assert_eq!(
            got,
            vec![
                format!("mlp t=1 ({d}/ens)"),
                format!("mlp t=1 ({d}/seed)"),
                format!("rind ({d}/x)"),
                format!("rind ({d}/y)"),
                "etc".to_string(),
            ]
        );
        // the same runs in the retrieval table, and without their folders (`markdown_table`) as before
        let places: Vec<String> = retrieval_places_table(&runs).lines().skip(2).map(label).collect();
        assert_eq!(places, got);
        let summaries: Vec<Summary> = runs.iter().map(|r| r.summary.clone()).collect();
        let plain: Vec<String> = markdown_table(&summaries).lines().skip(2).map(label).collect();
        assert_eq!(plain[0], "mlp t=1 (mlp@t=1)");
        assert_eq!(plain[2], "rind");
    }

    /// Five yes/no/maybe questions (gold yes, yes, yes, no, maybe) answered "Yes.", "yes or no", "No, it does
    /// not", "the abstract says", "Maybe": picks yes 1, no 1, maybe 1, none 2; accuracy 1/5 (only the first answer
    /// is right); always "yes" would score 3/5. A span question beside them is not counted.
    #[test]
    fn answer_picks_by_hand() {
        use crate::qa::AnswerKind::{Span, YesNoMaybe};
        let ex = |gold: &str, kind| crate::eval::run::tests::example("q", &[gold], kind, &[]);
        let answers = [("yes", "Yes."), ("yes", "yes or no"), ("yes", "No, it does not"), ("no", "the abstract says")];
        let mut p: Vec<PredictionRecord> = answers
            .iter()
            .map(|(g, a)| PredictionRecord::new(&ex(g, YesNoMaybe), &format!("So the answer is {a}.")))
            .collect();
        p.push(PredictionRecord::new(&ex("maybe", YesNoMaybe), "So the answer is Maybe."));
        p.push(PredictionRecord::new(&ex("Rome", Span), "So the answer is Rome."));
        let a = AnswerPicks::of(&p).unwrap();
        assert_eq!(
            a,
            AnswerPicks {
                questions: 5,
                picks: [1, 1, 1],
                no_pick: 2,
                gold: [3, 1, 1],
                accuracy: 0.4,
                majority: ("yes", 0.6)
            }
        );
        assert!(AnswerPicks::of(&p[5..]).is_none(), "no yes/no question");
        // without a "maybe" gold, "maybe" is no pick (a yes/no dataset)
        let a = AnswerPicks::of(&[PredictionRecord::new(&ex("no", YesNoMaybe), "So the answer is maybe.")]).unwrap();
        assert_eq!((a.picks, a.no_pick, a.majority), ([0, 0, 0], 1, ("no", 1.0)));
    }

    /// Three questions: retrievals at tokens 4, 4 and 9 with passages [a, b] twice (one repeat, made at the same
    /// token with the same query) and [c] once more; at token 2 with [a]; none. Four retrievals, one repeat (25%),
    /// one at the same place (25%); first tokens 4 and 2 (median 3); distinct passages 3 + 1 + 0 over 3 questions.
    #[test]
    fn retrieval_places_by_hand() {
        let r = |pos: usize, ids: &[&str]| RetrievalRecord {
            token_pos: pos,
            query: String::new(),
            passage_ids: ids.iter().map(|x| x.to_string()).collect(),
            hit_supporting: None,
        };
        let ex = crate::eval::run::tests::example("q", &["x"], crate::qa::AnswerKind::Span, &[]);
        let mut p = vec![PredictionRecord::new(&ex, ""); 3];
        p[0].retrievals = vec![r(4, &["a", "b"]), r(4, &["a", "b"]), r(9, &["c"])];
        p[1].retrievals = vec![r(2, &["a"])];
        let got = RetrievalPlaces::of(&p);
        assert_eq!(
            got,
            RetrievalPlaces {
                questions: 3,
                retrievals_per_question: 4.0 / 3.0,
                first_token_median: Some(3.0),
                repeat_share: Some(0.25),
                same_place_share: Some(0.25),
                distinct_passages_per_question: 4.0 / 3.0,
            }
        );
        let none = RetrievalPlaces::of(&p[2..]);
        assert_eq!((none.first_token_median, none.repeat_share, none.same_place_share), (None, None, None));
        // the same passages fetched at another token is a repeat, not a loop
        p[0].retrievals[1].token_pos = 7;
        let moved = RetrievalPlaces::of(&p);
        assert_eq!((moved.repeat_share, moved.same_place_share), (Some(0.25), Some(0.0)));
    }

    #[test]
    fn accuracy_column_only_when_some_run_has_it() {
        let s = Summary {
            run: "r".into(),
            method: "flare".into(),
            dataset: "nq".into(),
            questions: 2,
            em: 0.5,
            f1: 0.75,
            precision: 0.75,
            recall: 0.75,
            accuracy: None,
            contains: 0.5,
            retrievals_per_question: 1.5,
            supporting_hit_rate: None,
            generated_tokens_per_question: 12.0,
            forward_tokens_per_question: 100.25,
            seconds_per_question: 0.5,
            truncated_tail: false,
            skipped: 0,
            controller: "flare".into(),
            budget: None,
        };
        let t = markdown_table(&[s]);
        assert!(!t.contains("accuracy"));
        assert!(
            t.lines().nth(2).unwrap() == "| flare | nq | 2 | 0.500 | 0.750 | 1.50 | – | 12.0 | 100.2 | 0.500 |",
            "{t}"
        );
    }

    #[test]
    fn html_marks_tokens_and_retrievals() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("run-a");
        fake_run(&a, "dragin").unwrap();
        let runs = load_runs(&[a]).unwrap();
        let html = html_page(&runs, &Selection::First(1), "");
        assert!(html.starts_with("<!DOCTYPE html>") && html.contains("<style>"));
        // q1 has two trace tokens; entropy 0.2 -> alpha 0.05, entropy 2.5 -> 0.625 (shown 0.62/0.63);
        // scores 0.1 and 1.9 relative to the max 1.9 -> underline alpha 0.05 and 1.00.
        assert!(html.contains("background:rgba(220,50,47,0.05);text-decoration:underline;text-decoration-thickness:3px;text-decoration-color:rgba(38,139,210,0.05)"), "{html}");
        assert!(html.contains("text-decoration-color:rgba(38,139,210,1.00)\" title=\"entropy 2.500 · trigger score 1.900\"> Temple</span>"));
        // R1 before token 0, R2 (token_pos 4, beyond the 2-token trace) at the end.
        let r1 = html.find("⟲R1</span><span class=\"tok\"").expect("R1 before the first token");
        let r2 = html.find("> Temple</span><span class=\"ret\"").expect("R2 after the last token");
        assert!(r1 < r2);
        assert!(html.contains("query &quot;Corliss Archer&quot; → 7, 9"));
        assert!(html.contains("<span class=\"ok\">yes</span>") && html.contains("<span class=\"bad\">no</span>"));
        // Only the first question is shown.
        assert!(html.contains("question q1?") && !html.contains("question q2?"));
        let by_id = html_page(&runs, &Selection::Ids(vec!["q3".into(), "zz".into()]), "");
        assert!(by_id.contains("question q3?") && by_id.contains("not in any run"));
        assert!(by_id.contains("Thus not. So the answer is no."), "a run without a trace shows the raw output");
    }

    #[test]
    fn escapes_html() {
        assert_eq!(escape("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
    }
}
