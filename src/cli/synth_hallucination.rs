//! `ragtime synth hallucination --wiki DUMP --out DIR`: load the dump and the model, synthesize labelled
//! continuations article by article (`--batch B`: B articles at once), write resumable Parquet shards (see
//! `ragtime::synth::hallucination`).

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args as ClapArgs;

use ragtime::corpus::wikiextractor::read_dump;
use ragtime::entities::compare::DEFAULT_GLOVE_THRESHOLD;
use ragtime::entities::wordnet::WordNet;
use ragtime::entities::{CombinedExtractor, Resources};
use ragtime::labels::HalluStore;
use ragtime::shard::{Shard, ShardRun};
use ragtime::synth::hallucination::{record_config, run as synthesize, SynthConfig, Synthesizer, Template};

use super::model_args::ModelArgs;

#[derive(ClapArgs, Debug)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    /// WikiExtractor dump (file or folder tree; JSON lines or <doc> form; plain or .bz2).
    #[arg(long)]
    pub wiki: PathBuf,
    /// Dataset directory (created; a re-run resumes it).
    #[arg(long, default_value = "datasets/hallucination")]
    pub out: PathBuf,
    /// Only the first N articles of the dump (before sharding).
    #[arg(long)]
    pub limit: Option<usize>,
    /// i/n: synthesize shard i of n (the articles whose id hashes to i) into OUT/part-IIIII-of-NNNNN, all n
    /// shards into the same --out; `ragtime merge OUT` then writes the whole dataset. Default: from Slurm's
    /// SLURM_ARRAY_TASK_ID and RAGTIME_SHARD_COUNT (or SLURM_ARRAY_TASK_COUNT) when set.
    #[arg(long)]
    pub shard: Option<Shard>,
    /// Prompt templates, comma-separated: mind, radio.
    #[arg(long, value_delimiter = ',', default_value = "mind,radio")]
    pub templates: Vec<Template>,
    /// Body sentences that form an article's opening (0 = whole text).
    #[arg(long, default_value_t = 5, value_parser = super::ranges::int::<0, 100_000>)]
    pub sentences: usize,
    /// At most this many truncation points per article, a seeded sample (0 = all).
    #[arg(long, default_value_t = 0, value_parser = super::ranges::int::<0, 100_000>)]
    pub max_entities: usize,
    /// Tokens generated beyond the entity's own length.
    #[arg(long, default_value_t = 16, value_parser = super::ranges::int::<0, 4096>)]
    pub extra_tokens: usize,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Articles per Parquet shard (the unit a kill can lose).
    #[arg(long, default_value_t = 16, value_parser = super::ranges::int::<1, 1_000_000>)]
    pub flush_every: usize,
    /// GloVe cosine at or above which two entities count as the same (when GloVe is installed).
    #[arg(long, default_value_t = DEFAULT_GLOVE_THRESHOLD, value_parser = super::ranges::cosine_f32)]
    pub glove_threshold: f32,
    /// Do not use WordNet even if installed.
    #[arg(long)]
    pub no_wordnet: bool,
    /// Articles worked on at once, each with its own KV cache; their decoding steps share the passes over the
    /// model's weights (on the CPU: over the 4/8-bit weight blocks of a GGUF model). Articles are written in
    /// input order and the rows are those of `--batch 1`, so a run may be resumed with another value.
    /// Default: 8 on cpu (32 with --int8-dot where the CPU has AVX-512 VNNI), 64 on cuda.
    #[arg(long, value_parser = super::ranges::int::<1, 256>)]
    pub batch: Option<usize>,
}

