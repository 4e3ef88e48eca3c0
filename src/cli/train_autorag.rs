//! `ragtime train autorag`: supervised fine-tuning on Auto-RAG dialogues (see `ragtime::sft`).
//!
//! ```text
//! ragtime train autorag --data datasets/autorag --model M --epochs 5 --out checkpoints/autorag [--lora RANK]
//! ```
//!
//! Settings come from `--config` (default `configs/autorag-train.toml`), flags override them. `OUT/` receives
//! the Hugging Face folder of the trained model (LoRA merged; the adapter alone in `OUT/adapter/`),
//! `train_report.json`, and `OUT/checkpoint/` while training: running the same command again after a kill
//! resumes from it.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Deserialize;

use ragtime::config::{MethodConfig, TRAIN_TABLES};
use ragtime::device::{train_on, DeviceKind, TrainJob};
use ragtime::model::gguf::GgufFile;
use ragtime::model::safetensors::SafetensorsDir;
use ragtime::model::weights::WeightSource;
use ragtime::model::{ModelConfig, Tokenizer};
use ragtime::sft::export::{export_hf, write_tensors, TokenizerJson};
use ragtime::sft::lora::{adapter_config_json, LoraConfig};
use ragtime::sft::train::{remove_checkpoint, Trained};
use ragtime::sft::{read_dialogues, SftConfig, SftData};

