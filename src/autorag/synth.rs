//! Algorithm 1 of the paper: synthesizing iterative-retrieval dialogues, and the resumable dataset they go to.
//!
//! # Per question
//!
//! 1. The teacher (`--teacher`, default the model) writes R_0 and its own first query: the few-shot reasoning
//!    exemplars ([`super::prompts`]) then `Question: <q>`, greedy by default (`reasoning_temperature`).
//! 2. For t = 1..T: `candidates` queries are gathered: the teacher's own query first (`include_model_query`),
//!    then queries sampled from the query model (`--query-model`, default the teacher) with the few-shot
//!    (`rewrite = "fewshot"`, when the reasoning set has a rewriting file) or zero-shot rewriting prompt given
//!    the question and the latest reasoning, at `query_temperature` / `query_top_p`, each with its own seed
//!    drawn from the question's generator (seeded by `seed` and the question id, so a resumed run redoes a
//!    question identically). Duplicates are skipped (at most 2n draws). Each candidate retrieves `top_k`
//!    passages not shown before in this dialogue. The first candidate whose passages hold a sub-answer
//!    ([`super::filter`]) is kept, else a random one. The previous model turn becomes
//!    `R_{t-1} + (Initial|Refined) Query: q_t` (so y_t carries the *chosen* query, not necessarily the one the
//!    teacher wrote), the passages become x_t, and the teacher writes R_t.
//! 3. Stop ([`super::stop::decide`]): a `Final Answer:` in R_t's turn ends the dialogue with it; a reasoning with
//!    no information need (or no query) ends it with a forced answer (`R_t\n\nFinal Answer:` completed by the
//!    teacher); at t = T the answer is forced as well.
//! 4. Kept only when: the final answer matches the gold ([`super::filter::answer_matches`]), no query repeats
//!    an earlier one of the dialogue (SQuAD-normalised; the paper's quality filter, `drop_repeated_queries`),
//!    no reasoning is empty, and every prompt fit the model. Otherwise the attempt is recorded with the reason.
//!
//! Choices where the paper is unclear: the teacher's own query is one of the candidates (the paper samples
//! queries; keeping the model's own keeps dialogues coherent); R_0 may directly end in a final answer (a
//! zero-iteration dialogue, kept if correct); the random fallback is seeded per question.
//!
//! # Dataset directory (`--out`)
//!
//! ```text
//! config.json        the synthesis settings; a re-run with other settings is refused
//! attempts.jsonl     one Attempt per tried question (kept or not, and why): the commit point
//! dialogues.jsonl    one Dialogue per kept question (the record `ragtime train autorag` reads)
//! dialogues.parquet  the same dialogues as Parquet, rewritten from dialogues.jsonl at the end of a run
//! stats.json         yield statistics (Stats), rewritten at the end of a run
//! ```
//!
//! Resuming: a dialogue line is written (and flushed) before its attempt line, so a question counts as done
//! once its attempt is written. [`DialogueStore::open`] drops a truncated last line of either file and any
//! dialogue without an attempt (a kill between the two writes), then skips the done questions.
//!
//! Parquet columns (all non-null): `id`, `dataset`, `question` (utf8), `answers` (list<utf8>), `turn_inputs` and
//! `turn_outputs` (list<utf8>, x_t and y_t in order, same length), `iterations` (uint32), `final_answer` (utf8).

use std::collections::{BTreeMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use arrow_array::builder::{ListBuilder, StringBuilder, UInt32Builder};
use arrow_array::cast::AsArray;
use arrow_array::types::UInt32Type;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::dialogue::{Dialogue, Turn};
use super::filter::{self, SubAnswer};
use super::infer::{line_end, ChatGen};
use super::prompts::{self, AutoRagPrompts, Next};
use super::stop::{self, StopDecision};
use crate::eval::metrics::normalize_answer;
use crate::model::tokenizer::Message;
use crate::model::Sampler;
use crate::qa::Example;
use crate::retrieval::{Passage, Retriever};

/// Algorithm 1's settings (`[synth]` in configs/autorag.toml).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SynthConfig {
    /// T: iterations at most (the paper's inference default, 10).
    pub max_iter: usize,
    /// n: candidate queries per iteration (not given in the paper; 3 here).
    pub candidates: usize,
    /// Passages per candidate's retrieval (the authors' inference k = 2).
    pub top_k: usize,
    /// Sampling of rewritten queries (not given in the paper).
    pub query_temperature: f32,
    pub query_top_p: f32,
    /// Temperature of the reasoning turns (0: greedy).
    pub reasoning_temperature: f32,
    /// `fewshot` or `zeroshot` query-rewriting prompt.
    pub rewrite: String,
    /// The teacher's own query is the first candidate.
    pub include_model_query: bool,
    /// Drop dialogues whose queries repeat.
    pub drop_repeated_queries: bool,
    /// An answer containing the gold matches when it has at most this many words.
    pub max_answer_words: usize,
    /// Token limits: one reasoning turn, one query, one forced answer.
    pub max_new_tokens: usize,
    pub query_tokens: usize,
    pub answer_tokens: usize,
    pub seed: u64,
    /// Reasoning exemplar set: `2wikimultihopqa` or `nq`.
    pub reasoning: String,
}

