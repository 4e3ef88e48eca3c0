//! The training loop: token-weighted masked NLL (Eq. 3, [`super::loss`]), gradient accumulation, AdamW with
//! warm-up + cosine, periodic validation, checkpoints every N updates ([`super::checkpoint`]) and exact resume.
//! The updates follow the run plan ([`super::plan`]), so the update count alone fixes where training is.

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Result};
use burn::module::AutodiffModule;
use burn::prelude::Backend;
use burn::tensor::backend::AutodiffBackend;

use super::checkpoint::{existing_checkpoint, load_checkpoint, save_checkpoint};
use super::data::{make_batch, make_packed_batch, Batch};
use super::gradient_checkpointing::backward_checkpointed;
use super::lora;
use super::loss::{evaluate, nll_sum, scalar};
use super::optim::{AdamW, GradAccum};
use super::plan::fingerprint;
use crate::model::llama::{in_dtype, Llama, Rope};
use crate::model::weights::WeightSource;
use crate::model::{build_llama, ModelConfig};

// Paths that name these items through `sft::train`.
pub use super::checkpoint::{remove_checkpoint, StepLog, TrainState, ValidLog, STATE_FORMAT};
pub use super::config::SftConfig;
pub use super::plan::{plan, PlannedUpdate, SftData};

/// The trained model (LoRA merged) on the inner backend, and the logs.
pub struct Trained<B: Backend> {
    pub model: Llama<B>,
    pub state: TrainState,
    /// False when `stop_after` halted training early.
    pub finished: bool,
    /// PEFT adapter tensors (LoRA runs only), before merging.
    pub adapters: Option<Vec<(String, crate::model::weights::HostTensor)>>,
}