use super::model_args::DEFAULT_MODEL;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Folder with dialogues.jsonl (one Dialogue per line), or the .jsonl file itself; or several, comma-separated
    /// or repeated: the dialogue sets of several synthesis runs over the same questions (another `--seed`, more
    /// samples) are read in order, a dialogue that repeats an earlier one's question and queries left out.
    #[arg(long, value_delimiter = ',', default_value = "datasets/autorag")]
    pub data: Vec<PathBuf>,
    /// Only the first N dialogues of --data (in its order, the synthesis order; a question's dialogues are kept
    /// together): nested training sets for a learning curve.
    #[arg(long, value_parser = super::ranges::int::<1, 100_000_000>)]
    pub limit: Option<usize>,
    /// Base model: a .gguf file or a Hugging Face folder.
    #[arg(long, default_value = DEFAULT_MODEL)]
    pub model: PathBuf,
    /// tokenizer.json (needed with a GGUF model unless one lies beside it: it is copied into the output).
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Output folder: the trained model (HF layout), train_report.json, checkpoint/.
    #[arg(long, default_value = "checkpoints/autorag")]
    pub out: PathBuf,
    /// Defaults (TOML, sections [train] and [lora]; default: configs/autorag-train.toml, else built-in); flags
    /// override.
    #[arg(long)]
    pub config: Option<PathBuf>,
    #[arg(long, value_parser = super::ranges::int::<1, 100_000>)]
    pub epochs: Option<usize>,
    /// Peak learning rate (default: [train] lr, or [lora] lr with --lora).
    #[arg(long, value_parser = super::ranges::positive)]
    pub lr: Option<f64>,
    #[arg(long, value_parser = super::ranges::int::<1, 65_536>)]
    pub batch_size: Option<usize>,
    /// Micro-batches per optimizer update.
    #[arg(long, value_parser = super::ranges::int::<1, 65_536>)]
    pub grad_accum: Option<usize>,
    /// Tokens per dialogue (longer ones are cut).
    #[arg(long, value_parser = super::ranges::int::<8, 1_048_576>)]
    pub max_len: Option<usize>,
    #[arg(long, value_parser = super::ranges::fraction)]
    pub warmup_ratio: Option<f64>,
    /// Global gradient-norm bound (0: off).
    #[arg(long, value_parser = super::ranges::non_negative)]
    pub clip_norm: Option<f64>,
    #[arg(long, value_parser = super::ranges::non_negative)]
    pub weight_decay: Option<f64>,
    /// Validation loss every N updates.
    #[arg(long, value_parser = super::ranges::int::<1, 100_000_000>)]
    pub eval_every: Option<usize>,
    /// Checkpoint every N updates.
    #[arg(long, value_parser = super::ranges::int::<1, 100_000_000>)]
    pub save_every: Option<usize>,
    #[arg(long, value_parser = super::ranges::fraction)]
    pub valid_fraction: Option<f64>,
    #[arg(long)]
    pub seed: Option<u64>,
    /// Cap on optimizer updates (the schedule spans them).
    #[arg(long)]
    pub max_steps: Option<usize>,
    /// Train LoRA adapters of this rank instead of all weights.
    #[arg(long, value_parser = super::ranges::int::<0, 65_536>)]
    pub lora: Option<usize>,
    #[arg(long, value_parser = super::ranges::positive)]
    pub lora_alpha: Option<f64>,
    /// Comma-separated: q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj.
    #[arg(long, value_delimiter = ',')]
    pub lora_targets: Option<Vec<String>>,
    /// Stop (after a checkpoint) once this many updates are done; run again to continue.
    #[arg(long)]
    pub stop_after: Option<usize>,
    /// Ignore and delete an existing checkpoint in OUT/checkpoint.
    #[arg(long)]
    pub restart: bool,
    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    pub device: DeviceKind,
    /// Pad batches to a few fixed shapes (rows, length and target count to powers of two, rows at most
    /// --batch-size) so that CUDA compiles each kernel once; same losses (default: [train] static_shapes).
    #[arg(long)]
    pub static_shapes: bool,
    /// Pack each update's dialogues into rows of up to --max-len tokens (each dialogue at its own positions,
    /// attending only to itself), --batch-size rows per micro-batch: fewer pads, same losses (default: [train] pack).
    #[arg(long)]
    pub pack: bool,
    /// Keep only each decoder layer's input and recompute the layer during the backward pass: activation memory
    /// of one layer instead of all, for about a third more arithmetic per update; same losses (default: [train]
    /// gradient_checkpointing).
    #[arg(long)]
    pub gradient_checkpointing: bool,
    /// What the forward and backward passes compute in: f32, or bf16 with f32 master weights (the optimizer, the
    /// updates, the norms, the softmax and the loss stay f32; f16 is refused: it needs loss scaling) (default:
    /// [train] dtype, f32).
    #[arg(long)]
    pub dtype: Option<ragtime::model::Precision>,
    /// Write the run's plan (settings, tokenized dialogues with their loss masks, every update's micro-batches and
    /// learning rate) as JSON lines to this file and exit without training: another trainer can replay exactly
    /// this run (scripts/train_autorag_torch.py does, as the PyTorch reference). It replaces only a plan written
    /// before; any other file there is refused.
    #[arg(long)]
    pub dump_plan: Option<PathBuf>,
    /// Write the base model, untrained, as a Hugging Face folder (f32 safetensors + config + tokenizer) to this
    /// folder and exit: a GGUF base, de-quantized, for tools that read only that layout. With --lora, also the
    /// adapters training starts from (adapter_init.safetensors, PEFT's names and layout: the replay's start).
    #[arg(long)]
    pub export_base: Option<PathBuf>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct LoraSection {
    #[serde(default)]
    enabled: bool,
    rank: Option<usize>,
    alpha: Option<f64>,
    targets: Option<Vec<String>>,
    lr: Option<f64>,
}

