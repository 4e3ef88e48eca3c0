//! Threshold sweeps and calibrated operating points.
//!
//! A controller's threshold (RIND's theta, ETC's alpha, FLARE's theta, the detector's decision rule, the
//! fixed-length interval) sets how often it retrieves; a paper's value, tuned for another model, gives another
//! model any number of retrievals. Comparing controllers at whatever budget their thresholds happen to give
//! confounds *when* they retrieve with *how often*. So `ragtime sweep` runs each controller over a grid of its
//! threshold on validation questions ([`SweepTable`], the `[sweep]` table of the method's config), writes one
//! [`SweepRecord`] per setting, and with `--pick` keeps, for each budget of retrievals per question, the setting
//! nearest it ([`pick`], [`crate::eval::pareto::nearest`]) in `configs/calibrated/<model>.toml`
//! ([`Calibrated`]); `ragtime eval` then runs each controller at a chosen budget (`--budget`, default the file's
//! `default_budget`), so the comparison on test questions is at matched budgets.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::pareto::{nearest, Point};
use super::run::Summary;

/// Budgets (retrievals per question) a sweep picks operating points for unless told otherwise.
pub const DEFAULT_BUDGETS: &[f64] = &[0.5, 1.0, 2.0, 3.0];

/// `[sweep]` of a method config: the setting a sweep varies (`key`, as in `--set`) and its grid. A method with
/// no `[sweep]` table (none, single, fixed-sentence) is run once.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SweepTable {
    pub key: Option<String>,
    pub values: Vec<toml::Value>,
}

impl SweepTable {
    /// The settings to run: one per grid value, or one with no change when there is no grid.
    pub fn settings(&self, controller: &str) -> Result<Vec<Setting>> {
        match (&self.key, self.values.is_empty()) {
            (None, true) => Ok(vec![Setting { controller: controller.into(), key: None, value: None }]),
            (Some(k), false) => {
                if !k.contains('.') {
                    bail!("[sweep] key = '{k}': expected SECTION.KEY, e.g. trigger.theta");
                }
                let mut seen = Vec::new();
                for v in &self.values {
                    if seen.contains(&v) {
                        bail!("[sweep] values: {v} appears twice");
                    }
                    seen.push(v);
                }
                Ok(self
                    .values
                    .iter()
                    .map(|v| Setting { controller: controller.into(), key: Some(k.clone()), value: Some(v.clone()) })
                    .collect())
            }
            (None, false) => bail!("[sweep] has values but no key (e.g. key = \"trigger.theta\")"),
            (Some(k), true) => bail!("[sweep] key = '{k}' has no values"),
        }
    }
}

/// A grid given on the command line, `CONTROLLER=V1,V2,...` (`sweep --grid`): the controller and its values, each
/// read as a TOML value (`0.35` a float, `32` an integer) or else taken as a string (`threshold:0.999`). It
/// replaces the values of the controller's `[sweep]` table and keeps its key: a threshold's useful range depends on
/// the model (Qwen's detector scores most tokens above 0.9, SmolLM2's do not), the key does not.
pub fn parse_grid(flag: &str) -> Result<(String, Vec<toml::Value>)> {
    let Some((controller, list)) = flag.split_once('=') else {
        bail!("'{flag}': expected CONTROLLER=V1,V2,... (e.g. rind=0.1,0.2,0.35)");
    };
    let controller = controller.trim();
    if controller.is_empty() {
        bail!("'{flag}': no controller before '='");
    }
    let mut values = Vec::new();
    for item in list.split(',').map(str::trim) {
        if item.is_empty() {
            bail!("'{flag}': an empty value in the list");
        }
        let v = match toml::from_str::<toml::Table>(&format!("v = {item}")) {
            Ok(mut t) => t.remove("v").unwrap_or_else(|| toml::Value::String(item.into())),
            Err(_) => toml::Value::String(item.into()),
        };
        values.push(v);
    }
    Ok((controller.to_string(), values))
}

