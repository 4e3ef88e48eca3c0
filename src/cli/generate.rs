//! `ragtime generate`: print a continuation, or (`--prompts FILE`) one for each prompt of a file, decoded
//! `--batch B` at a time: a lane that finishes takes the next prompt while the others go on, and every forward
//! pass feeds all lanes together (`Lm::feed_many`), so the outputs are those of `--batch 1`.

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
    #[arg(long, conflicts_with_all = ["prompt_file", "prompts"], required_unless_present_any = ["prompt_file", "prompts"])]
    pub prompt: Option<String>,
    /// A file of prompts, one per line (a line that is a JSON string is decoded first, so a prompt may hold
    /// newlines); prints one JSON line per prompt, in the file's order: {"index", "text", "tokens"}.
    #[arg(long, conflicts_with = "prompt_file")]
    pub prompts: Option<PathBuf>,
    /// With --prompts: lanes decoded together (continuous batching; outputs do not depend on it).
    /// Default: 8 on cpu (32 with --int8-dot where the CPU has AVX-512 VNNI), 64 on cuda.
    #[arg(long, value_parser = super::ranges::int::<1, 1024>)]
    pub batch: Option<usize>,
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
    /// Print tokens/s, peak memory and the model's load time to stderr (after an untimed 8-token warm-up, like the
    /// transformers bench).
    #[arg(long)]
    pub stats: bool,
    /// Keep generating past end-of-sequence tokens (fixed-length runs for benchmarks).
    #[arg(long)]
    pub ignore_eos: bool,
    /// With --prompts: decode the whole prompt set this many times first, untimed, its outputs discarded (on a GPU
    /// the kernels of every shape the timed run meets compile there, in the same process).
    #[arg(long, default_value_t = 0, value_parser = super::ranges::int::<0, 100>)]
    pub warmup: usize,
}

/// The prompt from `--prompt` or `--prompt-file`; an empty one is an error (there is nothing to continue).
pub fn read_prompt(prompt: &Option<String>, file: &Option<PathBuf>) -> Result<String> {
    let (text, from) = match (prompt, file) {
        (Some(p), _) => (p.clone(), "--prompt".to_string()),
        (None, Some(f)) => (
            std::fs::read_to_string(f).with_context(|| format!("{}: cannot read prompt file", f.display()))?,
            f.display().to_string(),
        ),
        (None, None) => ragtime::usage_bail!("give --prompt or --prompt-file"),
    };
    if text.is_empty() && prompt.is_some() {
        ragtime::usage_bail!("{from}: the prompt is empty");
    }
    anyhow::ensure!(!text.is_empty(), "{from}: the prompt is empty");
    Ok(text)
}

pub fn run(args: Args) -> Result<()> {
    if args.warmup > 0 && args.prompts.is_none() {
        ragtime::usage_bail!("--warmup needs --prompts (one --prompt is timed after an 8-token warm-up of its own)");
    }
    args.model.check()?;
    if let Some(file) = &args.prompts {
        return run_many(&args, file);
    }
    let mut text = read_prompt(&args.prompt, &args.prompt_file)?;
    let t_load = std::time::Instant::now();
    let lm = args.model.load()?;
    let t_load = t_load.elapsed();
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
        let peak = ragtime::device::peak_rss_mib().map(|m| format!("; peak rss {m:.0} MiB")).unwrap_or_default();
        eprintln!(
            "prompt {} tokens in {:.3}s ({:.1} tok/s); generated {n} tokens in {dt:.3}s ({:.1} tok/s){peak}; \
             model loaded in {:.2}s",
            ids.len(),
            t_prefill.as_secs_f64(),
            ids.len() as f64 / t_prefill.as_secs_f64(),
            n as f64 / dt,
            t_load.as_secs_f64()
        );
    }
    Ok(())
}

/// The prompts of `--prompts FILE`: one per non-empty line, a JSON string line decoded.
fn read_prompts(file: &std::path::Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(file).with_context(|| format!("{}: cannot read prompts", file.display()))?;
    let mut prompts = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        prompts.push(if line.starts_with('"') {
            serde_json::from_str::<String>(line)
                .with_context(|| format!("{}:{}: not a JSON string", file.display(), n + 1))?
        } else {
            line.to_string()
        });
    }
    anyhow::ensure!(!prompts.is_empty(), "{}: no prompts", file.display());
    Ok(prompts)
}

