//! Reading a controller's table from a `configs/*.toml` file, with errors that name the method and the key,
//! and refusal of unknown keys (a typo must not silently fall back to a default).

use std::cell::RefCell;
use std::collections::BTreeSet;

use anyhow::{bail, Result};
use toml::Value;

use super::Lookahead;
use crate::step::TokenStep;
use crate::text::words;

/// Keys every section may carry besides the method's own.
const COMMON: &[&str] = &["name"];

/// A method's config table being read.
pub struct Params<'a> {
    method: String,
    table: Option<&'a toml::value::Table>,
    used: RefCell<BTreeSet<String>>,
}

fn kind(v: &Value) -> &'static str {
    v.type_str()
}

impl<'a> Params<'a> {
    /// `config` must be a table (or an empty string/table-less value: `Value::Table` empty).
    pub fn new(method: &str, config: &'a Value) -> Result<Self> {
        let table = match config {
            Value::Table(t) => Some(t),
            other => bail!("{method}: config must be a table, found {}", kind(other)),
        };
        Ok(Params { method: method.to_string(), table, used: RefCell::new(BTreeSet::new()) })
    }

    fn get(&self, key: &str) -> Option<&'a Value> {
        self.used.borrow_mut().insert(key.to_string());
        self.table.and_then(|t| t.get(key))
    }

    /// A number (integer or float), `default` when absent; `None` default makes it required.
    pub fn f32(&self, key: &str, default: Option<f32>) -> Result<f32> {
        match self.get(key) {
            Some(Value::Float(f)) => Ok(*f as f32),
            Some(Value::Integer(i)) => Ok(*i as f32),
            Some(v) => bail!("{}: config key '{key}': expected a number, found {}", self.method, kind(v)),
            None => default.ok_or_else(|| anyhow::anyhow!("{}: config key '{key}' is required", self.method)),
        }
    }

    /// A non-negative integer.
    pub fn usize(&self, key: &str, default: Option<usize>) -> Result<usize> {
        match self.get(key) {
            Some(Value::Integer(i)) if *i >= 0 => Ok(*i as usize),
            Some(v) => bail!("{}: config key '{key}': expected a non-negative integer, found {v}", self.method),
            None => default.ok_or_else(|| anyhow::anyhow!("{}: config key '{key}' is required", self.method)),
        }
    }

    pub fn bool(&self, key: &str, default: bool) -> Result<bool> {
        match self.get(key) {
            Some(Value::Boolean(b)) => Ok(*b),
            Some(v) => bail!("{}: config key '{key}': expected true or false, found {}", self.method, kind(v)),
            None => Ok(default),
        }
    }

    /// One of `choices` (the first is the default).
    pub fn choice(&self, key: &str, choices: &[&str]) -> Result<String> {
        match self.get(key) {
            Some(Value::String(s)) if choices.contains(&s.as_str()) => Ok(s.clone()),
            Some(v) => bail!("{}: config key '{key}': expected one of {choices:?}, found {v}", self.method),
            None => Ok(choices[0].to_string()),
        }
    }

    /// The raw value, if present (for keys with several accepted shapes).
    pub fn raw(&self, key: &str) -> Option<&'a Value> {
        self.get(key)
    }

    pub fn method(&self) -> &str {
        &self.method
    }

    /// Fails on keys the method did not read.
    pub fn finish(self) -> Result<()> {
        let used = self.used.borrow();
        if let Some(t) = self.table {
            let unknown: Vec<&String> =
                t.keys().filter(|k| !used.contains(k.as_str()) && !COMMON.contains(&k.as_str())).collect();
            if !unknown.is_empty() {
                let mut known: Vec<&str> = used.iter().map(String::as_str).collect();
                known.sort();
                bail!("{}: unknown config key(s) {unknown:?} (known: {known:?})", self.method);
            }
        }
        Ok(())
    }
}

/// Where the loop cuts the answer when a word-level trigger fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Truncate {
    /// Drop the triggering word and what follows (DRAGIN's and ETC's papers; ETC's code).
    Token,
    /// Drop the whole sentence holding the triggering word (DRAGIN's code).
    Sentence,
}

impl Truncate {
    /// Reads `truncate = "token" | "sentence"`; `default` when absent.
    pub fn read(p: &Params, default: Truncate) -> Result<Truncate> {
        let choices: &[&str] = match default {
            Truncate::Token => &["token", "sentence"],
            Truncate::Sentence => &["sentence", "token"],
        };
        Ok(if p.choice("truncate", choices)? == "token" { Truncate::Token } else { Truncate::Sentence })
    }

    /// `keep` for a trigger on the word starting at token `word_start`.
    pub fn keep(self, tokens: &[TokenStep], word_start: usize) -> usize {
        match self {
            Truncate::Token => word_start,
            Truncate::Sentence => words::sentence_of(tokens, word_start).start,
        }
    }
}

