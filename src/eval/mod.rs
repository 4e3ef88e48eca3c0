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
//! Modules: [`metrics`] (EM/F1/accuracy), [`run`] (run directory format, resume, summaries), [`report`]
//! (Markdown table and HTML page). Dataset loaders live in [`crate::qa`], prompts in [`crate::prompt`].

pub mod metrics;
pub mod report;
pub mod run;

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

/// A dataset description: `datasets/<name>.toml`.
///
/// Relative `file`, `exemplars` and `corpus` paths are relative to the shared data folder
/// ([`crate::shared_data_dir`]); `index` is relative to the working directory (where `ragtime index` built it).
/// [`DatasetSpec::load`] returns them resolved.
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
}

impl DatasetSpec {
    /// Folders searched for `NAME.toml`: `./datasets`, then the crate's own `datasets/`.
    pub fn search_dirs() -> Vec<PathBuf> {
        vec![PathBuf::from("datasets"), Path::new(env!("CARGO_MANIFEST_DIR")).join("datasets")]
    }

    /// Resolves `name_or_path`: an existing `.toml` file is a spec; another existing file (or folder) is a data
    /// file ([`DatasetSpec::from_data_file`], layout detected); anything else is a name looked up as
    /// `datasets/NAME.toml`.
    pub fn load(name_or_path: &str) -> Result<Self> {
        let p = Path::new(name_or_path);
        if p.exists() {
            if p.extension().map_or(false, |e| e == "toml") {
                return Self::from_toml_file(p);
            }
            return Self::from_data_file(p, None);
        }
        for dir in Self::search_dirs() {
            let f = dir.join(format!("{name_or_path}.toml"));
            if f.exists() {
                return Self::from_toml_file(&f);
            }
        }
        let known = Self::known_names();
        bail!("dataset '{name_or_path}' is neither a file nor a known name (known: {})", known.join(", "))
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
        let text = std::fs::read_to_string(path).with_context(|| format!("{}: cannot read", path.display()))?;
        let mut spec: DatasetSpec = toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        spec.file = shared_path(&spec.file);
        spec.exemplars = spec.exemplars.map(|p| shared_path(&p));
        spec.corpus = spec.corpus.map(|p| shared_path(&p));
        if spec.max_new_tokens == 0 {
            bail!("{}: max_new_tokens must be at least 1", path.display());
        }
        Ok(spec)
    }

    /// A spec for a bare data file: layout given or detected, the layout's usual metric, zero-shot, 100 new
    /// tokens, no index.
    pub fn from_data_file(path: &Path, layout: Option<Layout>) -> Result<Self> {
        let layout = match layout {
            Some(l) => l,
            None => qa::detect_layout(path)?,
        };
        let metric = match layout {
            Layout::StrategyqaBigbench | Layout::StrategyqaOriginal | Layout::Pubmedqa | Layout::Bioasq => Metric::Accuracy,
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
        })
    }

    /// The questions, filtered by `kinds`.
    pub fn load_examples(&self) -> Result<Vec<Example>> {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_spec_parses_and_resolves() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("datasets");
        let names = DatasetSpec::known_names();
        for n in ["hotpotqa", "2wikimultihopqa", "strategyqa", "nq", "triviaqa", "pubmedqa", "bioasq", "iirc", "popqa"] {
            assert!(names.contains(&n.to_string()), "datasets/{n}.toml missing");
            let spec = DatasetSpec::from_toml_file(&dir.join(format!("{n}.toml"))).unwrap();
            assert_eq!(spec.name, n);
            if let Some(e) = &spec.exemplars {
                spec.prompt_builder().unwrap_or_else(|err| panic!("{n}: {err:#} ({})", e.display()));
            }
        }
    }

    #[test]
    fn shipped_specs_load_their_data() {
        // IIRC and PopQA data are not in the shared folder (users bring them).
        let cases = [("hotpotqa", 250), ("2wikimultihopqa", 100), ("strategyqa", 2290), ("nq", 3610), ("triviaqa", 1000), ("pubmedqa", 500), ("bioasq", 409)];
        for (name, n) in cases {
            let spec = DatasetSpec::load(name).unwrap();
            assert_eq!(spec.load_examples().unwrap().len(), n, "{name}");
        }
        let iirc = DatasetSpec::load("iirc").unwrap();
        let err = format!("{:#}", iirc.load_examples().unwrap_err());
        assert!(err.contains("iirc") && err.contains("cannot read"), "{err}");
    }

    #[test]
    fn hotpotqa_spec_builds_dragin_prompt() {
        let spec = DatasetSpec::load("hotpotqa").unwrap();
        assert_eq!(spec.max_new_tokens, 100);
        assert!(spec.index.is_some());
        let b = spec.prompt_builder().unwrap();
        assert_eq!(b.exemplars.len(), 8);
        let p = b.build("Who?", &[], "");
        assert!(p.starts_with("Question: Jeremy Theobald and Christopher Nolan share what profession?\nAnswer: "));
        assert!(p.ends_with("So the answer is Germany.\nQuestion: Who?\nAnswer:"));
        let sq = DatasetSpec::load("strategyqa").unwrap().prompt_builder().unwrap();
        assert!(sq.build("Q?", &[], "").ends_with("Following the examples above, answer the question by reasoning step-by-step.\n\nQuestion: Q?\nAnswer:"));
    }

    #[test]
    fn data_file_and_unknown_names() {
        let p = crate::shared_data_dir().join("qa/pubmedqa/pqal_dev_500.json");
        let spec = DatasetSpec::load(p.to_str().unwrap()).unwrap();
        assert_eq!((spec.layout, spec.metric, spec.name.as_str()), (Some(Layout::Pubmedqa), Metric::Accuracy, "pqal_dev_500"));
        let err = DatasetSpec::load("no-such-dataset").unwrap_err().to_string();
        assert!(err.contains("known:") && err.contains("hotpotqa"), "{err}");
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
