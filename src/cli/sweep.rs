//! `ragtime sweep`: every controller over a grid of its threshold on one dataset split, one run directory per
//! setting, `sweep.jsonl` (one line per setting), `pareto.svg` (quality against retrievals per question), and with
//! `--pick` each controller's operating points for the budgets in `configs/calibrated/<model>.toml`, which
//! `ragtime eval` then uses (see [`ragtime::eval::sweep`]).
//!
//! A later sweep of other controllers into the same directory adds their lines to `sweep.jsonl` and their points
//! to the plot, keeping the earlier ones.
//!
//! The model and the index are loaded once for the whole sweep. Each setting is an ordinary eval run directory
//! (`DIR/runs/<controller>@<key>=<value>`), so an interrupted sweep resumes where it stopped, and `ragtime report
//! DIR/runs/*` reads it like any other run.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args as ClapArgs;

use ragtime::eval::plot::{group, pareto_svg};
use ragtime::eval::refine;
use ragtime::eval::run::{Progress, RunWriter, CONFIG_FILE, OUTPUT_KIND};
use ragtime::eval::sweep::{self, calibrated_path, Calibrated, Setting, SweepRecord, DEFAULT_BUDGETS};
use ragtime::progress::{hms, Clock};
use ragtime::retrieval::Retriever;

use super::eval::Method;
use super::model_args::ModelArgs;
use super::retriever_args::RetrieverArgs;

/// What a sweep directory's marker says it holds.
const SWEEP_KIND: &str = "sweep";
const RECORDS_FILE: &str = "sweep.jsonl";
const PLOT_FILE: &str = "pareto.svg";

#[derive(ClapArgs, Debug)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub data: super::dataset_args::DatasetArgs,
    /// The split swept (the dataset spec's [splits]); calibration belongs on validation questions.
    #[arg(long, default_value = "valid")]
    pub split: String,
    /// Controllers (configs/NAME.toml each; its [sweep] table gives the grid, none for a single run), e.g.
    /// `none,single,oracle,fixed-length,fixed-sentence,flare,rind,etc,mlp`.
    #[arg(long, value_delimiter = ',', required = true)]
    pub triggers: Vec<String>,
    /// Index from `ragtime index` (default: the dataset's).
    #[arg(long)]
    pub index: Option<PathBuf>,
    #[command(flatten)]
    pub retr: RetrieverArgs,
    /// Passages per retrieval (default: each config's [retrieval] top_k, else 3).
    #[arg(short = 'k', long, value_parser = super::ranges::int::<1, 1000>)]
    pub top_k: Option<usize>,
    /// The first N questions of the split.
    #[arg(long)]
    pub limit: Option<usize>,
    #[arg(long, default_value_t = 10, value_parser = super::ranges::int::<0, 1000>)]
    pub max_retrievals: usize,
    /// Answer length limit (default: each config's, else the dataset's).
    #[arg(long, value_parser = super::ranges::int::<1, 65_536>)]
    pub max_new_tokens: Option<usize>,
    /// Replace a controller's grid for this sweep, keeping its config's key: `--grid rind=0.1,0.2,0.35`,
    /// `--grid mlp=threshold:0.999,threshold:0.9995` (repeat the flag per controller). A threshold's useful range
    /// depends on the model.
    #[arg(long, value_name = "CONTROLLER=V1,V2,...")]
    pub grid: Vec<String>,
    /// Detector checkpoint for `mlp`.
    #[arg(long)]
    pub detector: Option<PathBuf>,
    /// Override a value in every controller's config, e.g. `--set query.top_n=20` (not the swept key).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    /// Questions answered at once (see `ragtime eval --batch`). Default: 8 on cpu (32 with --int8-dot where the
    /// CPU has AVX-512 VNNI), 64 on cuda.
    #[arg(long, value_parser = super::ranges::int::<1, 256>)]
    pub batch: Option<usize>,
    /// After the grid, up to N more settings per controller and budget (`--budgets`), each halfway between the
    /// two measured settings whose retrievals per question lie on either side of the budget (in log-odds for
    /// values in (0, 1), in logs for other positive ones), until one comes within `--tolerance` of it.
    #[arg(long, default_value_t = 0, value_parser = super::ranges::int::<0, 50>)]
    pub refine: usize,
    /// Retrievals per question within which `--refine` takes a budget as met; `--pick` warns of a point farther
    /// from its budget.
    #[arg(long, default_value_t = 0.1, value_parser = super::ranges::non_negative)]
    pub tolerance: f64,
    /// Write each controller's operating points for `--budgets` to `--calibrated`.
    #[arg(long)]
    pub pick: bool,
    /// Budgets (retrievals per question) that `--pick` finds settings for.
    #[arg(long, value_delimiter = ',', default_values_t = DEFAULT_BUDGETS.to_vec())]
    pub budgets: Vec<f64>,
    /// The budget `ragtime eval` uses by default, written into a new calibrated file.
    #[arg(long, default_value_t = 1.0)]
    pub default_budget: f64,
    /// Calibrated-points file `--pick` updates (default: configs/calibrated/<model file name>.toml).
    #[arg(long)]
    pub calibrated: Option<PathBuf>,
    /// Sweep directory (default runs/sweep-<dataset>-<split>-<model>).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