/// One lane of [`decode_lanes`]: the prompt it decodes, its session, its sampler, what it generated.
struct Lane<'a> {
    index: usize,
    session: ragtime::model::Session<'a>,
    sampler: Sampler,
    text: String,
    tokens: usize,
}

/// How [`decode_lanes`] samples and stops.
struct Decoding {
    max_new_tokens: usize,
    temperature: f32,
    top_p: f32,
    seed: u64,
    ignore_eos: bool,
}

/// Counts of a [`decode_lanes`] run.
#[derive(Debug, Default, PartialEq)]
struct Counts {
    prompt_tokens: usize,
    generated: usize,
    passes: usize,
    /// Passes in which every lane fed one sampled token (no prompt), the tokens they fed and the seconds their
    /// `feed_many` calls took: decoding's speed apart from prefill's.
    decode_passes: usize,
    decode_tokens: usize,
    decode_secs: f64,
}

/// Decodes every prompt of `encoded` over `lanes` lanes: each round, every lane that has a prompt feeds one token
/// (a new lane its whole prompt) in one `feed_many` pass; a lane that finishes takes the next prompt. Prompt `i`
/// samples with seed `seed + i`, so its output does not depend on the lanes or the other prompts. `emit(i, text,
/// tokens)` gets the outputs in prompt order, each as soon as it and those before it are done.
fn decode_lanes(
    lm: &ragtime::model::Lm,
    encoded: &[Vec<u32>],
    lanes: usize,
    d: &Decoding,
    emit: &mut dyn FnMut(usize, String, usize) -> Result<()>,
) -> Result<Counts> {
    let mut next = 0;
    let mut slots: Vec<Option<Lane>> = (0..lanes).map(|_| None).collect();
    let mut done: Vec<Option<(String, usize)>> = vec![None; encoded.len()];
    let mut emitted = 0;
    let mut counts = Counts::default();
    loop {
        for slot in slots.iter_mut().filter(|s| s.is_none()) {
            if next < encoded.len() {
                let seed = d.seed.wrapping_add(next as u64);
                let (session, sampler) = (lm.session(), Sampler::new(d.temperature, d.top_p, seed));
                *slot = Some(Lane { index: next, session, sampler, text: String::new(), tokens: 0 });
                next += 1;
            }
        }
        let mut active: Vec<&mut Lane> = slots.iter_mut().flatten().collect();
        if active.is_empty() {
            break;
        }
        // one pass: new lanes feed their prompt (no steps wanted), the others their sampled token (picked over
        // the pool)
        let mut picks = Vec::new();
        for lane in active.iter_mut().filter(|l| !l.session.is_empty()) {
            picks.push((lane.session.picker()?, &mut lane.sampler));
        }
        let mut picked = ragtime::model::pick_many(picks).into_iter();
        let (mut feeds, mut from) = (Vec::new(), Vec::new());
        for lane in active.iter() {
            if lane.session.is_empty() {
                counts.prompt_tokens += encoded[lane.index].len();
                feeds.push(encoded[lane.index].clone());
                from.push(encoded[lane.index].len());
            } else {
                feeds.push(vec![picked.next().expect("a pick per decoding lane")]);
                from.push(0);
            }
        }
        let ids: Vec<&[u32]> = feeds.iter().map(|f| f.as_slice()).collect();
        let mut sessions: Vec<&mut ragtime::model::Session> = active.iter_mut().map(|l| &mut l.session).collect();
        let t0 = std::time::Instant::now();
        let steps = lm.feed_many(&mut sessions, &ids, &from)?;
        counts.passes += 1;
        if from.iter().all(|&f| f == 0) {
            counts.decode_passes += 1;
            counts.decode_tokens += ids.len();
            counts.decode_secs += t0.elapsed().as_secs_f64();
        }
        for (lane, st) in active.iter_mut().zip(steps) {
            if let Some(step) = st.first() {
                lane.tokens += 1;
                counts.generated += 1;
                if d.ignore_eos || !lm.tokenizer.is_stop(step.id) {
                    lane.text.push_str(&step.text);
                }
            }
        }
        for slot in slots.iter_mut() {
            let finished = slot.as_ref().is_some_and(|l| {
                let stopped =
                    l.tokens > 0 && !d.ignore_eos && l.session.ids().last().is_some_and(|&id| lm.tokenizer.is_stop(id));
                l.tokens >= d.max_new_tokens || stopped
            });
            if finished {
                let l = slot.take().expect("a finished lane");
                done[l.index] = Some((l.text, l.tokens));
            }
        }
        while emitted < done.len() {
            let Some((text, tokens)) = done[emitted].take() else { break };
            emit(emitted, text, tokens)?;
            emitted += 1;
        }
    }
    Ok(counts)
}