impl Default for SynthConfig {
    fn default() -> Self {
        SynthConfig {
            max_iter: 10,
            candidates: 3,
            top_k: 2,
            query_temperature: 0.8,
            query_top_p: 0.95,
            reasoning_temperature: 0.0,
            rewrite: "fewshot".into(),
            include_model_query: true,
            drop_repeated_queries: true,
            max_answer_words: 10,
            max_new_tokens: 200,
            query_tokens: 32,
            answer_tokens: 32,
            seed: 0,
            reasoning: "2wikimultihopqa".into(),
        }
    }
}

/// One tried question (a line of attempts.jsonl).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    pub id: String,
    pub kept: bool,
    /// `kept`, or why not (the first that applies): `context_full`, `no_answer`, `wrong_answer`,
    /// `empty_reasoning`, `repeated_query`.
    pub reason: String,
    /// Queries issued (the chosen candidate of each iteration).
    pub iterations: usize,
    pub queries: Vec<String>,
    /// For each iteration, why the chosen candidate's passages hold a sub-answer (`null`: none did, a random
    /// candidate was taken).
    pub sub_answers: Vec<Option<SubAnswer>>,
    /// The answer was forced (not written by the teacher on its own).
    pub forced_answer: bool,
    pub final_answer: String,
    /// The final answer matches the gold (whether or not a quality filter dropped the dialogue).
    #[serde(default)]
    pub answer_correct: bool,
    pub generated_tokens: usize,
    pub seconds: f64,
}

/// Synthesizes dialogues with Algorithm 1.
pub struct Synthesizer<'a> {
    pub retriever: &'a dyn Retriever,
    pub prompts: &'a AutoRagPrompts,
    pub cfg: SynthConfig,
    /// Dataset name recorded in each dialogue.
    pub dataset: String,
}

/// FNV-1a of a question id: mixes the question into the seed.
fn id_hash(id: &str) -> u64 {
    id.bytes().fold(0xcbf29ce484222325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100000001b3))
}

fn clean_query(text: &str) -> String {
    let line = text.trim().lines().next().unwrap_or("").trim();
    let re = regex::Regex::new(r"(?i)^(?:(?:initial |refined )?query:)\s*").unwrap();
    re.replace(line, "").trim().trim_matches('"').trim().to_string()
}

/// Whether the reasoning says nothing beyond its label.
fn empty_reasoning(r: &str) -> bool {
    let re = regex::Regex::new(r"^(?:Analysis:|Intermediate Answer_\d+:)").unwrap();
    re.replace(r.trim(), "").trim().is_empty()
}

impl<'a> Synthesizer<'a> {
    fn messages(&self, turns: &[Turn]) -> Vec<Message> {
        prompts::dialogue_messages(Some(prompts::SYSTEM_PROMPT), &self.prompts.fewshot_messages(), turns)
    }

    /// Candidate queries for iteration t: the teacher's own, then sampled rewrites.
    fn candidates(&self, qgen: &mut ChatGen<'_>, rng: &mut StdRng, ex: &Example, analysis: &str, own: Option<&str>) -> Result<Vec<String>> {
        let n = self.cfg.candidates.max(1);
        let mut out: Vec<String> = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        if let Some(q) = own.filter(|_| self.cfg.include_model_query) {
            let q = clean_query(q);
            if !q.is_empty() && seen.insert(normalize_answer(&q)) {
                out.push(q);
            }
        }
        let few = self.cfg.rewrite == "fewshot";
        let prompt = [Message::new("user", self.prompts.rewrite_prompt(ex.question.trim(), analysis, few))];
        let mut draws = 0;
        while out.len() < n && draws < 2 * n {
            draws += 1;
            let mut s = Sampler::new(self.cfg.query_temperature, self.cfg.query_top_p, rng.random::<u64>());
            let Some(text) = qgen.complete(&prompt, "", self.cfg.query_tokens, &mut s, &line_end)? else { break };
            let q = clean_query(&text);
            if !q.is_empty() && seen.insert(normalize_answer(&q)) {
                out.push(q);
            }
        }
        if out.is_empty() {
            out.push(ex.question.trim().to_string());
        }
        Ok(out)
    }