impl Args {
    /// The file's settings with the flags applied.
    pub fn config(&self) -> Result<SftConfig> {
        // a --config that is not there is an error; the shipped one missing falls back to the built-in values
        let path = match &self.config {
            Some(p) => Some(p.clone()),
            None => Some(ragtime::config::default_path("autorag-train")).filter(|p| ragtime::io::present_or_refused(p)),
        };
        let (mut cfg, lora_sec) = match path {
            Some(p) => {
                let mc = MethodConfig::load(&p, None, &[], TRAIN_TABLES)?;
                (mc.section::<SftConfig>("train")?, mc.section::<LoraSection>("lora")?)
            }
            None => {
                eprintln!("configs/autorag-train.toml: not found, using built-in defaults");
                (SftConfig::default(), LoraSection::default())
            }
        };
        macro_rules! set {
            ($($f:ident),*) => { $( if let Some(v) = self.$f { cfg.$f = v; } )* };
        }
        set!(
            epochs,
            batch_size,
            grad_accum,
            max_len,
            warmup_ratio,
            clip_norm,
            weight_decay,
            eval_every,
            save_every,
            valid_fraction,
            seed
        );
        if self.max_steps.is_some() {
            cfg.max_steps = self.max_steps;
        }
        let rank = self.lora.or(if lora_sec.enabled { lora_sec.rank } else { None });
        cfg.lora = match rank {
            Some(0) | None => None,
            Some(r) => Some(LoraConfig {
                rank: r,
                alpha: self.lora_alpha.or(lora_sec.alpha).unwrap_or(2.0 * r as f64),
                targets: self
                    .lora_targets
                    .clone()
                    .or(lora_sec.targets)
                    .unwrap_or_else(|| ["q_proj", "k_proj", "v_proj", "o_proj"].map(String::from).to_vec()),
            }),
        };
        if cfg.lora.is_some() {
            if let Some(lr) = lora_sec.lr {
                cfg.lr = lr;
            }
        }
        if let Some(lr) = self.lr {
            cfg.lr = lr;
        }
        cfg.stop_after = self.stop_after;
        cfg.static_shapes |= self.static_shapes;
        cfg.pack |= self.pack;
        cfg.gradient_checkpointing |= self.gradient_checkpointing;
        if let Some(d) = self.dtype {
            if d == ragtime::model::Precision::F16 {
                ragtime::usage_bail!(
                    "--dtype f16: f16 training needs loss scaling, which ragtime does not do; use bf16 or f32"
                );
            }
            cfg.dtype = d;
        }
        cfg.validate()?;
        Ok(cfg)
    }
}

/// The base model's weights, config, tokenizer and the tokenizer.json to ship with the result.
fn open_base(
    model: &Path,
    tokenizer: Option<&Path>,
) -> Result<(Box<dyn WeightSource>, ModelConfig, Tokenizer, TokenizerJson)> {
    ragtime::model::require_model(model)?;
    let (src, cfg, tok, tok_json): (Box<dyn WeightSource>, ModelConfig, Tokenizer, TokenizerJson) =
        if ragtime::io::is_dir(model)? {
            let st = SafetensorsDir::open(model)?;
            let cfg = st.config().clone();
            let tj = tokenizer.map(Path::to_path_buf).unwrap_or_else(|| model.join("tokenizer.json"));
            let tok = Tokenizer::from_file(&tj)?;
            (Box::new(st), cfg, tok, TokenizerJson::File(tj))
        } else {
            let g = GgufFile::open(model)?;
            let cfg = g.config().clone();
            let beside = model.with_file_name("tokenizer.json");
            let file = match tokenizer {
                Some(t) => Some(t.to_path_buf()),
                None if ragtime::io::exists(&beside)? => Some(beside),
                None => None,
            };
            match file {
                Some(tj) => {
                    let mut tok = Tokenizer::from_file(&tj)?;
                    // A bare tokenizer.json has no chat template; the GGUF's own says which layout and system
                    // prompt inference with this model uses, and training must render the same.
                    match g.meta_str("tokenizer.chat_template") {
                        Some(own) if tok.chat_template.is_none() => tok.adopt_template(&own),
                        _ if tok.default_system.is_none() => tok.default_system = Tokenizer::gguf_default_system(&g),
                        _ => {}
                    }
                    (Box::new(g), cfg, tok, TokenizerJson::File(tj))
                }
                // No tokenizer.json: the GGUF's own vocabulary, the tokenizer inference uses, is also the one
                // the exported folder ships.
                None => {
                    let hint = || format!("{}: pass --tokenizer PATH/tokenizer.json for this model", model.display());
                    let json = Tokenizer::gguf_json(&g).with_context(hint)?;
                    let tok = Tokenizer::from_gguf_json(&g, &json).with_context(hint)?;
                    (Box::new(g), cfg, tok, TokenizerJson::Text(json.to_string()))
                }
            }
        };
    if tok.vocab_size() > cfg.vocab_size {
        bail!(
            "tokenizer {} has {} tokens but the model has {}: wrong tokenizer for this model?",
            tok.source,
            tok.vocab_size(),
            cfg.vocab_size
        );
    }
    // checkpoints and exports are Hugging Face folders: a model whose config.json cannot be written fails here,
    // before training, not at its first checkpoint
    cfg.to_hf_config().with_context(|| format!("{}: cannot be saved as a Hugging Face folder", model.display()))?;
    let mut tok = tok;
    if tok.bos_id.is_none() {
        tok.bos_id = cfg.bos_token_id;
    }
    Ok((src, cfg, tok, tok_json))
}

