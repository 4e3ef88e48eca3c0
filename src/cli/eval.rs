//! `ragtime eval`: run one controller over a QA dataset in the shared decode loop and write a run directory
//! (config.toml, predictions.jsonl with per-question traces, metrics.json). Resumes an interrupted run.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args as ClapArgs;

use ragtime::config::{self, GenerationTable, MethodConfig, RetrievalTable};
use ragtime::eval::run::{PredictionRecord, Progress, RetrievalRecord, RunWriter, TraceToken};
use ragtime::eval::DatasetSpec;
use ragtime::qa::Example;
use ragtime::rag::batch::InOrder;
use ragtime::rag::{Batch, LoopConfig, Outcome, RagLoop};
use ragtime::retrieval::Retriever;

use super::model_args::ModelArgs;
use super::retriever_args::RetrieverArgs;

#[derive(ClapArgs, Debug)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub data: super::dataset_args::DatasetArgs,
    /// Trigger / method name: reads configs/NAME.toml unless --config is given.
    #[arg(long)]
    pub trigger: String,
    /// Method config to read instead of configs/NAME.toml (the same tables: [trigger], [query], [retrieval],
    /// [generation]), e.g. one trigger with another method's query former.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Index from `ragtime index` (default: the dataset's).
    #[arg(long)]
    pub index: Option<PathBuf>,
    #[command(flatten)]
    pub retr: RetrieverArgs,
    /// Passages per retrieval (default: the config's [retrieval] top_k, else 3).
    #[arg(short = 'k', long, value_parser = super::ranges::int::<1, 1000>)]
    pub top_k: Option<usize>,
    /// Answer only this split of the dataset (its spec's [splits], e.g. `valid`, `test`); --skip and --limit
    /// then apply within it.
    #[arg(long)]
    pub split: Option<String>,
    /// Skip the first N questions (for example those `synth autorag --limit N` made training dialogues from),
    /// then apply `--limit`.
    #[arg(long, default_value_t = 0)]
    pub skip: usize,
    #[arg(long)]
    pub limit: Option<usize>,
    #[arg(long, default_value_t = 10, value_parser = super::ranges::int::<0, 1000>)]
    pub max_retrievals: usize,
    /// Answer length limit (default: the config's [generation] max_new_tokens, else the dataset's).
    #[arg(long, value_parser = super::ranges::int::<1, 65_536>)]
    pub max_new_tokens: Option<usize>,
    /// Detector checkpoint for `--trigger mlp` (from `ragtime train detector`; overrides the config's
    /// `[trigger] detector`). Other triggers ignore it, with a note.
    #[arg(long)]
    pub detector: Option<PathBuf>,
    /// Re-run the model over the whole sequence before each judgement to get attention and entropies, as
    /// DRAGIN's code does, instead of using the internals captured while decoding (for scripts/bench-eval.sh).
    #[arg(long)]
    pub recompute_internals: bool,
    /// Override a method-config value, e.g. `--set trigger.theta=0.35` (repeatable; recorded in the run's
    /// config.toml).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    /// Questions answered at once, each with its own KV cache; their decoding steps share the passes over the
    /// model's weights (on the CPU: over the 4/8-bit weight blocks of a GGUF model; on cuda: one pass for all).
    /// The predictions are those of `--batch 1` (on cuda up to near-ties between two tokens), so a run may be
    /// resumed with another value. Records are written in question order (one finished early waits for those
    /// before it); above 1 lane, each record's `seconds` is the wall time since the previous question finished,
    /// which keeps seconds per question equal to wall time over questions. Default: 8 on cpu (32 with --int8-dot
    /// where the CPU has AVX-512 VNNI), 64 on cuda.
    #[arg(long, value_parser = super::ranges::int::<1, 256>)]
    pub batch: Option<usize>,
    /// Run the controller at this calibrated retrieval budget (retrievals per question): its threshold is the
    /// one `ragtime sweep --pick` found nearest that budget on the dataset's validation questions, read from
    /// `--calibrated`. Default: the file's `default_budget` when it has a point for this controller and dataset,
    /// else the config's own value; `none` always takes the config's value. A `--set` of the same key wins.
    /// Controllers without a threshold (none, single, fixed-sentence, oracle) ignore it.
    #[arg(long, value_parser = parse_budget)]
    pub budget: Option<Budget>,
    /// Calibrated operating points (default: configs/calibrated/<model file name>.toml).
    #[arg(long)]
    pub calibrated: Option<PathBuf>,
    /// Row name in `ragtime report` (default: the trigger name).
    #[arg(long)]
    pub label: Option<String>,
    /// i/n: answer shard i of n (the questions whose id hashes to i) into OUT/part-IIIII-of-NNNNN, all n shards
    /// into the same --out; `ragtime merge OUT` then writes the whole run. Default: from Slurm's
    /// SLURM_ARRAY_TASK_ID and RAGTIME_SHARD_COUNT (or SLURM_ARRAY_TASK_COUNT) when set.
    #[arg(long)]
    pub shard: Option<ragtime::shard::Shard>,
    /// Run directory (default runs/<dataset>-<trigger>).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// The run directory and the part of its recorded config that every method shares: label, method, dataset,
