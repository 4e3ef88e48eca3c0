//! A run's method configuration: the one place that finds, merges, validates and records it.
//!
//! Layers, lowest first:
//! 1. the method's file: `configs/<method>.toml`, or the file `--config` names;
//! 2. that file's `[datasets.<name>]` table, merged key by key over the root, so a paper's per-dataset setting
//!    (`[datasets.hotpotqa.trigger] theta = 1.4`) replaces the general one;
//! 3. `--set section.key=value` overrides from the command line.
//!
//! The merged table is then checked against the tables the command reads: a top-level table it does not know
//! (a typo such as `[triger]` or `--set triger.theta=0.3`) is an error listing the valid names, the closest first,
//! and so is a number that is NaN or infinite. Inside each table, the method that reads it refuses unknown keys
//! ([`crate::trigger::params::Params::finish`], or serde's `deny_unknown_fields` via [`MethodConfig::section`]).
//! Commands record [`MethodConfig::root`] in their output (`config.toml` of a run), so a run says what it used.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::de::DeserializeOwned;
use toml::Value;

/// A method config as a command uses it: the file it came from and the merged, validated table.
#[derive(Debug, Clone)]
pub struct MethodConfig {
    pub path: PathBuf,
    pub root: Value,
}

/// Tables a token-level controller's config holds (`configs/rind.toml`, ...): read by `ragtime eval`; `[sweep]`
/// (the threshold grid) by `ragtime sweep`.
pub const TOKEN_LEVEL_TABLES: &[&str] = &["trigger", "query", "retrieval", "generation", "sweep"];
/// Tables of Auto-RAG's config (`configs/autorag.toml`): `eval --trigger autorag` and `synth autorag`.
pub const AUTORAG_TABLES: &[&str] = &["trigger", "autorag", "synth"];
/// Tables of the fine-tuning config (`configs/autorag-train.toml`).
pub const TRAIN_TABLES: &[&str] = &["train", "lora"];

/// `[retrieval]` of a token-level controller's config.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetrievalTable {
    /// Passages per retrieval.
    pub top_k: Option<usize>,
    /// Where passages come from: `index` (the default: `--index`, else the dataset's) or `gold` (the question's
    /// own supporting paragraphs: the oracle context, `configs/oracle.toml`).
    pub source: Option<String>,
}

/// `[generation]` of a token-level controller's config.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GenerationTable {
    /// Answer length limit (else the dataset's).
    pub max_new_tokens: Option<usize>,
}

/// `configs/<method>.toml`, where a method's shipped config lives.
pub fn default_path(method: &str) -> PathBuf {
    PathBuf::from(format!("configs/{method}.toml"))
}

impl MethodConfig {
    /// Reads `path`, merges `[datasets.<dataset>]`, applies `overrides` (`section.key=value`) and checks that
    /// every top-level table is one of `sections` (`datasets` is always allowed in the file).
    pub fn load(path: &Path, dataset: Option<&str>, overrides: &[String], sections: &[&str]) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("{}: cannot read method config", path.display()))?;
        let root: Value = toml::from_str(&text).with_context(|| format!("{}: not valid TOML", path.display()))?;
        Self::from_value(path, root, dataset, overrides, sections)
    }

    /// As [`MethodConfig::load`], with the file's contents already parsed (or built in code).
    pub fn from_value(
        path: &Path,
        root: Value,
        dataset: Option<&str>,
        overrides: &[String],
        sections: &[&str],
    ) -> Result<Self> {
        let mut root = resolve_dataset(&root, dataset).with_context(|| format!("{}", path.display()))?;
        check_sections(&root, sections).with_context(|| format!("{}", path.display()))?;
        for o in overrides {
            apply_override(&mut root, o)?;
            check_sections(&root, sections).with_context(|| format!("--set '{o}'"))?;
        }
        check_finite(&root, "").with_context(|| format!("{}", path.display()))?;
        Ok(MethodConfig { path: path.to_path_buf(), root })
    }

    /// Table `name` as `T`: `T::default()` when absent; a wrong type or an unknown key (with
    /// `deny_unknown_fields` on `T`) is an error naming the file and the table.
    pub fn section<T: DeserializeOwned + Default>(&self, name: &str) -> Result<T> {
        match self.root.get(name) {
            None => Ok(T::default()),
            Some(v) => {
                v.clone().try_into::<T>().with_context(|| format!("{}: bad [{name}] table", self.path.display()))
            }
        }
    }

    /// Table `name`, created empty when absent (for a flag that sets a value inside it).
    pub fn table_mut(&mut self, name: &str) -> Result<&mut toml::value::Table> {
        let Value::Table(t) = &mut self.root else { bail!("{}: the root must be a table", self.path.display()) };
        let entry = t.entry(name.to_string()).or_insert_with(|| Value::Table(Default::default()));
        match entry {
            Value::Table(t) => Ok(t),
            other => bail!("{}: '{name}' must be a table, found {}", self.path.display(), other.type_str()),
        }
    }
}

