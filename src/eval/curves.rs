//! Controllers compared at the same retrieval rate along their curves: `ragtime report --at 1,2 [--baseline NAME]`,
//! or over a range of rates: `ragtime report --mean-over 1.2..1.9`.
//!
//! Matched budgets ([`super::compare`]) pair runs whose thresholds were calibrated for a budget on validation
//! questions. On the test questions their rates then differ (say 1.79 against 1.92 retrievals per question), so
//! a difference in quality carries a difference in cost with it. Here each controller's runs at several settings
//! (a sweep over the test questions, or `eval` runs at several budgets) form a curve of quality (F1, or accuracy)
//! against retrievals per question, and every curve is read at the rate asked for: linearly between the two
//! measured rates on either side of it, or at a point measured there. Settings measured at one rate count as one
//! point, their mean. No setting is chosen on the questions compared, so reading a test sweep this way is not
//! calibrating on test questions.
//!
//! Over a range `LO..HI`, a curve's reading is its mean over those rates: the area under the same straight lines
//! from LO to HI divided by HI - LO (trapezoids between LO, the settings measured inside the range, and HI). One
//! number per curve for a span of budgets, where the readings at single rates are as many numbers as rates asked
//! for; a curve that is above another at some rates and below at others can come out level.
//!
//! The interval is a paired bootstrap over questions ([`super::bootstrap`]): each resample of the questions (the
//! same indices for every run) recomputes every run's mean quality and mean retrievals, reads each curve at the
//! rate (or over the range) again and takes its difference to the baseline curve. A resample on which either curve
//! no longer reaches the rate (or either end of the range) is left out, and the table says how many were kept. The
//! comparison is over the questions every run answered.
//!
//! This is ragtime's own reading of the sweeps, not a published protocol. Linear interpolation assumes a curve
//! is straight between the settings measured: settings close in rate keep that assumption small, and the
//! `between` column shows how far apart the two were.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::bootstrap::{for_each_resample, interval, PairedDiff};
use super::report::LoadedRun;

/// Rates closer than this are one rate (as [`super::pareto::nearest`] compares them).
const SAME_RATE: f64 = 1e-9;

/// One controller's runs: the settings of a sweep, or `eval` runs under one label.
pub struct Curve<'a> {
    pub name: String,
    pub runs: Vec<&'a LoadedRun>,
}

/// Which curve a run belongs to: a sweep's setting (labelled `CONTROLLER KEY=VALUE`, in `SWEEP/runs/SETTING`)
/// goes with the other settings of its controller in the same sweep; any other run with the runs of its label.
fn key(r: &LoadedRun) -> (String, Option<PathBuf>) {
    let s = &r.summary;
    let setting = s.method.strip_prefix(&s.controller).and_then(|rest| rest.strip_prefix(' '));
    match setting {
        Some(kv) if kv.contains('=') => {
            (s.controller.clone(), r.dir.parent().and_then(Path::parent).map(Path::to_path_buf))
        }
        _ => (s.method.clone(), None),
    }
}

/// The runs grouped into curves, in order of first appearance. A name two curves share (one controller swept
/// in two folders) is followed by the sweep folder's name.
pub fn curves(runs: &[LoadedRun]) -> Vec<Curve<'_>> {
    let mut keys: Vec<(String, Option<PathBuf>)> = Vec::new();
    let mut members: Vec<Vec<&LoadedRun>> = Vec::new();
    for r in runs {
        let k = key(r);
        match keys.iter().position(|x| *x == k) {
            Some(i) => members[i].push(r),
            None => {
                keys.push(k);
                members.push(vec![r]);
            }
        }
    }
    keys.iter()
        .zip(members)
        .map(|((name, sweep), runs)| {
            let shared = keys.iter().filter(|(n, _)| n == name).count() > 1;
            let name = match sweep.as_deref().and_then(Path::file_name) {
                Some(dir) if shared => format!("{name} ({})", dir.to_string_lossy()),
                _ => name.clone(),
            };
            Curve { name, runs }
        })
        .collect()
}

/// The two measured `(rate, quality)` points a reading lies between.
pub type Bracket = [(f64, f64); 2];