/// skipped questions, model and index.
/// The run directory: `--out`, or `runs/DATASET-TRIGGER`.
fn out_dir(args: &Args, dataset: &str) -> PathBuf {
    args.out.clone().unwrap_or_else(|| PathBuf::from(format!("runs/{dataset}-{}", args.trigger)))
}

/// A shard's part of a sharded run: the marker to leave when done, and (id, position) of its questions.
type ShardPart = (ragtime::shard::ShardRun, Vec<(String, u64)>);

/// Claims the run directory before the model loads, so that a wrong `--out` fails at once. With a shard (flag or
/// Slurm, see `ragtime::shard`): keeps the shard's questions, records `shard` in the run config, and returns the
/// shard's part directory of the sharded run in `--out`, with this process's lock on it (held while the run is
/// written).
fn claim_out(
    args: &Args,
    dir: PathBuf,
    examples: &mut Vec<Example>,
    run_config: &mut toml::map::Map<String, toml::Value>,
) -> Result<(PathBuf, Option<ShardPart>, ragtime::io::OutputLock)> {
    use ragtime::eval::run::{CONFIG_FILE, OUTPUT_KIND};
    let (dir, part) = match ragtime::shard::Shard::resolve(args.shard)? {
        None => (dir, None),
        Some(s) => {
            let job = serde_json::to_value(toml::Value::Table(run_config.clone()))?;
            let run = ragtime::shard::ShardRun::begin(&dir, "--out", s, OUTPUT_KIND, job)?;
            let order = s.take(examples, |x| &x.id);
            run_config.insert("shard".into(), toml::Value::String(s.to_string()));
            (run.part_dir(), Some((run, order)))
        }
    };
    let lock = ragtime::io::claim_output_dir(&dir, "--out", OUTPUT_KIND, CONFIG_FILE)?;
    Ok((dir, part, lock))
}

/// Leaves the shard's marker (when sharded) and prints the run's table.
fn finish_run(writer: RunWriter, part: Option<ShardPart>) -> Result<()> {
    let summary = writer.finish()?;
    if let Some((run, order)) = part {
        run.finish(order.len(), summary.questions, order)?;
    }
    println!("{}", ragtime::eval::report::markdown_table(&[summary]));
    Ok(())
}

