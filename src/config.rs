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
//!
//! Every error here is a [`ConfigError`] that says where the bad setting came from ([`Origin`]): a file, or a
//! `--set` override — the latter is a usage error (exit code 2, see [`crate::usage`]). Errors that the methods
//! raise while reading their tables are attributed the same way by [`MethodConfig::attribute`].

use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use toml::Value;

/// Where a setting came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A config file.
    File(PathBuf),
    /// A `--set KEY=VALUE` override on the command line.
    Set(String),
    /// A method's own table, read before the caller knows where the key came from (the method's name);
    /// [`MethodConfig::attribute`] replaces it with the file or the `--set` that wrote the key.
    Method(String),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File(p) => write!(f, "{}", p.display()),
            Origin::Set(spec) => write!(f, "--set '{spec}'"),
            Origin::Method(_) => write!(f, "method config"),
        }
    }
}

/// The config layer's error: a method config or a `--set` override that cannot be used, and where it came from.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}: cannot read method config", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: not valid TOML", .path.display())]
    Toml {
        path: PathBuf,
        #[source]
        source: toml::de::Error,
    },
    /// A value of the wrong shape (a table where a number belongs, `--set` without `=`, ...).
    #[error("{at}: {detail}")]
    Shape { at: Origin, detail: String },
    #[error("{at}: unknown table [{name}] (valid: {})", .valid.join(", "))]
    UnknownTable { at: Origin, name: String, valid: Vec<String> },
    /// Keys a table's reader does not know; `valid` lists the known ones, the closest to the first unknown first.
    #[error("{at}: {table}: unknown key{} {} (valid: {})", if .keys.len() == 1 { "" } else { "s" },
        .keys.iter().map(|k| format!("'{k}'")).collect::<Vec<_>>().join(", "), .valid.join(", "))]
    UnknownKey { at: Origin, table: String, keys: Vec<String>, valid: Vec<String> },
    #[error("{at}: '{key}' = {value}: must be a finite number")]
    NotFinite { at: Origin, key: String, value: f64 },
    /// A known key with a value its reader cannot take; `key` is empty where the reader does not say which.
    #[error("{at}: {table}: {}{detail}", if .key.is_empty() { String::new() } else { format!("config key '{}': ", .key) })]
    BadValue { at: Origin, table: String, key: String, detail: String },
}

/// The origin field of a [`ConfigError`] (shared or mutable, as the error is borrowed).
macro_rules! origin_of {
    ($e:expr) => {
        match $e {
            ConfigError::Read { .. } | ConfigError::Toml { .. } => None,
            ConfigError::Shape { at, .. }
            | ConfigError::UnknownTable { at, .. }
            | ConfigError::UnknownKey { at, .. }
            | ConfigError::NotFinite { at, .. }
            | ConfigError::BadValue { at, .. } => Some(at),
        }
    };
}

impl ConfigError {
    /// Whether the command line itself is at fault (a `--set` override), so the binary exits with 2.
    pub fn is_usage(&self) -> bool {
        matches!(self.origin(), Some(Origin::Set(_)))
    }

    pub fn origin(&self) -> Option<&Origin> {
        origin_of!(self)
    }

    fn origin_mut(&mut self) -> Option<&mut Origin> {
        origin_of!(self)
    }

    /// The key the error is about, where it names one.
    fn key(&self) -> Option<&str> {
        match self {
            ConfigError::UnknownKey { keys, .. } => keys.first().map(String::as_str),
            ConfigError::BadValue { key, .. } if !key.is_empty() => Some(key),
            _ => None,
        }
    }
}

/// What the config layer returns.
pub type Result<T, E = ConfigError> = std::result::Result<T, E>;

fn shape(at: Origin, detail: impl Into<String>) -> ConfigError {
    ConfigError::Shape { at, detail: detail.into() }
}

/// A method config as a command uses it: the file it came from and the merged, validated table.
#[derive(Debug, Clone)]
pub struct MethodConfig {
    pub path: PathBuf,
    pub root: Value,
    /// The `--set` overrides applied, in order (to say which one wrote a bad key).
    pub overrides: Vec<String>,
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
    /// The decode loop's guard against retrievals that repeat the previous one in place (the decode loop's
    /// `LoopConfig::loop_guard`; default [`DEFAULT_LOOP_GUARD`], `false` gives the papers' literal loop).
    pub loop_guard: Option<bool>,
}

/// Whether the decode loop's guard against in-place repeated retrievals is on when no config says.
pub const DEFAULT_LOOP_GUARD: bool = true;

