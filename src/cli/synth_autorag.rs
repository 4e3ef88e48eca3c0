//! `ragtime synth autorag`: Auto-RAG's Algorithm 1 over a QA dataset (see `ragtime::autorag::synth`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args as ClapArgs;

use ragtime::autorag::infer::ChatGen;
use ragtime::autorag::prompts::AutoRagPrompts;
use ragtime::autorag::synth::{DialogueStore, SynthConfig, Synthesizer};
use ragtime::config::{self, MethodConfig};
use ragtime::model::Lm;
use ragtime::qa::Example;
use ragtime::rag::batch::{Decoder, InOrder};

use super::model_args::ModelArgs;
use super::retriever_args::RetrieverArgs;

#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The model: writes the reasoning and the queries unless --teacher / --query-model say otherwise.
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub data: super::dataset_args::DatasetArgs,
    /// Index from `ragtime index` (default: the dataset's).
    #[arg(long)]
    pub index: Option<PathBuf>,
    #[command(flatten)]
    pub retr: RetrieverArgs,
    /// Model that writes the reasoning turns (default: --model).
    #[arg(long)]
    pub teacher: Option<PathBuf>,
    /// Model that writes the candidate queries (default: --model).
    #[arg(long)]
    pub query_model: Option<PathBuf>,
    /// Output directory (dialogues.jsonl, dialogues.parquet, attempts.jsonl, stats.json). Re-running resumes.
    #[arg(long, default_value = "datasets/autorag")]
    pub out: PathBuf,
    /// Method config with a [synth] table (default: configs/autorag.toml).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Override a method-config value, e.g. `--set synth.reasoning_temperature=0.7` (repeatable; the settings
    /// used are recorded in OUT/config.json).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    /// Only the first N questions.
    #[arg(long)]
    pub limit: Option<usize>,
    /// i/n: synthesize shard i of n (the questions whose id hashes to i) into OUT/part-IIIII-of-NNNNN, all n
    /// shards into the same --out; `ragtime merge OUT` then writes the whole dialogue set. Default: from Slurm's
    /// SLURM_ARRAY_TASK_ID and RAGTIME_SHARD_COUNT (or SLURM_ARRAY_TASK_COUNT) when set.
    #[arg(long)]
    pub shard: Option<ragtime::shard::Shard>,
    /// T: iterations at most (overrides the config).
    #[arg(long, value_parser = super::ranges::int::<1, 1000>)]
    pub max_iter: Option<usize>,
    /// n: candidate queries per iteration (overrides the config).
    #[arg(long, value_parser = super::ranges::int::<1, 1000>)]
    pub candidates: Option<usize>,
    /// Seed of the query sampling and the random fallback (overrides the config).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Rejection sampling: up to K samples of each question's dialogue, keeping the first that passes the filters
    /// (overrides the config's [synth] samples; 1 = one sample, the paper's setting).
    #[arg(long, value_parser = super::ranges::int::<1, 1000>)]
    pub samples: Option<usize>,
    /// Distinct passing samples kept per question, at most (overrides the config's [synth] keep; 1 = the first,
    /// the paper's one dialogue per question; more needs --samples at least as large). Samples are distinct when
    /// their queries differ.
    #[arg(long, value_parser = super::ranges::int::<1, 1000>)]
    pub keep: Option<usize>,
    /// Folder of the Auto-RAG prompt files (default: <shared data>/fewshot/autorag).
    #[arg(long)]
    pub prompts: Option<PathBuf>,
    /// Questions synthesized at once, each on lanes of its own whose decoding steps share passes over the
    /// teacher's weights (the query model's too when it is the teacher). The attempts and dialogues, and their
    /// order, are those of `--batch 1`, so a run may be resumed with another value. Default: 8 on cpu (32 with
    /// --int8-dot where the CPU has AVX-512 VNNI), 64 on cuda.
    #[arg(long, value_parser = super::ranges::int::<1, 1024>)]
    pub batch: Option<usize>,
}

/// What one question gave: its attempt and the dialogues kept (none, one, or up to `[synth] keep`).
type Synthesized = (ragtime::autorag::synth::Attempt, Vec<ragtime::autorag::dialogue::Dialogue>);