fn run_header(args: &Args, dataset: &str, index: String) -> (PathBuf, toml::map::Map<String, toml::Value>) {
    let out_dir = out_dir(args, dataset);
    let mut c = toml::map::Map::new();
    c.insert("label".into(), toml::Value::String(args.label.clone().unwrap_or_else(|| args.trigger.clone())));
    c.insert("method".into(), toml::Value::String(args.trigger.clone()));
    c.insert("dataset".into(), toml::Value::String(dataset.to_string()));
    if let Some(split) = &args.split {
        c.insert("split".into(), toml::Value::String(split.clone()));
    }
    if args.skip > 0 {
        c.insert("skip".into(), toml::Value::Integer(args.skip as i64));
    }
    c.insert("model".into(), toml::Value::String(args.model.model.display().to_string()));
    c.insert("index".into(), toml::Value::String(index));
    // Recorded only when not BM25, so runs made before `--retriever` existed still resume.
    if args.retr.retriever != ragtime::retrieval::RetrieverKind::Bm25 {
        c.insert("retriever".into(), toml::Value::String(args.retr.describe()));
    }
    // Likewise the engine and f32 decoding, recorded only when not the default (their numbers differ from the
    // default's by f32 rounding, which may flip a near-tie between tokens).
    if args.model.engine != ragtime::model::EngineKind::Auto {
        c.insert("engine".into(), toml::Value::String(args.model.engine.to_string()));
    }
    if args.model.dtype != ragtime::model::Precision::F32 {
        c.insert("dtype".into(), toml::Value::String(args.model.dtype.to_string()));
    }
    if args.model.f32_decode {
        c.insert("f32_decode".into(), toml::Value::Boolean(true));
    }
    for (k, v) in args.model.numeric_settings() {
        c.insert(k.into(), toml::Value::try_from(v).expect("a boolean or a string is a TOML value"));
    }
    (out_dir, c)
}

/// The questions a run answers: `--skip` first, then `--limit`. Selecting none is an error (a usage error where
/// `--skip` or `--limit` did it): a run of no questions would write metrics, an F1 of 0, that nothing measured.
pub(crate) fn select<T>(examples: Vec<T>, skip: usize, limit: Option<usize>) -> Result<Vec<T>> {
    let total = examples.len();
    let picked: Vec<T> = examples.into_iter().skip(skip).take(limit.unwrap_or(usize::MAX)).collect();
    if picked.is_empty() {
        match limit {
            _ if total == 0 => anyhow::bail!("the split has no questions"),
            Some(0) => ragtime::usage_bail!("--limit 0: selects no question"),
            _ => ragtime::usage_bail!("--skip {skip}: selects no question (the split has {total})"),
        }
    }
    Ok(picked)
}

/// `--budget`: a number of retrievals per question, or `none`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Budget {
    None,
    At(f64),
}

fn parse_budget(s: &str) -> std::result::Result<Budget, String> {
    if s == "none" {
        return Ok(Budget::None);
    }
    match s.parse::<f64>() {
        Ok(b) if b.is_finite() && (0.0..=1000.0).contains(&b) => Ok(Budget::At(b)),
        _ => Err(format!("'{s}': expected a number of retrievals per question in [0, 1000], or 'none'")),
    }
}

/// A token-level controller ready to run: its merged config and the settings the loop takes from it.
pub(crate) struct Method {
    pub name: String,
    pub config_path: PathBuf,
    pub mc: MethodConfig,
    pub top_k: usize,
    pub max_new: usize,
    /// `[retrieval] source = "gold"`: the question's own supporting paragraphs are handed over (oracle context).
    pub gold: bool,
    /// `[retrieval] loop_guard` (default on): see `LoopConfig::loop_guard`.
    pub loop_guard: bool,
}

/// A method named on the command line (`flag`: `--trigger`, `--triggers`) must have a shipped config; where it has
/// none, a usage error lists the methods that have one (and `hint`, another way the command offers), before any
/// data or model is read.
pub(crate) fn check_shipped(flag: &str, name: &str, hint: &str) -> Result<()> {
    let path = config::default_path(name);
    if !ragtime::io::present_or_refused(&path) {
        ragtime::usage_bail!(
            "{flag} {name}: no such method (no {}; shipped: {}{hint})",
            path.display(),
            config::shipped_methods().join(", ")
        );
    }
    Ok(())
}

/// Whether `mc`'s `[trigger]` is the learned one (`name = "mlp"`).
fn learned(mc: &MethodConfig) -> bool {
    mc.root.get("trigger").and_then(|t| t.get("name")).and_then(|n| n.as_str()) == Some("mlp")
}

