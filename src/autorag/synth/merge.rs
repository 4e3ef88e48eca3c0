//! Merging the dialogue directories of a sharded `synth autorag` (`ragtime merge`, see [`crate::shard`]) into
//! one: attempts and dialogues in the dataset's question order, then dialogues.parquet and stats.json — the
//! directory one process would have written.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context, Result};

use super::store::{read_attempts, read_dialogues, DialogueStore, CONFIG_FILE};
use super::{Attempt, Stats};
use crate::autorag::dialogue::Dialogue;
use crate::shard::{split_engine_keys, without_engine_keys};

fn config_of(part: &Path) -> Result<serde_json::Value> {
    let path = part.join(CONFIG_FILE);
    let text = std::fs::read_to_string(&path).with_context(|| format!("{}: cannot read", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}: malformed", path.display()))
}

/// Writes into `out` the dialogue directory of the part directories `parts`, questions in `order` (position,
/// part index, question id), resuming a merge into `out` that was stopped. Checks that the parts share one
/// config and that every attempt of every part is written once.
pub fn merge(parts: &[PathBuf], order: &[(u64, usize, &str)], out: &Path) -> Result<Stats> {
    let first = parts.first().ok_or_else(|| anyhow::anyhow!("no parts to merge"))?;
    // the parts' settings less how each computed (integer products on a CPU part, a GPU part's precision), which
    // the merged config lists per part
    let mut config = without_engine_keys(&config_of(first)?);
    let mut engines = serde_json::Map::new();
    let mut attempts: Vec<HashMap<String, Attempt>> = Vec::with_capacity(parts.len());
    let mut dialogues: Vec<HashMap<String, Vec<Dialogue>>> = Vec::with_capacity(parts.len());
    for p in parts {
        let (own, engine) = split_engine_keys(&config_of(p)?);
        ensure!(own == config, "{}: its settings differ from {}'s", p.join(CONFIG_FILE).display(), first.display());
        if !engine.is_empty() {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            engines.insert(name, serde_json::Value::Object(engine));
        }
        attempts.push(read_attempts(p)?.into_iter().map(|a| (a.id.clone(), a)).collect());
        let mut by_id: HashMap<String, Vec<Dialogue>> = HashMap::new();
        for d in read_dialogues(p)? {
            by_id.entry(d.id.clone()).or_default().push(d);
        }
        dialogues.push(by_id);
    }
    if !engines.is_empty() {
        config["part_engines"] = serde_json::Value::Object(engines);
    }
    let mut store = DialogueStore::open(out, &config)?;
    for &(_, part, id) in order {
        let Some(a) = attempts[part].remove(id) else {
            bail!("{}: no attempt for question {id:?}, which its shard marker lists", parts[part].display())
        };
        let d = dialogues[part].remove(id).unwrap_or_default();
        ensure!(
            a.dialogue_count() == d.len(),
            "{}: question {id:?} kept {} dialogue(s) but has {}",
            parts[part].display(),
            a.dialogue_count(),
            d.len()
        );
        if !store.is_done(id) {
            store.record(&a, &d)?;
        }
    }
    for (p, left) in parts.iter().zip(&attempts) {
        if let Some(id) = left.keys().next() {
            bail!("{}: holds an attempt for {id:?}, which its shard marker does not list", p.display());
        }
    }
    store.finish()
}