    /// Runs Algorithm 1 on one question: `tgen` is the teacher's session, `qgen` the query model's.
    pub fn synthesize(&self, tgen: &mut ChatGen<'_>, qgen: &mut ChatGen<'_>, ex: &Example) -> Result<(Attempt, Option<Dialogue>)> {
        let t0 = std::time::Instant::now();
        let gen0 = tgen.generated + qgen.generated;
        let cfg = &self.cfg;
        let mut rng = StdRng::seed_from_u64(cfg.seed ^ id_hash(&ex.id));
        let mut reasoner = Sampler::new(cfg.reasoning_temperature, 1.0, rng.random::<u64>());
        let mut turns = vec![Turn { input: prompts::question_input(&ex.question), output: String::new() }];
        let mut queries: Vec<String> = Vec::new();
        let mut subs: Vec<Option<SubAnswer>> = Vec::new();
        let mut shown: HashSet<String> = HashSet::new();
        let mut context_full = false;
        let mut empty = false;
        let mut forced = false;
        let mut answer: Option<String> = None;

        // R_0
        let msgs = self.messages(&turns);
        let mut parsed = match tgen.complete(&msgs, "", cfg.max_new_tokens, &mut reasoner, &prompts::turn_end)? {
            Some(t) => prompts::parse_turn(&t),
            None => {
                context_full = true;
                prompts::ParsedTurn::default()
            }
        };
        let mut t = 0usize;
        if !context_full {
            loop {
                if empty_reasoning(&parsed.reasoning) {
                    empty = true;
                }
                let decision = if t == 0 {
                    // R_0 plans: continue unless it answered outright
                    match &parsed.answer {
                        Some(a) => StopDecision::Answer(a.clone()),
                        None => StopDecision::Continue,
                    }
                } else {
                    stop::decide(&parsed.reasoning, parsed.query.as_deref(), parsed.answer.as_deref())
                };
                let r = parsed.reasoning.clone();
                match decision {
                    StopDecision::Answer(a) => {
                        turns.last_mut().unwrap().output = prompts::model_output(t, &r, Next::Answer(&a));
                        answer = Some(a);
                        break;
                    }
                    StopDecision::Continue if t < cfg.max_iter => {}
                    _ => {
                        // no information need, or T reached: force the answer
                        forced = true;
                        let open = prompts::model_output(t, &r, Next::Answer("")).trim_end().to_string();
                        let msgs = self.messages(&turns); // ends with x_t: y_t is not set yet
                        match tgen.complete(&msgs, &open, cfg.answer_tokens, &mut reasoner, &line_end)? {
                            Some(a) => {
                                let a = a.trim().trim_end_matches('.').trim().to_string();
                                turns.last_mut().unwrap().output = prompts::model_output(t, &r, Next::Answer(&a));
                                answer = Some(a);
                            }
                            None => context_full = true,
                        }
                        break;
                    }
                }
                // iteration t + 1: candidates, sub-answer filter, documents, R_{t+1}
                let cands = self.candidates(qgen, &mut rng, ex, &r, parsed.query.as_deref())?;
                let docs: Vec<Vec<Passage>> =
                    cands.iter().map(|q| self.retriever.search_excluding(q, cfg.top_k, &shown)).collect::<Result<_>>()?;
                let (pick, sub) = match filter::first_with_sub_answer(ex, &docs) {
                    Some((i, s)) => (i, Some(s)),
                    None => (rng.random_range(0..cands.len()), None),
                };
                let q = cands[pick].clone();
                turns.last_mut().unwrap().output = prompts::model_output(t, &r, Next::Query(&q));
                shown.extend(docs[pick].iter().map(|p| p.id.clone()));
                queries.push(q);
                subs.push(sub);
                t += 1;
                turns.push(Turn { input: prompts::documents_input(t, &docs[pick]), output: String::new() });
                let msgs = self.messages(&turns);
                match tgen.complete(&msgs, "", cfg.max_new_tokens, &mut reasoner, &prompts::turn_end)? {
                    Some(text) => parsed = prompts::parse_turn(&text),
                    None => {
                        context_full = true;
                        break;
                    }
                }
            }
        }
        let final_answer = answer.clone().unwrap_or_default();
        let repeated = {
            let mut seen = HashSet::new();
            !queries.iter().all(|q| seen.insert(normalize_answer(q)))
        };
        let correct = !final_answer.is_empty() && filter::answer_matches(&final_answer, &ex.answers, cfg.max_answer_words);
        // correctness first, then the quality filters, so stats tell correct-but-filtered dialogues apart
        let reason = if context_full {
            "context_full"
        } else if final_answer.is_empty() {
            "no_answer"
        } else if !correct {
            "wrong_answer"
        } else if empty {
            "empty_reasoning"
        } else if cfg.drop_repeated_queries && repeated {
            "repeated_query"
        } else {
            "kept"
        };
        let kept = reason == "kept";
        let attempt = Attempt {
            id: ex.id.clone(),
            kept,
            reason: reason.to_string(),
            iterations: queries.len(),
            queries,
            sub_answers: subs,
            forced_answer: forced,
            final_answer: final_answer.clone(),
            answer_correct: correct,
            generated_tokens: tgen.generated + qgen.generated - gen0,
            seconds: t0.elapsed().as_secs_f64(),
        };
        let dialogue = kept.then(|| Dialogue {
            id: ex.id.clone(),
            dataset: self.dataset.clone(),
            question: ex.question.clone(),
            answers: ex.answers.clone(),
            iterations: attempt.iterations,
            turns,
            final_answer,
        });
        Ok((attempt, dialogue))
    }
}