impl Method {
    /// Reads the method's config (`--config`, else configs/NAME.toml) for `dataset` with `overrides`, and
    /// checks that its trigger and query former build.
    pub fn load(
        name: &str,
        config: Option<&std::path::Path>,
        dataset: &DatasetSpec,
        overrides: &[String],
        detector: Option<&std::path::Path>,
        top_k: Option<usize>,
        max_new: Option<usize>,
    ) -> Result<Method> {
        let config_path = config.map(|p| p.to_path_buf()).unwrap_or_else(|| config::default_path(name));
        let mut mc = MethodConfig::load(&config_path, Some(&dataset.name), overrides, config::TOKEN_LEVEL_TABLES)?;
        // the detector is the learned trigger's; other triggers (in a sweep of several) do not take it
        if let (Some(d), true) = (detector, learned(&mc)) {
            mc.table_mut("trigger")?.insert("detector".into(), toml::Value::String(d.display().to_string()));
        }
        let retrieval: RetrievalTable = mc.section("retrieval")?;
        let gold = match retrieval.source.as_deref() {
            None | Some("index") => false,
            Some("gold") => true,
            Some(o) => {
                anyhow::bail!("{}: [retrieval] source = '{o}': expected 'index' or 'gold'", config_path.display())
            }
        };
        let top_k = top_k.or(retrieval.top_k).unwrap_or(3);
        let max_new =
            max_new.or(mc.section::<GenerationTable>("generation")?.max_new_tokens).unwrap_or(dataset.max_new_tokens);
        let loop_guard = retrieval.loop_guard();
        let m = Method { name: name.to_string(), config_path, mc, top_k, max_new, gold, loop_guard };
        m.trigger()?;
        m.query()?;
        Ok(m)
    }

    /// Whether the trigger is the learned one (`mlp`), the one that reads `--detector`.
    pub fn learned(&self) -> bool {
        learned(&self.mc)
    }

    pub fn trigger(&self) -> Result<Box<dyn ragtime::trigger::Trigger>> {
        ragtime::trigger::build_section(&self.mc.root).map_err(|e| self.mc.attribute("trigger", e))
    }

    pub fn query(&self) -> Result<Box<dyn ragtime::query::QueryFormer>> {
        ragtime::query::build_section(&self.mc.root).map_err(|e| self.mc.attribute("query", e))
    }

    /// The `[sweep]` table: the setting a sweep varies and its grid.
    pub fn sweep(&self) -> Result<ragtime::eval::sweep::SweepTable> {
        Ok(self.mc.section("sweep")?)
    }

    /// The passages this method reads: none for `none`, the question's gold paragraphs for an oracle, else the
    /// index (`--index`, else the dataset's).
    pub fn retriever(
        &self,
        index: Option<&std::path::Path>,
        retr: &RetrieverArgs,
        dataset: &DatasetSpec,
        examples: &[Example],
    ) -> Result<(Option<Box<dyn Retriever>>, String)> {
        let trigger = self.trigger()?;
        if trigger.name() == "none" {
            return Ok((None, String::new()));
        }
        if self.gold {
            return Ok((Some(Box::new(ragtime::retrieval::gold::GoldRetriever::new(examples))), "gold".into()));
        }
        match index.map(|p| p.to_path_buf()).or_else(|| dataset.index.clone()) {
            Some(dir) => Ok((Some(retr.open(&dir)?), dir.display().to_string())),
            None => ragtime::usage_bail!(
                "--trigger {} retrieves: give --index DIR (dataset '{}' names no default index)",
                self.name,
                dataset.name
            ),
        }
    }

    /// The loop settings for this method on `dataset`.
    pub fn loop_config(&self, dataset: &DatasetSpec, max_retrievals: usize, recompute_internals: bool) -> LoopConfig {
        LoopConfig {
            top_k: self.top_k,
            max_retrievals,
            max_new_tokens: self.max_new,
            answer_pattern: dataset.answer_pattern.clone(),
            recompute_internals,
            loop_guard: self.loop_guard,
            ..LoopConfig::default()
        }
    }
}