/// Applies a config file's per-dataset overrides: the root's `[datasets.<dataset>]` table is merged, key by
/// key and recursively, over the root (so `[datasets.hotpotqa.trigger] theta = 1.4` replaces `[trigger]
/// theta`). The `datasets` table itself is dropped from the result. Unknown dataset: the root unchanged.
pub fn resolve_dataset(root: &Value, dataset: Option<&str>) -> Result<Value> {
    let Value::Table(t) = root else { bail!("config: the root must be a table") };
    let mut out = t.clone();
    let datasets = out.remove("datasets");
    if let (Some(name), Some(datasets)) = (dataset, datasets) {
        let Value::Table(datasets) = datasets else { bail!("config: [datasets] must be a table") };
        if let Some(over) = datasets.get(name) {
            let Value::Table(over) = over else { bail!("config: [datasets.{name}] must be a table") };
            merge(&mut out, over);
        }
    }
    Ok(Value::Table(out))
}

fn merge(base: &mut toml::value::Table, over: &toml::value::Table) {
    for (k, v) in over {
        match (base.get_mut(k), v) {
            (Some(Value::Table(b)), Value::Table(o)) => merge(b, o),
            _ => {
                base.insert(k.clone(), v.clone());
            }
        }
    }
}

/// Applies a command-line override `section.key=value` (e.g. `trigger.theta=0.35`, `query.top_n=20`,
/// `trigger.truncate="sentence"`) to a method config. The value is read as TOML (number, bool, quoted string,
/// array); anything that does not parse as TOML is taken as a bare string. Missing tables are created.
pub fn apply_override(root: &mut Value, spec: &str) -> Result<()> {
    let Some((path, raw)) = spec.split_once('=') else {
        bail!("--set '{spec}': expected KEY=VALUE, e.g. trigger.theta=0.35")
    };
    let keys: Vec<&str> = path.trim().split('.').collect();
    if keys.iter().any(|k| k.is_empty()) {
        bail!("--set '{spec}': empty key in '{path}'");
    }
    if keys.len() < 2 {
        bail!("--set '{spec}': expected SECTION.KEY=VALUE, e.g. trigger.theta=0.35");
    }
    let value = match toml::from_str::<toml::Table>(&format!("v = {}", raw.trim())) {
        Ok(mut t) => t.remove("v").unwrap_or_else(|| Value::String(raw.trim().to_string())),
        Err(_) => Value::String(raw.trim().to_string()),
    };
    let mut cur = root;
    for k in &keys[..keys.len() - 1] {
        let Some(t) = cur.as_table_mut() else { bail!("--set '{spec}': '{k}' is inside a value that is not a table") };
        cur = t.entry(k.to_string()).or_insert_with(|| Value::Table(Default::default()));
    }
    let Some(t) = cur.as_table_mut() else {
        bail!("--set '{spec}': the parent of '{}' is not a table", keys[keys.len() - 1])
    };
    t.insert(keys[keys.len() - 1].to_string(), value);
    Ok(())
}