/// Yield statistics (stats.json).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Stats {
    pub tried: usize,
    pub kept: usize,
    /// Attempts whose final answer matched the gold (kept, or dropped by a quality filter).
    #[serde(default)]
    pub correct: usize,
    /// kept / tried (0 when nothing was tried).
    pub yield_rate: f64,
    /// Attempts per reason (`kept`, `wrong_answer`, ...).
    pub reasons: BTreeMap<String, usize>,
    /// Iterations (queries) of kept dialogues: count per number of iterations.
    pub iterations_kept: BTreeMap<usize, usize>,
    /// Iterations of all attempts.
    pub iterations_tried: BTreeMap<usize, usize>,
    /// Share of issued queries whose chosen candidate held a sub-answer (0 when no query).
    pub sub_answer_rate: f64,
    /// Share of attempts whose answer was forced.
    pub forced_rate: f64,
    pub seconds_per_question: f64,
}

impl Stats {
    /// Statistics of a set of attempts.
    pub fn of(attempts: &[Attempt]) -> Stats {
        let mut s = Stats { tried: attempts.len(), ..Default::default() };
        let (mut queries, mut hits, mut forced, mut secs) = (0usize, 0usize, 0usize, 0f64);
        for a in attempts {
            *s.reasons.entry(a.reason.clone()).or_default() += 1;
            *s.iterations_tried.entry(a.iterations).or_default() += 1;
            if a.kept {
                s.kept += 1;
                *s.iterations_kept.entry(a.iterations).or_default() += 1;
            }
            queries += a.sub_answers.len();
            hits += a.sub_answers.iter().filter(|x| x.is_some()).count();
            forced += a.forced_answer as usize;
            s.correct += a.answer_correct as usize;
            secs += a.seconds;
        }
        let div = |a: f64, b: usize| if b == 0 { 0.0 } else { a / b as f64 };
        s.yield_rate = div(s.kept as f64, s.tried);
        s.sub_answer_rate = div(hits as f64, queries);
        s.forced_rate = div(forced as f64, s.tried);
        s.seconds_per_question = div(secs, s.tried);
        s
    }

    /// One progress line: `[12/250] kept 3 (25.0%), correct 4 | iterations of kept {1: 2, 2: 1} | ...`.
    pub fn line(&self, total: usize) -> String {
        format!(
            "[{}/{}] kept {} ({:.1}%), correct {} | iterations of kept {:?} | sub-answer {:.1}% | {:.1} s/q",
            self.tried,
            total,
            self.kept,
            100.0 * self.yield_rate,
            self.correct,
            self.iterations_kept,
            100.0 * self.sub_answer_rate,
            self.seconds_per_question
        )
    }
}