/// The calibrated point `eval` applies for `trigger` on `dataset` (see `--budget`), with the file it came from;
/// `None` when the config's own value is used.
fn calibrated_point(
    args: &Args,
    dataset: &str,
    method: &Method,
) -> Result<Option<(ragtime::eval::sweep::CalibratedPoint, PathBuf)>> {
    use ragtime::eval::sweep::{calibrated_to_read, Calibrated};
    if args.budget == Some(Budget::None) {
        return Ok(None);
    }
    let sweep = method.sweep()?;
    let Some(key) = sweep.key else {
        if let Some(Budget::At(b)) = args.budget {
            eprintln!(
                "note: --budget {b}: --trigger {} has no threshold to calibrate; run as configured",
                args.trigger
            );
        }
        return Ok(None);
    };
    if args.overrides.iter().any(|o| o.split_once('=').is_some_and(|(k, _)| k.trim() == key)) {
        if args.budget.is_some() {
            ragtime::usage_bail!("--budget and --set {key}=... both set {key}; give one");
        }
        return Ok(None);
    }
    let model = args.model.model.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let path = args.calibrated.clone().unwrap_or_else(|| calibrated_to_read(&model));
    let file = Calibrated::load(&path).with_context(|| "--calibrated")?;
    let want = match (args.budget, &file) {
        (Some(Budget::At(b)), _) => b,
        (_, Some(f)) => f.default_budget,
        (_, None) => return Ok(None),
    };
    let point = file.as_ref().and_then(|f| f.lookup(&args.trigger, dataset, want));
    match point {
        Some(p) => {
            if let Some(other) = file.as_ref().map(|f| &f.model).filter(|m| **m != model) {
                eprintln!(
                    "note: --calibrated {}: points calibrated for model '{other}', applied to '{model}' (--model)",
                    path.display()
                );
            }
            Ok(Some((p.clone(), path)))
        }
        None if args.budget.is_some() => {
            let have = file.as_ref().map(|f| f.budgets(&args.trigger, dataset)).unwrap_or_default();
            ragtime::usage_bail!(
                "--budget {want}: {} has no point for --trigger {} on {dataset}{}; make one with `ragtime sweep --dataset {dataset} --split valid --triggers {} --pick`",
                path.display(),
                args.trigger,
                if have.is_empty() {
                    String::new()
                } else {
                    format!(" at that budget (calibrated: {})", have.iter().map(f64::to_string).collect::<Vec<_>>().join(", "))
                },
                args.trigger
            )
        }
        None => Ok(None),
    }
}

