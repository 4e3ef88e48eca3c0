//! The run plan: the tokenized train/valid split, every optimizer update with its micro-batches and learning
//! rate, and the fingerprint that ties a checkpoint to the run.
//!
//! **Schedule of data.** Update `u` (0-based) belongs to epoch `u / S` (`S` = updates per epoch) and uses the
//! micro-batches `[k A, (k+1) A)` of that epoch's batch list (`k = u % S`, `A` = accumulation), and an epoch's
//! batch list depends only on `(seed, epoch)` ([`super::data::epoch_batches`]). So the update count alone fixes
//! where training is: a checkpoint stores the trainable weights, the AdamW moments and that count, and nothing
//! else is random (no dropout). The loss of one update is `sum NLL / (target tokens of its micro-batches)`,
//! so accumulation gives the same gradient as one big batch.

use anyhow::{ensure, Result};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::config::SftConfig;
use super::data::{epoch_batches, pack_rows, render, split_valid, Example};
use super::optim::Schedule;
use crate::autorag::dialogue::Dialogue;
use crate::model::{ModelConfig, Tokenizer};

/// Tokenized dialogues, split.
#[derive(Debug, Clone)]
pub struct SftData {
    pub train: Vec<Example>,
    pub valid: Vec<Example>,
    pub pad_id: u32,
    /// Dialogues cut at `max_len`.
    pub truncated: usize,
    /// Dialogues dropped because no model token was left within `max_len`.
    pub dropped: usize,
}

impl SftData {
    /// Renders, truncates and splits the dialogues.
    pub fn prepare(dialogues: &[Dialogue], tok: &Tokenizer, max_len: usize, valid_fraction: f64) -> Result<SftData> {
        let ids: Vec<&str> = dialogues.iter().map(|d| d.id.as_str()).collect();
        let (train_idx, valid_idx) = split_valid(&ids, valid_fraction);
        let (mut truncated, mut dropped) = (0, 0);
        let mut conv = |idx: &[usize]| -> Result<Vec<Example>> {
            let mut out = Vec::new();
            for &i in idx {
                let mut ex = render(tok, &dialogues[i])?;
                if ex.len() > max_len {
                    ex.truncate(max_len);
                    truncated += 1;
                }
                if ex.targets() == 0 {
                    dropped += 1;
                } else {
                    out.push(ex);
                }
            }
            Ok(out)
        };
        let train = conv(&train_idx)?;
        let valid = conv(&valid_idx)?;
        ensure!(
            !train.is_empty(),
            "no training dialogue left (all {} too long for max_len {max_len}?)",
            dialogues.len()
        );
        let pad_id = tok.token_id("<|endoftext|>").or_else(|| tok.stop_ids.first().copied()).unwrap_or(0);
        Ok(SftData { train, valid, pad_id, truncated, dropped })
    }

    fn digest(&self) -> String {
        let mut h = Sha256::new();
        for (name, set) in [("train", &self.train), ("valid", &self.valid)] {
            h.update(name.as_bytes());
            for e in set {
                h.update(e.id.as_bytes());
                for (&i, &l) in e.ids.iter().zip(&e.loss) {
                    h.update(i.to_le_bytes());
                    h.update([l as u8]);
                }
            }
        }
        format!("{:x}", h.finalize())
    }
}

pub(super) fn fingerprint(cfg: &SftConfig, model_cfg: &ModelConfig, data: &SftData) -> String {
    let mut c = cfg.clone();
    c.eval_every = 0;
    c.save_every = 0;
    c.log_every = 0;
    c.stop_after = None;
    c.static_shapes = false;
    c.pack = false;
    c.gradient_checkpointing = false;
    let v = serde_json::json!({"config": c, "model": model_cfg, "data": data.digest()});
    format!("{:x}", Sha256::digest(v.to_string().as_bytes()))
}

/// One optimizer update of a run: its epoch (1-based), learning rate and micro-batches (indices into
/// `SftData::train`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlannedUpdate {
    pub epoch: usize,
    pub lr: f64,
    /// Each micro-batch's dialogues (with packing: its rows' dialogues, row after row).
    pub micro: Vec<Vec<usize>>,
    /// With packing ([`SftConfig::pack`]): each micro-batch's rows, each row's dialogues in the order they sit in it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rows: Option<Vec<Vec<Vec<usize>>>>,
}