impl SweepTable {
    /// This table with its grid replaced by `values` (see [`parse_grid`]); a method without a swept key has
    /// nothing to replace.
    pub fn with_values(&self, values: Vec<toml::Value>) -> Result<SweepTable> {
        match &self.key {
            Some(k) => Ok(SweepTable { key: Some(k.clone()), values }),
            None => bail!("the method's config has no [sweep] key to vary"),
        }
    }
}

/// One point of a sweep: a controller with one value of its swept setting.
#[derive(Debug, Clone, PartialEq)]
pub struct Setting {
    pub controller: String,
    pub key: Option<String>,
    pub value: Option<toml::Value>,
}

/// A TOML value as a short label: strings bare, numbers as written.
pub fn value_label(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl Setting {
    /// The `--set` override that makes this setting (`trigger.theta=0.35`), if any.
    pub fn override_spec(&self) -> Option<String> {
        Some(format!("{}={}", self.key.as_ref()?, self.value.as_ref()?))
    }

    /// `theta=0.35` (the key's last part), or "" for a setting with no grid.
    pub fn short(&self) -> String {
        match (&self.key, &self.value) {
            (Some(k), Some(v)) => format!("{}={}", k.rsplit('.').next().unwrap_or(k), value_label(v)),
            _ => String::new(),
        }
    }

    /// Row label: `rind theta=0.35`, or the controller alone.
    pub fn label(&self) -> String {
        let s = self.short();
        if s.is_empty() {
            self.controller.clone()
        } else {
            format!("{} {s}", self.controller)
        }
    }

    /// Run directory name inside a sweep: `rind@theta=0.35` (path separators replaced).
    pub fn dir_name(&self) -> String {
        let s = self.short();
        let name = if s.is_empty() { self.controller.clone() } else { format!("{}@{s}", self.controller) };
        name.chars().map(|c| if c == '/' || c == '\\' || c.is_control() { '_' } else { c }).collect()
    }
}

/// One line of `sweep.jsonl`: a setting and what its run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepRecord {
    pub controller: String,
    pub key: Option<String>,
    pub value: Option<toml::Value>,
    /// The run directory, relative to the sweep directory.
    pub run: String,
    pub questions: usize,
    pub em: f64,
    pub f1: f64,
    pub accuracy: Option<f64>,
    pub retrievals_per_question: f64,
    /// Share of retrievals that brought back a supporting passage.
    pub supporting_hit_rate: Option<f64>,
    pub generated_tokens_per_question: f64,
    pub seconds_per_question: f64,
    /// Seconds the whole run took (questions times seconds per question).
    pub seconds: f64,
}

impl SweepRecord {
    pub fn new(setting: &Setting, run: &str, s: &Summary) -> Self {
        SweepRecord {
            controller: setting.controller.clone(),
            key: setting.key.clone(),
            value: setting.value.clone(),
            run: run.to_string(),
            questions: s.questions,
            em: s.em,
            f1: s.f1,
            accuracy: s.accuracy,
            retrievals_per_question: s.retrievals_per_question,
            supporting_hit_rate: s.supporting_hit_rate,
            generated_tokens_per_question: s.generated_tokens_per_question,
            seconds_per_question: s.seconds_per_question,
            seconds: s.seconds_per_question * s.questions as f64,
        }
    }

    /// The quality a pick and a plot use: accuracy where the dataset has one (yes/no/maybe), else F1.
    pub fn score(&self) -> f64 {
        self.accuracy.unwrap_or(self.f1)
    }

    pub fn point(&self) -> Point {
        Point { cost: self.retrievals_per_question, value: self.score() }
    }
}