impl RetrievalTable {
    /// Whether the loop guard is on: the table's `loop_guard`, else [`DEFAULT_LOOP_GUARD`].
    pub fn loop_guard(&self) -> bool {
        self.loop_guard.unwrap_or(DEFAULT_LOOP_GUARD)
    }
}

/// `[generation]` of a token-level controller's config.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GenerationTable {
    /// Answer length limit (else the dataset's).
    pub max_new_tokens: Option<usize>,
}

/// `configs/<method>.toml`, where a method's shipped config lives (see [`shipped`]).
pub fn default_path(method: &str) -> PathBuf {
    shipped(&format!("{method}.toml"))
}

/// The methods a shipped config is there for: the stems of `configs/*.toml` in the folder [`shipped`] finds,
/// sorted, training configs (`*-train`) left out. For an error that names what `--trigger` could have been.
pub fn shipped_methods() -> Vec<String> {
    let entries = std::fs::read_dir(shipped("")).into_iter().flatten().flatten();
    let mut names: Vec<String> = entries
        .filter_map(|e| {
            let p = e.path();
            let stem = p.file_stem()?.to_str()?.to_string();
            (p.extension()? == "toml" && !stem.ends_with("-train")).then_some(stem)
        })
        .collect();
    names.sort();
    names
}

/// A file shipped under the repository's `configs/` (`rel`: `rind.toml`, `calibrated/MODEL.toml`): the working
/// directory's `configs/REL` when it is there (a checkout, or the user's own copy to edit), else the one beside the
/// sources the binary was built from, so that a command run from another directory reads the same settings;
/// where neither exists, the working directory's path, which an error then names.
pub fn shipped(rel: &str) -> PathBuf {
    let local = Path::new("configs").join(rel);
    if crate::io::present_or_refused(&local) {
        return local;
    }
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs").join(rel);
    if crate::io::present_or_refused(&built) {
        built
    } else {
        local
    }
}

impl MethodConfig {
    /// Reads `path`, merges `[datasets.<dataset>]`, applies `overrides` (`section.key=value`) and checks that
    /// every top-level table is one of `sections` (`datasets` is always allowed in the file).
    pub fn load(path: &Path, dataset: Option<&str>, overrides: &[String], sections: &[&str]) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        let root: Value =
            toml::from_str(&text).map_err(|source| ConfigError::Toml { path: path.to_path_buf(), source })?;
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
        let file = Origin::File(path.to_path_buf());
        let mut root = resolve_dataset(&root, dataset).map_err(|d| shape(file.clone(), d))?;
        check_sections(&root, sections, &file)?;
        check_finite(&root, "", &file)?;
        for o in overrides {
            let set = Origin::Set(o.clone());
            apply_override(&mut root, o)?;
            check_sections(&root, sections, &set)?;
            check_finite(&root, "", &set)?;
        }
        Ok(MethodConfig { path: path.to_path_buf(), root, overrides: overrides.to_vec() })
    }

    /// Where `table.key` got its value: the last `--set` that wrote it (or, with `key` `None`, wrote into
    /// `table`; with `table` `None`, any table's `key`), else the file.
    pub fn origin_of(&self, table: Option<&str>, key: Option<&str>) -> Origin {
        let hit = self.overrides.iter().rev().find(|o| {
            let path = o.split_once('=').map_or(o.as_str(), |(p, _)| p).trim();
            let mut parts = path.splitn(2, '.');
            let (t, k) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            table.is_none_or(|want| want == t) && key.is_none_or(|want| want == k || k.starts_with(&format!("{want}.")))
        });
        match hit {
            Some(o) => Origin::Set(o.clone()),
            None => Origin::File(self.path.clone()),
        }
    }

    /// Gives an error that a method raised while reading its table (`table`: `trigger`, `query`, ...) the
    /// origin of the key it names: the `--set` that wrote it, else this config's file. Other errors get the
    /// file as context.
    pub fn attribute(&self, table: &str, err: anyhow::Error) -> anyhow::Error {
        match err.downcast::<ConfigError>() {
            Ok(mut e) => {
                let origin = self.origin_of(Some(table), e.key());
                if let Some(at) = e.origin_mut() {
                    if matches!(at, Origin::Method(_)) {
                        *at = origin;
                    }
                }
                anyhow::Error::new(e)
            }
            Err(other) => other.context(self.path.display().to_string()),
        }
    }

    /// Table `name` as `T`: `T::default()` when absent; a wrong type or an unknown key (with
    /// `deny_unknown_fields` on `T`) is an error naming the file and the table.
    pub fn section<T: DeserializeOwned + Default>(&self, name: &str) -> Result<T> {
        let Some(v) = self.root.get(name) else { return Ok(T::default()) };
        if let (Some(fields), Some(t)) = (struct_fields::<T>(), v.as_table()) {
            let unknown: Vec<String> = t.keys().filter(|k| !fields.contains(&k.as_str())).cloned().collect();
            if let Some(first) = unknown.first() {
                return Err(ConfigError::UnknownKey {
                    at: self.origin_of(Some(name), Some(first)),
                    table: format!("[{name}]"),
                    valid: closest_first(first, fields).into_iter().map(String::from).collect(),
                    keys: unknown,
                });
            }
        }
        v.clone().try_into::<T>().map_err(|e| ConfigError::BadValue {
            at: self.origin_of(Some(name), None),
            table: format!("[{name}]"),
            key: String::new(),
            detail: e.to_string().trim().to_string(),
        })
    }

    /// Table `name`, created empty when absent (for a flag that sets a value inside it).
    pub fn table_mut(&mut self, name: &str) -> Result<&mut toml::value::Table> {
        let file = Origin::File(self.path.clone());
        let Value::Table(t) = &mut self.root else { return Err(shape(file, "the root must be a table")) };
        let entry = t.entry(name.to_string()).or_insert_with(|| Value::Table(Default::default()));
        match entry {
            Value::Table(t) => Ok(t),
            other => Err(shape(file, format!("'{name}' must be a table, found {}", other.type_str()))),
        }
    }
}

