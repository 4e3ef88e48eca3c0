//! `ragtime inspect`: one JSON object per generated token with what controllers read (entropy, top-5 logits,
//! last-layer attention row), then the hidden states of the last position. Same fields as
//! `../shared/reference/smollm2_135m_q4_1.json`, so the two can be compared.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;
use clap::Args as ClapArgs;
use serde_json::json;

use ragtime::model::{sampling, Message, Sampler};

use super::model_args::ModelArgs;

#[derive(ClapArgs, Debug)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    #[arg(long, conflicts_with = "prompt_file", required_unless_present = "prompt_file")]
    pub prompt: Option<String>,
    #[arg(long)]
    pub prompt_file: Option<PathBuf>,
    #[arg(long)]
    pub chat: bool,
    #[arg(long, default_value_t = 16, value_parser = super::ranges::int::<0, 65_536>)]
    pub max_new_tokens: usize,
}

pub fn run(args: Args) -> Result<()> {
    args.model.check()?;
    let mut text = super::generate::read_prompt(&args.prompt, &args.prompt_file)?;
    let lm = args.model.load()?;
    if args.chat {
        text = lm.tokenizer.apply_chat_template(&[Message::new("user", text)], true);
    }
    let ids = lm.tokenizer.encode(&text, true)?;
    let mut s = lm.session();
    s.prefill(&ids)?;
    let mut out = std::io::stdout().lock();
    let mut last = None;
    for _ in 0..args.max_new_tokens {
        let top5 = sampling::top_k(s.logits().unwrap(), 5);
        let step = s.step(&mut Sampler::greedy())?;
        let obj = json!({
            "pos": step.pos,
            "id": step.id,
            "entropy": step.entropy,
            "top5": top5.iter().map(|(i, l)| json!([i, l])).collect::<Vec<_>>(),
            "attn": step.attn,
        });
        writeln!(out, "{obj}")?;
        let stop = lm.tokenizer.is_stop(step.id);
        last = Some(step);
        if stop {
            break;
        }
    }
    if let Some(l) = last {
        writeln!(out, "{}", json!({"hidden_final_last": l.hidden_final, "hidden_mean_layers_last": l.hidden_mean}))?;
    }
    Ok(())
}