/// For each controller with a grid, the setting nearest each budget (retrievals per question), as calibrated
/// points. Controllers run once (no key) have nothing to calibrate and are left out.
pub fn pick(records: &[SweepRecord], budgets: &[f64], dataset: &str, split: &str) -> Vec<CalibratedPoint> {
    let mut out = Vec::new();
    let mut controllers: Vec<&str> = Vec::new();
    for r in records {
        if r.key.is_some() && !controllers.contains(&r.controller.as_str()) {
            controllers.push(&r.controller);
        }
    }
    for c in controllers {
        let rs: Vec<&SweepRecord> = records.iter().filter(|r| r.controller == c && r.key.is_some()).collect();
        let points: Vec<Point> = rs.iter().map(|r| r.point()).collect();
        for &b in budgets {
            let Some(i) = nearest(&points, b) else { continue };
            let r = rs[i];
            out.push(CalibratedPoint {
                trigger: c.to_string(),
                dataset: dataset.to_string(),
                split: split.to_string(),
                budget: b,
                key: r.key.clone().unwrap_or_default(),
                value: r.value.clone().unwrap_or(toml::Value::Boolean(false)),
                retrievals_per_question: r.retrievals_per_question,
                f1: r.f1,
                accuracy: r.accuracy,
                questions: r.questions,
            });
        }
    }
    out
}

/// One calibrated operating point: the setting of `trigger` that gave about `budget` retrievals per question on
/// `dataset`'s `split`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalibratedPoint {
    pub trigger: String,
    pub dataset: String,
    pub split: String,
    pub budget: f64,
    pub key: String,
    pub value: toml::Value,
    /// What the sweep measured at this setting.
    pub retrievals_per_question: f64,
    pub f1: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accuracy: Option<f64>,
    pub questions: usize,
}

impl CalibratedPoint {
    /// The `--set` override that applies this point.
    pub fn override_spec(&self) -> String {
        format!("{}={}", self.key, self.value)
    }
}

/// The first line of every calibrated file; a file without it was not written by ragtime and is never replaced.
pub const CALIBRATED_HEADER: &str = "# Calibrated operating points, written by `ragtime sweep --pick`.";

/// The comment block every calibrated file opens with: [`CALIBRATED_HEADER`] and what the points are.
fn calibrated_header() -> String {
    format!(
        "{CALIBRATED_HEADER}\n# For each controller and budget (retrievals per question), the swept setting whose \
         measured\n# retrievals per question on the validation split came nearest; `ragtime eval` applies the\n# \
         point of --budget (default: default_budget) for this model, `--budget none` the config's own value.\n"
    )
}

