//! The evaluation harness: datasets, prompts, scoring, run directories and reports.
//!
//! # How `ragtime eval` uses it
//!
//! ```ignore
//! use ragtime::eval::{DatasetSpec, run::{RunWriter, PredictionRecord, RetrievalRecord, TraceToken}};
//! use ragtime::prompt::{needs_answer_suffix_with, ANSWER_SUFFIX};
//!
//! let spec = DatasetSpec::load("hotpotqa")?;            // a name (datasets/hotpotqa.toml), a .toml path or a data file
//! // or: DatasetSpec::from_data_file(path, Some(Layout::Popqa))?   for `--dataset PATH --layout popqa`
//! let examples = spec.load_examples()?;                   // Vec<qa::Example>
//! let prompts = spec.prompt_builder()?;                   // PromptBuilder: exemplars, DRAGIN layout
//! let mut out = RunWriter::create(&out_dir, &config)?;    // config: any Serialize (include `spec`, method, model)
//! for ex in &examples {
//!     if out.is_done(&ex.id) { continue; }                // resume
//!     // decode loop: prompts.shared_prefix() is the cacheable start of every prompt;
//!     //   prompts.build(&ex.question, &docs, &answer_so_far)  (or build_chat for instruct models)
//!     // each retrieval:  retrievals.push(RetrievalRecord::new(ex, token_pos, &query, &passages));
//!     // at the end: if needs_answer_suffix_with(&text, &spec.answer_pattern) { append " So the answer is"
//!     //   and generate a few more tokens (DRAGIN: 20) }
//!     let mut rec = PredictionRecord::new(ex, &text);     // extracts the answer and scores it
//!     rec.retrievals = retrievals;
//!     rec.generated_tokens = ..; rec.forward_tokens = ..; rec.seconds = ..;
//!     rec.trace = steps.iter().map(|s| TraceToken { text: s.text.clone(), entropy: s.entropy, score }).collect();
//!     out.write(&rec)?;                                   // one flushed line of predictions.jsonl
//! }
//! let summary = out.finish()?;                            // writes metrics.json
//! println!("{}", report::markdown_table(&[summary]));
//! ```
//!
//! Modules: [`metrics`] (EM/F1/accuracy), [`list_answers`] (BioASQ's list measures), [`run`] (run directory
//! format, resume, summaries), [`report`] (Markdown table and HTML page). Dataset loaders live in [`crate::qa`],
//! prompts in [`crate::prompt`].

pub mod bootstrap;
pub mod compare;
pub mod curves;
pub mod list_answers;
pub mod merge;
pub mod metrics;
pub mod pareto;
pub mod plot;
pub mod refine;
pub mod report;
pub mod run;
pub mod sweep;

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::prompt::{shared_path, PromptBuilder, ANSWER_PATTERN};
use crate::qa::{self, AnswerKind, Example, Layout};

/// Which numbers head a dataset's results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Exact match and token F1 (span answers).
    #[default]
    EmF1,
    /// Accuracy (yes/no or yes/no/maybe answers).
    Accuracy,
}

fn default_pattern() -> String {
    ANSWER_PATTERN.to_string()
}

fn default_max_new_tokens() -> usize {
    100
}

/// Datasets whose questions are reserved for validating and testing controllers: nothing that makes training
/// data (`synth autorag`, `synth qa-labels`) takes them.
pub const RESERVED_FOR_TESTING: &[&str] = &["hotpotqa", "2wikimultihopqa", "musique"];