/// Synthesizes `todo` on the `batch.lanes() / lanes_per_slot` question slots of `batch`: slot k's teacher
/// generator on lane `lanes_per_slot * k` (and its query generator from `qgen(k)`: the next lane, or a session of
/// the query model), handing each question's result to `done` in the order of `todo`.
fn synthesize_on_lanes<'l, Q: Decoder>(
    synth: &Synthesizer<'_>,
    batch: &ragtime::rag::Batch<'l>,
    teacher: &'l Lm,
    lanes_per_slot: usize,
    qgen: impl Fn(usize) -> ChatGen<'l, Q>,
    todo: &[&Example],
    mut done: impl FnMut(&Example, Result<Synthesized>, usize) -> Result<()>,
) -> Result<()> {
    let generators =
        (0..batch.lanes() / lanes_per_slot).map(|k| (ChatGen::on(teacher, batch.lane(lanes_per_slot * k)), qgen(k)));
    // results wait here until every question before them is handed on
    let mut order = InOrder::default();
    batch.run_slots(
        lanes_per_slot,
        generators.collect(),
        todo.iter().copied().enumerate(),
        |(mut t, mut q), (i, ex)| {
            Box::pin(async move {
                let r = synth.synthesize_with(&mut t, &mut q, ex).await;
                ((t, q), (i, ex, r.with_context(|| format!("question '{}'", ex.id))))
            })
        },
        |(i, ex, r)| order.push(i, (ex, r), |(ex, r), finished| done(ex, r, finished)),
    )
}

fn load_model(path: &Path, base: &ModelArgs) -> Result<Lm> {
    ModelArgs { model: path.to_path_buf(), ..base.clone() }.load()
}