/// With `--lora`, `--export-base` also writes the adapters a run starts from, in PEFT's names and layout.
const ADAPTER_INIT: &str = "adapter_init.safetensors";

pub fn run(a: Args) -> Result<()> {
    let cfg = a.config()?;
    if let Some(file) = &a.dump_plan {
        claim_plan(file)?;
    }
    let data_files = a
        .data
        .iter()
        .map(|d| Ok(if ragtime::io::is_dir(d)? { d.join("dialogues.jsonl") } else { d.clone() }))
        .collect::<Result<Vec<PathBuf>>>()?;
    let (src, model_cfg, tok, tok_json) = open_base(&a.model, a.tokenizer.as_deref())?;
    if let Some(dir) = &a.export_base {
        let _lock = ragtime::io::claim_output_dir(dir, "--export-base", "model export", ragtime::io::OUTPUT_MARKER)?;
        let device = Default::default();
        let base = ragtime::model::build_llama::<burn::backend::Flex>(src.as_ref(), &model_cfg, &device)?;
        export_hf(&base, &model_cfg, &tok_json, &tok, dir)?;
        eprintln!("wrote the base model {} as a Hugging Face folder: {}", a.model.display(), dir.display());
        if let Some(l) = &cfg.lora {
            // the adapters training starts from (A from the seed, B = 0), for a replay from the same start
            let fresh = ragtime::sft::lora::attach(base, l, cfg.seed, &device)?;
            write_tensors(&dir.join(ADAPTER_INIT), &ragtime::sft::lora::adapter_tensors(&fresh))?;
            eprintln!("wrote the initial LoRA adapters (seed {}): {}", cfg.seed, dir.join(ADAPTER_INIT).display());
        }
        return Ok(());
    }
    // the inputs, then the output, before any work: a wrong --data or --out fails at once, and a wrong --data
    // leaves no output directory behind
    let mut dialogues = Vec::new();
    for f in &data_files {
        dialogues.extend(read_dialogues(f)?);
    }
    let (mut dialogues, repeats) = ragtime::sft::distinct_dialogues(dialogues);
    if repeats > 0 {
        eprintln!("--data: {repeats} dialogue(s) left out that repeat an earlier one's question and queries");
    }
    if let Some(n) = a.limit {
        dialogues = ragtime::sft::first_dialogues(dialogues, n);
    }
    let _lock = ragtime::io::claim_output_dir(&a.out, "--out", "autorag fine-tune", "train_report.json")?;
    let data = SftData::prepare(&dialogues, &tok, cfg.max_len, cfg.valid_fraction)?;
    let count = |s: &[ragtime::sft::Example]| {
        (s.iter().map(|e| e.len()).sum::<usize>(), s.iter().map(|e| e.targets()).sum::<usize>())
    };
    let (tt, tg) = count(&data.train);
    let (vt, vg) = count(&data.valid);
    eprintln!(
        "{}: {} dialogues -> train {} ({tt} tokens, {tg} on model turns), valid {} ({vt} tokens, {vg}); {} cut at {} tokens, {} dropped",
        data_files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(" + "),
        dialogues.len(),
        data.train.len(),
        data.valid.len(),
        data.truncated,
        cfg.max_len,
        data.dropped
    );
    eprintln!(
        "model {} ({} layers, hidden {}), {} on {}; lr {:.1e}, batch {} x accum {}, {} epochs{}",
        a.model.display(),
        model_cfg.num_layers,
        model_cfg.hidden_size,
        match &cfg.lora {
            Some(l) => format!("LoRA r={} alpha={} on {}", l.rank, l.alpha, l.targets.join(",")),
            None => "full fine-tuning".into(),
        },
        a.device,
        cfg.lr,
        cfg.batch_size,
        cfg.grad_accum,
        cfg.epochs,
        cfg.max_steps.map(|m| format!(", at most {m} updates")).unwrap_or_default()
    );
    if let Some(file) = &a.dump_plan {
        return dump_plan(file, &data, &cfg);
    }
    let ckpt = a.out.join("checkpoint");
    if a.restart {
        remove_checkpoint(&ckpt)?;
    }
    train_on(
        a.device,
        SftJob {
            a: &a,
            src: src.as_ref(),
            model_cfg: &model_cfg,
            data: &data,
            cfg: &cfg,
            ckpt: &ckpt,
            tok: &tok,
            tok_json: &tok_json,
        },
    )
}