/// A dataset description: `datasets/<name>.toml`.
///
/// Relative `file`, `exemplars` and `corpus` paths are relative to the data folders ([`crate::data::resolve`]:
/// `datasets/data`, then `../shared/data`); `index` is relative to the working directory (where `ragtime index`
/// built it). [`DatasetSpec::load`] returns them resolved. `[source]` says where `ragtime data fetch` gets the
/// data file and its sha256; `[splits]` names question ranges (`valid = "0..100"`, `test = "100.."`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetSpec {
    pub name: String,
    /// The data file (or BioASQ folder).
    pub file: PathBuf,
    /// Its layout; detected from the file when absent.
    #[serde(default)]
    pub layout: Option<Layout>,
    #[serde(default)]
    pub metric: Metric,
    /// Few-shot exemplar file (DRAGIN or IRCoT layout); zero-shot when absent.
    #[serde(default)]
    pub exemplars: Option<PathBuf>,
    /// Number of exemplars to use (the first n); all when absent.
    #[serde(default)]
    pub fewshot: Option<usize>,
    /// Show the exemplars' context paragraphs (IRCoT "with context" files).
    #[serde(default)]
    pub exemplar_contexts: bool,
    /// Generation length (DRAGIN's generate_max_length).
    #[serde(default = "default_max_new_tokens")]
    pub max_new_tokens: usize,
    /// Default retrieval index.
    #[serde(default)]
    pub index: Option<PathBuf>,
    /// The corpus the default index is built from.
    #[serde(default)]
    pub corpus: Option<PathBuf>,
    /// The phrase before the final answer.
    #[serde(default = "default_pattern")]
    pub answer_pattern: String,
    /// Text before the test question's "Question:" (DRAGIN's StrategyQA instruction).
    #[serde(default)]
    pub question_prefix: String,
    /// Keep only questions of these kinds (BioASQ: `["yes_no"]`); all when absent.
    #[serde(default)]
    pub kinds: Option<Vec<AnswerKind>>,
    /// Where the data file is published ([`crate::data::Source`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<crate::data::Source>,
    /// Named question ranges (indices into [`DatasetSpec::load_examples`]'s list).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub splits: BTreeMap<String, SplitRange>,
}

/// A half-open range of question indices, written `"START..END"` or `"START.."` (to the last question).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SplitRange {
    pub start: usize,
    pub end: Option<usize>,
}

impl TryFrom<String> for SplitRange {
    type Error = String;

    fn try_from(s: String) -> std::result::Result<Self, String> {
        let bad = || format!("split '{s}' is not START..END or START.. (question indices, END excluded)");
        let (a, b) = s.split_once("..").ok_or_else(bad)?;
        let start = a.trim().parse::<usize>().map_err(|_| bad())?;
        let end = match b.trim() {
            "" => None,
            e => Some(e.parse::<usize>().map_err(|_| bad())?),
        };
        if end.is_some_and(|e| e <= start) {
            return Err(format!("split '{s}' is empty (END must be above START)"));
        }
        Ok(SplitRange { start, end })
    }
}

impl From<SplitRange> for String {
    fn from(r: SplitRange) -> String {
        match r.end {
            Some(e) => format!("{}..{e}", r.start),
            None => format!("{}..", r.start),
        }
    }
}

impl DatasetSpec {
    /// Whether the questions are reserved for testing controllers: a spec named in [`RESERVED_FOR_TESTING`], or
    /// data from the folder of one of their data files under another name (a data file given by path, whose name
    /// is its file stem, or a spec of one's own pointing there).
    pub fn reserved_for_testing(&self) -> bool {
        if RESERVED_FOR_TESTING.contains(&self.name.as_str()) {
            return true;
        }
        // the folder holding a data file (not the parent of a data folder such as BioASQ's)
        let folder = |f: &Path| {
            let f = std::fs::canonicalize(f).ok()?;
            if crate::io::is_file(&f).ok()? {
                f.parent().map(Path::to_path_buf)
            } else {
                Some(f)
            }
        };
        let Some(mine) = folder(&self.file) else { return false };
        RESERVED_FOR_TESTING
            .iter()
            .filter_map(|n| Self::from_toml_file(&Self::find_toml(n)?).ok())
            .any(|r| folder(&r.file).is_some_and(|theirs| mine.starts_with(&theirs)))
    }