pub fn run(args: Args) -> Result<()> {
    args.model.check()?;
    let spec = args.data.load()?;
    if spec.reserved_for_testing() {
        ragtime::usage_bail!(
            "--dataset {}: its questions are reserved for testing controllers; synthesize training dialogues from \
             BioASQ, NQ-open or another training pool",
            spec.name
        );
    }
    let mut examples = spec.load_examples()?;
    // the final answer is checked as one answer (`filter::answer_matches`): list questions have none
    let lists = examples.iter().filter(|e| e.kind == ragtime::qa::AnswerKind::List).count();
    if lists > 0 {
        examples.retain(|e| e.kind != ragtime::qa::AnswerKind::List);
        eprintln!("synth autorag: {lists} list questions of {} left out (a dialogue ends in one answer)", spec.name);
        if examples.is_empty() {
            ragtime::usage_bail!("--dataset {}: only list questions, which Auto-RAG synthesis leaves out", spec.name);
        }
    }
    if let Some(n) = args.limit {
        examples.truncate(n);
    }
    let config_path = args.config.clone().unwrap_or_else(|| config::default_path("autorag"));
    let mc = MethodConfig::load(&config_path, Some(&spec.name), &args.overrides, config::AUTORAG_TABLES)?;
    let mut cfg: SynthConfig = mc.section("synth")?;
    if let Some(t) = args.max_iter {
        cfg.max_iter = t;
    }
    if let Some(n) = args.candidates {
        cfg.candidates = n;
    }
    if let Some(s) = args.seed {
        cfg.seed = s;
    }
    if let Some(k) = args.samples {
        cfg.samples = k;
    }
    if let Some(m) = args.keep {
        cfg.keep = m;
    }
    anyhow::ensure!(
        (1..=1000).contains(&cfg.samples),
        "{}: [synth] samples = {}: expected 1..=1000 (1: one sample, the paper's setting)",
        config_path.display(),
        cfg.samples
    );
    if !(1..=cfg.samples).contains(&cfg.keep) {
        let from =
            if args.keep.is_some() { "--keep".to_string() } else { format!("{}: [synth] keep", config_path.display()) };
        ragtime::usage_bail!(
            "{from} = {}: expected 1..={} (at most the samples tried per question, --samples / [synth] samples)",
            cfg.keep,
            cfg.samples
        );
    }
    anyhow::ensure!(
        cfg.rewrite == "fewshot" || cfg.rewrite == "zeroshot",
        "{}: [synth] rewrite must be fewshot or zeroshot, not {:?}",
        config_path.display(),
        cfg.rewrite
    );
    let prompt_dir = args.prompts.clone().unwrap_or_else(AutoRagPrompts::default_dir);
    let prompts = AutoRagPrompts::load(&prompt_dir, &cfg.reasoning)?;
    let index = args
        .index
        .clone()
        .or_else(|| spec.index.clone())
        .with_context(|| format!("give --index DIR (dataset '{}' names no default index)", spec.name))?;
    let retriever = args.retr.open(&index)?;
    let model_path = args.model.model.clone();
    let teacher_path = args.teacher.clone().unwrap_or_else(|| model_path.clone());
    let query_path = args.query_model.clone().unwrap_or_else(|| model_path.clone());
    let mut config = serde_json::json!({
        "dataset": spec.name,
        "index": index.display().to_string(),
        "teacher": teacher_path.display().to_string(),
        "query_model": query_path.display().to_string(),
        "prompts": prompt_dir.display().to_string(),
        "synth": cfg,
    });
    // Recorded only when not BM25, so dialogue folders made before `--retriever` existed still resume.
    if args.retr.retriever != ragtime::retrieval::RetrieverKind::Bm25 {
        config["retriever"] = serde_json::Value::String(args.retr.describe());
    }
    // Likewise integer products and weights rounded at load (their numbers differ from the exact ones)
    for (k, v) in args.model.numeric_settings() {
        config[k] = v;
    }
    // and a precision other than f32 (the batched engine's bf16 or f16)
    if args.model.dtype != ragtime::model::Precision::F32 {
        config["dtype"] = serde_json::Value::String(args.model.dtype.to_string());
    }
    // the output before the models load: a wrong --out fails at once
    use ragtime::autorag::synth::store as dstore;
    let (out, part) = match ragtime::shard::Shard::resolve(args.shard)? {
        None => (args.out.clone(), None),
        Some(s) => {
            // shards may differ in how they compute (a CPU part with integer products beside GPU parts)
            let run =
                ragtime::shard::ShardRun::begin_any_engine(&args.out, "--out", s, dstore::OUTPUT_KIND, config.clone())?;
            let order = s.take(&mut examples, |x| &x.id);
            (run.part_dir(), Some((run, order)))
        }
    };
    let _lock = ragtime::io::claim_output_dir(&out, "--out", dstore::OUTPUT_KIND, dstore::CONFIG_FILE)?;

    // models: load each distinct file once
    let teacher = load_model(&teacher_path, &args.model)?;
    let query_own = if query_path == teacher_path { None } else { Some(load_model(&query_path, &args.model)?) };
    let query_lm = query_own.as_ref().unwrap_or(&teacher);

    let mut store = DialogueStore::open(&out, &config)?;
    let synth = Synthesizer { retriever: retriever.as_ref(), prompts: &prompts, cfg, dataset: spec.name.clone() };
    let total = examples.len();
    eprintln!(
        "synth autorag: {} questions ({} already tried) -> {}",
        total,
        examples.iter().filter(|e| store.is_done(&e.id)).count(),
        out.display()
    );
    let todo: Vec<&Example> = examples.iter().filter(|e| !store.is_done(&e.id)).collect();
    // the rate of this process on the wall clock (questions on lanes overlap, so s/q is no rate)
    let (clock, left) = (ragtime::progress::Clock::new(), todo.len());
    // `finished`: questions this process has synthesized so far, this one and those on lanes that wait for a
    // slower one before them (written in question order), which the rate counts
    let mut record = |ex: &Example, r: Result<Synthesized>, finished: usize| -> Result<()> {
        let (attempt, dialogues) = r?;
        store.record(&attempt, &dialogues)?;
        let (per_s, eta) = clock.rate(finished, left.saturating_sub(finished));
        eprintln!(
            "{} | {:.2} q/min, ETA {} | {}: {} ({} iterations, answer {:?})",
            store.stats().line(total),
            60.0 * per_s,
            ragtime::progress::hms(eta),
            ex.id,
            attempt.reason,
            attempt.iterations,
            attempt.final_answer
        );
        Ok(())
    };
    if args.model.lanes(args.batch) <= 1 {
        let (mut tgen, mut qgen) = (ChatGen::new(&teacher), ChatGen::new(query_lm));
        for (k, ex) in todo.into_iter().enumerate() {
            let r = synth.synthesize(&mut tgen, &mut qgen, ex).with_context(|| format!("question '{}'", ex.id));
            record(ex, r, k + 1)?;
        }
    } else if query_own.is_none() {
        // one model: slot k's teacher turns on lane 2k, its queries on lane 2k + 1
        let batch = ragtime::rag::Batch::new(&teacher, 2 * args.model.lanes(args.batch));
        let qgen = |k: usize| ChatGen::on(&teacher, batch.lane(2 * k + 1));
        synthesize_on_lanes(&synth, &batch, &teacher, 2, qgen, &todo, &mut record)?;
    } else {
        // the query model has sessions of its own, one per slot (they never wait)
        let batch = ragtime::rag::Batch::new(&teacher, args.model.lanes(args.batch));
        let qgen = |_k: usize| ChatGen::new(query_lm);
        synthesize_on_lanes(&synth, &batch, &teacher, 1, qgen, &todo, &mut record)?;
    }
    let stats = store.finish()?;
    if let Some((run, order)) = part {
        run.finish(order.len(), stats.kept, order)?;
    }
    println!("{}", serde_json::to_string_pretty(&stats)?);
    Ok(())
}