fn check_budget(flag: &str, b: f64) -> Result<()> {
    if !b.is_finite() || !(0.0..=1000.0).contains(&b) {
        ragtime::usage_bail!("{flag} {b}: expected retrievals per question in [0, 1000]");
    }
    Ok(())
}

pub fn run(args: Args) -> Result<()> {
    args.model.check()?;
    // check every input before the model loads
    if args.pick && args.split == "test" {
        ragtime::usage_bail!("--pick with --split test: thresholds are calibrated on validation questions; test questions are for reporting");
    }
    for &b in &args.budgets {
        check_budget("--budgets", b)?;
    }
    check_budget("--default-budget", args.default_budget)?;
    let mut triggers = args.triggers.clone();
    triggers.dedup();
    if triggers.contains(&"autorag".to_string()) {
        ragtime::usage_bail!(
            "--triggers autorag: Auto-RAG has no threshold to sweep; run it with `ragtime eval --trigger autorag`"
        );
    }
    for t in &triggers {
        super::eval::check_shipped("--triggers", t, "")?;
    }
    let spec = args.data.load()?;
    let examples = super::eval::select(spec.load_split(Some(&args.split))?, 0, args.limit)?;
    let prompt = spec.prompt_builder()?;
    let model_name = args.model.model.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("runs/sweep-{}-{}-{model_name}", spec.name, args.split)));

    let mut grids: Vec<(String, Vec<toml::Value>)> = Vec::new();
    for g in &args.grid {
        let (controller, values) = match sweep::parse_grid(g) {
            Ok(cv) => cv,
            Err(e) => ragtime::usage_bail!("--grid {e}"),
        };
        if !triggers.contains(&controller) {
            ragtime::usage_bail!("--grid {g}: '{controller}' is not among --triggers");
        }
        if grids.iter().any(|(c, _)| *c == controller) {
            ragtime::usage_bail!("--grid {g}: a second grid for '{controller}'");
        }
        grids.push((controller, values));
    }
    let mut plan: Vec<(Setting, Method)> = Vec::new();
    for t in &triggers {
        let base = method_for(&args, &spec, t, &args.overrides).with_context(|| format!("--triggers {t}"))?;
        let mut grid = base.sweep().with_context(|| format!("--triggers {t}"))?;
        if let Some((_, values)) = grids.iter().find(|(c, _)| c == t) {
            grid = match grid.with_values(values.clone()) {
                Ok(g) => g,
                Err(e) => ragtime::usage_bail!("--grid {t}=...: {e} ({})", base.config_path.display()),
            };
        }
        let settings = grid.settings(t).with_context(|| format!("{}", base.config_path.display()))?;
        for s in settings {
            if let Some(key) = &s.key {
                if args.overrides.iter().any(|o| o.split_once('=').is_some_and(|(k, _)| k.trim() == key)) {
                    ragtime::usage_bail!("--set {key}=...: {key} is what the sweep of {t} varies");
                }
            }
            let m = setting_method(&args, &spec, &s)?;
            plan.push((s, m));
        }
    }
    // one index for every controller that reads it; one gold retriever for the oracle
    let needs_index = plan.iter().any(|(_, m)| !m.gold && m.trigger().map(|t| t.name() != "none").unwrap_or(true));
    let index_dir = args.index.clone().or_else(|| spec.index.clone());
    let index: Option<Box<dyn Retriever>> = match (&index_dir, needs_index) {
        (_, false) => None,
        (Some(d), true) => Some(args.retr.open(d)?),
        (None, true) => ragtime::usage_bail!(
            "--triggers retrieve: give --index DIR (dataset '{}' names no default index)",
            spec.name
        ),
    };
    let gold = ragtime::retrieval::gold::GoldRetriever::new(&examples);
    let calibrated_file = args.calibrated.clone().unwrap_or_else(|| calibrated_path(&model_name));
    if args.pick {
        // refuse a foreign file, or another model's, now, before --out is made and not after hours of sweeping
        if ragtime::io::exists(&calibrated_file)? {
            let text = std::fs::read_to_string(&calibrated_file)?;
            if !text.starts_with(sweep::CALIBRATED_HEADER) {
                bail!(
                    "--calibrated {}: exists and was not written by `ragtime sweep --pick`",
                    calibrated_file.display()
                );
            }
        }
        let existing = Calibrated::load(&calibrated_file)
            .with_context(|| format!("--calibrated {}", calibrated_file.display()))?;
        if let Some(other) = existing.filter(|f| f.model != model_name) {
            ragtime::usage_bail!(
                "--calibrated {}: holds the points of model '{}', not of '{model_name}' (--model); give this model's \
                 file (by default {}) or a new path",
                calibrated_file.display(),
                other.model,
                calibrated_path(&model_name).display()
            );
        }
    }
    let _lock = ragtime::io::claim_output_dir(&out, "--out", SWEEP_KIND, RECORDS_FILE)?;
    let lm = args.model.load()?;
    for (s, m) in &plan {
        m.trigger()?
            .check_model(&lm.name, lm.config.hidden_size)
            .with_context(|| format!("--triggers {}", s.controller))?;
    }

    // transform: one run per setting, resumable
    eprintln!(
        "sweep: {} settings of {} controllers over {} questions -> {}",
        plan.len(),
        triggers.len(),
        examples.len(),
        out.display()
    );
    let clock = Clock::new();
    // settings swept into this directory by earlier sweeps of other controllers stay in sweep.jsonl and the plot
    let ours: Vec<String> = plan.iter().map(|(s, _)| format!("runs/{}", s.dir_name())).collect();
    let mut earlier: Vec<SweepRecord> = if ragtime::io::is_file(&out.join(RECORDS_FILE))? {
        sweep::read_records(&out.join(RECORDS_FILE))?.into_iter().filter(|r| !ours.contains(&r.run)).collect()
    } else {
        Vec::new()
    };
    let mut records: Vec<SweepRecord> = Vec::new();
    // one setting's run: an ordinary eval run directory, resumed where an earlier sweep left it
    let mut run_setting = |setting: &Setting, method: &Method, records: &mut Vec<SweepRecord>| -> Result<SweepRecord> {
        let name = setting.dir_name();
        let dir = out.join("runs").join(&name);
        let _run_lock = ragtime::io::claim_output_dir(&dir, "--out", OUTPUT_KIND, CONFIG_FILE)?;
        let retriever: Option<&dyn Retriever> = match method.trigger()?.name() {
            "none" => None,
            _ if method.gold => Some(&gold),
            _ => index.as_deref(),
        };
        let cfg = method.loop_config(&spec, args.max_retrievals, false);
        let mut c = toml::map::Map::new();
        c.insert("label".into(), toml::Value::String(setting.label()));
        c.insert("method".into(), toml::Value::String(setting.controller.clone()));
        c.insert("dataset".into(), toml::Value::String(spec.name.clone()));
        c.insert("split".into(), toml::Value::String(args.split.clone()));
        spec.record_prompt(&mut c);
        c.insert("model".into(), toml::Value::String(args.model.model.display().to_string()));
        let source = if retriever.is_none() {
            String::new()
        } else if method.gold {
            "gold".into()
        } else {
            index_dir.as_ref().map(|d| d.display().to_string()).unwrap_or_default()
        };
        c.insert("index".into(), toml::Value::String(source));
        if args.retr.retriever != ragtime::retrieval::RetrieverKind::Bm25 {
            c.insert("retriever".into(), toml::Value::String(args.retr.describe()));
        }
        if let (Some(k), Some(v)) = (&setting.key, &setting.value) {
            let mut sw = toml::map::Map::new();
            sw.insert("key".into(), toml::Value::String(k.clone()));
            sw.insert("value".into(), v.clone());
            c.insert("sweep".into(), toml::Value::Table(sw));
        }
        c.insert("loop".into(), toml::Value::try_from(&cfg)?);
        c.insert("method_config".into(), method.mc.root.clone());
        let mut writer = RunWriter::create(&dir, &toml::Value::Table(c))?;
        let mut progress = Progress::new(examples.len(), writer.len());
        super::eval::answer_all(
            &lm,
            &prompt,
            retriever,
            method,
            cfg,
            &examples,
            &mut writer,
            &mut progress,
            args.model.lanes(args.batch),
        )?;
        let summary = writer.finish()?;
        let run = format!("runs/{name}");
        let rec = SweepRecord::new(setting, &run, &summary);
        records.push(rec.clone());
        // write after every setting, so an interrupted sweep leaves what it measured; a refined setting an
        // earlier, interrupted sweep measured is this sweep's now
        earlier.retain(|r| r.run != run);
        let all: Vec<SweepRecord> = earlier.iter().chain(records.iter()).cloned().collect();
        write_outputs(&out, &all, &spec.name, &args.split, &model_name)?;
        Ok(rec)
    };
    for (i, (setting, method)) in plan.iter().enumerate() {
        let rec = run_setting(setting, method, &mut records)?;
        let (_, left) = clock.rate(i + 1, plan.len() - i - 1);
        eprintln!(
            "sweep [{}/{}] {}: {} ({} elapsed, ETA {})",
            i + 1,
            plan.len(),
            setting.label(),
            measured(&rec),
            hms(clock.elapsed()),
            hms(left)
        );
    }
    // refine: bisect toward each budget between the settings that bracket it
    if args.refine > 0 {
        let swept: Vec<(String, String)> = plan
            .iter()
            .filter_map(|(s, _)| Some((s.controller.clone(), s.key.clone()?)))
            .fold(Vec::new(), |mut v, ck| {
                if !v.contains(&ck) {
                    v.push(ck);
                }
                v
            });
        for (controller, key) in &swept {
            for &budget in &args.budgets {
                for k in 0..=args.refine {
                    let what = match refine::next(&records, controller, budget, args.tolerance) {
                        refine::Next::Probe(v) if k < args.refine => v,
                        refine::Next::Probe(_) => {
                            eprintln!(
                                "refine {controller} to {budget}: not within {} after {} more settings",
                                args.tolerance, args.refine
                            );
                            break;
                        }
                        refine::Next::Met(i) => {
                            eprintln!(
                                "refine {controller} to {budget}: met by {} ({:.2} retrievals/question)",
                                records[i].run, records[i].retrievals_per_question
                            );
                            break;
                        }
                        refine::Next::Outside { nearest } => {
                            eprintln!(
                                "refine {controller} to {budget}: every setting swept gives {} retrievals/question \
                                 (nearest {nearest:.2}); widen --grid to bracket it",
                                if nearest > budget { "more" } else { "fewer" }
                            );
                            break;
                        }
                        refine::Next::NoRoom { below, above } => {
                            eprintln!(
                                "refine {controller} to {budget}: nothing lies between {below} and {above}, which bracket it"
                            );
                            break;
                        }
                        refine::Next::NoGrid => break,
                    };
                    let setting = Setting { controller: controller.clone(), key: Some(key.clone()), value: Some(what) };
                    let method = setting_method(&args, &spec, &setting)?;
                    let rec = run_setting(&setting, &method, &mut records)?;
                    eprintln!(
                        "refine {controller} to {budget} [{}/{}] {}: {} ({} elapsed)",
                        k + 1,
                        args.refine,
                        setting.label(),
                        measured(&rec),
                        hms(clock.elapsed()),
                    );
                }
            }
        }
    }

    // report
    print!("{}", records_table(&records));
    if args.pick {
        let points = sweep::pick(&records, &args.budgets, &spec.name, &args.split);
        let mut file =
            Calibrated::load(&calibrated_file)?.unwrap_or_else(|| Calibrated::new(&model_name, args.default_budget));
        // the command as a user types it: `ragtime`, not the path the binary was started from
        let command = std::iter::once("ragtime".to_string())
            .chain(std::env::args().skip(1).map(|a| if a.contains(' ') { format!("'{a}'") } else { a }))
            .collect::<Vec<_>>()
            .join(" ");
        for p in &points {
            eprintln!(
                "pick: {} on {} at budget {}: {} ({:.2} retrievals/question, F1 {:.3})",
                p.trigger,
                p.dataset,
                p.budget,
                p.override_spec(),
                p.retrievals_per_question,
                p.f1
            );
        }
        for note in points.iter().filter_map(|p| refine::off_budget(&records, p, args.tolerance)) {
            eprintln!("warning: pick: {note}");
        }
        file.merge(points, command);
        file.save(&calibrated_file)?;
        eprintln!("wrote {}", calibrated_file.display());
    }
    Ok(())
}