/// The measured points with finite values, in order of rate, points at one rate merged into their mean quality.
fn merged(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut p: Vec<(f64, f64)> = points.iter().copied().filter(|(r, q)| r.is_finite() && q.is_finite()).collect();
    p.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut merged: Vec<(f64, f64)> = Vec::new();
    let mut i = 0;
    while i < p.len() {
        let j = i + p[i..].iter().take_while(|q| q.0 - p[i].0 <= SAME_RATE).count();
        merged.push((p[i].0, p[i..j].iter().map(|q| q.1).sum::<f64>() / (j - i) as f64));
        i = j;
    }
    merged
}

/// Where a curve of measured `(rate, quality)` points stands at `rate`: the quality of a point measured at that
/// rate, or the linear interpolation between the nearest measured rates below and above it, with those two
/// points. Points at one rate are merged into their mean quality. `None` outside the measured rates.
pub fn at(points: &[(f64, f64)], rate: f64) -> Option<(f64, Option<Bracket>)> {
    at_merged(&merged(points), rate)
}

/// [`at`] on points already [`merged`].
fn at_merged(merged: &[(f64, f64)], rate: f64) -> Option<(f64, Option<Bracket>)> {
    if let Some(q) = merged.iter().find(|q| (q.0 - rate).abs() <= SAME_RATE) {
        return Some((q.1, None));
    }
    let hi = merged.iter().position(|q| q.0 > rate)?;
    if hi == 0 {
        return None;
    }
    let (a, b) = (merged[hi - 1], merged[hi]);
    Some((a.1 + (b.1 - a.1) * (rate - a.0) / (b.0 - a.0), Some([a, b])))
}

/// The mean quality of a curve over the rates `lo..=hi`: the area under the straight lines [`at`] reads between
/// the measured points, divided by `hi - lo` (trapezoids between `lo`, the measured rates inside, and `hi`), with
/// the curve's readings at the two ends. `None` unless the measured rates reach both ends; at `lo == hi`, the
/// reading there.
pub fn mean_over(points: &[(f64, f64)], lo: f64, hi: f64) -> Option<(f64, Bracket)> {
    let merged = merged(points);
    let (at_lo, at_hi) = (at_merged(&merged, lo)?.0, at_merged(&merged, hi)?.0);
    let ends = [(lo, at_lo), (hi, at_hi)];
    if hi - lo <= SAME_RATE {
        return Some((at_lo, ends));
    }
    let mut knots = vec![(lo, at_lo)];
    knots.extend(merged.into_iter().filter(|q| q.0 > lo + SAME_RATE && q.0 < hi - SAME_RATE));
    knots.push((hi, at_hi));
    let area: f64 = knots.windows(2).map(|w| (w[1].0 - w[0].0) * (w[0].1 + w[1].1) / 2.0).sum();
    Some((area / (hi - lo), ends))
}

/// Where the curves are read: at one rate, or their mean over a range of rates.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reading {
    /// `report --at RATE`.
    At(f64),
    /// `report --mean-over LO..HI`.
    Over(f64, f64),
}

impl Reading {
    /// A curve of measured points read here: the value, and the two points it lies between (`At`: `None` when
    /// measured at the rate) or the readings at the range's ends (`Over`).
    fn read(self, points: &[(f64, f64)]) -> Option<(f64, Option<Bracket>)> {
        match self {
            Reading::At(rate) => at(points, rate),
            Reading::Over(lo, hi) => mean_over(points, lo, hi).map(|(v, ends)| (v, Some(ends))),
        }
    }
}

impl std::fmt::Display for Reading {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reading::At(rate) => write!(f, "{rate}"),
            Reading::Over(lo, hi) => write!(f, "{lo}–{hi}"),
        }
    }
}

/// One curve's row of a reading's table.
#[derive(Debug, Clone)]
pub struct Row {
    pub name: String,
    /// Settings (runs) on the curve.
    pub settings: usize,
    /// The lowest and highest rate measured.
    pub span: (f64, f64),
    /// Quality at the rate (or its mean over the range); `None` when the curve does not reach it.
    pub value: Option<f64>,
    /// At a rate, the two measured points it lies between (`None`: measured at the rate, or not reached); over a
    /// range, the curve's readings at its two ends.
    pub between: Option<Bracket>,
    /// Difference to the baseline curve (`None`: the baseline itself, no baseline, or either curve does not
    /// reach the rate or range); `resamples` counts the resamples kept.
    pub diff: Option<PairedDiff>,
    pub baseline: bool,
}

