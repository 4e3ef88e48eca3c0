//! `ragtime synth qa-labels --dataset NAME --split train --out DIR`: the model answers training questions
//! closed-book; each generated sentence is stored with its hidden states and labelled by whether the final answer
//! was wrong (see `ragtime::synth::qa_labels`), in the same resumable Parquet store `synth hallucination` writes,
//! so `train detector` reads either source.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args as ClapArgs;

use ragtime::labels::{HalluExample, HalluStore, MANIFEST, OUTPUT_KIND};
use ragtime::qa::Example;
use ragtime::rag::batch::InOrder;
use ragtime::rag::{Batch, Outcome, RagLoop};
use ragtime::synth::hallucination::Progress;
use ragtime::synth::qa_labels::{examples, TEMPLATE};

use super::eval::Method;
use super::model_args::ModelArgs;

#[derive(ClapArgs, Debug)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub data: super::dataset_args::DatasetArgs,
    /// The split to answer (the spec's [splits]); `valid` and `test` are refused.
    #[arg(long, default_value = "train")]
    pub split: String,
    /// Only the first N questions of the split.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Answer length limit (default: configs/none.toml's, else the dataset's).
    #[arg(long, value_parser = super::ranges::int::<1, 65_536>)]
    pub max_new_tokens: Option<usize>,
    /// Dataset directory (created; a re-run resumes it).
    #[arg(long)]
    pub out: PathBuf,
    /// Questions per Parquet shard (the unit a kill can lose).
    #[arg(long, default_value_t = 64, value_parser = super::ranges::int::<1, 1_000_000>)]
    pub flush_every: usize,
    /// Questions answered at once (lanes of one batch; the rows are those of `--batch 1`).
    /// Default: 8 on cpu (32 with --int8-dot where the CPU has AVX-512 VNNI), 64 on cuda.
    #[arg(long, value_parser = super::ranges::int::<1, 256>)]
    pub batch: Option<usize>,
    /// i/n: answer shard i of n (the questions whose id hashes to i) into OUT/part-IIIII-of-NNNNN, all n shards
    /// into the same --out; `ragtime merge OUT` then writes the whole dataset. Default: from Slurm's
    /// SLURM_ARRAY_TASK_ID and RAGTIME_SHARD_COUNT (or SLURM_ARRAY_TASK_COUNT) when set.
    #[arg(long)]
    pub shard: Option<ragtime::shard::Shard>,
}

pub fn run(a: Args) -> Result<()> {
    a.model.check()?;
    // load, checking everything before the model
    let spec = a.data.load()?;
    if spec.reserved_for_testing() {
        ragtime::usage_bail!("--dataset {}: its questions are reserved for testing controllers; label NQ-open, TriviaQA or another training pool", spec.name);
    }
    if ["test", "valid", "validation", "dev"].contains(&a.split.as_str()) {
        ragtime::usage_bail!("--split {}: labels are made from training questions only", a.split);
    }
    let mut examples_all: Vec<Example> =
        spec.load_split(Some(&a.split))?.into_iter().take(a.limit.unwrap_or(usize::MAX)).collect();
    let prompt = spec.prompt_builder()?;
    let method = Method::load("none", None, &spec, &[], None, None, a.max_new_tokens)?;
    let mut settings = serde_json::json!({
        "source": TEMPLATE, "dataset": spec.name, "split": a.split, "model": a.model.model,
        "max_new_tokens": method.max_new,
    });
    // recorded only when set, so label stores made before `--int8-dot` existed still resume
    for (k, v) in a.model.numeric_settings() {
        settings[k] = v;
    }
    let (out, part) = match ragtime::shard::Shard::resolve(a.shard)? {
        None => (a.out.clone(), None),
        Some(s) => {
            let mut job = settings.clone();
            job["limit"] = serde_json::json!(a.limit);
            job["flush_every"] = serde_json::json!(a.flush_every);
            let run = ragtime::shard::ShardRun::begin(&a.out, "--out", s, OUTPUT_KIND, job)?;
            let order = s.take(&mut examples_all, |x| &x.id);
            (run.part_dir(), Some((run, order)))
        }
    };
    let _lock = ragtime::io::claim_output_dir(&out, "--out", OUTPUT_KIND, MANIFEST)?;
    let path = out.join("synth-config.json");
    if let Some(old) = ragtime::io::pin_settings(&path, &serde_json::to_string_pretty(&settings)?, |t| {
        Ok(serde_json::from_str::<serde_json::Value>(t)?)
    })? {
        if old != settings {
            bail!("{}: this directory was made with other settings ({old}); resume with the same ones or use another --out", path.display());
        }
    }
    let lm = a.model.load()?;
    let hidden = lm.config.hidden_size;
    let mut store = HalluStore::open(&out, &lm.name, hidden)?.with_flush_every(a.flush_every);
    let todo: Vec<&Example> = examples_all.iter().filter(|e| !store.is_done(&e.id)).collect();
    eprintln!(
        "synth qa-labels: {} questions of {} {} ({} done), model {}, closed-book, up to {} tokens",
        examples_all.len(),
        spec.name,
        a.split,
        examples_all.len() - todo.len(),
        lm.name,
        method.max_new
    );

    // transform + write, in input order
    let rag = RagLoop { lm: &lm, prompt: &prompt, retriever: None, cfg: method.loop_config(&spec, 0, false) };
    let qf = method.query()?;
    let batch = Batch::new(&lm, a.model.lanes(a.batch).min(todo.len()).max(1));
    let triggers = (0..batch.lanes()).map(|_| method.trigger()).collect::<Result<Vec<_>>>()?;
    let mut progress = Progress::new(examples_all.len(), examples_all.len() - todo.len());
    let mut order = InOrder::default();
    rag.answer_on_lanes(&batch, triggers, qf.as_ref(), todo.iter().map(|ex| ex.question.as_str()), |i, o| {
        order.push(i, (todo[i], o), |(ex, o): (&Example, Result<Outcome>), finished| {
            let rows: Vec<HalluExample> = match o {
                Ok(o) => examples(ex, &o, hidden),
                Err(e) if e.downcast_ref::<ragtime::model::ContextOverflow>().is_some() => {
                    eprintln!("warning: question '{}' skipped: {e}", ex.id);
                    Vec::new()
                }
                Err(e) => return Err(e.context(format!("question '{}'", ex.id))),
            };
            let line = progress.update(&rows, finished);
            store.add_article(&ex.id, rows)?;
            eprintln!("{line}");
            Ok(())
        })
    })?;
    store.flush()?;
    let m = store.manifest().clone();
    if let Some((run, order)) = part {
        run.finish(order.len(), m.examples, order)?;
    }
    println!(
        "{}: {} questions, {} sentences, {} from wrong answers ({:.1}%), {} from right ones; rules: {}",
        out.display(),
        m.articles,
        m.examples,
        m.hallucinated,
        100.0 * m.hallucinated_rate,
        m.faithful,
        m.rules.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ")
    );
    Ok(())
}
