//! The run directory: what one `ragtime eval` run writes, how it resumes, and how it is summarised.
//!
//! ```text
//! runs/NAME/
//!   config.toml        everything the run used (dataset spec, method config, model, ...), as the caller serialises it
//!   predictions.jsonl  one PredictionRecord per question, appended and flushed line by line
//!   metrics.json       the Summary, written by RunWriter::finish (or `summarise` + `write_metrics`)
//! ```
//!
//! Resuming: [`RunWriter::create`] on an existing directory checks that the new config equals the stored one,
//! drops a truncated last line (a run killed mid-write) and reports the ids already written through
//! [`RunWriter::is_done`], so the caller skips them.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::metrics::{score_example, Scores};
use crate::prompt::extract_answer;
use crate::qa::Example;
use crate::retrieval::Passage;

pub const CONFIG_FILE: &str = "config.toml";
/// The kind of output a run directory is ([`crate::io::claim_output_dir`]).
pub const OUTPUT_KIND: &str = "eval run";
pub const PREDICTIONS_FILE: &str = "predictions.jsonl";
pub const METRICS_FILE: &str = "metrics.json";

/// One retrieval made while answering.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetrievalRecord {
    /// Index in `trace` (the generated tokens) before which the retrieved documents were put in the prompt, i.e.
    /// the number of generated tokens kept when retrieval happened (0: before the first token).
    pub token_pos: usize,
    pub query: String,
    /// Ids of the passages brought back, best first.
    pub passage_ids: Vec<String>,
    /// Whether some passage is a supporting paragraph of the question (title + text match); `None` when the
    /// dataset has no supporting paragraphs.
    pub hit_supporting: Option<bool>,
}

impl RetrievalRecord {
    /// Records a retrieval, matching the passages against `example`'s supporting paragraphs.
    pub fn new(example: &Example, token_pos: usize, query: &str, passages: &[Passage]) -> Self {
        let hit_supporting = if example.supporting.is_empty() {
            None
        } else {
            Some(passages.iter().any(|p| example.is_supporting(&p.title, &p.text)))
        };
        RetrievalRecord {
            token_pos,
            query: query.to_string(),
            passage_ids: passages.iter().map(|p| p.id.clone()).collect(),
            hit_supporting,
        }
    }
}

/// One generated token, for the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceToken {
    pub text: String,
    /// Entropy (nats) of the distribution the token was drawn from. A non-finite value is written as `null`
    /// (JSON has no NaN) and read back as NaN.
    #[serde(deserialize_with = "f32_or_nan")]
    pub entropy: f32,
    /// The trigger's score for this token, when the method has one.
    pub score: Option<f32>,
}

fn f32_or_nan<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<f32, D::Error> {
    Ok(Option::<f32>::deserialize(d)?.unwrap_or(f32::NAN))
}

/// One line of predictions.jsonl.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PredictionRecord {
    pub id: String,
    pub question: String,
    pub gold: Vec<String>,
    /// The extracted answer that was scored.
    pub prediction: String,
    /// The whole generation (after the answer suffix, if one was needed).
    pub raw_output: String,
    pub metrics: Scores,
    pub retrievals: Vec<RetrievalRecord>,
    /// Retrievals the trigger asked for that the loop guard did not make, each of which would have repeated the
    /// one before it in place ([`crate::rag::LoopConfig::loop_guard`]); written only when not 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub loops_guarded: usize,
    /// Tokens the model generated for this question (all rounds, including discarded ones).
    pub generated_tokens: usize,
    /// Tokens the model ran forward (prompt tokens processed, cached ones excluded, plus generated ones).
    pub forward_tokens: usize,
    pub seconds: f64,
    #[serde(default)]
    pub trace: Vec<TraceToken>,
    /// Why the question was not answered (it did not fit in the model's context window); it then scores 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

impl PredictionRecord {
    /// Scores `raw_output` for `example`: extracts the answer ([`extract_answer`]) and fills `prediction`,
    /// `metrics`, `gold`; the efficiency counters and trace start empty for the caller to set.
    /// The record of a question the model could not answer because it outgrew the context window
    /// ([`crate::model::ContextOverflow`]): scored as an empty answer, marked `skipped`, with a warning on stderr,
    /// so that one over-long question does not end a run. Any other error is returned (naming the question).
    pub fn unanswered(example: &Example, e: anyhow::Error) -> Result<Self> {
        let Some(overflow) = e.downcast_ref::<crate::model::ContextOverflow>() else {
            return Err(e.context(format!("question '{}'", example.id)));
        };
        eprintln!("warning: question '{}' skipped: {overflow}; recorded as unanswered (scored 0)", example.id);
        let mut rec = PredictionRecord::new(example, "");
        rec.skipped = Some(overflow.to_string());
        Ok(rec)
    }