pub fn run(args: Args) -> Result<()> {
    args.model.check()?;
    if args.trigger == "autorag" {
        return run_autorag(args);
    }
    if args.config.is_none() {
        check_shipped("--trigger", &args.trigger, "; or give a config with --config FILE")?;
    }
    // load
    let spec = args.data.load()?;
    let mut examples = select(spec.load_split(args.split.as_deref())?, args.skip, args.limit)?;
    let prompt = spec.prompt_builder()?;
    let plain = Method::load(
        &args.trigger,
        args.config.as_deref(),
        &spec,
        &args.overrides,
        args.detector.as_deref(),
        args.top_k,
        args.max_new_tokens,
    )?;
    if let (Some(d), false) = (&args.detector, plain.learned()) {
        eprintln!("note: --detector {}: --trigger {} reads no detector; ignored", d.display(), args.trigger);
    }
    let calibrated = calibrated_point(&args, &spec.name, &plain)?;
    let method = match &calibrated {
        None => plain,
        Some((p, path)) => {
            eprintln!(
                "{}: {} (budget {} retrievals/question: {:.2} measured on {} {}, {} questions); --budget none for the config's value",
                path.display(),
                p.override_spec(),
                p.budget,
                p.retrievals_per_question,
                p.dataset,
                p.split,
                p.questions
            );
            let mut overrides = vec![p.override_spec()];
            overrides.extend(args.overrides.iter().cloned());
            Method::load(
                &args.trigger,
                args.config.as_deref(),
                &spec,
                &overrides,
                args.detector.as_deref(),
                args.top_k,
                args.max_new_tokens,
            )?
        }
    };
    let (retriever, index) = method.retriever(args.index.as_deref(), &args.retr, &spec, &examples)?;
    let cfg = method.loop_config(&spec, args.max_retrievals, args.recompute_internals);
    let (out_dir, mut run_config) = run_header(&args, &spec.name, index);
    spec.record_prompt(&mut run_config);
    if let Some((p, path)) = &calibrated {
        run_config.insert("budget".into(), toml::Value::Float(p.budget));
        let mut c = toml::map::Map::new();
        c.insert("file".into(), toml::Value::String(path.display().to_string()));
        c.insert("key".into(), toml::Value::String(p.key.clone()));
        c.insert("value".into(), p.value.clone());
        run_config.insert("calibrated".into(), toml::Value::Table(c));
    }
    run_config.insert("loop".into(), toml::Value::try_from(&cfg)?);
    run_config.insert("method_config".into(), method.mc.root.clone());
    let (out_dir, part, _lock) = claim_out(&args, out_dir, &mut examples, &mut run_config)?;
    let lm = args.model.load()?;
    method
        .trigger()?
        .check_model(&lm.name, lm.config.hidden_size)
        .with_context(|| format!("--trigger {}", args.trigger))?;
    let mut writer = RunWriter::create(&out_dir, &toml::Value::Table(run_config))?;
    let mut progress = Progress::new(examples.len(), writer.len());
    answer_all(
        &lm,
        &prompt,
        retriever.as_deref(),
        &method,
        cfg,
        &examples,
        &mut writer,
        &mut progress,
        args.model.lanes(args.batch),
    )?;
    finish_run(writer, part)
}

/// Answers the questions of `examples` not yet in `writer` with `method`, `batch` lanes at once, one record per
/// question in the order of `examples` (flushed per line; on lanes a question that finishes before one asked
/// earlier waits for it, so a kill loses the questions in flight and those waiting).
#[allow(clippy::too_many_arguments)]
pub(crate) fn answer_all(
    lm: &ragtime::model::Lm,
    prompt: &ragtime::prompt::PromptBuilder,
    retriever: Option<&dyn Retriever>,
    method: &Method,
    cfg: LoopConfig,
    examples: &[Example],
    writer: &mut RunWriter,
    progress: &mut Progress,
    batch_size: usize,
) -> Result<()> {
    let trigger = method.trigger()?;
    let qf = method.query()?;
    let rag = RagLoop { lm, prompt, retriever, cfg };
    let todo: Vec<&Example> = examples.iter().filter(|ex| !writer.is_done(&ex.id)).collect();
    if batch_size <= 1 {
        let mut trigger = trigger;
        let mut session = lm.session();
        for ex in todo {
            let t0 = std::time::Instant::now();
            let rec = match rag.answer_in(&mut session, &ex.question, trigger.as_mut(), qf.as_ref()) {
                Ok(o) => record(ex, &o, t0.elapsed().as_secs_f64()),
                Err(e) => PredictionRecord::unanswered(ex, e)?,
            };
            writer.write(&rec)?;
            eprintln!("{}", progress.update(&rec));
        }
    } else {
        let batch = Batch::new(lm, batch_size);
        let mut triggers = vec![trigger];
        for _ in 1..batch_size {
            triggers.push(method.trigger()?);
        }
        let (mut last, mut order) = (std::time::Instant::now(), InOrder::default());
        rag.answer_on_lanes(&batch, triggers, qf.as_ref(), todo.iter().map(|ex| ex.question.as_str()), |i, o| {
            // `seconds`: the wall time since the previous question finished
            let ex = todo[i];
            let rec = match o {
                Ok(o) => record(ex, &o, last.elapsed().as_secs_f64()),
                Err(e) => PredictionRecord::unanswered(ex, e)?,
            };
            last = std::time::Instant::now();
            order.push(i, rec, |rec, finished| {
                writer.write(&rec)?;
                eprintln!("{}", progress.update_on_lanes(&rec, finished));
                Ok(())
            })
        })?;
        eprintln!("{}", batch.summary("questions"));
    }
    Ok(())
}