pub const CONFIG_FILE: &str = "config.json";
pub const ATTEMPTS_FILE: &str = "attempts.jsonl";
pub const DIALOGUES_FILE: &str = "dialogues.jsonl";
pub const PARQUET_FILE: &str = "dialogues.parquet";
pub const STATS_FILE: &str = "stats.json";

/// Reads a JSON-lines file: the records and whether the last line was truncated (no final newline and not valid
/// JSON; the caller drops it). Any other bad line is an error naming file:line.
fn read_jsonl<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<(Vec<T>, bool)> {
    if !path.exists() {
        return Ok((vec![], false));
    }
    let text = fs::read_to_string(path).with_context(|| format!("{}: cannot read", path.display()))?;
    let mut out = Vec::new();
    let mut truncated = false;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let body = line.trim();
        if body.is_empty() {
            continue;
        }
        match serde_json::from_str::<T>(body) {
            Ok(r) => out.push(r),
            Err(_) if !line.ends_with('\n') => truncated = true,
            Err(e) => bail!("{}:{}: malformed line: {e}", path.display(), i + 1),
        }
    }
    Ok((out, truncated))
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    {
        let mut f = File::create(&tmp).with_context(|| format!("{}: cannot create", tmp.display()))?;
        f.write_all(bytes).with_context(|| format!("{}: cannot write", tmp.display()))?;
        f.sync_all().with_context(|| format!("{}: cannot sync", tmp.display()))?;
    }
    fs::rename(&tmp, path).with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()))
}

fn jsonl_bytes<T: Serialize>(rows: &[T]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for r in rows {
        out.extend(serde_json::to_string(r)?.into_bytes());
        out.push(b'\n');
    }
    Ok(out)
}

/// The resumable output directory of `ragtime synth autorag` (see the module doc).
pub struct DialogueStore {
    dir: PathBuf,
    attempts: Vec<Attempt>,
    done: HashSet<String>,
    attempts_file: File,
    dialogues_file: File,
}

impl DialogueStore {
    /// Opens or creates `dir` for a run with `config` (any JSON); refuses a directory made with another config;
    /// repairs the leftovers of a killed run (see the module doc).
    pub fn open(dir: &Path, config: &serde_json::Value) -> Result<Self> {
        fs::create_dir_all(dir).with_context(|| format!("{}: cannot create", dir.display()))?;
        let cfg_path = dir.join(CONFIG_FILE);
        if cfg_path.exists() {
            let text = fs::read_to_string(&cfg_path).with_context(|| format!("{}: cannot read", cfg_path.display()))?;
            let old: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("{}: malformed JSON", cfg_path.display()))?;
            if &old != config {
                bail!("{}: the directory holds dialogues synthesized with other settings; use another --out (or delete it)", dir.display());
            }
        } else {
            write_atomic(&cfg_path, serde_json::to_string_pretty(config)?.as_bytes())?;
        }
        let apath = dir.join(ATTEMPTS_FILE);
        let dpath = dir.join(DIALOGUES_FILE);
        let (attempts, a_trunc): (Vec<Attempt>, bool) = read_jsonl(&apath)?;
        let (dialogues, d_trunc): (Vec<Dialogue>, bool) = read_jsonl(&dpath)?;
        let mut done = HashSet::new();
        for (i, a) in attempts.iter().enumerate() {
            if !done.insert(a.id.clone()) {
                bail!("{}: attempt {} repeats id '{}'", apath.display(), i + 1, a.id);
            }
        }
        let kept: HashSet<&str> = attempts.iter().filter(|a| a.kept).map(|a| a.id.as_str()).collect();
        let good: Vec<&Dialogue> = dialogues.iter().filter(|d| kept.contains(d.id.as_str())).collect();
        let mut ids = HashSet::new();
        for d in &good {
            if !ids.insert(d.id.as_str()) {
                bail!("{}: two dialogues for id '{}'", dpath.display(), d.id);
            }
        }
        if good.len() != kept.len() {
            bail!("{}: {} kept attempts but {} dialogues for them; the directory is damaged", dir.display(), kept.len(), good.len());
        }
        if a_trunc {
            write_atomic(&apath, &jsonl_bytes(&attempts)?)?;
        }
        if d_trunc || good.len() != dialogues.len() {
            write_atomic(&dpath, &jsonl_bytes(&good)?)?;
        }
        let open = |p: &Path| OpenOptions::new().create(true).append(true).open(p).with_context(|| format!("{}: cannot open for appending", p.display()));
        Ok(DialogueStore { dir: dir.to_path_buf(), attempts_file: open(&apath)?, dialogues_file: open(&dpath)?, attempts, done })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether question `id` was already tried.
    pub fn is_done(&self, id: &str) -> bool {
        self.done.contains(id)
    }