/// The curves read at one rate, or over one range of rates.
#[derive(Debug, Clone)]
pub struct Table {
    pub reading: Reading,
    /// "F1" or "accuracy".
    pub metric: &'static str,
    pub baseline: Option<String>,
    /// Questions compared (every run answered them), and the resamples drawn.
    pub questions: usize,
    pub resamples: usize,
    pub rows: Vec<Row>,
}

/// Per question (in `ids` order) each run's quality and retrievals.
struct Matrix {
    quality: Vec<Vec<f64>>,
    retrievals: Vec<Vec<f64>>,
}

impl Matrix {
    fn of(runs: &[&LoadedRun], ids: &[&str]) -> Matrix {
        let (mut quality, mut retrievals) = (Vec::new(), Vec::new());
        for r in runs {
            let by_id: HashMap<&str, _> = r.predictions.iter().map(|p| (p.id.as_str(), p)).collect();
            quality.push(ids.iter().map(|id| by_id[id].metrics.accuracy.unwrap_or(by_id[id].metrics.f1)).collect());
            retrievals.push(ids.iter().map(|id| by_id[id].retrievals.len() as f64).collect());
        }
        Matrix { quality, retrievals }
    }

    /// Each run's (mean retrievals, mean quality) over the question indices `idx`.
    fn points(&self, idx: &[usize]) -> Vec<(f64, f64)> {
        let n = idx.len().max(1) as f64;
        let mean = |v: &[f64]| idx.iter().fold(0.0, |s, &i| s + v[i]) / n;
        self.quality.iter().zip(&self.retrievals).map(|(q, r)| (mean(r), mean(q))).collect()
    }
}

/// Every curve of `runs` read at each of `readings`, with the paired-bootstrap difference to the curve named
/// `baseline` (a label, or a controller's name) where one is given.
pub fn tables(
    runs: &[LoadedRun],
    readings: &[Reading],
    baseline: Option<&str>,
    resamples: usize,
    seed: u64,
) -> Result<Vec<Table>> {
    // the flag the refusals name
    let flag = if readings.iter().all(|r| matches!(r, Reading::Over(..))) { "--mean-over" } else { "--at" };
    let mut datasets: Vec<&str> = runs.iter().map(|r| r.summary.dataset.as_str()).collect();
    datasets.sort();
    datasets.dedup();
    if datasets.len() > 1 {
        crate::usage_bail!(
            "{flag}: the runs are of {} datasets ({}); read one at a time",
            datasets.len(),
            datasets.join(", ")
        );
    }
    let curves = curves(runs);
    let base = match baseline {
        None => None,
        Some(b) => match curves.iter().position(|c| c.name == b) {
            Some(i) => Some(i),
            None => {
                let names: Vec<&str> = curves.iter().map(|c| c.name.as_str()).collect();
                crate::usage_bail!("--baseline {b}: no such curve (the runs' curves: {})", names.join(", "));
            }
        },
    };
    // the questions every run answered, in the first run's order
    let answered: Vec<HashSet<&str>> =
        runs.iter().map(|r| r.predictions.iter().map(|p| p.id.as_str()).collect()).collect();
    let ids: Vec<&str> = runs[0]
        .predictions
        .iter()
        .map(|p| p.id.as_str())
        .filter(|id| answered.iter().all(|a| a.contains(id)))
        .collect();
    if ids.is_empty() {
        crate::usage_bail!("{flag}: no question was answered by every run given (the runs are of different questions)");
    }
    let flat: Vec<&LoadedRun> = curves.iter().flat_map(|c| c.runs.iter().copied()).collect();
    let matrix = Matrix::of(&flat, &ids);
    // curve c's runs are flat[offsets[c]..offsets[c + 1]]
    let mut offsets = vec![0];
    for c in &curves {
        offsets.push(offsets.last().unwrap() + c.runs.len());
    }
    let read = |points: &[(f64, f64)], c: usize, reading: Reading| reading.read(&points[offsets[c]..offsets[c + 1]]);
    let all: Vec<usize> = (0..ids.len()).collect();
    let observed = matrix.points(&all);
    // with a baseline: every run's point on each resample of the questions, drawn once for all rates and curves
    let mut boot: Vec<Vec<(f64, f64)>> = Vec::new();
    if base.is_some() {
        for_each_resample(ids.len(), resamples, seed, |idx| boot.push(matrix.points(idx)));
    }
    let metric = if runs.iter().any(|r| r.summary.accuracy.is_some()) { "accuracy" } else { "F1" };
    let mut out = Vec::new();
    for &reading in readings {
        let base_at: Vec<Option<f64>> = match base {
            Some(b) => boot.iter().map(|p| read(p, b, reading).map(|x| x.0)).collect(),
            None => Vec::new(),
        };
        let rows = (0..curves.len())
            .map(|c| {
                let mine = &observed[offsets[c]..offsets[c + 1]];
                let span =
                    mine.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), p| (lo.min(p.0), hi.max(p.0)));
                let here = read(&observed, c, reading);
                let diff = match (base, here) {
                    (Some(b), Some((v, _))) if b != c => read(&observed, b, reading).map(|(w, _)| {
                        let mut values: Vec<f64> = boot
                            .iter()
                            .zip(&base_at)
                            .filter_map(|(p, w)| Some(read(p, c, reading)?.0 - (*w)?))
                            .collect();
                        values.sort_by(f64::total_cmp);
                        interval(ids.len(), v - w, &values)
                    }),
                    _ => None,
                };
                Row {
                    name: curves[c].name.clone(),
                    settings: curves[c].runs.len(),
                    span,
                    value: here.map(|h| h.0),
                    between: here.and_then(|h| h.1),
                    diff,
                    baseline: base == Some(c),
                }
            })
            .collect();
        out.push(Table {
            reading,
            metric,
            baseline: base.map(|b| curves[b].name.clone()),
            questions: ids.len(),
            resamples,
            rows,
        });
    }
    Ok(out)
}