/// The prediction record of `ex` answered as `o` in `seconds`.
fn record(ex: &Example, o: &Outcome, seconds: f64) -> PredictionRecord {
    let mut rec = PredictionRecord::new(ex, &o.text);
    rec.retrievals =
        o.retrievals.iter().map(|r| RetrievalRecord::new(ex, r.token_pos, &r.query, &r.passages)).collect();
    rec.loops_guarded = o.loops_guarded;
    rec.generated_tokens = o.generated_tokens;
    rec.forward_tokens = o.forward_tokens;
    rec.seconds = seconds;
    rec.trace = o
        .tokens
        .iter()
        .zip(&o.scores)
        .map(|(t, s)| TraceToken { text: t.text.clone(), entropy: t.entropy, score: *s })
        .collect();
    rec
}

/// `--trigger autorag`: Auto-RAG's Algorithm 2 (`ragtime::autorag::infer`), written in the same run-directory
/// format. The config's `[autorag]` table gives T, T_PK, k, the turn length and whether the few-shot exemplars
/// are shown (the base model) or not (a model trained on `synth autorag` dialogues); `-k` overrides k and
/// `--max-new-tokens` the turn length (`--max-retrievals` does not apply: T is `[autorag] max_iter`).
fn run_autorag(args: Args) -> Result<()> {
    use ragtime::autorag::infer::{AutoRag, ChatGen, InferConfig, InferOutcome};
    use ragtime::autorag::prompts::AutoRagPrompts;
    let spec = args.data.load()?;
    let mut examples = select(spec.load_split(args.split.as_deref())?, args.skip, args.limit)?;
    let config_path = args.config.clone().unwrap_or_else(|| config::default_path("autorag"));
    let mc = MethodConfig::load(&config_path, Some(&spec.name), &args.overrides, config::AUTORAG_TABLES)?;
    let mut cfg: InferConfig = mc.section("autorag")?;
    if let Some(k) = args.top_k {
        cfg.top_k = k;
    }
    if let Some(n) = args.max_new_tokens {
        cfg.max_new_tokens = n;
    }
    let prompt_dir = AutoRagPrompts::default_dir();
    let prompts = AutoRagPrompts::load(&prompt_dir, &cfg.reasoning)?;
    let index = args.index.clone().or_else(|| spec.index.clone());
    let Some(index) = index else {
        ragtime::usage_bail!(
            "--trigger autorag retrieves: give --index DIR (dataset '{}' names no default index)",
            spec.name
        )
    };
    let retriever = args.retr.open(&index)?;
    let (out_dir, mut run_config) = run_header(&args, &spec.name, index.display().to_string());
    run_config.insert("autorag".into(), toml::Value::try_from(&cfg)?);
    run_config.insert("method_config".into(), mc.root.clone());
    let (out_dir, part, _lock) = claim_out(&args, out_dir, &mut examples, &mut run_config)?;
    let lm = args.model.load()?;
    let mut writer = RunWriter::create(&out_dir, &toml::Value::Table(run_config))?;
    let mut progress = Progress::new(examples.len(), writer.len());
    let rag = AutoRag { lm: &lm, retriever: retriever.as_ref(), prompts: &prompts, cfg };
    let todo: Vec<&Example> = examples.iter().filter(|ex| !writer.is_done(&ex.id)).collect();
    // `finished`: questions this process has answered so far (on lanes, written or waiting), for the ETA
    let mut write = |ex: &Example, o: Result<InferOutcome>, trace: Vec<(String, f32)>, seconds: f64, finished| {
        let rec = match o {
            Ok(o) => autorag_record(ex, &o, trace, seconds),
            Err(e) => PredictionRecord::unanswered(ex, e)?,
        };
        writer.write(&rec)?;
        eprintln!("{}", progress.update_on_lanes(&rec, finished));
        anyhow::Ok(())
    };
    if args.model.lanes(args.batch) <= 1 {
        let (mut main, mut aux) = (ChatGen::new(&lm), ChatGen::new(&lm));
        for (k, ex) in todo.into_iter().enumerate() {
            let t0 = std::time::Instant::now();
            let o = rag.answer(&mut main, &mut aux, &ex.question);
            write(ex, o, std::mem::take(&mut main.trace), t0.elapsed().as_secs_f64(), k + 1)?;
        }
    } else {
        // Lanes 2k and 2k+1 are question slot k's: its dialogue and its pseudo-documents. Each slot keeps its
        // two generators (and their cached exemplar prefix) across the questions it answers.
        let slots = args.model.lanes(args.batch);
        let batch = Batch::new(&lm, 2 * slots);
        let generators = (0..slots)
            .map(|k| (ChatGen::on(&lm, batch.lane(2 * k)), ChatGen::on(&lm, batch.lane(2 * k + 1))))
            .collect();
        let rag = &rag;
        let (mut last, mut order) = (std::time::Instant::now(), InOrder::default());
        batch.run_slots(
            2,
            generators,
            todo.into_iter().enumerate(),
            |(mut main, mut aux), (i, ex)| {
                Box::pin(async move {
                    let o = rag.answer_with(&mut main, &mut aux, &ex.question).await;
                    let trace = std::mem::take(&mut main.trace);
                    ((main, aux), (i, ex, o, trace))
                })
            },
            |(i, ex, o, trace)| {
                // written in question order, each with the wall time since the previous question finished
                let seconds = last.elapsed().as_secs_f64();
                last = std::time::Instant::now();
                order.push(i, (ex, o, trace, seconds), |(ex, o, trace, seconds), finished| {
                    write(ex, o, trace, seconds, finished)
                })
            },
        )?;
        eprintln!("{}", batch.summary("sequences"));
    }
    finish_run(writer, part)
}