    pub fn attempts(&self) -> &[Attempt] {
        &self.attempts
    }

    /// Records one tried question: its dialogue first (when kept), then the attempt (the commit point).
    pub fn record(&mut self, attempt: &Attempt, dialogue: Option<&Dialogue>) -> Result<()> {
        if self.done.contains(&attempt.id) {
            bail!("{}: question '{}' is already recorded", self.dir.display(), attempt.id);
        }
        if attempt.kept != dialogue.is_some() {
            bail!("attempt '{}': kept = {} but dialogue given = {}", attempt.id, attempt.kept, dialogue.is_some());
        }
        if let Some(d) = dialogue {
            let line = serde_json::to_string(d)? + "\n";
            self.dialogues_file.write_all(line.as_bytes()).and_then(|_| self.dialogues_file.flush()).with_context(|| format!("{}: cannot write", self.dir.join(DIALOGUES_FILE).display()))?;
        }
        let line = serde_json::to_string(attempt)? + "\n";
        self.attempts_file.write_all(line.as_bytes()).and_then(|_| self.attempts_file.flush()).with_context(|| format!("{}: cannot write", self.dir.join(ATTEMPTS_FILE).display()))?;
        self.done.insert(attempt.id.clone());
        self.attempts.push(attempt.clone());
        Ok(())
    }

    /// Statistics of every attempt so far.
    pub fn stats(&self) -> Stats {
        Stats::of(&self.attempts)
    }

    /// Writes dialogues.parquet (from dialogues.jsonl) and stats.json; returns the statistics.
    pub fn finish(self) -> Result<Stats> {
        let dpath = self.dir.join(DIALOGUES_FILE);
        let (dialogues, _) = read_jsonl::<Dialogue>(&dpath)?;
        write_parquet(&self.dir.join(PARQUET_FILE), &dialogues)?;
        let s = self.stats();
        write_atomic(&self.dir.join(STATS_FILE), (serde_json::to_string_pretty(&s)? + "\n").as_bytes())?;
        Ok(s)
    }
}

/// Every dialogue of a dataset directory's dialogues.jsonl.
pub fn read_dialogues(dir: &Path) -> Result<Vec<Dialogue>> {
    Ok(read_jsonl(&dir.join(DIALOGUES_FILE))?.0)
}

/// The Parquet schema of dialogues.parquet.
pub fn parquet_schema() -> SchemaRef {
    let list = DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true)));
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("dataset", DataType::Utf8, false),
        Field::new("question", DataType::Utf8, false),
        Field::new("answers", list.clone(), false),
        Field::new("turn_inputs", list.clone(), false),
        Field::new("turn_outputs", list, false),
        Field::new("iterations", DataType::UInt32, false),
        Field::new("final_answer", DataType::Utf8, false),
    ]))
}