/// Fine-tuning on whichever backend `--device` names, then writing the result.
struct SftJob<'a> {
    a: &'a Args,
    src: &'a dyn WeightSource,
    model_cfg: &'a ModelConfig,
    data: &'a SftData,
    cfg: &'a SftConfig,
    ckpt: &'a Path,
    tok: &'a Tokenizer,
    tok_json: &'a TokenizerJson,
}

impl TrainJob for SftJob<'_> {
    type Output = ();
    fn run<B: burn::tensor::backend::AutodiffBackend>(self, device: &B::Device) -> Result<()> {
        let mut log = |line: &str| eprintln!("{line}");
        let trained =
            ragtime::sft::train::<B>(self.src, self.model_cfg, self.data, self.cfg, Some(self.ckpt), device, &mut log)?;
        finish(self.a, trained, self.model_cfg, self.tok, self.tok_json)
    }
}

/// `--dump-plan`: one JSON object per line: `{"kind":"config",..}`, then every example
/// (`{"kind":"example","split":"train"|"valid","index","id","ids","loss"}`, `loss` as 0/1 per token), then every
/// update (`{"kind":"update","step","epoch","lr","micro"}`, `micro` = lists of train indices; with --pack also
/// `"rows"`: per micro-batch, its rows' lists of train indices in the order they sit in the row).
fn dump_plan(file: &Path, data: &SftData, cfg: &SftConfig) -> Result<()> {
    let updates = ragtime::sft::train::plan(data, cfg)?;
    ragtime::io::write_atomic_with(file, |tmp| write_plan(tmp, data, cfg, &updates))?;
    eprintln!("wrote the plan of {} updates to {}", updates.len(), file.display());
    Ok(())
}

/// Whether a file's first bytes are a plan's: its first line the `{"kind":"config",..}` object [`dump_plan`]
/// writes.
fn is_plan(head: &[u8]) -> bool {
    let first = head.split(|&b| b == b'\n').next().unwrap_or_default();
    serde_json::from_slice::<serde_json::Value>(first)
        .is_ok_and(|v| v["kind"] == "config" && v.get("updates").is_some() && v.get("pad_id").is_some())
}

