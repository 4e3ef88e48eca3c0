//! `ragtime generate`: print a continuation.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args as ClapArgs;

use ragtime::model::{Message, Sampler};

use super::model_args::ModelArgs;

#[derive(ClapArgs, Debug)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Prompt text.
    #[arg(long, conflicts_with = "prompt_file", required_unless_present = "prompt_file")]
    pub prompt: Option<String>,
    /// File holding the prompt.
    #[arg(long)]
    pub prompt_file: Option<PathBuf>,
    /// Wrap the prompt as a user turn in the model's chat template.
    #[arg(long)]
    pub chat: bool,
    #[arg(long, default_value_t = 128, value_parser = super::ranges::int::<0, 65_536>)]
    pub max_new_tokens: usize,
    /// 0 = greedy.
    #[arg(long, default_value_t = 0.0, value_parser = super::ranges::non_negative_f32)]
    pub temperature: f32,
    #[arg(long, default_value_t = 1.0, value_parser = super::ranges::probability_f32)]
    pub top_p: f32,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Print tokens/s and peak memory to stderr (after an untimed 8-token warm-up, like the transformers bench).
    #[arg(long)]
    pub stats: bool,
    /// Keep generating past end-of-sequence tokens (fixed-length runs for benchmarks).
    #[arg(long)]
    pub ignore_eos: bool,
}

/// The prompt from `--prompt` or `--prompt-file`; an empty one is an error (there is nothing to continue).
pub fn read_prompt(prompt: &Option<String>, file: &Option<PathBuf>) -> Result<String> {
    let (text, from) = match (prompt, file) {
        (Some(p), _) => (p.clone(), "--prompt".to_string()),
        (None, Some(f)) => (
            std::fs::read_to_string(f).with_context(|| format!("{}: cannot read prompt file", f.display()))?,
            f.display().to_string(),
        ),
        (None, None) => anyhow::bail!("give --prompt or --prompt-file"),
    };
    anyhow::ensure!(!text.is_empty(), "{from}: the prompt is empty");
    Ok(text)
}

pub fn run(args: Args) -> Result<()> {
    let mut text = read_prompt(&args.prompt, &args.prompt_file)?;
    let lm = args.model.load()?;
    if args.chat {
        text = lm.tokenizer.apply_chat_template(&[Message::new("user", text)], true);
    }
    let ids = lm.tokenizer.encode(&text, true)?;
    let mut sampler = Sampler::new(args.temperature, args.top_p, args.seed);
    if args.stats {
        // Untimed warm-up on the first 8 tokens (thread pool, allocator), as scripts/bench_decode_hf.py does for
        // transformers before its timed prefill.
        lm.session().prefill(&ids[..ids.len().min(8)])?;
    }
    let mut s = lm.session();
    let t0 = std::time::Instant::now();
    s.prefill(&ids)?;
    let t_prefill = t0.elapsed();
    let mut out = std::io::stdout().lock();
    let t1 = std::time::Instant::now();
    let mut n = 0;
    for _ in 0..args.max_new_tokens {
        let step = s.step(&mut sampler)?;
        n += 1;
        if lm.tokenizer.is_stop(step.id) && !args.ignore_eos {
            break;
        }
        write!(out, "{}", step.text)?;
        out.flush()?;
    }
    writeln!(out)?;
    if args.stats {
        let dt = t1.elapsed().as_secs_f64();
        let peak = peak_rss_mib().map(|m| format!("; peak rss {m:.0} MiB")).unwrap_or_default();
        eprintln!(
            "prompt {} tokens in {:.3}s ({:.1} tok/s); generated {n} tokens in {dt:.3}s ({:.1} tok/s){peak}",
            ids.len(),
            t_prefill.as_secs_f64(),
            ids.len() as f64 / t_prefill.as_secs_f64(),
            n as f64 / dt
        );
    }
    Ok(())
}

/// Peak resident memory of this process (Linux `VmHWM`), in MiB.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}