/// The comment lines of `text`'s opening block (up to its first line that is neither a comment nor blank) that
/// are not [`calibrated_header`]'s: what someone wrote there about the points.
fn added_notes(text: &str) -> String {
    let header = calibrated_header();
    let ours: Vec<&str> = header.lines().collect();
    text.lines()
        .take_while(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
        .filter(|l| l.trim_start().starts_with('#') && !ours.contains(l))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// `configs/calibrated/<model>.toml`: each controller's operating points for one model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Calibrated {
    /// The model's name (its file or folder name without extension).
    pub model: String,
    /// The budget `ragtime eval` uses when `--budget` is not given.
    pub default_budget: f64,
    /// The sweep commands that made the points, one per dataset swept.
    #[serde(default)]
    pub commands: Vec<String>,
    #[serde(default)]
    pub point: Vec<CalibratedPoint>,
}

/// Where `sweep --pick` writes a model's calibrated points: `configs/calibrated/<model>.toml` in the working
/// directory.
pub fn calibrated_path(model: &str) -> PathBuf {
    PathBuf::from("configs").join(calibrated_rel(model))
}

/// Where `eval` reads a model's calibrated points: the working directory's file, else the one shipped beside the
/// sources ([`crate::config::shipped`]).
pub fn calibrated_to_read(model: &str) -> PathBuf {
    crate::config::shipped(&calibrated_rel(model))
}

fn calibrated_rel(model: &str) -> String {
    format!("calibrated/{model}.toml")
}

impl Calibrated {
    pub fn new(model: &str, default_budget: f64) -> Self {
        Calibrated { model: model.into(), default_budget, commands: Vec::new(), point: Vec::new() }
    }

    /// Reads `path`; `None` when it does not exist.
    pub fn load(path: &Path) -> Result<Option<Self>> {
        if !crate::io::exists(path)? {
            return Ok(None);
        }
        let text = std::fs::read_to_string(path).with_context(|| format!("{}: cannot read", path.display()))?;
        let c: Calibrated = toml::from_str(&text).with_context(|| {
            format!("{}: not a calibrated-points file (see `ragtime sweep --pick`)", path.display())
        })?;
        if !c.default_budget.is_finite() || c.default_budget < 0.0 {
            bail!("{}: default_budget = {}: must be a finite number >= 0", path.display(), c.default_budget);
        }
        Ok(Some(c))
    }

    /// Replaces the points of every (trigger, dataset) pair in `points` and keeps the others; records `command`.
    pub fn merge(&mut self, points: Vec<CalibratedPoint>, command: String) {
        self.point.retain(|p| !points.iter().any(|q| q.trigger == p.trigger && q.dataset == p.dataset));
        self.point.extend(points);
        self.point.sort_by(|a, b| {
            (a.dataset.as_str(), a.trigger.as_str())
                .cmp(&(b.dataset.as_str(), b.trigger.as_str()))
                .then(a.budget.total_cmp(&b.budget))
        });
        if !self.commands.contains(&command) {
            self.commands.push(command);
        }
    }

    /// The point for `trigger` on `dataset` at `budget` (to 1e-9).
    pub fn lookup(&self, trigger: &str, dataset: &str, budget: f64) -> Option<&CalibratedPoint> {
        self.point.iter().find(|p| p.trigger == trigger && p.dataset == dataset && (p.budget - budget).abs() < 1e-9)
    }

    /// The budgets calibrated for `trigger` on `dataset`.
    pub fn budgets(&self, trigger: &str, dataset: &str) -> Vec<f64> {
        self.point.iter().filter(|p| p.trigger == trigger && p.dataset == dataset).map(|p| p.budget).collect()
    }

    /// Writes the file (temp file + rename). An existing file that does not start with [`CALIBRATED_HEADER`] is
    /// someone else's and is left alone. The notes someone wrote in an existing file's opening comment block (the
    /// comment lines after the header's, before the first setting) are kept, below the header.
    pub fn save(&self, path: &Path) -> Result<()> {
        let mut notes = String::new();
        if crate::io::exists(path)? {
            let text = std::fs::read_to_string(path).with_context(|| format!("{}: cannot read", path.display()))?;
            if !text.starts_with(CALIBRATED_HEADER) {
                bail!(
                    "{}: exists and was not written by `ragtime sweep --pick`; not replaced (move it, or give \
                     --calibrated another path)",
                    path.display()
                );
            }
            notes = added_notes(&text);
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("{}: cannot create the directory", dir.display()))?;
        }
        let body = toml::to_string(self)?;
        let text = format!("{}{notes}\n{body}", calibrated_header());
        crate::io::write_atomic(path, text.as_bytes())
    }
}

/// Writes `records` as JSON lines (temp file + rename).
pub fn write_records(path: &Path, records: &[SweepRecord]) -> Result<()> {
    let mut s = String::new();
    for r in records {
        s.push_str(&serde_json::to_string(r)?);
        s.push('\n');
    }
    crate::io::write_atomic(path, s.as_bytes())
}