    /// Folders searched for `NAME.toml`: `./datasets`, then the crate's own `datasets/`.
    pub fn search_dirs() -> Vec<PathBuf> {
        vec![PathBuf::from("datasets"), Path::new(env!("CARGO_MANIFEST_DIR")).join("datasets")]
    }

    /// Resolves `name_or_path`: an existing `.toml` file is a spec; another existing file (or folder) is a data
    /// file ([`DatasetSpec::from_data_file`], layout detected); anything else is a name looked up as
    /// `datasets/NAME.toml`.
    pub fn load(name_or_path: &str) -> Result<Self> {
        Self::load_as(name_or_path, None)
    }

    /// [`DatasetSpec::load`] with the layout of a data file given (`--layout`) instead of detected; a layout
    /// given for a spec (which names its own) is a usage error.
    pub fn load_as(name_or_path: &str, layout: Option<Layout>) -> Result<Self> {
        let p = Path::new(name_or_path);
        let is_spec = |p: &Path| p.extension().is_some_and(|e| e == "toml");
        if let Some(l) = layout {
            if !crate::io::exists(p)? || is_spec(p) {
                crate::usage_bail!(
                    "--layout {l}: applies to a data file given as --dataset PATH; '{name_or_path}' is a dataset spec, \
                     which names its own layout"
                );
            }
            return Self::from_data_file(p, Some(l));
        }
        if crate::io::exists(p)? {
            if is_spec(p) {
                return Self::from_toml_file(p);
            }
            return Self::from_data_file(p, None);
        }
        match Self::find_toml(name_or_path) {
            Some(f) => Self::from_toml_file(&f),
            None => {
                let known = Self::known_names();
                crate::usage_bail!(
                    "dataset '{name_or_path}' is neither a file nor a known name (known: {})",
                    known.join(", ")
                )
            }
        }
    }

    /// The spec file `NAME.toml` in [`DatasetSpec::search_dirs`].
    pub fn find_toml(name: &str) -> Option<PathBuf> {
        Self::search_dirs()
            .into_iter()
            .map(|d| d.join(format!("{name}.toml")))
            .find(|f| crate::io::present_or_refused(f))
    }