impl Table {
    fn title(&self) -> String {
        let vs = match &self.baseline {
            Some(b) => format!(", Δ against {b} by paired bootstrap, {} resamples", self.resamples),
            None => String::new(),
        };
        let place = match self.reading {
            Reading::At(_) => "at",
            Reading::Over(..) => "averaged over",
        };
        format!(
            "{} {place} {} retrievals/question, along each controller's settings ({} questions{vs})",
            self.metric, self.reading, self.questions
        )
    }

    /// The table's header and rows as text cells.
    pub fn cells(&self) -> (Vec<String>, Vec<Vec<String>>) {
        let over = matches!(self.reading, Reading::Over(..));
        let where_ = if over { "at the ends (retrievals/q: score)" } else { "between (retrievals/q: score)" };
        let mut header: Vec<String> =
            ["controller", "settings", "retrievals/q measured", where_].map(String::from).into();
        header.push(match self.reading {
            Reading::At(rate) => format!("{} at {rate}", self.metric),
            Reading::Over(lo, hi) => format!("mean {} over {lo}–{hi}", self.metric),
        });
        if let Some(b) = &self.baseline {
            header.extend([format!("Δ {} vs {b} [95% CI]", self.metric), "p".into(), "resamples kept".into()]);
        }
        let rows = self
            .rows
            .iter()
            .map(|r| {
                let mut v = vec![r.name.clone(), r.settings.to_string(), format!("{:.2}–{:.2}", r.span.0, r.span.1)];
                v.push(match (&r.between, r.value) {
                    (Some([a, b]), _) if over => format!("{:.2}: {:.3} to {:.2}: {:.3}", a.0, a.1, b.0, b.1),
                    (Some([a, b]), _) => format!("{:.2}: {:.3} and {:.2}: {:.3}", a.0, a.1, b.0, b.1),
                    (None, Some(_)) => "measured".into(),
                    (None, None) => "not reached".into(),
                });
                v.push(r.value.map_or_else(|| "–".into(), |x| format!("{x:.3}")));
                if self.baseline.is_some() {
                    match (&r.diff, r.baseline) {
                        (_, true) => v.extend(["baseline".into(), String::new(), String::new()]),
                        (Some(d), _) => v.extend([
                            format!("{:+.3} [{:+.3}, {:+.3}]", d.mean, d.lo, d.hi),
                            format!("{:.3}", d.p),
                            d.resamples.to_string(),
                        ]),
                        (None, _) => v.extend(["–".into(), String::new(), String::new()]),
                    }
                }
                v
            })
            .collect();
        (header, rows)
    }
}

/// The tables in Markdown, one per reading with a heading.
pub fn markdown(tables: &[Table]) -> String {
    tables.iter().map(|t| super::compare::markdown_table(&t.title(), &t.cells())).collect()
}