/// Reads `sweep.jsonl`.
pub fn read_records(path: &Path) -> Result<Vec<SweepRecord>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{}: cannot read", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).with_context(|| format!("{}:{}: not a sweep record", path.display(), i + 1))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(controller: &str, value: Option<f64>, retr: f64, f1: f64) -> SweepRecord {
        SweepRecord {
            controller: controller.into(),
            key: value.map(|_| "trigger.theta".to_string()),
            value: value.map(toml::Value::Float),
            run: String::new(),
            questions: 10,
            em: 0.0,
            f1,
            accuracy: None,
            retrievals_per_question: retr,
            supporting_hit_rate: None,
            generated_tokens_per_question: 0.0,
            seconds_per_question: 0.0,
            seconds: 0.0,
        }
    }

    #[test]
    fn settings_of_a_grid_and_of_none() {
        let t: SweepTable = toml::from_str("key = \"trigger.theta\"\nvalues = [0.1, 0.35]").unwrap();
        let s = t.settings("rind").unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[1].override_spec().unwrap(), "trigger.theta=0.35");
        assert_eq!((s[1].label(), s[1].dir_name()), ("rind theta=0.35".into(), "rind@theta=0.35".into()));
        let t: SweepTable = toml::from_str("key = \"trigger.rule\"\nvalues = [\"threshold:0.7\", \"radio\"]").unwrap();
        let s = t.settings("mlp").unwrap();
        assert_eq!(s[0].override_spec().unwrap(), "trigger.rule=\"threshold:0.7\"");
        assert_eq!(s[0].dir_name(), "mlp@rule=threshold:0.7");
        let one = SweepTable::default().settings("single").unwrap();
        assert_eq!((one.len(), one[0].label(), one[0].override_spec()), (1, "single".into(), None));
        assert!(toml::from_str::<SweepTable>("key = \"theta\"\nvalues = [1]").unwrap().settings("x").is_err());
        assert!(toml::from_str::<SweepTable>("values = [1]").unwrap().settings("x").is_err());
        assert!(toml::from_str::<SweepTable>("key = \"t.x\"\nvalues = [1, 1]").unwrap().settings("x").is_err());
        assert!(toml::from_str::<SweepTable>("key = \"t.x\"\nvalue = [1]").is_err());
    }

    #[test]
    fn a_grid_flag_replaces_the_values_and_keeps_the_key() {
        let (c, v) = parse_grid("mlp=threshold:0.999, threshold:0.9995,radio").unwrap();
        assert_eq!(c, "mlp");
        let t: SweepTable = toml::from_str("key = \"trigger.rule\"\nvalues = [\"threshold:0.7\"]").unwrap();
        let s = t.with_values(v).unwrap().settings("mlp").unwrap();
        let specs: Vec<String> = s.iter().filter_map(Setting::override_spec).collect();
        assert_eq!(
            specs,
            ["trigger.rule=\"threshold:0.999\"", "trigger.rule=\"threshold:0.9995\"", "trigger.rule=\"radio\""]
        );
        let (_, v) = parse_grid("fixed-length=32,64").unwrap();
        assert_eq!(v, vec![toml::Value::Integer(32), toml::Value::Integer(64)]);
        let (_, v) = parse_grid("rind=0.1").unwrap();
        assert_eq!(v, vec![toml::Value::Float(0.1)]);
        assert!(parse_grid("rind").is_err());
        assert!(parse_grid("=0.1").is_err());
        assert!(parse_grid("rind=0.1,,0.2").is_err());
        // the repeated value is caught where the config's would be
        let (_, v) = parse_grid("rind=0.1,0.1").unwrap();
        let rind: SweepTable = toml::from_str("key = \"trigger.theta\"\nvalues = [1.0]").unwrap();
        assert!(rind.with_values(v).unwrap().settings("rind").is_err());
        assert!(SweepTable::default().with_values(vec![toml::Value::Float(1.0)]).is_err());
    }

    /// --pick: budgets 0.5, 1, 2, 3 over rind's measured retrievals 0.2, 0.6, 1.7, 4.0 pick 0.6 (0.1 away),
    /// 0.6 (0.4; 1.7 is 0.7 away), 1.7, 4.0 (1.0 away, against 1.7's 1.3); controllers without a grid are not
    /// calibrated.
    #[test]
    fn pick_takes_the_setting_nearest_each_budget() {
        let records = vec![
            rec("rind", Some(2.0), 0.2, 0.10),
            rec("rind", Some(1.0), 0.6, 0.12),
            rec("rind", Some(0.5), 1.7, 0.15),
            rec("rind", Some(0.1), 4.0, 0.14),
            rec("single", None, 1.0, 0.2),
        ];
        let p = pick(&records, DEFAULT_BUDGETS, "hotpotqa", "valid");
        let got: Vec<(f64, f64)> = p.iter().map(|p| (p.budget, p.value.as_float().unwrap())).collect();
        assert_eq!(got, vec![(0.5, 1.0), (1.0, 1.0), (2.0, 0.5), (3.0, 0.1)]);
        assert!(p.iter().all(|p| p.trigger == "rind" && p.key == "trigger.theta" && p.split == "valid"));
        assert_eq!(p[2].retrievals_per_question, 1.7);
    }

    #[test]
    fn calibrated_file_round_trips_merges_and_refuses_foreign_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("calibrated/m.toml");
        let mut c = Calibrated::new("m", 1.0);
        let mut recs = vec![rec("rind", Some(0.3), 1.1, 0.2), rec("etc", Some(2.0), 0.9, 0.1)];
        recs[1].key = Some("trigger.alpha".into());
        c.merge(pick(&recs, &[1.0], "hotpotqa", "valid"), "ragtime sweep A".into());
        c.save(&path).unwrap();
        let back = Calibrated::load(&path).unwrap().unwrap();
        assert_eq!(back, c);
        assert_eq!(back.lookup("etc", "hotpotqa", 1.0).unwrap().override_spec(), "trigger.alpha=2.0");
        assert!(back.lookup("etc", "pubmedqa", 1.0).is_none());
        // a later sweep of rind replaces rind's points only
        let mut c2 = back.clone();
        c2.merge(pick(&[rec("rind", Some(0.7), 1.0, 0.3)], &[1.0, 2.0], "hotpotqa", "valid"), "ragtime sweep B".into());
        assert_eq!(c2.budgets("rind", "hotpotqa"), vec![1.0, 2.0]);
        assert_eq!(c2.lookup("rind", "hotpotqa", 1.0).unwrap().value, toml::Value::Float(0.7));
        assert!(c2.lookup("etc", "hotpotqa", 1.0).is_some());
        assert_eq!(c2.commands.len(), 2);
        // notes written under the header are kept by the next save, once, below it
        let written = std::fs::read_to_string(&path).unwrap();
        let notes = "# rind swept on the first 20 questions.\n# mlp reads checkpoints/detector.\n";
        let (header, rest) = written.split_at(written.find("\n\n").unwrap() + 1);
        std::fs::write(&path, format!("{header}{notes}{rest}")).unwrap();
        c2.save(&path).unwrap();
        c2.save(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with(&format!("{header}{notes}\nmodel = ")), "{text}");
        assert_eq!(text.matches("# mlp reads").count(), 1);
        assert_eq!(Calibrated::load(&path).unwrap().unwrap(), c2);
        // a file ragtime did not write is never replaced
        let foreign = dir.path().join("mine.toml");
        std::fs::write(&foreign, "model = \"m\"\n").unwrap();
        let err = c.save(&foreign).unwrap_err().to_string();
        assert!(err.contains("not written by"), "{err}");
        assert_eq!(std::fs::read_to_string(&foreign).unwrap(), "model = \"m\"\n");
        assert!(Calibrated::load(&dir.path().join("absent.toml")).unwrap().is_none());
    }

    #[test]
    fn records_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sweep.jsonl");
        let r = vec![rec("rind", Some(0.3), 1.1, 0.2), rec("none", None, 0.0, 0.1)];
        write_records(&p, &r).unwrap();
        assert_eq!(read_records(&p).unwrap(), r);
    }
}