    pub fn new(example: &Example, raw_output: &str) -> Self {
        let prediction = extract_answer(raw_output);
        PredictionRecord {
            id: example.id.clone(),
            question: example.question.clone(),
            gold: example.answers.clone(),
            metrics: score_example(example, &prediction),
            prediction,
            raw_output: raw_output.to_string(),
            retrievals: vec![],
            loops_guarded: 0,
            generated_tokens: 0,
            forward_tokens: 0,
            seconds: 0.0,
            skipped: None,
            trace: vec![],
        }
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Averages over a run (metrics.json).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The run directory's name.
    pub run: String,
    /// `method` (or `method.name`, or `label`) from config.toml; the directory name when absent.
    pub method: String,
    /// `dataset` (or `dataset.name`) from config.toml; "" when absent.
    pub dataset: String,
    pub questions: usize,
    pub em: f64,
    pub f1: f64,
    pub precision: f64,
    pub recall: f64,
    /// Mean over the questions that have an accuracy (yes/no kinds); `None` when none has.
    pub accuracy: Option<f64>,
    pub contains: f64,
    pub retrievals_per_question: f64,
    /// Share of retrievals (of questions with supporting paragraphs) that brought back a supporting paragraph.
    pub supporting_hit_rate: Option<f64>,
    pub generated_tokens_per_question: f64,
    pub forward_tokens_per_question: f64,
    pub seconds_per_question: f64,
    /// Whether predictions.jsonl ended in a truncated line that was ignored.
    #[serde(default)]
    pub truncated_tail: bool,
    /// Questions not answered because they did not fit in the model's context window (scored 0, counted in
    /// `questions`).
    #[serde(default)]
    pub skipped: usize,
    /// The controller (`method` in config.toml, whatever the label); the method when absent.
    #[serde(default)]
    pub controller: String,
    /// The retrieval budget the run was calibrated for (`budget` in config.toml: `eval --budget`), if any.
    #[serde(default)]
    pub budget: Option<f64>,
}

/// Appends predictions to a run directory; see the module doc.
pub struct RunWriter {
    dir: PathBuf,
    file: File,
    done: HashSet<String>,
    /// The run directory, locked for this process while the writer is open.
    _lock: crate::io::OutputLock,
}

impl RunWriter {
    /// Opens (creating if needed) `dir`, writes `config` as config.toml, or — when the directory already holds a
    /// run — checks it equals the stored config and resumes: a truncated last line is removed, and the ids
    /// already written are reported by [`RunWriter::is_done`].
    pub fn create<C: Serialize>(dir: &Path, config: &C) -> Result<Self> {
        let lock = crate::io::claim_output_dir(dir, "run directory", OUTPUT_KIND, CONFIG_FILE)?;
        let cfg_text = toml::to_string(config).context("cannot serialise the run config as TOML")?;
        let cfg_path = dir.join(CONFIG_FILE);
        let new: toml::Value = toml::from_str(&cfg_text)?;
        if crate::io::pin_settings(&cfg_path, &cfg_text, |t| Ok(toml::from_str::<toml::Value>(t)?))?
            .is_some_and(|old| old != new)
        {
            bail!(
                "{}: the run directory holds a run with a different config; use another --out (or delete it)",
                dir.display()
            );
        }
        let pred_path = dir.join(PREDICTIONS_FILE);
        let mut done = HashSet::new();
        if crate::io::exists(&pred_path)? {
            let (records, truncated_at) = read_predictions_inner(&pred_path)?;
            if let Some(len) = truncated_at {
                let f = OpenOptions::new()
                    .write(true)
                    .open(&pred_path)
                    .with_context(|| format!("{}: cannot open", pred_path.display()))?;
                f.set_len(len)
                    .with_context(|| format!("{}: cannot drop the truncated last line", pred_path.display()))?;
            }
            done = records.into_iter().map(|r| r.id).collect();
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&pred_path)
            .with_context(|| format!("{}: cannot open for appending", pred_path.display()))?;
        Ok(RunWriter { dir: dir.to_path_buf(), file, done, _lock: lock })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether a prediction for `id` is already in the run (resume: skip it).
    pub fn is_done(&self, id: &str) -> bool {
        self.done.contains(id)
    }

    /// How many predictions the run holds.
    pub fn len(&self) -> usize {
        self.done.len()
    }

    pub fn is_empty(&self) -> bool {
        self.done.is_empty()
    }

    /// Appends one prediction as a line and flushes it.
    pub fn write(&mut self, record: &PredictionRecord) -> Result<()> {
        if self.done.contains(&record.id) {
            bail!(
                "{}: a prediction for id '{}' is already written",
                self.dir.join(PREDICTIONS_FILE).display(),
                record.id
            );
        }
        let mut line = serde_json::to_string(record)?;
        line.push('\n');
        self.file
            .write_all(line.as_bytes())
            .and_then(|_| self.file.flush())
            .with_context(|| format!("{}: cannot write", self.dir.join(PREDICTIONS_FILE).display()))?;
        self.done.insert(record.id.clone());
        Ok(())
    }

    /// Summarises the run and writes metrics.json.
    pub fn finish(self) -> Result<Summary> {
        let s = summarise(&self.dir)?;
        write_metrics(&self.dir, &s)?;
        Ok(s)
    }
}

/// Running averages for the progress line of `ragtime eval`.
#[derive(Debug, Clone)]
pub struct Progress {
    pub total: usize,
    pub done: usize,
    clock: crate::progress::Clock,
    updates: usize,
    em: f64,
    f1: f64,
    acc: f64,
    acc_n: usize,
    retrievals: usize,
    seconds: f64,
}

impl Progress {
    /// `total`: questions in this run (resumed ones included); `already`: predictions already written.
    pub fn new(total: usize, already: usize) -> Self {
        Progress {
            total,
            done: already,
            clock: crate::progress::Clock::new(),
            updates: 0,
            em: 0.0,
            f1: 0.0,
            acc: 0.0,
            acc_n: 0,
            retrievals: 0,
            seconds: 0.0,
        }
    }