/// `generate --prompts FILE --batch B`: the prompts' continuations as JSON lines, in the file's order.
fn run_many(args: &Args, file: &std::path::Path) -> Result<()> {
    let prompts = read_prompts(file)?;
    let lm = args.model.load()?;
    let encode = |p: &str| -> Result<Vec<u32>> {
        let text =
            if args.chat { lm.tokenizer.apply_chat_template(&[Message::new("user", p)], true) } else { p.into() };
        lm.tokenizer.encode(&text, true)
    };
    let encoded: Vec<Vec<u32>> = prompts.iter().map(|p| encode(p)).collect::<Result<_>>()?;
    if args.stats {
        lm.session().prefill(&encoded[0][..encoded[0].len().min(8)])?; // untimed warm-up, as for one prompt
    }
    let d = Decoding {
        max_new_tokens: args.max_new_tokens,
        temperature: args.temperature,
        top_p: args.top_p,
        seed: args.seed,
        ignore_eos: args.ignore_eos,
    };
    let lanes = args.model.lanes(args.batch);
    for _ in 0..args.warmup {
        decode_lanes(&lm, &encoded, lanes, &d, &mut |_, _, _| Ok(()))?;
    }
    let mut out = std::io::stdout().lock();
    let spent_before = lm.time_spent();
    let t0 = std::time::Instant::now();
    let c = decode_lanes(&lm, &encoded, lanes, &d, &mut |index, text, tokens| {
        writeln!(out, "{}", serde_json::json!({"index": index, "text": text, "tokens": tokens}))?;
        Ok(out.flush()?)
    })?;
    if args.stats {
        let dt = t0.elapsed().as_secs_f64();
        let peak = ragtime::device::peak_rss_mib().map(|m| format!("; peak rss {m:.0} MiB")).unwrap_or_default();
        eprintln!(
            "{} prompts ({} prompt tokens), {} generated tokens in {dt:.3}s over {} passes: {:.1} generated tok/s, \
             {:.1} tok/s in all, {} lanes{peak}; {}; passes without a prompt: {} tokens in {:.3} s over {}, \
             {:.1} tok/s",
            prompts.len(),
            c.prompt_tokens,
            c.generated,
            c.passes,
            c.generated as f64 / dt,
            (c.generated + c.prompt_tokens) as f64 / dt,
            lanes,
            time_split(&spent_before, &lm.time_spent(), dt),
            c.decode_tokens,
            c.decode_secs,
            c.decode_passes,
            c.decode_tokens as f64 / c.decode_secs.max(1e-9)
        );
    }
    Ok(())
}

