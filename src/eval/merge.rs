//! Merging the runs of a sharded `ragtime eval` (`ragtime merge`, see [`crate::shard`]) into one run directory:
//! the config every shard shared (without its `shard` key), the predictions in the dataset's question order, and
//! the metrics of all of them — the run one process would have written, but for the timings.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Result};

use super::run::{read_config, read_predictions, PredictionRecord, RunWriter, Summary, CONFIG_FILE};

/// A part's config.toml without the `shard` key.
fn shared_config(part: &Path) -> Result<toml::Value> {
    let Some(mut v) = read_config(part)? else {
        bail!("{}: missing; a part's directory holds the config its run wrote", part.join(CONFIG_FILE).display())
    };
    if let Some(t) = v.as_table_mut() {
        t.remove("shard");
    }
    Ok(v)
}

/// Writes into `out` the run of the part directories `parts`, predictions in `order` (question position, part
/// index, question id), resuming a merge into `out` that was stopped. Checks that the parts share one config and
/// that every prediction of every part is written once.
pub fn merge(parts: &[PathBuf], order: &[(u64, usize, &str)], out: &Path) -> Result<Summary> {
    let first = parts.first().ok_or_else(|| anyhow::anyhow!("no parts to merge"))?;
    let config = shared_config(first)?;
    let mut records: Vec<HashMap<String, PredictionRecord>> = Vec::with_capacity(parts.len());
    for p in parts {
        ensure!(
            shared_config(p)? == config,
            "{}: its config differs from {}'s (other than the shard)",
            p.join(CONFIG_FILE).display(),
            first.display()
        );
        records.push(read_predictions(p)?.into_iter().map(|r| (r.id.clone(), r)).collect());
    }
    let mut writer = RunWriter::create(out, &config)?;
    for &(_, part, id) in order {
        let Some(r) = records[part].remove(id) else {
            bail!("{}: no prediction for question {id:?}, which its shard marker lists", parts[part].display())
        };
        if !writer.is_done(id) {
            writer.write(&r)?;
        }
    }
    for (p, left) in parts.iter().zip(&records) {
        if let Some(id) = left.keys().next() {
            bail!("{}: holds a prediction for {id:?}, which its shard marker does not list", p.display());
        }
    }
    writer.finish()
}
