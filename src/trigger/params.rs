//! Reading a controller's table of a method config (merged by [`crate::config`]), with errors that name the method and the key,
//! and refusal of unknown keys (a typo must not silently fall back to a default).

use std::cell::RefCell;
use std::collections::BTreeSet;

use anyhow::Result;
use toml::Value;

use crate::config::{closest_first, ConfigError, Origin};

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
            other => {
                let detail = format!("{method}: config must be a table, found {}", kind(other));
                return Err(ConfigError::Shape { at: Origin::Method(method.to_string()), detail }.into());
            }
        };
        Ok(Params { method: method.to_string(), table, used: RefCell::new(BTreeSet::new()) })
    }

    /// The error for a value of `key` this method cannot take (attributed to its file or `--set` later, by
    /// [`crate::config::MethodConfig::attribute`]).
    pub fn invalid(&self, key: &str, detail: impl Into<String>) -> anyhow::Error {
        ConfigError::BadValue {
            at: Origin::Method(self.method.clone()),
            table: self.method.clone(),
            key: key.to_string(),
            detail: detail.into(),
        }
        .into()
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
            Some(v) => Err(self.invalid(key, format!("expected a number, found {}", kind(v)))),
            None => default.ok_or_else(|| self.invalid(key, "missing (it has no default)")),
        }
    }

    /// A non-negative integer.
    pub fn usize(&self, key: &str, default: Option<usize>) -> Result<usize> {
        match self.get(key) {
            Some(Value::Integer(i)) if *i >= 0 => Ok(*i as usize),
            Some(v) => Err(self.invalid(key, format!("expected a non-negative integer, found {v}"))),
            None => default.ok_or_else(|| self.invalid(key, "missing (it has no default)")),
        }
    }

    pub fn bool(&self, key: &str, default: bool) -> Result<bool> {
        match self.get(key) {
            Some(Value::Boolean(b)) => Ok(*b),
            Some(v) => Err(self.invalid(key, format!("expected true or false, found {}", kind(v)))),
            None => Ok(default),
        }
    }

    /// One of `choices` (the first is the default).
    pub fn choice(&self, key: &str, choices: &[&str]) -> Result<String> {
        match self.get(key) {
            Some(Value::String(s)) if choices.contains(&s.as_str()) => Ok(s.clone()),
            Some(v) => Err(self.invalid(key, format!("expected one of {choices:?}, found {v}"))),
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
            if let Some(first) = unknown.first() {
                let known: Vec<&str> = used.iter().map(String::as_str).collect();
                return Err(ConfigError::UnknownKey {
                    at: Origin::Method(self.method.clone()),
                    table: self.method.clone(),
                    valid: closest_first(first, &known).into_iter().map(String::from).collect(),
                    keys: unknown.into_iter().cloned().collect(),
                }
                .into());
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

/// How a word-level trigger (RIND, ETC) paces the loop: where it cuts the answer when it fires, the block it
/// judges, and whether the first sentence after a retrieval is accepted without judging (DRAGIN's code).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pacing {
    pub truncate: Truncate,
    pub lookahead: Lookahead,
    /// Cap of a sentence-long block (and of the accepted sentence).
    pub max_sentence_tokens: usize,
    pub accept_after_retrieval: bool,
    /// A retrieval happened and the next sentence is to be accepted.
    pending_accept: bool,
}

impl Pacing {
    pub fn new(truncate: Truncate, lookahead: Lookahead, accept_after_retrieval: bool) -> Self {
        Pacing { truncate, lookahead, max_sentence_tokens: 64, accept_after_retrieval, pending_accept: false }
    }

    /// Reads `truncate`, `lookahead`, `max_sentence_tokens` and `accept_after_retrieval`, `self` giving the
    /// defaults.
    pub fn read(self, p: &Params) -> Result<Self> {
        Ok(Pacing {
            truncate: Truncate::read(p, self.truncate)?,
            lookahead: read_lookahead(p, self.lookahead)?,
            max_sentence_tokens: p.usize("max_sentence_tokens", Some(self.max_sentence_tokens))?,
            accept_after_retrieval: p.bool("accept_after_retrieval", self.accept_after_retrieval)?,
            pending_accept: false,
        })
    }

    /// The next block: one sentence when it is to be accepted, else the configured lookahead.
    pub fn lookahead(&self) -> Lookahead {
        if self.pending_accept {
            Lookahead::Sentence { max_tokens: self.max_sentence_tokens }
        } else {
            self.lookahead
        }
    }

    pub fn reset(&mut self) {
        self.pending_accept = false;
    }

    pub fn on_retrieval(&mut self) {
        self.pending_accept = self.accept_after_retrieval;
    }

    /// True once after a retrieval when the block is to be accepted without judging.
    pub fn take_accept(&mut self) -> bool {
        std::mem::take(&mut self.pending_accept)
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
        Some(v) => Err(p.invalid("lookahead", format!("expected \"sentence\" or a positive integer, found {v}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::resolve_dataset;

    #[test]
    fn unknown_keys_and_bad_types_are_errors() {
        let v: Value = toml::from_str("name = \"rind\"\ntheta = \"high\"\ntheat = 1.0").unwrap();
        let p = Params::new("rind", &v).unwrap();
        let e = p.f32("theta", Some(1.0)).unwrap_err().to_string();
        assert!(e.contains("rind: config key 'theta': expected a number"), "{e}");
        let e = p.finish().unwrap_err().to_string();
        assert!(e.ends_with("rind: unknown key 'theat' (valid: theta)"), "{e}");
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
        assert!(
            seen.contains(&("rind".into(), "qfs".into())) && seen.contains(&("flare".into(), "flare-masked".into()))
        );
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