/// A controller's method with `overrides` (`--set`, and the swept value where there is one).
fn method_for(
    args: &Args,
    spec: &ragtime::eval::DatasetSpec,
    controller: &str,
    overrides: &[String],
) -> Result<Method> {
    Method::load(controller, None, spec, overrides, args.detector.as_deref(), args.top_k, args.max_new_tokens)
}

/// The method that runs one setting: its swept value, then every `--set`.
fn setting_method(args: &Args, spec: &ragtime::eval::DatasetSpec, s: &Setting) -> Result<Method> {
    let mut overrides: Vec<String> = s.override_spec().into_iter().collect();
    overrides.extend(args.overrides.iter().cloned());
    method_for(args, spec, &s.controller, &overrides)
        .with_context(|| format!("--triggers {}, {}", s.controller, s.label()))
}

/// What a setting's run measured, for its progress line: `F1 0.216, 1.90 retrievals/question`.
fn measured(r: &SweepRecord) -> String {
    let accuracy = r.accuracy.map(|a| format!(", accuracy {a:.3}")).unwrap_or_default();
    format!("F1 {:.3}{accuracy}, {:.2} retrievals/question", r.f1, r.retrievals_per_question)
}

/// `sweep.jsonl` and `pareto.svg` of the records so far.
fn write_outputs(
    out: &std::path::Path,
    records: &[SweepRecord],
    dataset: &str,
    split: &str,
    model: &str,
) -> Result<()> {
    sweep::write_records(&out.join(RECORDS_FILE), records)?;
    let series = group(records.iter().map(|r| (r.controller.clone(), r.point())));
    let metric = if records.iter().any(|r| r.accuracy.is_some()) { "accuracy" } else { "F1" };
    let svg = pareto_svg(&format!("{metric} against retrievals: {dataset} {split}, {model}"), metric, &series)?;
    ragtime::io::write_atomic(&out.join(PLOT_FILE), svg.as_bytes())
}

/// The sweep as a Markdown table, one row per setting.
fn records_table(records: &[SweepRecord]) -> String {
    let mut s = String::from(
        "| controller | setting | n | EM | F1 | accuracy | retrievals/q | supporting hit | gen tokens/q | s/q |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in records {
        let setting = match (&r.key, &r.value) {
            (Some(k), Some(v)) => format!("{k}={}", sweep::value_label(v)),
            _ => "–".into(),
        };
        let opt = |v: Option<f64>| v.map_or_else(|| "–".to_string(), |x| format!("{x:.3}"));
        s.push_str(&format!(
            "| {} | {setting} | {} | {:.3} | {:.3} | {} | {:.2} | {} | {:.1} | {:.2} |\n",
            r.controller,
            r.questions,
            r.em,
            r.f1,
            opt(r.accuracy),
            r.retrievals_per_question,
            opt(r.supporting_hit_rate),
            r.generated_tokens_per_question,
            r.seconds_per_question
        ));
    }
    s
}