pub fn run(a: Args) -> Result<()> {
    a.model.check()?;
    // load
    let all = read_dump(&a.wiki)?;
    anyhow::ensure!(!all.is_empty(), "{}: the dump has no articles", a.wiki.display());
    let wordnet = if a.no_wordnet { None } else { WordNet::load_default()? };
    // the gazetteer and the common-word statistics come from the whole dump, so every shard extracts alike
    let extractor = CombinedExtractor::from_articles(&all, wordnet.as_ref());
    let mut resources = Resources::load_default(a.glove_threshold)?;
    if a.no_wordnet {
        resources.wordnet = None;
    }
    let mut articles = all;
    if let Some(n) = a.limit {
        articles.truncate(n);
    }
    let cfg = SynthConfig {
        templates: a.templates.clone(),
        sentences: a.sentences,
        max_entities: a.max_entities,
        extra_tokens: a.extra_tokens,
        seed: a.seed,
    };
    // the output before the model loads: a wrong --out fails at once
    use ragtime::labels::{MANIFEST, OUTPUT_KIND};
    let shard = Shard::resolve(a.shard)?;
    let (out, shard_run, order) = match shard {
        None => (a.out.clone(), None, vec![]),
        Some(s) => {
            let job = job_settings(&a, &cfg)?;
            let run = ShardRun::begin(&a.out, "--out", s, OUTPUT_KIND, job)?;
            let order = s.take(&mut articles, |x| &x.id);
            (run.part_dir(), Some(run), order)
        }
    };
    let _lock = ragtime::io::claim_output_dir(&out, "--out", OUTPUT_KIND, MANIFEST)?;
    let lm = a.model.load()?;
    eprintln!(
        "synth: {} articles{} from {}, model {} ({}), templates {}, resources: WordNet {}, GloVe {}",
        articles.len(),
        shard.map(|s| format!(" (shard {s})")).unwrap_or_default(),
        a.wiki.display(),
        lm.name,
        lm.device,
        cfg.templates.iter().map(|t| t.name()).collect::<Vec<_>>().join(","),
        if resources.wordnet.is_some() { "yes" } else { "no" },
        if resources.glove.is_some() { "yes" } else { "no (scripts/setup.sh --glove)" },
    );
    let mut store = HalluStore::open(&out, &lm.name, lm.config.hidden_size)?.with_flush_every(a.flush_every);
    let recorded = serde_json::json!({
        "wiki": a.wiki, "model": a.model.model, "shard": shard, "limit": a.limit, "flush_every": a.flush_every,
    });
    record_config(&out, &cfg, &recorded)?;

    // transform + write
    let synth = Synthesizer { lm: &lm, extractor: &extractor, resources: &resources, cfg };
    let m = synthesize(&synth, &articles, &mut store, a.model.lanes(a.batch), &mut |l| eprintln!("{l}"))
        .with_context(|| format!("synthesis into {}", out.display()))?;
    if let Some(run) = shard_run {
        run.finish(m.articles, m.examples, order)?;
    }
    println!(
        "{}: {} articles, {} examples, {} hallucinated ({:.1}%), {} faithful; rules: {}",
        out.display(),
        m.articles,
        m.examples,
        m.hallucinated,
        100.0 * m.hallucinated_rate,
        m.faithful,
        m.rules.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ")
    );
    println!("templates: {}", ragtime::labels::template_agreement(&out)?);
    Ok(())
}

/// What every shard of one sharded synthesis must share: the synthesis settings, the input and the model (as
/// given; the merged dataset's `synth-config.json` is shard 0's without the shard).
fn job_settings(a: &Args, cfg: &SynthConfig) -> Result<serde_json::Value> {
    let mut v = serde_json::to_value(cfg)?;
    let m = v.as_object_mut().expect("struct");
    m.insert("wiki".into(), serde_json::json!(a.wiki));
    m.insert("model".into(), serde_json::json!(a.model.model));
    m.insert("limit".into(), serde_json::json!(a.limit));
    m.insert("glove_threshold".into(), serde_json::json!(a.glove_threshold));
    m.insert("no_wordnet".into(), serde_json::json!(a.no_wordnet));
    m.insert("flush_every".into(), serde_json::json!(a.flush_every));
    for (k, v) in a.model.numeric_settings() {
        m.insert(k.into(), v);
    }
    Ok(v)
}