/// Every update of a run, fixed by the data and the settings alone (see the module doc): update `u`
/// takes micro-batches `[k A, (k+1) A)` of epoch `u / S`'s batch list, at the warm-up + cosine rate of `u`; with
/// packing, their dialogues packed into rows ([`pack_rows`]) and the rows cut into micro-batches of `batch_size`.
/// [`train`](super::train::train) follows this plan, and `ragtime train autorag --dump-plan` writes it for other
/// trainers.
pub fn plan(data: &SftData, cfg: &SftConfig) -> Result<Vec<PlannedUpdate>> {
    let lengths: Vec<usize> = data.train.iter().map(|e| e.len()).collect();
    let per_epoch = data.train.len().div_ceil(cfg.batch_size).div_ceil(cfg.grad_accum);
    let mut total = cfg.epochs * per_epoch;
    if let Some(m) = cfg.max_steps {
        total = total.min(m);
    }
    ensure!(total > 0, "nothing to train: max_steps is 0");
    let warmup = (cfg.warmup_ratio * total as f64).ceil() as usize;
    let sched = Schedule { peak: cfg.lr, warmup, total, min_ratio: cfg.min_lr_ratio };
    let mut out = Vec::with_capacity(total);
    let mut batches = Vec::new();
    for u in 0..total {
        let (epoch, k) = (u / per_epoch, u % per_epoch);
        if k == 0 {
            batches = epoch_batches(&lengths, cfg.batch_size, cfg.seed, epoch);
        }
        let micro = batches[k * cfg.grad_accum..((k + 1) * cfg.grad_accum).min(batches.len())].to_vec();
        let (micro, rows) = if cfg.pack {
            // the same dialogues, packed into rows, `batch_size` rows per micro-batch
            let rows = pack_rows(&lengths, &micro.concat(), cfg.max_len);
            let groups: Vec<Vec<Vec<usize>>> = rows.chunks(cfg.batch_size).map(<[_]>::to_vec).collect();
            (groups.iter().map(|g| g.concat()).collect(), Some(groups))
        } else {
            (micro, None)
        };
        out.push(PlannedUpdate { epoch: epoch + 1, lr: sched.lr(u), micro, rows });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{setup, small_cfg};
    use super::*;

    #[test]
    fn plan_covers_each_example_once_per_epoch_on_the_schedule() {
        let Some((_, _, data)) = setup() else { return };
        let cfg = small_cfg(false); // batch 2, accumulation 2, 2 epochs, warm-up 10 %
        let n = data.train.len();
        let per_epoch = n.div_ceil(2).div_ceil(2);
        let p = plan(&data, &cfg).unwrap();
        assert_eq!(p.len(), 2 * per_epoch);
        for epoch in 1..=2 {
            let mut seen: Vec<usize> = p.iter().filter(|u| u.epoch == epoch).flat_map(|u| u.micro.concat()).collect();
            seen.sort();
            assert_eq!(seen, (0..n).collect::<Vec<_>>(), "epoch {epoch}");
        }
        assert!(p.iter().all(|u| !u.micro.is_empty() && u.micro.len() <= 2 && u.micro.iter().all(|b| b.len() <= 2)));
        // Warm-up of ceil(0.1 * total) = 1 update reaches the peak at once; cosine decay to 0 after it.
        let sched = Schedule { peak: cfg.lr, warmup: 1, total: p.len(), min_ratio: 0.0 };
        for (u, up) in p.iter().enumerate() {
            assert_eq!(up.lr, sched.lr(u), "update {u}");
        }
        assert_eq!(p[0].lr, cfg.lr);
        assert!(p.windows(2).all(|w| w[1].lr <= w[0].lr));
        // max_steps cuts the plan, and the schedule spans the cut run.
        let cut = plan(&data, &SftConfig { max_steps: Some(3), ..cfg.clone() }).unwrap();
        assert_eq!(cut.len(), 3);
        assert_eq!(
            cut[..3].iter().map(|u| &u.micro).collect::<Vec<_>>(),
            p[..3].iter().map(|u| &u.micro).collect::<Vec<_>>()
        );
        assert!(cut[2].lr < p[2].lr);
    }

    #[test]
    fn packing_keeps_each_update_s_dialogues_in_rows_of_max_len() {
        let Some((_, _, data)) = setup() else { return };
        let mut cfg = small_cfg(false);
        cfg.max_len = 256;
        let plain = plan(&data, &cfg).unwrap();
        cfg.pack = true;
        let packed = plan(&data, &cfg).unwrap();
        assert_eq!(plain.len(), packed.len());
        let mut fewer = false;
        for (u, (a, b)) in plain.iter().zip(&packed).enumerate() {
            assert!(a.rows.is_none());
            let rows = b.rows.as_ref().expect("rows with packing");
            let (mut x, mut y) = (a.micro.concat(), b.micro.concat());
            x.sort();
            y.sort();
            assert_eq!(x, y, "update {u}: the same dialogues");
            assert_eq!((a.epoch, a.lr), (b.epoch, b.lr));
            for (m, g) in b.micro.iter().zip(rows) {
                assert!(!g.is_empty() && g.len() <= cfg.batch_size, "update {u}");
                assert_eq!(*m, g.concat());
                assert!(g.iter().all(|r| r.iter().map(|&i| data.train[i].len()).sum::<usize>() <= cfg.max_len));
            }
            fewer |= rows.iter().map(Vec::len).sum::<usize>() < a.micro.iter().map(Vec::len).sum::<usize>();
        }
        assert!(fewer, "the toy dialogues fit several to a row of 256");
    }
}