    /// Names of the specs in [`DatasetSpec::search_dirs`].
    pub fn known_names() -> Vec<String> {
        let mut names: Vec<String> = Self::search_dirs()
            .iter()
            .filter_map(|d| std::fs::read_dir(d).ok())
            .flatten()
            .filter_map(|e| {
                let p = e.ok()?.path();
                if p.extension()? != "toml" {
                    return None;
                }
                Some(p.file_stem()?.to_string_lossy().into_owned())
            })
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// Reads a spec file and resolves its paths.
    pub fn from_toml_file(path: &Path) -> Result<Self> {
        let mut spec = Self::parse_toml_file(path)?;
        spec.file = shared_path(&spec.file);
        spec.exemplars = spec.exemplars.map(|p| shared_path(&p));
        spec.corpus = spec.corpus.map(|p| shared_path(&p));
        Ok(spec)
    }

    /// Reads and checks a spec file, leaving its paths as written (data-relative).
    pub fn parse_toml_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("{}: cannot read", path.display()))?;
        let spec: DatasetSpec = toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        if spec.max_new_tokens == 0 {
            bail!("{}: max_new_tokens must be at least 1", path.display());
        }
        if let Some(src) = &spec.source {
            src.validate().with_context(|| format!("{}", path.display()))?;
        }
        Ok(spec)
    }

    /// The question indices of split `name`, for a dataset of `count` questions.
    pub fn split_range(&self, name: &str, count: usize) -> Result<Range<usize>> {
        let Some(r) = self.splits.get(name) else {
            let known: Vec<&str> = self.splits.keys().map(String::as_str).collect();
            if known.is_empty() {
                crate::usage_bail!(
                    "--split {name}: dataset '{}' defines no splits (add [splits] to its spec)",
                    self.name
                );
            }
            crate::usage_bail!(
                "--split {name}: dataset '{}' has no such split (known: {})",
                self.name,
                known.join(", ")
            );
        };
        let end = r.end.unwrap_or(count);
        if end > count || r.start >= end {
            bail!(
                "--split {name}: questions {}..{end} of dataset '{}', but {} has {count}",
                r.start,
                self.name,
                self.file.display()
            );
        }
        Ok(r.start..end)
    }

    /// The questions of split `name` (all questions for `None`).
    pub fn load_split(&self, name: Option<&str>) -> Result<Vec<Example>> {
        let ex = self.load_examples()?;
        match name {
            None => Ok(ex),
            Some(n) => {
                let r = self.split_range(n, ex.len())?;
                Ok(ex[r].to_vec())
            }
        }
    }

    /// A spec for a bare data file: layout given or detected, the layout's usual metric, zero-shot, 100 new
    /// tokens, no index.
    pub fn from_data_file(path: &Path, layout: Option<Layout>) -> Result<Self> {
        let layout = match layout {
            Some(l) => l,
            None => qa::detect_layout(path)?,
        };
        let metric = match layout {
            Layout::StrategyqaBigbench | Layout::StrategyqaOriginal | Layout::Pubmedqa | Layout::Bioasq => {
                Metric::Accuracy
            }
            _ => Metric::EmF1,
        };
        Ok(DatasetSpec {
            name: path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default(),
            file: path.to_path_buf(),
            layout: Some(layout),
            metric,
            exemplars: None,
            fewshot: None,
            exemplar_contexts: false,
            max_new_tokens: default_max_new_tokens(),
            index: None,
            corpus: None,
            answer_pattern: default_pattern(),
            question_prefix: String::new(),
            kinds: None,
            source: None,
            splits: BTreeMap::new(),
        })
    }

    /// The questions, filtered by `kinds`.
    pub fn load_examples(&self) -> Result<Vec<Example>> {
        if !crate::io::exists(&self.file)? && self.source.is_some() {
            let roots: Vec<String> = crate::data::roots().iter().map(|r| r.display().to_string()).collect();
            bail!(
                "{}: cannot read: dataset '{}' is in none of the data folders ({}); run `ragtime data fetch {}`",
                self.file.display(),
                self.name,
                roots.join(", "),
                self.name
            );
        }
        let mut ex = qa::load(&self.file, self.layout)?;
        if let Some(kinds) = &self.kinds {
            ex.retain(|e| kinds.contains(&e.kind));
            if ex.is_empty() {
                bail!("{}: no questions of the kinds {kinds:?}", self.file.display());
            }
        }
        Ok(ex)
    }

    /// The prompt builder for this dataset (its exemplars, question prefix).
    pub fn prompt_builder(&self) -> Result<PromptBuilder> {
        let b = match &self.exemplars {
            Some(p) => PromptBuilder::from_file(p, self.fewshot)?,
            None => PromptBuilder::zero_shot(),
        };
        Ok(b.exemplar_contexts(self.exemplar_contexts).question_prefix(self.question_prefix.clone()))
    }

    /// Adds to a run's config.toml what of the prompt its dataset name does not pin: the instruction before each
    /// question, when there is one (left out otherwise, so runs made before it was recorded still resume). A run
    /// resumed with another instruction is then refused, and `report` lists runs that differ in it.
    pub fn record_prompt(&self, config: &mut toml::map::Map<String, toml::Value>) {
        if !self.question_prefix.is_empty() {
            config.insert("question_prefix".into(), toml::Value::String(self.question_prefix.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fair comparison on one dataset gives every controller the same answer length: each shipped token-level
    /// config, on each shipped dataset, resolves to the dataset's `max_new_tokens` (its own `[generation]` or
    /// `[datasets.<name>] generation`, when it sets one, agreeing with the dataset's spec).
    #[test]
    fn every_shipped_controller_answers_within_the_datasets_length() {
        use crate::config::{shipped, shipped_methods, GenerationTable, MethodConfig, TOKEN_LEVEL_TABLES};
        let datasets: Vec<DatasetSpec> =
            DatasetSpec::known_names().iter().map(|n| DatasetSpec::load(n).unwrap()).collect();
        assert!(datasets.iter().any(|d| d.name == "pubmedqa" && d.max_new_tokens == 100));
        let controllers: Vec<String> = shipped_methods().into_iter().filter(|m| m != "autorag").collect();
        assert!(controllers.len() >= crate::trigger::NAMES.len(), "{controllers:?}");
        for m in &controllers {
            for d in &datasets {
                let path = shipped(&format!("{m}.toml"));
                let mc = MethodConfig::load(&path, Some(&d.name), &[], TOKEN_LEVEL_TABLES).unwrap();
                let got = mc.section::<GenerationTable>("generation").unwrap().max_new_tokens;
                assert_eq!(got.unwrap_or(d.max_new_tokens), d.max_new_tokens, "{m} on {}", d.name);
            }
        }
    }

    /// The reserved datasets by name, and their data under another name: another file of the same folder given by
    /// path, or a spec of one's own pointing there. Other data (the training pools, a file of one's own) is not.
    #[test]
    fn reserved_questions_are_found_by_name_and_by_folder() {
        let Some(other) = crate::testing::require("qa/hotpotqa/hotpot_dev_simplified.json") else { return };
        assert!(DatasetSpec::load("hotpotqa").unwrap().reserved_for_testing());
        assert!(DatasetSpec::load("2wikimultihopqa").unwrap().reserved_for_testing());
        assert!(DatasetSpec::load("musique").unwrap().reserved_for_testing());
        let by_path = DatasetSpec::from_data_file(&other, None).unwrap();
        assert_eq!(by_path.name, "hotpot_dev_simplified");
        assert!(by_path.reserved_for_testing());
        let dir = tempfile::tempdir().unwrap();
        let toml = dir.path().join("mine.toml");
        let mut spec = DatasetSpec::load("hotpotqa").unwrap();
        spec.name = "mine".into();
        std::fs::write(&toml, toml::to_string(&spec).unwrap()).unwrap();
        assert!(DatasetSpec::load(toml.to_str().unwrap()).unwrap().reserved_for_testing());
        let own = dir.path().join("questions.jsonl");
        std::fs::write(&own, "{\"id\": \"q0\", \"question\": \"Where is Rome?\", \"answer\": [\"Italy\"]}\n").unwrap();
        assert!(!DatasetSpec::from_data_file(&own, None).unwrap().reserved_for_testing());
        for name in ["nq", "triviaqa", "bioasq", "pubmedqa"] {
            if let Ok(spec) = DatasetSpec::load(name) {
                assert!(!spec.reserved_for_testing(), "{name}");
            }
        }
    }

    #[test]
    fn every_shipped_spec_parses_and_resolves() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("datasets");
        let names = DatasetSpec::known_names();
        let shipped = "hotpotqa 2wikimultihopqa strategyqa nq triviaqa pubmedqa bioasq iirc popqa musique";
        for n in shipped.split(' ') {
            assert!(names.contains(&n.to_string()), "datasets/{n}.toml missing");
            let spec = DatasetSpec::from_toml_file(&dir.join(format!("{n}.toml"))).unwrap();
            assert_eq!(spec.name, n);
            let source = spec.source.as_ref().unwrap_or_else(|| panic!("{n}: no [source]"));
            assert!(source.url.starts_with("https://"), "{n}: {}", source.url);
            assert!(!spec.splits.is_empty(), "{n}: no [splits]");
            if let Some(e) = &spec.exemplars {
                if e.exists() || crate::testing::data_required() {
                    spec.prompt_builder().unwrap_or_else(|err| panic!("{n}: {err:#} ({})", e.display()));
                }
            }
        }
    }

    #[test]
    fn shipped_checksums_match_the_shared_files() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("datasets");
        for n in DatasetSpec::known_names() {
            let Ok(spec) = DatasetSpec::parse_toml_file(&dir.join(format!("{n}.toml"))) else { continue };
            let Some(source) = &spec.source else { continue };
            for (_, rel, sha) in source.items(&spec.file) {
                // IIRC, PopQA and MuSiQue record no checksum: users bring their files.
                let Some(sha) = sha else { continue };
                let p = crate::require_data!(rel.to_str().unwrap());
                assert_eq!(crate::data::sha256_file(&p).unwrap(), sha, "{n}: {}", p.display());
            }
        }
    }

    #[test]
    fn splits_select_question_ranges() {
        let spec = DatasetSpec::load("hotpotqa").unwrap();
        assert_eq!(spec.split_range("valid", 250).unwrap(), 0..100);
        assert_eq!(spec.split_range("test", 250).unwrap(), 100..250);
        let err = spec.split_range("train", 250).unwrap_err().to_string();
        assert!(err.contains("train") && err.contains("known: test, valid"), "{err}");
        let err = spec.split_range("test", 90).unwrap_err().to_string();
        assert!(err.contains("has 90"), "{err}");
        let pm = DatasetSpec::load("pubmedqa").unwrap();
        assert_eq!((pm.split_range("valid", 500).unwrap(), pm.split_range("test", 500).unwrap()), (0..200, 200..500));
        let data = crate::require_data!("qa/hotpotqa/ircot_dev_250.jsonl");
        assert!(spec.file.ends_with("ircot_dev_250.jsonl") && data.exists());
        let (all, test) = (spec.load_split(None).unwrap(), spec.load_split(Some("test")).unwrap());
        assert_eq!((all.len(), test.len()), (250, 150));
        assert_eq!(test[0].id, all[100].id);
    }

    #[test]
    fn split_and_source_errors_name_the_file_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("y.toml");
        let cases = [
            ("[splits]\nvalid = \"10..5\"\n", "10..5"),
            ("[splits]\nvalid = \"a..5\"\n", "START..END"),
            ("[source]\nurl = \"https://x\"\nsha265 = \"0\"\n", "sha265"),
            ("[source]\nurl = \"https://x\"\nsha256 = \"0\"\n", "64 hex"),
        ];
        for (tail, want) in cases {
            std::fs::write(&p, format!("name = \"y\"\nfile = \"a.json\"\n{tail}")).unwrap();
            let err = format!("{:#}", DatasetSpec::from_toml_file(&p).unwrap_err());
            assert!(err.contains("y.toml") && err.contains(want), "{err}");
        }
        std::fs::write(&p, "name = \"y\"\nfile = \"qa/y/none.json\"\n[source]\nurl = \"https://x\"\n").unwrap();
        let err = format!("{:#}", DatasetSpec::from_toml_file(&p).unwrap().load_examples().unwrap_err());
        assert!(err.contains("ragtime data fetch y") && err.contains("none.json"), "{err}");
    }

    #[test]
    fn shipped_specs_load_their_data() {
        // IIRC and PopQA data are not in the shared folder (users bring them).
        let cases = [
            ("hotpotqa", 250),
            ("2wikimultihopqa", 100),
            ("strategyqa", 2290),
            ("nq", 3610),
            ("triviaqa", 1000),
            ("pubmedqa", 500),
            ("bioasq", 409),
        ];
        for (name, n) in cases {
            let spec = DatasetSpec::parse_toml_file(&DatasetSpec::find_toml(name).unwrap()).unwrap();
            crate::require_data!(spec.file.to_str().unwrap());
            let spec = DatasetSpec::load(name).unwrap();
            let all = spec.load_examples().unwrap();
            assert_eq!(all.len(), n, "{name}");
            for split in spec.splits.keys() {
                spec.split_range(split, all.len()).unwrap_or_else(|e| panic!("{name}: {e}"));
            }
        }
        let iirc = DatasetSpec::load("iirc").unwrap();
        let err = format!("{:#}", iirc.load_examples().unwrap_err());
        assert!(err.contains("iirc") && err.contains("cannot read"), "{err}");
    }

    #[test]
    fn hotpotqa_spec_builds_dragin_prompt() {
        crate::require_data!("fewshot/dragin/hotpotqa.txt");
        crate::require_data!("fewshot/dragin/strategyqa.txt");
        let spec = DatasetSpec::load("hotpotqa").unwrap();
        assert_eq!(spec.max_new_tokens, 100);
        assert!(spec.index.is_some());
        let b = spec.prompt_builder().unwrap();
        assert_eq!(b.exemplars.len(), 8);
        let p = b.build("Who?", &[], "");
        assert!(p.starts_with("Question: Jeremy Theobald and Christopher Nolan share what profession?\nAnswer: "));
        assert!(p.ends_with("So the answer is Germany.\nQuestion: Who?\nAnswer:"));
        let sq = DatasetSpec::load("strategyqa").unwrap().prompt_builder().unwrap();
        assert!(sq.build("Q?", &[], "").ends_with(
            "Following the examples above, answer the question by reasoning step-by-step.\n\nQuestion: Q?\nAnswer:"
        ));
    }

    #[test]
    fn data_file_and_unknown_names() {
        let err = DatasetSpec::load("no-such-dataset").unwrap_err().to_string();
        assert!(err.contains("known:") && err.contains("hotpotqa"), "{err}");
        let p = crate::require_data!("qa/pubmedqa/pqal_dev_500.json");
        let spec = DatasetSpec::load(p.to_str().unwrap()).unwrap();
        assert_eq!(
            (spec.layout, spec.metric, spec.name.as_str()),
            (Some(Layout::Pubmedqa), Metric::Accuracy, "pqal_dev_500")
        );
    }

    /// A file whose layout cannot be detected says to name it with --layout; --layout is the layout used (a
    /// wrong one fails on the fields it needs); --layout with a spec's name is a usage error (the spec names
    /// its own layout).
    #[test]
    fn layout_flag_names_the_layout_of_a_data_file() {
        let dir = tempfile::tempdir().unwrap();
        let odd = dir.path().join("odd.jsonl");
        std::fs::write(&odd, "{\"query\": \"Who wrote Hamlet?\", \"label\": \"Shakespeare\"}\n").unwrap();
        let e = format!("{:#}", DatasetSpec::load(odd.to_str().unwrap()).unwrap_err());
        assert!(e.contains("cannot tell the layout") && e.contains("--layout (one of hotpotqa-ircot"), "{e}");
        let nq = dir.path().join("nq.jsonl");
        std::fs::write(&nq, "{\"question\": \"Who wrote Hamlet?\", \"answer\": [\"Shakespeare\"]}\n").unwrap();
        let spec = DatasetSpec::load_as(nq.to_str().unwrap(), Some(Layout::NqOpen)).unwrap();
        let ex = spec.load_examples().unwrap();
        assert_eq!((spec.layout, ex.len(), ex[0].question.as_str()), (Some(Layout::NqOpen), 1, "Who wrote Hamlet?"));
        let wrong = DatasetSpec::load_as(nq.to_str().unwrap(), Some(Layout::Popqa)).unwrap();
        let e = format!("{:#}", wrong.load_examples().unwrap_err());
        assert!(e.contains("missing field 'possible_answers'"), "{e}");
        let e = DatasetSpec::load_as("hotpotqa", Some(Layout::Popqa)).unwrap_err();
        assert_eq!(crate::usage::exit_code(&e), 2);
        assert!(e.to_string().starts_with("--layout popqa: applies to a data file"), "{e}");
        assert_eq!("nq-open".parse::<Layout>().unwrap(), Layout::NqOpen);
    }

    #[test]
    fn spec_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.toml");
        std::fs::write(&p, "name = \"x\"\nfile = \"a.json\"\nmetrc = \"em_f1\"\n").unwrap();
        let err = DatasetSpec::from_toml_file(&p).unwrap_err().to_string();
        assert!(err.contains("x.toml") && err.contains("metrc"), "{err}");
    }
}