/// The prediction record of `ex` answered by Auto-RAG as `o`, with the dialogue's generated tokens as its trace.
fn autorag_record(
    ex: &Example,
    o: &ragtime::autorag::infer::InferOutcome,
    trace: Vec<(String, f32)>,
    seconds: f64,
) -> PredictionRecord {
    let mut rec = PredictionRecord::new(ex, &o.answer);
    rec.raw_output = o.transcript();
    rec.retrievals = o
        .retrievals
        .iter()
        .filter(|r| !r.pseudo)
        .map(|r| RetrievalRecord::new(ex, r.token_pos, &r.query, &r.passages))
        .collect();
    rec.generated_tokens = o.generated_tokens;
    rec.forward_tokens = o.forward_tokens;
    rec.seconds = seconds;
    rec.trace = trace.into_iter().map(|(text, entropy)| TraceToken { text, entropy, score: None }).collect();
    rec
}

#[cfg(test)]
mod tests {
    use super::select;

    #[test]
    fn skip_then_limit() {
        let q: Vec<u32> = (0..10).collect();
        assert_eq!(select(q.clone(), 0, None).unwrap(), q);
        assert_eq!(select(q.clone(), 2, Some(3)).unwrap(), vec![2, 3, 4]);
        assert_eq!(select(q.clone(), 8, Some(5)).unwrap(), vec![8, 9]);
        // none selected: an error naming the flag, with exit code 2
        let e = select(q.clone(), 10, None).unwrap_err();
        assert_eq!(
            (e.to_string(), ragtime::usage::exit_code(&e)),
            ("--skip 10: selects no question (the split has 10)".into(), 2)
        );
        let e = select(q.clone(), 0, Some(0)).unwrap_err();
        assert_eq!(e.to_string(), "--limit 0: selects no question");
        let e = select(Vec::<u32>::new(), 0, None).unwrap_err();
        assert_eq!((e.to_string(), ragtime::usage::exit_code(&e)), ("the split has no questions".into(), 1));
    }
}