/// Every top-level key must be a table the command reads.
fn check_sections(root: &Value, sections: &[&str]) -> Result<()> {
    let Value::Table(t) = root else { bail!("the root must be a table") };
    for (k, v) in t {
        if !sections.contains(&k.as_str()) {
            bail!("unknown table [{k}] (valid: {})", closest_first(k, sections).join(", "));
        }
        if !v.is_table() {
            bail!("'{k}' must be a table [{k}], found {}", v.type_str());
        }
    }
    Ok(())
}

/// No NaN or infinite number anywhere (TOML accepts `nan` and `inf`; no setting of ours means them).
fn check_finite(v: &Value, at: &str) -> Result<()> {
    match v {
        Value::Float(f) if !f.is_finite() => bail!("'{at}' = {f}: must be a finite number"),
        Value::Table(t) => t
            .iter()
            .try_for_each(|(k, v)| check_finite(v, &if at.is_empty() { k.clone() } else { format!("{at}.{k}") })),
        Value::Array(a) => a.iter().enumerate().try_for_each(|(i, v)| check_finite(v, &format!("{at}[{i}]"))),
        _ => Ok(()),
    }
}

/// `names` ordered by edit distance to `word` (ties keep their order), for "did you mean" lists.
pub fn closest_first<'a>(word: &str, names: &[&'a str]) -> Vec<&'a str> {
    let mut v: Vec<(usize, usize, &str)> =
        names.iter().enumerate().map(|(i, n)| (levenshtein(word, n), i, *n)).collect();
    v.sort();
    v.into_iter().map(|(_, _, n)| n).collect()
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb)).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECTIONS: &[&str] = &["trigger", "query", "retrieval", "generation", "datasets"];

    #[test]
    fn command_line_overrides() {
        let mut root: Value = toml::from_str("[trigger]\nname = \"rind\"\ntheta = 1.4\n").unwrap();
        apply_override(&mut root, "trigger.theta=0.35").unwrap();
        apply_override(&mut root, "trigger.truncate=sentence").unwrap();
        apply_override(&mut root, "query.top_n=20").unwrap();
        apply_override(&mut root, "query.with_question = false").unwrap();
        assert_eq!(root["trigger"]["theta"].as_float(), Some(0.35));
        assert_eq!(root["trigger"]["truncate"].as_str(), Some("sentence"));
        assert_eq!(root["query"]["top_n"].as_integer(), Some(20));
        assert_eq!(root["query"]["with_question"].as_bool(), Some(false));
        assert!(apply_override(&mut root, "theta").is_err());
        assert!(apply_override(&mut root, "theta=1").is_err());
        assert!(apply_override(&mut root, "trigger..theta=1").is_err());
        assert!(apply_override(&mut root, "trigger.theta.x=1").is_err());
    }

    #[test]
    fn dataset_overrides_merge_recursively() {
        let v: Value = toml::from_str(
            "[trigger]\nname = \"rind\"\ntheta = 1.2\nvariant = \"paper\"\n[datasets.hotpotqa.trigger]\ntheta = 1.4\n",
        )
        .unwrap();
        let r = resolve_dataset(&v, Some("hotpotqa")).unwrap();
        assert_eq!(r["trigger"]["theta"].as_float(), Some(1.4));
        assert_eq!(r["trigger"]["variant"].as_str(), Some("paper"));
        assert!(r.get("datasets").is_none());
        let r = resolve_dataset(&v, Some("iirc")).unwrap();
        assert_eq!(r["trigger"]["theta"].as_float(), Some(1.2));
    }

    /// The layers in order: file < [datasets.NAME] < --set.
    #[test]
    fn layers_apply_in_order() {
        let v: Value =
            toml::from_str("[trigger]\nname = \"rind\"\ntheta = 1.2\n[datasets.hotpotqa.trigger]\ntheta = 1.4\n")
                .unwrap();
        let p = Path::new("configs/rind.toml");
        let c = MethodConfig::from_value(p, v.clone(), Some("hotpotqa"), &[], SECTIONS).unwrap();
        assert_eq!(c.root["trigger"]["theta"].as_float(), Some(1.4));
        let c = MethodConfig::from_value(p, v, Some("hotpotqa"), &["trigger.theta=0.3".into()], SECTIONS).unwrap();
        assert_eq!(c.root["trigger"]["theta"].as_float(), Some(0.3));
    }

    /// A misspelt table, in the file or in --set, is an error naming the valid tables, the closest first.
    #[test]
    fn unknown_tables_are_errors_with_the_closest_name_first() {
        let p = Path::new("configs/rind.toml");
        let v: Value = toml::from_str("[trigger]\nname = \"rind\"\n").unwrap();
        let e = MethodConfig::from_value(p, v.clone(), None, &["triger.theta=0.3".into()], SECTIONS).unwrap_err();
        let e = format!("{e:#}");
        assert!(e.contains("--set 'triger.theta=0.3'") && e.contains("unknown table [triger] (valid: trigger,"), "{e}");
        let v2: Value = toml::from_str("[trigger]\nname = \"rind\"\n[retreival]\ntop_k = 3\n").unwrap();
        let e = format!("{:#}", MethodConfig::from_value(p, v2, None, &[], SECTIONS).unwrap_err());
        assert!(e.contains("configs/rind.toml") && e.contains("unknown table [retreival] (valid: retrieval,"), "{e}");
        let v3: Value = toml::from_str("theta = 1.0\n[trigger]\nname = \"rind\"\n").unwrap();
        let e = format!("{:#}", MethodConfig::from_value(p, v3, None, &[], SECTIONS).unwrap_err());
        assert!(e.contains("unknown table [theta]"), "{e}");
        assert!(MethodConfig::from_value(p, v, None, &["trigger.theta=0.3".into()], SECTIONS).is_ok());
    }

    #[test]
    fn nan_and_infinity_are_refused_with_the_key() {
        let p = Path::new("configs/rind.toml");
        let v: Value = toml::from_str("[trigger]\nname = \"rind\"\n").unwrap();
        let e = format!(
            "{:#}",
            MethodConfig::from_value(p, v.clone(), None, &["trigger.theta=nan".into()], SECTIONS).unwrap_err()
        );
        assert!(e.contains("'trigger.theta' = NaN: must be a finite number"), "{e}");
        let e = format!(
            "{:#}",
            MethodConfig::from_value(p, v, None, &["query.w=[1.0, inf]".into()], SECTIONS).unwrap_err()
        );
        assert!(e.contains("'query.w[1]' = inf"), "{e}");
    }

    #[test]
    fn sections_read_with_defaults_and_errors() {
        #[derive(serde::Deserialize, Default, Debug, PartialEq)]
        #[serde(default, deny_unknown_fields)]
        struct R {
            top_k: usize,
        }
        let v: Value = toml::from_str("[retrieval]\ntop_k = 5\n").unwrap();
        let c = MethodConfig::from_value(Path::new("c.toml"), v, None, &[], SECTIONS).unwrap();
        assert_eq!(c.section::<R>("retrieval").unwrap(), R { top_k: 5 });
        assert_eq!(c.section::<R>("generation").unwrap(), R::default());
        let v: Value = toml::from_str("[retrieval]\ntop_kk = 5\n").unwrap();
        let c = MethodConfig::from_value(Path::new("c.toml"), v, None, &[], SECTIONS).unwrap();
        let e = format!("{:#}", c.section::<R>("retrieval").unwrap_err());
        assert!(e.contains("c.toml: bad [retrieval] table") && e.contains("top_kk"), "{e}");
    }

    #[test]
    fn edit_distance() {
        assert_eq!(levenshtein("triger", "trigger"), 1);
        assert_eq!(levenshtein("", "abc"), 3);
        assert_eq!(closest_first("qury", &["trigger", "query", "retrieval"])[0], "query");
    }
}