/// Writes `dialogues` to `path` (tmp + rename).
pub fn write_parquet(path: &Path, dialogues: &[Dialogue]) -> Result<()> {
    use parquet::arrow::ArrowWriter;
    use parquet::basic::Compression;
    use parquet::file::properties::WriterProperties;
    let strings = |f: &dyn Fn(&Dialogue) -> &str| -> ArrayRef {
        let mut b = StringBuilder::new();
        dialogues.iter().for_each(|d| b.append_value(f(d)));
        Arc::new(b.finish())
    };
    let lists = |f: &dyn Fn(&Dialogue) -> Vec<&str>| -> ArrayRef {
        let mut b = ListBuilder::new(StringBuilder::new());
        for d in dialogues {
            for s in f(d) {
                b.values().append_value(s);
            }
            b.append(true);
        }
        Arc::new(b.finish())
    };
    let mut iters = UInt32Builder::new();
    dialogues.iter().for_each(|d| iters.append_value(d.iterations as u32));
    let columns: Vec<ArrayRef> = vec![
        strings(&|d| &d.id),
        strings(&|d| &d.dataset),
        strings(&|d| &d.question),
        lists(&|d| d.answers.iter().map(String::as_str).collect()),
        lists(&|d| d.turns.iter().map(|t| t.input.as_str()).collect()),
        lists(&|d| d.turns.iter().map(|t| t.output.as_str()).collect()),
        Arc::new(iters.finish()),
        strings(&|d| &d.final_answer),
    ];
    let batch = RecordBatch::try_new(parquet_schema(), columns)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    {
        let f = File::create(&tmp).with_context(|| format!("{}: cannot create", tmp.display()))?;
        let props = WriterProperties::builder().set_compression(Compression::SNAPPY).build();
        let mut w = ArrowWriter::try_new(f.try_clone()?, batch.schema(), Some(props)).with_context(|| format!("{}: cannot start parquet writer", tmp.display()))?;
        w.write(&batch).with_context(|| format!("{}: cannot write rows", tmp.display()))?;
        w.close().with_context(|| format!("{}: cannot finish parquet file", tmp.display()))?;
        f.sync_all().with_context(|| format!("{}: cannot sync", tmp.display()))?;
    }
    fs::rename(&tmp, path).with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()))
}