/// Trains from `src` (the base model's weights), checkpointing into `ckpt` when given and resuming from it
/// when it holds a checkpoint of the same run. `log` receives progress lines.
pub fn train<AB: AutodiffBackend>(
    src: &dyn WeightSource,
    model_cfg: &ModelConfig,
    data: &SftData,
    cfg: &SftConfig,
    ckpt: Option<&Path>,
    device: &AB::Device,
    log: &mut dyn FnMut(&str),
) -> Result<Trained<AB::InnerBackend>> {
    let _exclusive = crate::device::autodiff_exclusive();
    cfg.validate()?;
    let fp = fingerprint(cfg, model_cfg, data);
    let updates = plan(data, cfg)?;
    let total = updates.len();

    let base = build_llama::<AB>(src, model_cfg, device)?;
    let mut model = match &cfg.lora {
        Some(l) => lora::attach(base, l, cfg.seed, device)?,
        None => base,
    };
    let mut opt = AdamW::<AB::InnerBackend>::new(cfg.adamw());
    let mut state = TrainState {
        format: STATE_FORMAT.into(),
        step: 0,
        total_steps: total,
        fingerprint: fp.clone(),
        config: cfg.clone(),
        train_dialogues: data.train.len(),
        valid_dialogues: data.valid.len(),
        history: Vec::new(),
        valid: Vec::new(),
    };
    if let Some(dir) = ckpt.and_then(existing_checkpoint) {
        let (m, s) = load_checkpoint::<AB>(&dir, model, &mut opt, src, model_cfg, cfg, device)?;
        if s.fingerprint != fp {
            bail!(
                "{}: this checkpoint was written with other settings, model or data; pass --restart to start over, or another --out",
                dir.display()
            );
        }
        model = m;
        log(&format!("resuming from {} at update {}/{}", dir.display(), s.step, total));
        state = s;
    }

    // mixed precision: the passes run on a copy of the model cast to the compute dtype (f32: the model itself)
    let dtype = cfg.dtype.dtype();
    let rope = Rope::<AB>::new(model_cfg, cfg.max_len.max(2), device).cast(dtype);
    let rope_eval = Rope::<AB::InnerBackend>::new(model_cfg, cfg.max_len.max(2), device).cast(dtype);
    let eval_bs = cfg.batch_size.max(1);
    let validate = |model: &Llama<AB>, step: usize, state: &mut TrainState, log: &mut dyn FnMut(&str)| {
        if data.valid.is_empty() || state.valid.iter().any(|v| v.step == step) {
            return;
        }
        let t0 = Instant::now();
        let loss = evaluate(
            &in_dtype(model.valid(), dtype),
            &rope_eval,
            &data.valid,
            eval_bs,
            cfg.shapes(),
            data.pad_id,
            device,
        );
        log(&format!(
            "valid  step {step:>5}  loss {loss:.4}  ({} dialogues, {:.1}s)",
            data.valid.len(),
            t0.elapsed().as_secs_f64()
        ));
        state.valid.push(ValidLog { step, loss });
    };
    if state.step == 0 {
        validate(&model, 0, &mut state, log);
    }

    let mut grads = GradAccum::<AB::InnerBackend>::default();
    let mut finished = true;
    // time left from this process's own updates (a resumed run's earlier ones ran elsewhere, at another rate)
    let (clock, first_step) = (crate::progress::Clock::new(), state.step);
    while state.step < total {
        if cfg.stop_after.is_some_and(|s| state.step >= s) {
            finished = false;
            break;
        }
        let up = &updates[state.step];
        let (epoch, lr) = (up.epoch, up.lr);
        let dialogues = |idx: &[usize]| idx.iter().map(|&i| &data.train[i]).collect::<Vec<_>>();
        let micro: Vec<Batch> = match &up.rows {
            Some(groups) => groups
                .iter()
                .map(|rows| make_packed_batch(&rows.iter().map(|r| dialogues(r)).collect::<Vec<_>>(), data.pad_id))
                .collect(),
            None => up.micro.iter().map(|idx| make_batch(&dialogues(idx), data.pad_id)).collect(),
        };
        let micro: Vec<Batch> = micro.into_iter().map(|b| cfg.shapes().apply(b, data.pad_id)).collect();
        let n_targets: usize = micro.iter().map(|b| b.real).sum();
        let tokens: usize = micro.iter().map(|b| b.tokens).sum();
        let t0 = Instant::now();
        let mut loss_sum = 0.0;
        // burn's pool on CUDA, sampled where the live tensors peak: after a forward (activations kept for the
        // backward), after a backward (gradients) and after the optimizer step; (most bytes in use, bytes
        // reserved at the last sample)
        let mut pool: Option<(u64, u64)> = None;
        let mut sample = || {
            if let Some(m) = crate::device::pool_memory(device) {
                pool = Some((pool.map_or(0, |p| p.0).max(m.in_use), m.reserved));
            }
        };
        for b in &micro {
            if cfg.gradient_checkpointing {
                loss_sum +=
                    backward_checkpointed(&model, cfg.dtype, &rope, &rope_eval, b, n_targets, &mut grads, device);
                sample();
                continue;
            }
            // the gradients of the cast copy's parameters flow through the casts to the f32 ones
            let loss = nll_sum(&in_dtype(model.clone(), dtype), &rope, b, device).div_scalar(n_targets as f64);
            loss_sum += scalar(loss.clone().inner());
            sample();
            grads.add::<AB, _>(&model, loss.backward());
            sample();
        }
        let (m, norm) = opt.step::<AB, _>(model, &mut grads, lr);
        model = m;
        sample();
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        state.step += 1;
        let row = StepLog {
            step: state.step,
            epoch,
            loss: loss_sum,
            lr,
            grad_norm: norm,
            tokens,
            target_tokens: n_targets,
            secs: t0.elapsed().as_secs_f64(),
            gpu_in_use_mib: pool.map(|p| mib(p.0)),
            gpu_reserved_mib: pool.map(|p| mib(p.1)),
        };
        if cfg.log_every > 0 && (state.step.is_multiple_of(cfg.log_every) || state.step == total) {
            let shapes: Vec<String> = micro.iter().map(|b| format!("{}x{}", b.b, b.t)).collect();
            let rss = crate::device::peak_rss_mib().map(|m| format!("  peak rss {m:.0} MiB")).unwrap_or_default();
            let gpu = match (row.gpu_in_use_mib, row.gpu_reserved_mib) {
                (Some(u), Some(r)) => format!("  gpu pool {u:.0} MiB in use at most, {r:.0} reserved"),
                _ => String::new(),
            };
            log(&format!(
                "step {:>5}/{total}  epoch {}  loss {:.4}  lr {:.2e}  |g| {:.3}  {} tok ({} target)  {:.0} tok/s  ETA {}  batches {}{rss}{gpu}",
                row.step,
                row.epoch,
                row.loss,
                row.lr,
                row.grad_norm,
                row.tokens,
                row.target_tokens,
                row.tokens as f64 / row.secs.max(1e-9),
                crate::progress::hms(clock.rate(state.step - first_step, total - state.step).1),
                shapes.join(","),
            ));
        }
        state.history.push(row);
        let last = state.step == total;
        if last || (cfg.eval_every > 0 && state.step.is_multiple_of(cfg.eval_every)) {
            validate(&model, state.step, &mut state, log);
        }
        let halting = cfg.stop_after.is_some_and(|s| state.step >= s);
        if let Some(dir) = ckpt {
            if last || halting || (cfg.save_every > 0 && state.step.is_multiple_of(cfg.save_every)) {
                save_checkpoint(dir, &model, &opt, &state, model_cfg, cfg.lora.as_ref())?;
                log(&format!("checkpoint at update {} -> {}", state.step, dir.display()));
            }
        }
    }
    let inner = model.valid();
    let adapters = cfg.lora.as_ref().map(|_| lora::adapter_tensors(&inner));
    let merged = lora::merge(inner);
    Ok(Trained { model: merged, state, finished, adapters })
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{setup, small_cfg, AB};
    use super::*;

    #[test]
    fn resume_gives_the_same_next_loss() {
        let Some((mcfg, w, data)) = setup() else { return };
        let dev = Default::default();
        for lora in [false, true] {
            let cfg = small_cfg(lora);
            let n = 3;
            // Uninterrupted: n + 1 updates.
            let mut c = cfg.clone();
            c.stop_after = Some(n + 1);
            let full = train::<AB>(&w, &mcfg, &data, &c, None, &dev, &mut |_| {}).unwrap();
            assert_eq!(full.state.history.len(), n + 1);
            // Killed after n updates (checkpoint written), then resumed for one more.
            let dir = tempfile::tempdir().unwrap();
            let ck = dir.path().join("checkpoint");
            let mut c = cfg.clone();
            c.stop_after = Some(n);
            let first = train::<AB>(&w, &mcfg, &data, &c, Some(&ck), &dev, &mut |_| {}).unwrap();
            assert!(!first.finished);
            assert!(ck.join("state.json").exists() && ck.join("optimizer.safetensors").exists());
            let mut lines = Vec::new();
            let mut c = cfg.clone();
            c.stop_after = Some(n + 1);
            let resumed =
                train::<AB>(&w, &mcfg, &data, &c, Some(&ck), &dev, &mut |l| lines.push(l.to_string())).unwrap();
            assert!(lines[0].starts_with("resuming"), "{lines:?}");
            assert_eq!(resumed.state.history.len(), n + 1);
            let (a, b) = (full.state.history[n].loss, resumed.state.history[n].loss);
            eprintln!("lora={lora}: update {} loss uninterrupted {a:.9}, resumed {b:.9}", n + 1);
            assert!((a - b).abs() < 1e-5, "lora={lora}: next loss after resume {b} vs uninterrupted {a}");
            for k in 0..n {
                // (read back from state.json: equal up to JSON float parsing)
                assert!((full.state.history[k].loss - resumed.state.history[k].loss).abs() < 1e-12);
            }
            // a different setting refuses the checkpoint
            let mut c = cfg.clone();
            c.lr *= 2.0;
            let err = train::<AB>(&w, &mcfg, &data, &c, Some(&ck), &dev, &mut |_| {}).err().unwrap();
            assert!(format!("{err:#}").contains("other settings"), "{err:#}");
        }
    }

    #[test]
    fn static_shapes_train_like_tight_batches() {
        let Some((mcfg, w, data)) = setup() else { return };
        let dev = Default::default();
        let mut cfg = small_cfg(false);
        cfg.stop_after = Some(4);
        // The batch shapes, from the progress lines ("batches 2x57,1x40").
        let run = |cfg: &SftConfig| {
            let mut shapes = std::collections::BTreeSet::new();
            let t = train::<AB>(&w, &mcfg, &data, cfg, None, &dev, &mut |l| {
                if let Some((_, s)) = l.split_once("batches ") {
                    shapes.extend(s.split_whitespace().next().unwrap().split(',').map(String::from));
                }
            });
            (t.unwrap(), shapes)
        };
        let (tight, tight_shapes) = run(&cfg);
        cfg.static_shapes = true;
        let (fixed, fixed_shapes) = run(&cfg);
        assert!(tight_shapes.len() > 1, "the toy batches differ in length: {tight_shapes:?}");
        // rows a power of two up to the batch size (2; an epoch's last micro-batch has 1), lengths powers of two
        let fixed_shape = |s: &String| ["1x64", "1x128", "2x64", "2x128"].contains(&s.as_str());
        assert!(fixed_shapes.iter().all(fixed_shape), "{fixed_shapes:?} vs {tight_shapes:?}");
        // Same updates: each loss after the first also depends on the earlier updates' gradients.
        assert_eq!(tight.state.history.len(), 4);
        assert_same_updates("static shapes", &tight.state, &fixed.state, 1e-4, 1e-3);
        for (a, b) in tight.state.valid.iter().zip(&fixed.state.valid) {
            assert!((a.loss - b.loss).abs() < 1e-4 * a.loss.abs(), "valid at {}: {} vs {}", a.step, a.loss, b.loss);
        }
        assert_eq!(tight.state.fingerprint, fixed.state.fingerprint, "a run may resume with the other setting");
    }

    /// The same updates: tokens and target tokens equal, losses within `loss_tol` and gradient norms within
    /// `norm_tol` (relative).
    fn assert_same_updates(what: &str, a: &TrainState, b: &TrainState, loss_tol: f64, norm_tol: f64) {
        assert_eq!(a.history.len(), b.history.len(), "{what}");
        for (a, b) in a.history.iter().zip(&b.history) {
            assert_eq!((a.tokens, a.target_tokens), (b.tokens, b.target_tokens), "{what} update {}", a.step);
            assert!(
                (a.loss - b.loss).abs() < loss_tol * a.loss.abs(),
                "{what} update {}: {} vs {}",
                a.step,
                a.loss,
                b.loss
            );
            assert!((a.grad_norm - b.grad_norm).abs() < norm_tol * a.grad_norm, "{what} update {}", a.step);
        }
    }

    /// `pack`: each update's dialogues packed into rows; the same updates (losses, gradient norms, tokens) in
    /// fewer rows, with the plain and the checkpointed backward, tight and at fixed shapes; the fingerprint
    /// is unchanged (a run may resume with the other setting).
    #[test]
    fn packing_trains_like_one_dialogue_per_row() {
        let Some((mcfg, w, data)) = setup() else { return };
        let dev = Default::default();
        let mut cfg = small_cfg(false);
        cfg.stop_after = Some(3);
        // rows of 256: the toy dialogues (under 128 tokens) go two or more to a row
        cfg.max_len = 256;
        // the rows of each update, from the progress lines ("batches 2x57,1x40")
        let run = |cfg: &SftConfig| {
            let mut rows = Vec::new();
            let t = train::<AB>(&w, &mcfg, &data, cfg, None, &dev, &mut |l| {
                if let Some((_, s)) = l.split_once("batches ") {
                    let shapes = s.split_whitespace().next().unwrap().split(',');
                    rows.push(shapes.map(|x| x.split_once('x').unwrap().0.parse::<usize>().unwrap()).sum::<usize>());
                }
            });
            (t.unwrap(), rows)
        };
        let (plain, plain_rows) = run(&cfg);
        cfg.pack = true;
        for (checkpointed, fixed) in [(false, false), (true, false), (false, true)] {
            cfg.gradient_checkpointing = checkpointed;
            cfg.static_shapes = fixed;
            let (packed, rows) = run(&cfg);
            let what = format!("checkpointed {checkpointed}, fixed shapes {fixed}");
            assert_eq!(plain.state.history.len(), 3);
            assert_same_updates(&what, &plain.state, &packed.state, 1e-4, 1e-3);
            if !fixed {
                assert!(rows.iter().zip(&plain_rows).all(|(p, u)| p < u), "{what}: rows {rows:?} vs {plain_rows:?}");
            }
            assert_eq!(plain.state.fingerprint, packed.state.fingerprint, "{what}");
        }
        // bf16: packed rows against one dialogue per row, both in bf16 (within its rounding)
        (cfg.gradient_checkpointing, cfg.static_shapes, cfg.dtype) = (false, false, crate::model::Precision::Bf16);
        let packed = run(&cfg).0;
        cfg.pack = false;
        let plain = run(&cfg).0;
        assert_same_updates("bf16", &plain.state, &packed.state, 5e-3, 3e-2);
    }

    #[test]
    fn gradient_checkpointing_trains_like_the_plain_backward() {
        let Some((mcfg, w, data)) = setup() else { return };
        let dev = Default::default();
        for lora in [false, true] {
            let mut cfg = small_cfg(lora);
            cfg.stop_after = Some(3);
            let plain = train::<AB>(&w, &mcfg, &data, &cfg, None, &dev, &mut |_| {}).unwrap();
            cfg.gradient_checkpointing = true;
            let ckpt = train::<AB>(&w, &mcfg, &data, &cfg, None, &dev, &mut |_| {}).unwrap();
            assert_eq!(plain.state.history.len(), 3);
            assert_same_updates(&format!("lora={lora}"), &plain.state, &ckpt.state, 1e-5, 1e-4);
            assert_eq!(plain.state.fingerprint, ckpt.state.fingerprint, "a run may resume with the other setting");
        }
    }

    /// `dtype = bf16`: the passes run in bf16 on a cast copy while the parameters, their gradients and the
    /// optimizer stay f32. The losses and gradient norms follow f32's within bf16's rounding but are not f32's,
    /// the trained weights are f32, the checkpointed backward gives the plain one's losses, the fingerprint
    /// differs from f32's, and f16 is refused.
    #[test]
    fn bf16_trains_with_f32_master_weights() {
        use crate::model::Precision;
        let Some((mcfg, w, data)) = setup() else { return };
        let dev = Default::default();
        for lora in [false, true] {
            let mut cfg = small_cfg(lora);
            cfg.stop_after = Some(3);
            let full = train::<AB>(&w, &mcfg, &data, &cfg, None, &dev, &mut |_| {}).unwrap();
            cfg.dtype = Precision::Bf16;
            let half = train::<AB>(&w, &mcfg, &data, &cfg, None, &dev, &mut |_| {}).unwrap();
            assert_eq!(half.model.layers[0].self_attn.q_proj.weight.val().dtype(), burn::tensor::DType::F32);
            assert_eq!(half.state.history.len(), 3);
            let mut differs = false;
            for (a, b) in full.state.history.iter().zip(&half.state.history) {
                eprintln!(
                    "lora={lora} update {}: loss {:.5} / {:.5}, |g| {:.4} / {:.4}",
                    a.step, a.loss, b.loss, a.grad_norm, b.grad_norm
                );
                assert!(
                    (a.loss - b.loss).abs() < 2e-2 * a.loss,
                    "lora={lora} update {}: {} vs {}",
                    a.step,
                    a.loss,
                    b.loss
                );
                assert!((a.grad_norm - b.grad_norm).abs() < 0.1 * a.grad_norm, "lora={lora} update {}", a.step);
                differs |= a.loss != b.loss;
            }
            assert!(differs, "lora={lora}: bf16 gave f32's losses bit for bit: the passes did not run in bf16");
            assert_ne!(full.state.fingerprint, half.state.fingerprint, "another dtype is another run");
            cfg.gradient_checkpointing = true;
            let ckpt = train::<AB>(&w, &mcfg, &data, &cfg, None, &dev, &mut |_| {}).unwrap();
            for (a, b) in half.state.history.iter().zip(&ckpt.state.history) {
                assert!(
                    (a.loss - b.loss).abs() < 2e-3 * a.loss,
                    "lora={lora} update {}: {} vs {}",
                    a.step,
                    a.loss,
                    b.loss
                );
                assert!((a.grad_norm - b.grad_norm).abs() < 2e-2 * a.grad_norm, "lora={lora} update {}", a.step);
            }
        }
        let cfg = SftConfig { dtype: Precision::F16, ..small_cfg(false) };
        let err = train::<AB>(&w, &mcfg, &data, &cfg, None, &dev, &mut |_| {}).err().expect("f16 refused");
        assert!(err.to_string().contains("loss scaling"), "{err}");
    }

    #[test]
    fn loss_falls_on_toy_dialogues() {
        let Some((mcfg, w, data)) = setup() else { return };
        let dev = Default::default();
        for lora in [false, true] {
            let mut cfg = small_cfg(lora);
            cfg.epochs = 6;
            cfg.lr = if lora { 2e-2 } else { 5e-3 };
            let t = train::<AB>(&w, &mcfg, &data, &cfg, None, &dev, &mut |_| {}).unwrap();
            let h = &t.state.history;
            let first: f64 = h[..3].iter().map(|r| r.loss).sum::<f64>() / 3.0;
            let last: f64 = h[h.len() - 3..].iter().map(|r| r.loss).sum::<f64>() / 3.0;
            assert!(last < 0.7 * first, "lora={lora}: train loss {first:.3} -> {last:.3}");
            let v = &t.state.valid;
            assert_eq!(v.first().unwrap().step, 0);
            assert!(v.last().unwrap().loss < v[0].loss, "lora={lora}: valid {:?}", v);
            assert_eq!(t.adapters.is_some(), lora);
        }
    }
}