    /// Adds one new prediction and returns the progress line, e.g.
    /// `[12/250] EM 0.417 F1 0.512 acc - | 1.25 retrievals/q | 3.20 s/q | ETA 12m 46s` (averages over the
    /// predictions made by this process; s/q is each question's own time, which lanes answering several
    /// questions at once overlap, so the ETA comes from the wall-clock time since the process started).
    /// One question at a time: it has just finished.
    pub fn update(&mut self, r: &PredictionRecord) -> String {
        self.update_on_lanes(r, self.updates + 1)
    }

    /// [`Progress::update`] for a question answered on lanes, written in question order: `finished` questions of
    /// this process have been answered by now, this one and those that wait for a slower one before them; the
    /// ETA counts them all.
    pub fn update_on_lanes(&mut self, r: &PredictionRecord, finished: usize) -> String {
        let wall = self.clock.elapsed();
        self.update_at(r, wall, finished)
    }

    /// [`Progress::update_on_lanes`] with `wall` seconds since the start.
    pub fn update_at(&mut self, r: &PredictionRecord, wall: f64, finished: usize) -> String {
        self.done += 1;
        self.updates += 1;
        let k = self.updates as f64;
        self.em += r.metrics.em;
        self.f1 += r.metrics.f1;
        if let Some(a) = r.metrics.accuracy {
            self.acc += a;
            self.acc_n += 1;
        }
        self.retrievals += r.retrievals.len();
        self.seconds += r.seconds;
        let acc = if self.acc_n == 0 { "-".to_string() } else { format!("{:.3}", self.acc / self.acc_n as f64) };
        let finished = finished.max(self.updates);
        let left = self.total.saturating_sub(self.done - self.updates + finished);
        let (_, left) = crate::progress::rate_at(wall, finished, left);
        format!(
            "[{}/{}] EM {:.3} F1 {:.3} acc {acc} | {:.2} retrievals/q | {:.2} s/q | ETA {}",
            self.done,
            self.total,
            self.em / k,
            self.f1 / k,
            self.retrievals as f64 / k,
            self.seconds / k,
            crate::progress::hms(left)
        )
    }
}

/// Writes `summary` as metrics.json in `dir`.
pub fn write_metrics(dir: &Path, summary: &Summary) -> Result<()> {
    let p = dir.join(METRICS_FILE);
    std::fs::write(&p, serde_json::to_string_pretty(summary)? + "\n")
        .with_context(|| format!("{}: cannot write", p.display()))
}

/// Reads predictions.jsonl: the records, and `Some(byte length to keep)` when the last line is torn (see
/// [`crate::io::read_jsonl`]). A malformed line or a repeated id is an error naming file:line.
fn read_predictions_inner(path: &Path) -> Result<(Vec<PredictionRecord>, Option<u64>)> {
    let lines = crate::io::read_jsonl::<PredictionRecord>(path, "prediction")?;
    let mut seen = HashSet::new();
    for (line, r) in &lines.rows {
        if !seen.insert(r.id.clone()) {
            bail!("{}:{}: duplicate prediction for id '{}'", path.display(), line, r.id);
        }
    }
    let truncated = lines.torn.as_ref().map(|t| t.offset);
    Ok((lines.records(), truncated))
}

/// Every prediction of a run, in file order (a truncated last line is ignored).
pub fn read_predictions(run_dir: &Path) -> Result<Vec<PredictionRecord>> {
    Ok(read_predictions_inner(&run_dir.join(PREDICTIONS_FILE))?.0)
}

fn config_name(cfg: &toml::Value, key: &str) -> Option<String> {
    match cfg.get(key)? {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Table(t) => t.get("name").and_then(|v| v.as_str()).map(str::to_string),
        _ => None,
    }
}

/// A run directory's config.toml, parsed; `None` when the run has none.
pub fn read_config(run_dir: &Path) -> Result<Option<toml::Value>> {
    let path = run_dir.join(CONFIG_FILE);
    if !crate::io::exists(&path)? {
        return Ok(None);
    }
    let t = std::fs::read_to_string(&path).with_context(|| format!("{}: cannot read", path.display()))?;
    Ok(Some(toml::from_str(&t).with_context(|| format!("{}: malformed TOML", path.display()))?))
}

/// Averages a run directory's predictions (see [`Summary`]).
pub fn summarise(run_dir: &Path) -> Result<Summary> {
    let pred_path = run_dir.join(PREDICTIONS_FILE);
    if !crate::io::exists(&pred_path)? {
        bail!("{}: not a run directory (no {PREDICTIONS_FILE})", run_dir.display());
    }
    let (records, truncated) = read_predictions_inner(&pred_path)?;
    let run =
        run_dir.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| run_dir.display().to_string());
    let cfg = read_config(run_dir)?;
    let method = cfg
        .as_ref()
        .and_then(|c| c.get("label").and_then(|v| v.as_str()).map(str::to_string).or_else(|| config_name(c, "method")))
        .unwrap_or_else(|| run.clone());
    let dataset = cfg.as_ref().and_then(|c| config_name(c, "dataset")).unwrap_or_default();
    let controller = cfg.as_ref().and_then(|c| config_name(c, "method")).unwrap_or_else(|| method.clone());
    let budget =
        cfg.as_ref().and_then(|c| c.get("budget")).and_then(|v| v.as_float().or(v.as_integer().map(|i| i as f64)));
    let n = records.len();
    let mean =
        |f: &dyn Fn(&PredictionRecord) -> f64| if n == 0 { 0.0 } else { records.iter().map(f).sum::<f64>() / n as f64 };
    let accs: Vec<f64> = records.iter().filter_map(|r| r.metrics.accuracy).collect();
    let judged: Vec<bool> = records.iter().flat_map(|r| r.retrievals.iter().filter_map(|x| x.hit_supporting)).collect();
    Ok(Summary {
        run,
        method,
        dataset,
        questions: n,
        em: mean(&|r| r.metrics.em),
        f1: mean(&|r| r.metrics.f1),
        precision: mean(&|r| r.metrics.precision),
        recall: mean(&|r| r.metrics.recall),
        accuracy: if accs.is_empty() { None } else { Some(accs.iter().sum::<f64>() / accs.len() as f64) },
        contains: mean(&|r| r.metrics.contains),
        retrievals_per_question: mean(&|r| r.retrievals.len() as f64),
        supporting_hit_rate: if judged.is_empty() {
            None
        } else {
            Some(judged.iter().filter(|h| **h).count() as f64 / judged.len() as f64)
        },
        generated_tokens_per_question: mean(&|r| r.generated_tokens as f64),
        forward_tokens_per_question: mean(&|r| r.forward_tokens as f64),
        seconds_per_question: mean(&|r| r.seconds),
        truncated_tail: truncated.is_some(),
        skipped: records.iter().filter(|r| r.skipped.is_some()).count(),
        controller,
        budget,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::qa::{AnswerKind, Doc};

    pub(crate) fn example(id: &str, answers: &[&str], kind: AnswerKind, supporting: &[(&str, &str)]) -> Example {
        Example {
            id: id.into(),
            question: format!("question {id}?"),
            answers: answers.iter().map(|s| s.to_string()).collect(),
            kind,
            supporting: supporting.iter().map(|(t, x)| Doc { title: t.to_string(), text: x.to_string() }).collect(),
            contexts: vec![],
            entries: vec![],
        }
    }

    /// A question too long for the context window is recorded as unanswered (scored 0, marked, counted in the
    /// summary); any other error still ends the run.
    #[test]
    fn overflow_is_recorded_as_skipped_other_errors_are_not() {
        let ex = example("q1", &["Paris"], AnswerKind::Span, &[]);
        let overflow = anyhow::Error::from(crate::model::ContextOverflow { needed: 40000, max: 32768 });
        let rec = PredictionRecord::unanswered(&ex, overflow.context("feeding the prompt")).unwrap();
        assert_eq!(rec.skipped.as_deref(), Some("sequence of 40000 tokens exceeds the model's 32768 positions"));
        assert_eq!((rec.prediction.as_str(), rec.metrics.f1), ("", 0.0));
        let other = PredictionRecord::unanswered(&ex, anyhow::anyhow!("disk full")).unwrap_err();
        assert_eq!(format!("{other:#}"), "question 'q1': disk full");
        // round trip and summary
        let dir = tempfile::tempdir().unwrap();
        let mut w = RunWriter::create(dir.path(), &toml::Value::Table(Default::default())).unwrap();
        w.write(&rec).unwrap();
        w.write(&PredictionRecord::new(&example("q2", &["Rome"], AnswerKind::Span, &[]), "Rome")).unwrap();
        let s = w.finish().unwrap();
        assert_eq!((s.questions, s.skipped), (2, 1));
        assert!((s.f1 - 0.5).abs() < 1e-12);
    }

    pub(crate) fn passage(id: &str, title: &str, text: &str) -> Passage {
        Passage { id: id.into(), title: title.into(), text: text.into(), score: 0.0 }
    }

    #[derive(Serialize)]
    pub(crate) struct Cfg {
        pub method: String,
        pub dataset: String,
        pub threshold: f64,
    }

    /// Writes a run with three questions; the expected averages are worked out in `summary_by_hand`.
    pub(crate) fn fake_run(dir: &Path, method: &str) -> Result<()> {
        let mut w = RunWriter::create(dir, &Cfg { method: method.into(), dataset: "hotpotqa".into(), threshold: 1.2 })?;
        // q1: correct; 2 retrievals, the first brings back the supporting "Shirley Temple" paragraph.
        let e1 = example(
            "q1",
            &["Chief of Protocol"],
            AnswerKind::Span,
            &[("Shirley Temple", "She was Chief of Protocol.")],
        );
        let mut r1 =
            PredictionRecord::new(&e1, "Shirley Temple was Chief of Protocol. So the answer is Chief of Protocol.");
        r1.retrievals.push(RetrievalRecord::new(
            &e1,
            0,
            "Corliss Archer",
            &[passage("7", "Shirley Temple", "She was  Chief of Protocol."), passage("9", "X", "y")],
        ));
        r1.retrievals.push(RetrievalRecord::new(&e1, 4, "Shirley Temple position", &[passage("9", "X", "y")]));
        (r1.generated_tokens, r1.forward_tokens, r1.seconds) = (20, 500, 1.5);
        r1.trace = vec![
            TraceToken { text: "Shirley".into(), entropy: 0.2, score: Some(0.1) },
            TraceToken { text: " Temple".into(), entropy: 2.5, score: Some(1.9) },
        ];
        w.write(&r1)?;
        // q2: "Walls and Bridges album" vs "Walls and Bridges": EM 0, F1 6/7, P 3/4, R 1; 1 retrieval, no hit.
        let e2 = example("q2", &["Walls and Bridges"], AnswerKind::Span, &[("Walls and Bridges", "An album.")]);
        let mut r2 = PredictionRecord::new(&e2, "So the answer is Walls and Bridges album.");
        r2.retrievals.push(RetrievalRecord::new(
            &e2,
            2,
            "Nobody Loves You album",
            &[passage("3", "Walls and Bridges", "Another text.")],
        ));
        (r2.generated_tokens, r2.forward_tokens, r2.seconds) = (10, 300, 0.5);
        w.write(&r2)?;
        // q3: yes/no, correct; no retrieval, no supporting paragraphs.
        let e3 = example("q3", &["no"], AnswerKind::YesNo, &[]);
        let mut r3 = PredictionRecord::new(&e3, "Thus not. So the answer is no.");
        (r3.generated_tokens, r3.forward_tokens, r3.seconds) = (30, 100, 1.0);
        w.write(&r3)?;
        Ok(())
    }

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-9, "{a} != {b}");
    }