/// The tables as HTML.
pub fn html(tables: &[Table]) -> String {
    tables.iter().map(|t| super::compare::html_table(&t.title(), &t.cells())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::compare::tests::run;
    use crate::eval::run::RetrievalRecord;

    /// Hand-worked interpolation: points (0.5, 0.10), (1.5, 0.30), (3.0, 0.20). At 1.0: halfway from 0.5 to 1.5,
    /// 0.10 + 0.5 * 0.20 = 0.20. At 2.0: a third of the way from 1.5 to 3.0, 0.30 - 0.10 / 3 = 0.2667. At 1.5:
    /// the point itself. At 0.4 and 3.1: outside. Two settings at one rate count as their mean.
    #[test]
    fn interpolation_by_hand() {
        let p = [(1.5, 0.30), (0.5, 0.10), (3.0, 0.20)];
        let (v, b) = at(&p, 1.0).unwrap();
        assert!((v - 0.20).abs() < 1e-12);
        assert_eq!(b, Some([(0.5, 0.10), (1.5, 0.30)]));
        assert!((at(&p, 2.0).unwrap().0 - (0.30 - 0.10 / 3.0)).abs() < 1e-12);
        assert_eq!(at(&p, 1.5), Some((0.30, None)));
        assert_eq!(at(&p, 0.4), None);
        assert_eq!(at(&p, 3.1), None);
        assert_eq!(at(&[(1.0, 0.2)], 1.0), Some((0.2, None)));
        assert_eq!(at(&[(1.0, 0.2)], 1.1), None);
        // (1.0, 0.2) and (1.0, 0.4) merge into (1.0, 0.3): at 2.0 halfway to (3.0, 0.5), 0.4
        let (v, b) = at(&[(1.0, 0.2), (3.0, 0.5), (1.0, 0.4)], 2.0).unwrap();
        assert!((v - 0.4).abs() < 1e-12, "{v}");
        let [lo, hi] = b.unwrap();
        assert!(lo.0 == 1.0 && (lo.1 - 0.3).abs() < 1e-12 && hi == (3.0, 0.5), "{b:?}");
    }

    /// Hand-worked means over ranges of the same points (0.5, 0.10), (1.5, 0.30), (3.0, 0.20). Over 1.0..2.0:
    /// 0.20 at 1.0, 0.30 at 1.5 (measured), 0.2667 at 2.0; trapezoids 0.5 * (0.20 + 0.30) / 2 = 0.125 and
    /// 0.5 * (0.30 + 0.2667) / 2 = 0.1417, area 0.2667 over a width of 1. Over all of 0.5..3.0: 1.0 * 0.20 + 1.5 *
    /// 0.25 = 0.575 over 2.5, 0.23. Over 0.5..1.5, one straight line: its middle, 0.20. A range of no width is the
    /// reading at its rate; one past the measured rates is not reached.
    #[test]
    fn mean_over_a_range_by_hand() {
        let p = [(1.5, 0.30), (0.5, 0.10), (3.0, 0.20)];
        let (v, ends) = mean_over(&p, 1.0, 2.0).unwrap();
        assert!((v - (0.125 + 0.5 * (0.30 + 0.30 - 0.10 / 3.0) / 2.0)).abs() < 1e-12, "{v}");
        assert!((v - 0.8 / 3.0).abs() < 1e-12, "{v}");
        assert!(ends[0].0 == 1.0 && (ends[0].1 - 0.20).abs() < 1e-12, "{ends:?}");
        assert!((ends[1].1 - (0.30 - 0.10 / 3.0)).abs() < 1e-12 && ends[1].0 == 2.0, "{ends:?}");
        assert!((mean_over(&p, 0.5, 3.0).unwrap().0 - 0.23).abs() < 1e-12);
        assert!((mean_over(&p, 0.5, 1.5).unwrap().0 - 0.20).abs() < 1e-12);
        assert_eq!(mean_over(&p, 1.5, 1.5).unwrap().0, 0.30);
        assert_eq!(mean_over(&p, 0.4, 1.0), None);
        assert_eq!(mean_over(&p, 1.0, 3.1), None);
        // settings at one rate merge into their mean before the area: (1.0, 0.2) and (1.0, 0.4) as (1.0, 0.3)
        let q = [(0.0, 0.0), (1.0, 0.2), (1.0, 0.4), (2.0, 0.3)];
        assert!((mean_over(&q, 0.0, 2.0).unwrap().0 - (0.15 + 0.3) / 2.0).abs() < 1e-12);
    }

    /// A run of `method` (controller `controller`) whose question i scores `f1[i]` with `retr[i]` retrievals.
    fn setting(dir: &str, method: &str, controller: &str, f1: &[f64], retr: &[usize]) -> LoadedRun {
        let mut r = run(method, None, f1, 0.0);
        r.dir = PathBuf::from(dir);
        r.summary.controller = controller.into();
        for (p, &k) in r.predictions.iter_mut().zip(retr) {
            let rec = RetrievalRecord { token_pos: 0, query: "q".into(), passage_ids: vec![], hit_supporting: None };
            p.retrievals = vec![rec; k];
        }
        r.summary.retrievals_per_question = retr.iter().sum::<usize>() as f64 / retr.len() as f64;
        r
    }

    /// A sweep's settings form one curve per controller; eval runs one per label; a controller swept in two
    /// folders gives two curves named by folder.
    #[test]
    fn runs_group_into_curves() {
        let q = [0.0, 1.0];
        let runs = vec![
            setting("a/runs/rind@theta=0.1", "rind theta=0.1", "rind", &q, &[1, 1]),
            setting("a/runs/rind@theta=0.2", "rind theta=0.2", "rind", &q, &[0, 1]),
            setting("a/runs/single", "single", "single", &q, &[1, 1]),
            setting("t/mlp-content-b1", "mlp-content", "mlp", &q, &[1, 0]),
            setting("t/mlp-content-b2", "mlp-content", "mlp", &q, &[2, 2]),
            setting("b/runs/rind@theta=0.3", "rind theta=0.3", "rind", &q, &[0, 0]),
        ];
        let c = curves(&runs);
        let names: Vec<&str> = c.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["rind (a)", "single", "mlp-content", "rind (b)"]);
        let sizes: Vec<usize> = c.iter().map(|c| c.runs.len()).collect();
        assert_eq!(sizes, [2, 1, 2, 1]);
        assert_eq!(curves(&runs[..3])[0].name, "rind");
    }

    /// Hand-worked comparison at rate 1 on two questions. rind: settings at rates 0.5 (F1 0.25) and 1.5
    /// (0.75), so 0.5 at rate 1. mlp: 0.0 (F1 0) and 2.0 (F1 1.0), so 0.5 as well: Δ = 0. The resamples: both
    /// questions drawn twice or once each. Resample (q0, q0): rind's settings at rates 0 (F1 0) and 1 (F1 0.5)
    /// give 0.5 at rate 1; mlp's at 0 and 2 (F1 0 and 1) give 0.5: Δ 0. (q1, q1): rind at 1 (0.5) and 2 (1.0)
    /// gives 0.5; mlp at 0 (0) and 2 (1) gives 0.5: Δ 0. So every resample has Δ 0, the interval is the point 0
    /// and p = 1. single (rate exactly 1) is read where it was measured.
    #[test]
    fn curves_compared_at_a_rate_by_hand() {
        let runs = vec![
            setting("s/runs/rind@theta=0.2", "rind theta=0.2", "rind", &[0.0, 0.5], &[0, 1]),
            setting("s/runs/rind@theta=0.1", "rind theta=0.1", "rind", &[0.5, 1.0], &[1, 2]),
            setting("s/runs/mlp@rule=a", "mlp rule=a", "mlp", &[0.0, 0.0], &[0, 0]),
            setting("s/runs/mlp@rule=b", "mlp rule=b", "mlp", &[1.0, 1.0], &[2, 2]),
            setting("s/runs/single", "single", "single", &[0.2, 0.4], &[1, 1]),
            setting("s/runs/none", "none", "none", &[0.0, 0.0], &[0, 0]),
        ];
        let t = tables(&runs, &[Reading::At(1.0), Reading::At(3.0)], Some("rind"), 200, 5).unwrap();
        assert_eq!((t[0].questions, t[0].baseline.as_deref()), (2, Some("rind")));
        let row = |i: usize, name: &str| t[i].rows.iter().find(|r| r.name == name).unwrap().clone();
        let rind = row(0, "rind");
        assert!(rind.baseline && rind.diff.is_none());
        assert_eq!((rind.value, rind.between, rind.span), (Some(0.5), Some([(0.5, 0.25), (1.5, 0.75)]), (0.5, 1.5)));
        let mlp = row(0, "mlp");
        let d = mlp.diff.unwrap();
        assert_eq!((mlp.value, d.mean, d.lo, d.hi, d.p, d.resamples), (Some(0.5), 0.0, 0.0, 0.0, 1.0, 200));
        let single = row(0, "single");
        assert_eq!((single.value, single.between), (Some(0.30000000000000004), None));
        // single against rind: 0.3 - 0.5 on the whole; resample (q0, q0): 0.2 - 0.5; (q1, q1): 0.4 - 0.5
        let d = single.diff.unwrap();
        assert!((d.mean + 0.2).abs() < 1e-12 && (d.lo + 0.3).abs() < 1e-12 && (d.hi + 0.1).abs() < 1e-12, "{d:?}");
        // none is measured at 0 only; at rate 3 no curve reaches
        assert_eq!(row(0, "none").value, None);
        assert!(t[1].rows.iter().all(|r| r.value.is_none() && r.diff.is_none()));
        let md = markdown(&t);
        assert!(md.contains("| rind | 2 | 0.50–1.50 | 0.50: 0.250 and 1.50: 0.750 | 0.500 | baseline |"), "{md}");
        assert!(md.contains("| single | 1 | 1.00–1.00 | measured | 0.300 | -0.200 [-0.300, -0.100] |"), "{md}");
        assert!(md.contains("| none | 1 | 0.00–0.00 | not reached | – | – |"), "{md}");
    }

    /// A resample on which a curve no longer reaches the rate is left out and counted: mlp's two settings lie
    /// at 0.5 and 1.5 on the whole, but a resample of one question twice puts both at 0 or both at 1 and 2.
    #[test]
    fn resamples_that_leave_a_curve_short_of_the_rate_are_left_out() {
        let runs = vec![
            setting("s/runs/rind@theta=0.2", "rind theta=0.2", "rind", &[0.0, 0.0], &[0, 0]),
            setting("s/runs/rind@theta=0.1", "rind theta=0.1", "rind", &[1.0, 1.0], &[3, 3]),
            setting("s/runs/mlp@rule=a", "mlp rule=a", "mlp", &[0.0, 0.0], &[1, 0]),
            setting("s/runs/mlp@rule=b", "mlp rule=b", "mlp", &[1.0, 1.0], &[2, 1]),
        ];
        let t = tables(&runs, &[Reading::At(1.0)], Some("rind"), 400, 9).unwrap();
        let d = t[0].rows[1].diff.unwrap();
        // on the whole mlp is at 0.5 and 1.5 -> 0.5 at rate 1; rind at 0 and 3 -> 1/3
        assert!((d.mean - (0.5 - 1.0 / 3.0)).abs() < 1e-12);
        // resample (q0, q0): mlp at 1 and 2: measured at 1 (F1 0): Δ -1/3; (q1, q1): mlp at 0 and 1, measured at
        // 1 (F1 1): Δ +2/3; (q0, q1) either order: as on the whole. So no resample is left out here, and the
        // interval spans the two extremes
        assert_eq!(d.resamples, 400);
        assert!((d.lo + 1.0 / 3.0).abs() < 1e-12 && (d.hi - 2.0 / 3.0).abs() < 1e-12, "{d:?}");
        // at rate 2 mlp (0.5 to 1.5 on the whole) is not reached: no value, no difference
        let t = tables(&runs, &[Reading::At(2.0)], Some("rind"), 4000, 9).unwrap();
        assert_eq!(t[0].rows[1].value, None);
        assert!(t[0].rows[1].diff.is_none());
        let t = tables(&runs, &[Reading::At(1.2)], Some("rind"), 4000, 9).unwrap();
        let d = t[0].rows[1].diff.unwrap();
        // (q1, q1): mlp at 0 and 1 does not reach 1.2: about a quarter of the resamples left out
        assert!((2800..3200).contains(&d.resamples), "{}", d.resamples);
    }

    /// Hand-worked comparison over 0.5..1.5 on two questions. rind: settings at rates 0 (F1 0) and 2 (F1 1), a
    /// straight line whose mean over the range is its value at 1, 0.5. mlp: settings at 0 (F1 0), 1 (F1 0.6 and
    /// 1.0 on the two questions, 0.8 on the whole) and 2 (F1 1): 0.4 at 0.5, 0.8 at 1, 0.9 at 1.5, so the area is
    /// 0.5 * (0.4 + 0.8) / 2 + 0.5 * (0.8 + 0.9) / 2 = 0.725 over a width of 1: Δ +0.225. Resample (q0, q0): mlp's
    /// middle setting at F1 0.6: 0.3, 0.6, 0.8 -> 0.575, Δ +0.075; (q1, q1): 0.5, 1.0, 1.0 -> 0.875, Δ +0.375;
    /// (q0, q1) either order: as on the whole. The interval spans the two extremes.
    #[test]
    fn curves_compared_over_a_range_by_hand() {
        let runs = vec![
            setting("s/runs/rind@theta=0.2", "rind theta=0.2", "rind", &[0.0, 0.0], &[0, 0]),
            setting("s/runs/rind@theta=0.1", "rind theta=0.1", "rind", &[1.0, 1.0], &[2, 2]),
            setting("s/runs/mlp@rule=a", "mlp rule=a", "mlp", &[0.0, 0.0], &[0, 0]),
            setting("s/runs/mlp@rule=b", "mlp rule=b", "mlp", &[0.6, 1.0], &[1, 1]),
            setting("s/runs/mlp@rule=c", "mlp rule=c", "mlp", &[1.0, 1.0], &[2, 2]),
            setting("s/runs/single", "single", "single", &[0.2, 0.4], &[1, 1]),
        ];
        let t = tables(&runs, &[Reading::Over(0.5, 1.5), Reading::Over(0.5, 2.5)], Some("rind"), 400, 3).unwrap();
        let rind = &t[0].rows[0];
        assert_eq!((rind.value, rind.between), (Some(0.5), Some([(0.5, 0.25), (1.5, 0.75)])));
        let mlp = &t[0].rows[1];
        assert!((mlp.value.unwrap() - 0.725).abs() < 1e-12);
        let d = mlp.diff.unwrap();
        assert!((d.mean - 0.225).abs() < 1e-12, "{d:?}");
        assert!((d.lo - 0.075).abs() < 1e-12 && (d.hi - 0.375).abs() < 1e-12 && d.resamples == 400, "{d:?}");
        // single, measured at 1 only, does not span the range; past rate 2 no curve does
        assert!(t[0].rows[2].value.is_none() && t[0].rows[2].diff.is_none());
        assert!(t[1].rows.iter().all(|r| r.value.is_none() && r.diff.is_none()));
        let md = markdown(&t);
        assert!(
            md.contains("### F1 averaged over 0.5–1.5 retrievals/question, along each controller's settings"),
            "{md}"
        );
        assert!(md.contains("| at the ends (retrievals/q: score) | mean F1 over 0.5–1.5 |"), "{md}");
        assert!(md.contains("| rind | 2 | 0.00–2.00 | 0.50: 0.250 to 1.50: 0.750 | 0.500 | baseline |"), "{md}");
        assert!(md.contains("| mlp | 3 | 0.00–2.00 | 0.50: 0.400 to 1.50: 0.900 | 0.725 | +0.225 ["), "{md}");
        let e = tables(&runs[..1], &[Reading::Over(0.5, 1.5)], Some("flare"), 10, 1).err().unwrap().to_string();
        assert!(e.contains("--baseline flare"), "{e}");
        let mut other = setting("s/runs/none", "none", "none", &[0.0], &[0]);
        other.predictions[0].id = "elsewhere".into();
        let e = tables(&[runs.into_iter().next().unwrap(), other], &[Reading::Over(0.5, 1.5)], None, 10, 1)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("--mean-over: no question was answered by every run given"), "{e}");
    }

    #[test]
    fn refusals_name_the_flag() {
        let runs = vec![setting("s/runs/rind@theta=0.2", "rind theta=0.2", "rind", &[0.0], &[0])];
        let e = tables(&runs, &[Reading::At(1.0)], Some("flare"), 10, 1).err().unwrap().to_string();
        assert!(e.contains("--baseline flare: no such curve (the runs' curves: rind)"), "{e}");
        let mut other = setting("s/runs/none", "none", "none", &[0.0], &[0]);
        other.summary.dataset = "2wiki".into();
        let e = tables(&[runs.into_iter().next().unwrap(), other], &[Reading::At(1.0)], None, 10, 1)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("--at: the runs are of 2 datasets (2wiki, hotpotqa)"), "{e}");
        let mut other = setting("s/runs/none", "none", "none", &[0.0], &[0]);
        other.predictions[0].id = "elsewhere".into();
        let first = setting("s/runs/rind@theta=0.2", "rind theta=0.2", "rind", &[0.0], &[0]);
        let e = tables(&[first, other], &[Reading::At(1.0)], None, 10, 1).err().unwrap().to_string();
        assert!(e.contains("--at: no question was answered by every run given"), "{e}");
    }
}