/// Reads `lookahead = "sentence"` (with `max_sentence_tokens`) or `lookahead = <n tokens>`.
pub fn read_lookahead(p: &Params, default: Lookahead) -> Result<Lookahead> {
    let default_max = match default {
        Lookahead::Sentence { max_tokens } => max_tokens,
        Lookahead::Tokens(n) => n,
    };
    let max_tokens = p.usize("max_sentence_tokens", Some(default_max))?;
    match p.raw("lookahead") {
        None => Ok(match default {
            Lookahead::Sentence { .. } => Lookahead::Sentence { max_tokens },
            t => t,
        }),
        Some(Value::String(s)) if s == "sentence" => Ok(Lookahead::Sentence { max_tokens }),
        Some(Value::Integer(n)) if *n > 0 => Ok(Lookahead::Tokens(*n as usize)),
        Some(v) => bail!("{}: config key 'lookahead': expected \"sentence\" or a positive integer, found {v}", p.method()),
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
    let Some((path, raw)) = spec.split_once('=') else { bail!("--set '{spec}': expected KEY=VALUE, e.g. trigger.theta=0.35") };
    let keys: Vec<&str> = path.trim().split('.').collect();
    if keys.iter().any(|k| k.is_empty()) {
        bail!("--set '{spec}': empty key in '{path}'");
    }
    let value = match toml::from_str::<toml::Table>(&format!("v = {}", raw.trim())) {
        Ok(mut t) => t.remove("v").unwrap(),
        Err(_) => Value::String(raw.trim().to_string()),
    };
    let mut cur = root;
    for k in &keys[..keys.len() - 1] {
        let Some(t) = cur.as_table_mut() else { bail!("--set '{spec}': '{k}' is inside a value that is not a table") };
        cur = t.entry(k.to_string()).or_insert_with(|| Value::Table(Default::default()));
    }
    let Some(t) = cur.as_table_mut() else { bail!("--set '{spec}': the parent of '{}' is not a table", keys[keys.len() - 1]) };
    t.insert(keys[keys.len() - 1].to_string(), value);
    Ok(())
}

#[cfg(test)]
mod tests {
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
        assert!(apply_override(&mut root, "trigger..theta=1").is_err());
        assert!(apply_override(&mut root, "trigger.theta.x=1").is_err());
    }

    use super::*;

    #[test]
    fn unknown_keys_and_bad_types_are_errors() {
        let v: Value = toml::from_str("name = \"rind\"\ntheta = \"high\"\ntheat = 1.0").unwrap();
        let p = Params::new("rind", &v).unwrap();
        let e = p.f32("theta", Some(1.0)).unwrap_err().to_string();
        assert!(e.contains("rind: config key 'theta': expected a number"), "{e}");
        let e = p.finish().unwrap_err().to_string();
        assert!(e.contains("unknown config key(s) [\"theat\"]"), "{e}");
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

    /// Every `configs/*.toml` parses, resolves for each dataset, and builds its trigger and query former.
    #[test]
    fn shipped_configs_build() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
        let mut seen = Vec::new();
        for name in ["none", "single", "fixed-length", "fixed-sentence", "flare", "rind", "etc"] {
            let path = dir.join(format!("{name}.toml"));
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let root: Value = toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            for ds in [None, Some("2wikimultihopqa"), Some("hotpotqa"), Some("iirc"), Some("strategyqa")] {
                let r = resolve_dataset(&root, ds).unwrap();
                let t = crate::trigger::build_section(&r).unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
                let q = crate::query::build_section(&r).unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
                assert_eq!(t.name(), name);
                if name == "fixed-length" && q.name() == "last-tokens" {
                    assert_eq!(r["trigger"]["n"], r["query"]["n"], "{}: trigger n != query n", path.display());
                }
                seen.push((t.name().to_string(), q.name().to_string()));
            }
        }
        // the per-dataset merge reached the trigger: DRAGIN's HotpotQA threshold
        let root: Value = toml::from_str(&std::fs::read_to_string(dir.join("rind.toml")).unwrap()).unwrap();
        assert_eq!(resolve_dataset(&root, Some("hotpotqa")).unwrap()["trigger"]["theta"].as_float(), Some(1.4));
        assert!(seen.contains(&("rind".into(), "qfs".into())) && seen.contains(&("flare".into(), "flare-masked".into())));
        // switching rind.toml to the code form switches its block size too (nothing pinned in the file)
        let mut r = resolve_dataset(&root, None).unwrap();
        r["trigger"].as_table_mut().unwrap().insert("variant".into(), Value::String("code".into()));
        assert_eq!(crate::trigger::build_section(&r).unwrap().lookahead(), Lookahead::Tokens(64));
    }

    #[test]
    fn registries_name_what_they_know() {
        let empty = Value::Table(Default::default());
        let e = crate::trigger::build("dragin", &empty).err().unwrap().to_string();
        assert!(e.contains("unknown trigger 'dragin'") && e.contains("rind"), "{e}");
        let e = crate::query::build("qfz", &empty).err().unwrap().to_string();
        assert!(e.contains("unknown query former 'qfz'") && e.contains("qfs"), "{e}");
        let root: Value = toml::from_str("[trigger]\ntheta = 1.0").unwrap();
        let e = crate::trigger::build_section(&root).err().unwrap().to_string();
        assert!(e.contains("[trigger] needs a string 'name'"), "{e}");
        let e = crate::trigger::build("etc", &toml::from_str("alpha = 1.0\nvariant = \"both\"").unwrap())
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("etc: config key 'variant': expected one of [\"paper\", \"code\"]"), "{e}");
    }
}