/// Applies a config file's per-dataset overrides: the root's `[datasets.<dataset>]` table is merged, key by
/// key and recursively, over the root (so `[datasets.hotpotqa.trigger] theta = 1.4` replaces `[trigger]
/// theta`). The `datasets` table itself is dropped from the result. Unknown dataset: the root unchanged.
pub fn resolve_dataset(root: &Value, dataset: Option<&str>) -> Result<Value, String> {
    let Value::Table(t) = root else { return Err("the root must be a table".into()) };
    let mut out = t.clone();
    let datasets = out.remove("datasets");
    if let (Some(name), Some(datasets)) = (dataset, datasets) {
        let Value::Table(datasets) = datasets else { return Err("[datasets] must be a table".into()) };
        if let Some(over) = datasets.get(name) {
            let Value::Table(over) = over else { return Err(format!("[datasets.{name}] must be a table")) };
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
    let at = || Origin::Set(spec.to_string());
    let Some((path, raw)) = spec.split_once('=') else {
        return Err(shape(at(), "expected KEY=VALUE, e.g. trigger.theta=0.35"));
    };
    let keys: Vec<&str> = path.trim().split('.').collect();
    if path.trim().is_empty() {
        return Err(shape(at(), "nothing before '='; expected SECTION.KEY=VALUE, e.g. trigger.theta=0.35"));
    }
    if keys.iter().any(|k| k.is_empty()) {
        return Err(shape(at(), format!("'{}' has an empty part; expected SECTION.KEY=VALUE", path.trim())));
    }
    if keys.len() < 2 {
        return Err(shape(at(), "expected SECTION.KEY=VALUE, e.g. trigger.theta=0.35"));
    }
    let value = match toml::from_str::<toml::Table>(&format!("v = {}", raw.trim())) {
        Ok(mut t) => t.remove("v").unwrap_or_else(|| Value::String(raw.trim().to_string())),
        Err(_) => Value::String(raw.trim().to_string()),
    };
    let mut cur = root;
    for k in &keys[..keys.len() - 1] {
        let Some(t) = cur.as_table_mut() else {
            return Err(shape(at(), format!("'{k}' is inside a value that is not a table")));
        };
        cur = t.entry(k.to_string()).or_insert_with(|| Value::Table(Default::default()));
    }
    let Some(t) = cur.as_table_mut() else {
        return Err(shape(at(), format!("the parent of '{}' is not a table", keys[keys.len() - 1])));
    };
    t.insert(keys[keys.len() - 1].to_string(), value);
    Ok(())
}

/// Every top-level key must be a table the command reads.
fn check_sections(root: &Value, sections: &[&str], at: &Origin) -> Result<()> {
    let Value::Table(t) = root else { return Err(shape(at.clone(), "the root must be a table")) };
    for (k, v) in t {
        if !sections.contains(&k.as_str()) {
            let valid = closest_first(k, sections).into_iter().map(String::from).collect();
            return Err(ConfigError::UnknownTable { at: at.clone(), name: k.clone(), valid });
        }
        if !v.is_table() {
            return Err(shape(at.clone(), format!("'{k}' must be a table [{k}], found {}", v.type_str())));
        }
    }
    Ok(())
}

/// No NaN or infinite number anywhere (TOML accepts `nan` and `inf`; no setting of ours means them).
fn check_finite(v: &Value, key: &str, at: &Origin) -> Result<()> {
    match v {
        Value::Float(f) if !f.is_finite() => {
            Err(ConfigError::NotFinite { at: at.clone(), key: key.to_string(), value: *f })
        }
        Value::Table(t) => t
            .iter()
            .try_for_each(|(k, v)| check_finite(v, &if key.is_empty() { k.clone() } else { format!("{key}.{k}") }, at)),
        Value::Array(a) => a.iter().enumerate().try_for_each(|(i, v)| check_finite(v, &format!("{key}[{i}]"), at)),
        _ => Ok(()),
    }
}

/// The field names of a struct that derives `Deserialize` (what `deserialize_struct` is told), for listing the
/// valid keys of a table; `None` for a type that is not a struct.
pub fn struct_fields<T: DeserializeOwned>() -> Option<&'static [&'static str]> {
    use serde::de::{self, Visitor};
    struct Probe<'a>(&'a std::cell::Cell<Option<&'static [&'static str]>>);
    impl<'de> de::Deserializer<'de> for Probe<'_> {
        type Error = de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> std::result::Result<V::Value, Self::Error> {
            Err(de::Error::custom("not a struct"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> std::result::Result<V::Value, Self::Error> {
            self.0.set(Some(fields));
            Err(de::Error::custom("fields read"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
            unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
    let cell = std::cell::Cell::new(None);
    let _ = T::deserialize(Probe(&cell));
    cell.get()
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
    fn every_trigger_has_a_shipped_config() {
        let methods = shipped_methods();
        for name in crate::trigger::NAMES.iter().chain(&["oracle", "autorag"]) {
            assert!(methods.iter().any(|m| m == name), "{name} not in {methods:?}");
        }
        assert!(!methods.iter().any(|m| m.ends_with("-train")), "{methods:?}");
        assert!(methods.windows(2).all(|w| w[0] < w[1]), "sorted: {methods:?}");
    }

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
        assert!(apply_override(&mut root, "trigger.theta.x=1").is_err());
        let e = |spec: &str| apply_override(&mut root.clone(), spec).unwrap_err().to_string();
        assert_eq!(e("=3"), "--set '=3': nothing before '='; expected SECTION.KEY=VALUE, e.g. trigger.theta=0.35");
        assert_eq!(
            e("trigger..theta=1"),
            "--set 'trigger..theta=1': 'trigger..theta' has an empty part; expected SECTION.KEY=VALUE"
        );
        assert_eq!(e(" .theta =1"), "--set ' .theta =1': '.theta' has an empty part; expected SECTION.KEY=VALUE");
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
        let e = c.section::<R>("retrieval").unwrap_err();
        assert_eq!(e.to_string(), "c.toml: [retrieval]: unknown key 'top_kk' (valid: top_k)");
        assert!(!e.is_usage());
        let v: Value = toml::from_str("[retrieval]\ntop_k = \"five\"\n").unwrap();
        let c = MethodConfig::from_value(Path::new("c.toml"), v, None, &[], SECTIONS).unwrap();
        let e = c.section::<R>("retrieval").unwrap_err().to_string();
        assert!(e.starts_with("c.toml: [retrieval]: ") && e.contains("invalid type"), "{e}");
    }

    /// An unknown key or a bad value that came from `--set` is a usage error naming that `--set`, and the valid
    /// keys are listed closest first; the same key from the file names the file.
    #[test]
    fn keys_are_attributed_to_their_origin() {
        #[derive(serde::Deserialize, Default, Debug)]
        #[serde(default, deny_unknown_fields)]
        #[allow(dead_code)]
        struct G {
            max_new_tokens: usize,
            top_k: usize,
        }
        let p = Path::new("configs/rind.toml");
        let v: Value = toml::from_str("[trigger]\nname = \"rind\"\n").unwrap();
        let sets = ["generation.max_new_token=5".to_string()];
        let c = MethodConfig::from_value(p, v.clone(), None, &sets, SECTIONS).unwrap();
        let e = c.section::<G>("generation").unwrap_err();
        assert_eq!(
            e.to_string(),
            "--set 'generation.max_new_token=5': [generation]: unknown key 'max_new_token' (valid: max_new_tokens, \
             top_k)"
        );
        assert!(e.is_usage());
        // a method's own error, attributed: the --set that wrote the key, else the file
        let raised = || {
            anyhow::Error::new(ConfigError::UnknownKey {
                at: Origin::Method("rind".into()),
                table: "rind".into(),
                keys: vec!["thetta".into()],
                valid: vec!["theta".into()],
            })
        };
        let c = MethodConfig::from_value(p, v.clone(), None, &["trigger.thetta=0.3".into()], SECTIONS).unwrap();
        let e = c.attribute("trigger", raised());
        assert_eq!(format!("{e:#}"), "--set 'trigger.thetta=0.3': rind: unknown key 'thetta' (valid: theta)");
        assert_eq!(crate::usage::exit_code(&e), 2);
        let c = MethodConfig::from_value(p, v, None, &[], SECTIONS).unwrap();
        let e = c.attribute("trigger", raised());
        assert_eq!(format!("{e:#}"), "configs/rind.toml: rind: unknown key 'thetta' (valid: theta)");
        assert_eq!(crate::usage::exit_code(&e), 1);
        assert_eq!(format!("{:#}", c.attribute("trigger", anyhow::anyhow!("other"))), "configs/rind.toml: other");
    }

    /// A NaN from the file names the file; one from --set names the --set (it used to name the file for both).
    #[test]
    fn non_finite_numbers_name_their_origin() {
        let p = Path::new("configs/rind.toml");
        let v: Value = toml::from_str("[trigger]\nname = \"rind\"\ntheta = nan\n").unwrap();
        let e = MethodConfig::from_value(p, v, None, &[], SECTIONS).unwrap_err();
        assert_eq!(e.to_string(), "configs/rind.toml: 'trigger.theta' = NaN: must be a finite number");
        assert!(!e.is_usage());
        let v: Value = toml::from_str("[trigger]\nname = \"rind\"\n").unwrap();
        let e = MethodConfig::from_value(p, v, None, &["trigger.theta=nan".into()], SECTIONS).unwrap_err();
        assert_eq!(e.to_string(), "--set 'trigger.theta=nan': 'trigger.theta' = NaN: must be a finite number");
        assert!(e.is_usage());
    }

    /// `[retrieval] loop_guard`: on when absent, as written in the file, as a `--set` (per dataset too), and a
    /// value that is not a bool refused.
    #[test]
    fn loop_guard_key() {
        let p = Path::new("configs/rind.toml");
        let read = |text: &str, dataset: Option<&str>, sets: &[&str]| {
            let v: Value = toml::from_str(text).unwrap();
            let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
            MethodConfig::from_value(p, v, dataset, &sets, SECTIONS).unwrap().section::<RetrievalTable>("retrieval")
        };
        assert!(read("[retrieval]\ntop_k = 3\n", None, &[]).unwrap().loop_guard());
        assert!(read("", None, &[]).unwrap().loop_guard());
        assert!(!read("[retrieval]\nloop_guard = false\n", None, &[]).unwrap().loop_guard());
        assert!(read("[retrieval]\nloop_guard = true\n", None, &[]).unwrap().loop_guard());
        assert!(!read("", None, &["retrieval.loop_guard=false"]).unwrap().loop_guard());
        let per_dataset = "[datasets.hotpotqa]\nretrieval = { loop_guard = false }\n";
        assert!(!read(per_dataset, Some("hotpotqa"), &[]).unwrap().loop_guard());
        assert!(read(per_dataset, Some("iirc"), &[]).unwrap().loop_guard());
        let e = read("", None, &["retrieval.loop_guard=no"]).unwrap_err();
        assert!(e.is_usage() && e.to_string().contains("invalid type"), "{e}");
    }

    #[test]
    fn struct_fields_of_a_derived_struct() {
        assert_eq!(struct_fields::<RetrievalTable>(), Some(&["top_k", "source", "loop_guard"][..]));
        assert_eq!(struct_fields::<u32>(), None);
    }

    #[test]
    fn edit_distance() {
        assert_eq!(levenshtein("triger", "trigger"), 1);
        assert_eq!(levenshtein("", "abc"), 3);
        assert_eq!(closest_first("qury", &["trigger", "query", "retrieval"])[0], "query");
    }
}