/// Checks that `--dump-plan FILE` may write `file`: nothing there, or a plan written before.
fn claim_plan(file: &Path) -> Result<()> {
    ragtime::io::claim_output_file(file, "--dump-plan", "a plan `ragtime train autorag` wrote", is_plan)
}

/// The plan's lines (see [`dump_plan`]), written to `file`.
fn write_plan(
    file: &Path,
    data: &SftData,
    cfg: &SftConfig,
    updates: &[ragtime::sft::plan::PlannedUpdate],
) -> Result<()> {
    use std::io::Write;
    let f = std::fs::File::create(file).with_context(|| format!("{}: cannot create", file.display()))?;
    let mut w = std::io::BufWriter::new(f);
    let mut line = |v: serde_json::Value| -> Result<()> {
        writeln!(w, "{v}").with_context(|| format!("{}: cannot write", file.display()))
    };
    line(serde_json::json!({"kind": "config", "pad_id": data.pad_id, "config": cfg, "updates": updates.len()}))?;
    for (split, set) in [("train", &data.train), ("valid", &data.valid)] {
        for (i, e) in set.iter().enumerate() {
            let loss: Vec<u8> = e.loss.iter().map(|&l| l as u8).collect();
            line(
                serde_json::json!({"kind": "example", "split": split, "index": i, "id": e.id, "ids": e.ids, "loss": loss}),
            )?;
        }
    }
    for (u, up) in updates.iter().enumerate() {
        let mut rec =
            serde_json::json!({"kind": "update", "step": u + 1, "epoch": up.epoch, "lr": up.lr, "micro": up.micro});
        if let Some(rows) = &up.rows {
            rec["rows"] = serde_json::json!(rows);
        }
        line(rec)?;
    }
    w.flush().with_context(|| format!("{}: cannot write", file.display()))
}

fn finish<B: burn::prelude::Backend>(
    a: &Args,
    t: Trained<B>,
    model_cfg: &ModelConfig,
    tok: &Tokenizer,
    tok_json: &TokenizerJson,
) -> Result<()> {
    std::fs::write(a.out.join("train_report.json"), serde_json::to_string_pretty(&t.state)?)?;
    if !t.finished {
        eprintln!(
            "stopped after update {}/{} (checkpoint kept); run the same command again to continue",
            t.state.step, t.state.total_steps
        );
        return Ok(());
    }
    export_hf(&t.model, model_cfg, tok_json, tok, &a.out)?;
    if let (Some(ad), Some(l)) = (&t.adapters, &t.state.config.lora) {
        let dir = a.out.join("adapter");
        std::fs::create_dir_all(&dir)?;
        write_tensors(&dir.join("adapter_model.safetensors"), ad)?;
        std::fs::write(
            dir.join("adapter_config.json"),
            serde_json::to_string_pretty(&adapter_config_json(l, &a.model.display().to_string()))?,
        )?;
    }
    let h = &t.state.history;
    let mean = |r: &[ragtime::sft::train::StepLog]| r.iter().map(|x| x.loss).sum::<f64>() / r.len().max(1) as f64;
    let k = (h.len() / 5).max(1);
    let secs: f64 = h.iter().map(|r| r.secs).sum();
    let toks: usize = h.iter().map(|r| r.tokens).sum();
    println!(
        "train loss {:.4} (first {k} updates) -> {:.4} (last {k}); {:.0} tokens/s over {} updates",
        mean(&h[..k.min(h.len())]),
        mean(&h[h.len().saturating_sub(k)..]),
        toks as f64 / secs.max(1e-9),
        h.len()
    );
    for v in &t.state.valid {
        println!("valid loss at update {:>5}: {:.4}", v.step, v.loss);
    }
    eprintln!("wrote {} (Hugging Face folder; loads with --model {})", a.out.display(), a.out.display());
    Ok(())
}