    #[test]
    fn summary_by_hand() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("dragin-hotpot");
        fake_run(&run, "dragin").unwrap();
        let s = summarise(&run).unwrap();
        assert_eq!(
            (s.run.as_str(), s.method.as_str(), s.dataset.as_str(), s.questions),
            ("dragin-hotpot", "dragin", "hotpotqa", 3)
        );
        // EM: (1 + 0 + 1) / 3; F1: (1 + 6/7 + 1) / 3 = 20/21; P: (1 + 3/4 + 1)/3 = 11/12; R: 1.
        close(s.em, 2.0 / 3.0);
        close(s.f1, 20.0 / 21.0);
        close(s.precision, 11.0 / 12.0);
        close(s.recall, 1.0);
        // Accuracy only over the yes/no question.
        assert_eq!(s.accuracy, Some(1.0));
        // 3 retrievals over 3 questions; 1 of the 3 judged retrievals hit.
        close(s.retrievals_per_question, 1.0);
        close(s.supporting_hit_rate.unwrap(), 1.0 / 3.0);
        close(s.generated_tokens_per_question, 20.0);
        close(s.forward_tokens_per_question, 300.0);
        close(s.seconds_per_question, 1.0);
        assert!(!s.truncated_tail);
    }

    #[test]
    fn resume_skips_written_and_drops_truncated_line() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("r");
        fake_run(&run, "dragin").unwrap();
        let p = run.join(PREDICTIONS_FILE);
        let full = std::fs::read_to_string(&p).unwrap();
        // Simulate a kill in the middle of writing the third line.
        let cut = full.trim_end().rfind('\n').unwrap() + 1 + 25;
        std::fs::write(&p, &full[..cut]).unwrap();
        let s = summarise(&run).unwrap();
        assert_eq!(s.questions, 2);
        assert!(s.truncated_tail);
        let cfg = Cfg { method: "dragin".into(), dataset: "hotpotqa".into(), threshold: 1.2 };
        let mut w = RunWriter::create(&run, &cfg).unwrap();
        assert!(w.is_done("q1") && w.is_done("q2") && !w.is_done("q3"));
        assert_eq!(w.len(), 2);
        let e3 = example("q3", &["no"], AnswerKind::YesNo, &[]);
        w.write(&PredictionRecord::new(&e3, "So the answer is no.")).unwrap();
        assert!(w.write(&PredictionRecord::new(&e3, "again")).is_err(), "an id is written once");
        let s = w.finish().unwrap();
        assert_eq!((s.questions, s.truncated_tail), (3, false));
        let lines: Vec<_> = std::fs::read_to_string(&p).unwrap().lines().map(str::to_string).collect();
        assert_eq!(lines.len(), 3);
        let m: Summary = serde_json::from_str(&std::fs::read_to_string(run.join(METRICS_FILE)).unwrap()).unwrap();
        assert_eq!(m, s);
    }

    #[test]
    fn resume_refuses_other_config_and_reports_bad_lines() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("r");
        fake_run(&run, "dragin").unwrap();
        let other = Cfg { method: "flare".into(), dataset: "hotpotqa".into(), threshold: 1.2 };
        assert!(format!("{:#}", RunWriter::create(&run, &other).err().unwrap()).contains("different config"));
        let p = run.join(PREDICTIONS_FILE);
        let mut text = std::fs::read_to_string(&p).unwrap();
        text.insert_str(0, "{not json}\n");
        std::fs::write(&p, text).unwrap();
        let err = format!("{:#}", summarise(&run).unwrap_err());
        assert!(err.contains("predictions.jsonl:1: malformed prediction"), "{err}");
        assert!(summarise(dir.path()).unwrap_err().to_string().contains("not a run directory"));
    }

    #[test]
    fn progress_line_by_hand() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("r");
        fake_run(&run, "dragin").unwrap();
        let recs = read_predictions(&run).unwrap();
        // Resumed after 10 of 14 questions; two new predictions: q1 (EM 1, 2 retrievals, 1.5 s) and q2 (EM 0,
        // F1 6/7, 1 retrieval, 0.5 s). EM 1/2, F1 (1 + 6/7)/2 = 13/14 = 0.929, 1.5 retrievals/q, 1 s/q; answered
        // on lanes at once, both done 1.5 s after the start: 0.75 s each, 2 questions left -> ETA 1.5 s -> 2 s.
        let mut p = Progress::new(14, 10);
        p.update_at(&recs[0], 1.5, 1);
        let line = p.update_at(&recs[1], 1.5, 2);
        assert_eq!(line, "[12/14] EM 0.500 F1 0.929 acc - | 1.50 retrievals/q | 1.00 s/q | ETA 0m 02s");
        let line = p.update_at(&recs[1], 30.0, 3);
        assert!(line.ends_with("ETA 0m 10s"), "30 s for 3 questions, one left: {line}");
        let mut p = Progress::new(14, 10);
        p.update_at(&recs[0], 1.0, 1);
        p.update_at(&recs[1], 2.0, 2);
        let line = p.update_at(&recs[2], 3.0, 3);
        assert!(line.starts_with("[13/14] EM 0.667") && line.contains("acc 1.000"), "{line}");
        // On lanes: the first question is written 20 s in, when 3 of the 4 left have finished (two waited for
        // it): 20 / 3 s each, one to go -> ETA 6.7 s -> 7 s (counting the one written: 60 s).
        let mut p = Progress::new(14, 10);
        let line = p.update_at(&recs[0], 20.0, 3);
        assert!(line.starts_with("[11/14]") && line.ends_with("ETA 0m 07s"), "{line}");
        // a count below the written ones (one lane) counts those
        let mut p = Progress::new(14, 10);
        p.update_at(&recs[0], 1.0, 0);
        let line = p.update_at(&recs[1], 2.0, 0);
        assert!(line.ends_with("ETA 0m 02s"), "2 s for 2 questions, 2 left: {line}");
    }

    #[test]
    fn dataset_spec_serialises_into_the_run_config() {
        #[derive(Serialize)]
        struct RunConfig {
            method: String,
            dataset: crate::eval::DatasetSpec,
        }
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("r");
        let cfg = RunConfig { method: "dragin".into(), dataset: crate::eval::DatasetSpec::load("bioasq").unwrap() };
        RunWriter::create(&run, &cfg).unwrap();
        let text = std::fs::read_to_string(run.join(CONFIG_FILE)).unwrap();
        assert!(text.contains("kinds = [\"yes_no\"]"), "{text}");
        let back: toml::Value = toml::from_str(&text).unwrap();
        let spec: crate::eval::DatasetSpec = back["dataset"].clone().try_into().unwrap();
        assert_eq!(spec, cfg.dataset);
        RunWriter::create(&run, &cfg).expect("same config resumes");
        let s = summarise(&run).unwrap();
        assert_eq!((s.method.as_str(), s.dataset.as_str(), s.questions), ("dragin", "bioasq", 0));
    }

    #[test]
    fn non_finite_entropy_round_trips_as_null() {
        let t = TraceToken { text: "x".into(), entropy: f32::NAN, score: Some(f32::INFINITY) };
        let j = serde_json::to_string(&t).unwrap();
        assert_eq!(j, r#"{"text":"x","entropy":null,"score":null}"#);
        let back: TraceToken = serde_json::from_str(&j).unwrap();
        assert!(back.entropy.is_nan() && back.score.is_none());
    }

    #[test]
    fn retrieval_hit_needs_supporting_paragraphs() {
        let e = example("a", &["x"], AnswerKind::Span, &[]);
        assert_eq!(RetrievalRecord::new(&e, 0, "q", &[passage("1", "T", "x")]).hit_supporting, None);
    }
}