/// `time: forward 1.234 s (inputs 0.010, launch 0.300, ...), scoring 0.200 s, rest 0.100 s`: where a timed run's
/// wall time `dt` went, from [`ragtime::model::Lm::time_spent`] before and after it (`rest`: the decode loop
/// itself, picking tokens and writing lines).
fn time_split(before: &[(String, std::time::Duration)], after: &[(String, std::time::Duration)], dt: f64) -> String {
    let secs: Vec<(&str, f64)> =
        after.iter().zip(before).map(|((n, a), (_, b))| (n.as_str(), (*a - *b).as_secs_f64())).collect();
    let get = |name: &str| secs.iter().find(|(n, _)| *n == name).map_or(0.0, |&(_, s)| s);
    let inner: Vec<String> =
        secs.iter().filter_map(|(n, s)| n.strip_prefix("forward/").map(|p| format!("{p} {s:.3}"))).collect();
    let inner = if inner.is_empty() { String::new() } else { format!(" ({})", inner.join(", ")) };
    let (fwd, score) = (get("forward"), get("scoring"));
    format!("time: forward {fwd:.3} s{inner}, scoring {score:.3} s, rest {:.3} s", dt - fwd - score)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragtime::device::DeviceKind;
    use ragtime::model::{random_weights, Arch, Lm, MemoryWeights, ModelConfig, Tokenizer};

    #[test]
    fn time_split_reports_what_the_timed_run_added_to_each_phase() {
        let d = |ms: u64| std::time::Duration::from_millis(ms);
        let names = ["forward", "forward/launch", "forward/read-back", "scoring"];
        let before: Vec<_> = names.iter().zip([100, 40, 50, 10]).map(|(n, ms)| (n.to_string(), d(ms))).collect();
        let after: Vec<_> = names.iter().zip([1100, 440, 550, 210]).map(|(n, ms)| (n.to_string(), d(ms))).collect();
        assert_eq!(
            time_split(&before, &after, 1.5),
            "time: forward 1.000 s (launch 0.400, read-back 0.500), scoring 0.200 s, rest 0.300 s"
        );
        let (before, after) = (&before[..1], &after[..1]); // an engine that tells no phases apart, no scoring
        assert_eq!(time_split(before, after, 1.0), "time: forward 1.000 s, scoring 0.000 s, rest 0.000 s");
    }

    /// Five prompts of different lengths over 1, 2 and 8 lanes, greedy and sampled: the same outputs in the same
    /// order, and lanes did share passes (fewer passes than tokens).
    #[test]
    fn lanes_give_the_outputs_of_one_at_a_time() {
        let Some(tok) = ragtime::testing::require("models/smollm2-135m-instruct/tokenizer.json") else { return };
        let cfg = ModelConfig::tiny(Arch::Llama, 49152);
        let w = MemoryWeights(random_weights(&cfg, 3).into_iter().collect());
        let lm = Lm::from_source(&w, cfg, Tokenizer::from_file(&tok).unwrap(), "tiny".into(), DeviceKind::Cpu).unwrap();
        let encoded: Vec<Vec<u32>> =
            (0..5).map(|i| (0..(3 + 4 * i)).map(|j| (100 + 37 * i + 11 * j) as u32).collect()).collect();
        for temperature in [0.0, 0.8] {
            let d = Decoding { max_new_tokens: 9, temperature, top_p: 1.0, seed: 5, ignore_eos: true };
            let run = |lanes: usize| {
                let mut got = Vec::new();
                let c = decode_lanes(&lm, &encoded, lanes, &d, &mut |i, text, n| {
                    got.push((i, text, n));
                    Ok(())
                })
                .unwrap();
                // the counts without the one timing among them
                (got, Counts { decode_secs: 0.0, ..c })
            };
            let (one, c1) = run(1);
            assert_eq!(one.iter().map(|g| (g.0, g.2)).collect::<Vec<_>>(), (0..5).map(|i| (i, 9)).collect::<Vec<_>>());
            assert_eq!(c1.passes, 5 * 10, "a prompt pass and 9 token passes each");
            assert_eq!((c1.decode_passes, c1.decode_tokens), (5 * 9, 5 * 9), "the token passes alone");
            for lanes in [2, 8] {
                let (got, c) = run(lanes);
                assert_eq!(got, one, "{lanes} lanes, temperature {temperature}");
                assert_eq!((c.generated, c.prompt_tokens), (c1.generated, c1.prompt_tokens));
                assert!(c.passes < c1.passes, "{lanes} lanes shared passes");
                // a run after another (what `--warmup` does) leaves nothing behind for the next
                assert_eq!(run(lanes), (got, c), "a second run over {lanes} lanes");
            }
        }
    }
}