/// Reads dialogues.parquet back.
pub fn read_parquet(path: &Path) -> Result<Vec<Dialogue>> {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let f = File::open(path).with_context(|| format!("{}: cannot open", path.display()))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(f).with_context(|| format!("{}: not a readable parquet file", path.display()))?.build()?;
    let mut out = Vec::new();
    for batch in reader {
        let b = batch.with_context(|| format!("{}: corrupt row group", path.display()))?;
        let col = |name: &str| b.column_by_name(name).with_context(|| format!("{}: no column {name:?}", path.display()));
        let strs = |name: &str| -> Result<Vec<String>> {
            let a = col(name)?.as_string_opt::<i32>().with_context(|| format!("{}: column {name:?} is not utf8", path.display()))?;
            Ok((0..a.len()).map(|i| a.value(i).to_string()).collect())
        };
        let lists = |name: &str| -> Result<Vec<Vec<String>>> {
            let l = col(name)?.as_list_opt::<i32>().with_context(|| format!("{}: column {name:?} is not a list", path.display()))?;
            (0..l.len())
                .map(|i| {
                    let v = l.value(i);
                    let s = v.as_string_opt::<i32>().with_context(|| format!("{}: column {name:?} is not a list of utf8", path.display()))?;
                    Ok((0..s.len()).map(|j| s.value(j).to_string()).collect())
                })
                .collect()
        };
        let (ids, ds, qs, fa) = (strs("id")?, strs("dataset")?, strs("question")?, strs("final_answer")?);
        let (ans, ins, outs) = (lists("answers")?, lists("turn_inputs")?, lists("turn_outputs")?);
        let it = col("iterations")?.as_primitive_opt::<UInt32Type>().with_context(|| format!("{}: column \"iterations\" is not uint32", path.display()))?;
        for i in 0..b.num_rows() {
            if ins[i].len() != outs[i].len() {
                bail!("{}: row {i}: {} turn inputs but {} outputs", path.display(), ins[i].len(), outs[i].len());
            }
            out.push(Dialogue {
                id: ids[i].clone(),
                dataset: ds[i].clone(),
                question: qs[i].clone(),
                answers: ans[i].clone(),
                turns: ins[i].iter().zip(&outs[i]).map(|(x, y)| Turn { input: x.clone(), output: y.clone() }).collect(),
                iterations: it.value(i) as usize,
                final_answer: fa[i].clone(),
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dialogue(id: &str) -> Dialogue {
        Dialogue {
            id: id.into(),
            dataset: "hotpotqa".into(),
            question: "Q?".into(),
            answers: vec!["A".into(), "a2".into()],
            turns: vec![
                Turn { input: "Question: Q?".into(), output: "Analysis: x\n\nInitial Query: q".into() },
                Turn { input: "Retrieved Document_1: d".into(), output: "Intermediate Answer_1: A.\n\nFinal Answer: A".into() },
            ],
            iterations: 1,
            final_answer: "A".into(),
        }
    }

    fn attempt(id: &str, kept: bool, iters: usize, subs: Vec<Option<SubAnswer>>) -> Attempt {
        Attempt {
            id: id.into(),
            kept,
            reason: if kept { "kept".into() } else { "wrong_answer".into() },
            iterations: iters,
            queries: vec!["q".into(); iters],
            sub_answers: subs,
            forced_answer: !kept,
            final_answer: "A".into(),
            answer_correct: kept || id == "4",
            generated_tokens: 10,
            seconds: 2.0,
        }
    }

    #[test]
    fn stats_yield_and_histograms() {
        let a = vec![
            attempt("1", true, 1, vec![Some(SubAnswer::Supporting)]),
            attempt("2", false, 2, vec![None, Some(SubAnswer::Answer)]),
            attempt("3", true, 2, vec![None, None]),
            attempt("4", false, 0, vec![]),
        ];
        let s = Stats::of(&a);
        assert_eq!((s.tried, s.kept, s.correct), (4, 2, 3));
        assert!((s.yield_rate - 0.5).abs() < 1e-12);
        // 2 of 5 queries had a sub-answer
        assert!((s.sub_answer_rate - 0.4).abs() < 1e-12);
        assert_eq!(s.iterations_kept, BTreeMap::from([(1, 1), (2, 1)]));
        assert_eq!(s.iterations_tried, BTreeMap::from([(0, 1), (1, 1), (2, 2)]));
        assert_eq!(s.reasons, BTreeMap::from([("kept".to_string(), 2), ("wrong_answer".to_string(), 2)]));
        assert!((s.forced_rate - 0.5).abs() < 1e-12);
        assert_eq!(Stats::of(&[]).yield_rate, 0.0);
    }

    #[test]
    fn store_resumes_and_repairs() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = serde_json::json!({"model": "m", "max_iter": 3});
        {
            let mut s = DialogueStore::open(dir.path(), &cfg).unwrap();
            s.record(&attempt("1", true, 1, vec![None]), Some(&dialogue("1"))).unwrap();
            s.record(&attempt("2", false, 1, vec![None]), None).unwrap();
            assert!(s.record(&attempt("2", false, 1, vec![None]), None).is_err());
            assert!(s.record(&attempt("3", true, 1, vec![None]), None).is_err());
        }
        // a kill after the dialogue line of "3" but before its attempt, and a half-written attempt line
        let mut f = OpenOptions::new().append(true).open(dir.path().join(DIALOGUES_FILE)).unwrap();
        writeln!(f, "{}", serde_json::to_string(&dialogue("3")).unwrap()).unwrap();
        let mut f = OpenOptions::new().append(true).open(dir.path().join(ATTEMPTS_FILE)).unwrap();
        write!(f, "{{\"id\": \"3\", \"ke").unwrap();
        drop(f);
        assert!(DialogueStore::open(dir.path(), &serde_json::json!({"model": "other"})).is_err());
        let mut s = DialogueStore::open(dir.path(), &cfg).unwrap();
        assert!(s.is_done("1") && s.is_done("2") && !s.is_done("3"));
        assert_eq!(read_dialogues(dir.path()).unwrap().iter().map(|d| d.id.as_str()).collect::<Vec<_>>(), ["1"]);
        s.record(&attempt("3", true, 1, vec![Some(SubAnswer::Answer)]), Some(&dialogue("3"))).unwrap();
        let stats = s.finish().unwrap();
        assert_eq!((stats.tried, stats.kept), (3, 2));
        let back = read_parquet(&dir.path().join(PARQUET_FILE)).unwrap();
        assert_eq!(back, vec![dialogue("1"), dialogue("3")]);
        let st: Stats = serde_json::from_str(&fs::read_to_string(dir.path().join(STATS_FILE)).unwrap()).unwrap();
        assert_eq!(st, stats);
        // a malformed complete line is an error naming file and line
        fs::write(dir.path().join(ATTEMPTS_FILE), "{\"id\": 1}\n").unwrap();
        let e = DialogueStore::open(dir.path(), &cfg).err().unwrap();
        assert!(format!("{e:#}").contains("attempts.jsonl:1"), "{e:#}");
    }

    #[test]
    fn query_cleaning() {
        assert_eq!(clean_query(" Query: \"Karl Freund\"\nmore"), "Karl Freund");
        assert_eq!(clean_query("Refined Query: X y"), "X y");
        assert_eq!(clean_query("\n"), "");
        assert!(empty_reasoning("Intermediate Answer_2: "));
        assert!(!empty_reasoning("Analysis: need X"));
    }
}
