//! Optional resource: WordNet 3.0 as Debian's `wordnet-base` installs it (`/usr/share/wordnet`, or the
//! folder named by `RAGTIME_WORDNET`). Read from its `data.{noun,verb,adj,adv}` files:
//! - instance nouns (synsets with an `@i` "instance of" pointer: "Abraham Lincoln", "Paris"), whose
//!   capitalised lemmas feed a gazetteer ([`WordNet::instance_matcher`]);
//! - synsets of every lemma, for the synonym rule of [`super::compare`] ([`WordNet::synonyms`]).
//!
//! When WordNet is absent, [`WordNet::load_default`] returns `Ok(None)` and callers go without it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::gazetteer::PhraseMatcher;

pub struct WordNet {
    /// Lower-cased lemma (spaces for underscores) -> synset ids (`pos` letter folded into the id).
    synsets: HashMap<String, Vec<u64>>,
    /// Capitalised lemmas of instance synsets, as written ("Abraham Lincoln").
    instances: Vec<String>,
}

impl WordNet {
    /// `$RAGTIME_WORDNET`, else `/usr/share/wordnet`.
    pub fn default_dir() -> PathBuf {
        std::env::var_os("RAGTIME_WORDNET").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/usr/share/wordnet"))
    }

    /// WordNet from [`WordNet::default_dir`] if it holds `data.noun`; `Ok(None)` if not installed.
    pub fn load_default() -> Result<Option<WordNet>> {
        let dir = Self::default_dir();
        if !crate::io::is_file(&dir.join("data.noun"))? {
            return Ok(None);
        }
        Self::load(&dir).map(Some)
    }

    /// Read `data.noun` (required) and `data.verb`, `data.adj`, `data.adv` (each if present) from `dir`.
    pub fn load(dir: &Path) -> Result<WordNet> {
        let mut wn = WordNet { synsets: HashMap::new(), instances: Vec::new() };
        let noun = dir.join("data.noun");
        if !crate::io::is_file(&noun)? {
            bail!("{}: WordNet data.noun not found", noun.display());
        }
        for (file, pos) in [("data.noun", 1u64), ("data.verb", 2), ("data.adj", 3), ("data.adv", 4)] {
            let path = dir.join(file);
            if crate::io::is_file(&path)? {
                let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
                wn.add_data_file(&text, pos, &path)?;
            }
        }
        wn.instances.sort();
        wn.instances.dedup();
        Ok(wn)
    }

    /// Parse one `data.*` file: `offset lex_filenum ss_type w_cnt(hex) {word lex_id} p_cnt {ptr} | gloss`.
    fn add_data_file(&mut self, text: &str, pos: u64, path: &Path) -> Result<()> {
        for (i, line) in text.lines().enumerate() {
            if line.starts_with("  ") || line.trim().is_empty() {
                continue; // licence header
            }
            let bad = || format!("{}:{}: not a WordNet data line", path.display(), i + 1);
            let head = line.split(" | ").next().unwrap_or(line);
            let f: Vec<&str> = head.split_whitespace().collect();
            if f.len() < 4 {
                bail!(bad());
            }
            let offset: u64 = f[0].parse().with_context(bad)?;
            let w_cnt = usize::from_str_radix(f[3], 16).with_context(bad)?;
            if f.len() < 4 + 2 * w_cnt + 1 {
                bail!(bad());
            }
            let words: Vec<String> = (0..w_cnt).map(|k| clean_lemma(f[4 + 2 * k])).collect();
            let p_at = 4 + 2 * w_cnt;
            let p_cnt: usize = f[p_at].parse().with_context(bad)?;
            let instance = (0..p_cnt).any(|k| f.get(p_at + 1 + 4 * k) == Some(&"@i"));
            let id = offset * 8 + pos;
            for w in &words {
                let key = w.to_lowercase();
                let v = self.synsets.entry(key).or_default();
                if !v.contains(&id) {
                    v.push(id);
                }
                if instance && w.chars().next().is_some_and(char::is_uppercase) {
                    self.instances.push(w.clone());
                }
            }
        }
        Ok(())
    }

    /// Capitalised instance-noun lemmas.
    pub fn instances(&self) -> &[String] {
        &self.instances
    }

    /// Gazetteer over the instance nouns (priority after the dump's titles).
    pub fn instance_matcher(&self) -> PhraseMatcher {
        PhraseMatcher::new(&self.instances, 9)
    }

    /// Do `a` and `b` (any case; spaces or underscores) share a synset? A plural "s" is tried off too.
    pub fn synonyms(&self, a: &str, b: &str) -> bool {
        let sa = self.lookup(a);
        let sb = self.lookup(b);
        sa.iter().any(|x| sb.contains(x))
    }

    fn lookup(&self, w: &str) -> Vec<u64> {
        let key = w.trim().to_lowercase().replace('_', " ");
        let mut out = self.synsets.get(&key).cloned().unwrap_or_default();
        if out.is_empty() {
            if let Some(stem) = key.strip_suffix('s') {
                out = self.synsets.get(stem).cloned().unwrap_or_default();
            }
        }
        out
    }
}

/// "Abraham_Lincoln" gives "Abraham Lincoln"; adjective markers "(a)", "(p)", "(ip)" are dropped.
fn clean_lemma(w: &str) -> String {
    let w = w.split('(').next().unwrap_or(w);
    w.replace('_', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const DATA_NOUN: &str = "  1 This software and database is being provided\n\
00001740 03 n 01 entity 0 003 ~ 00001930 n 0000 ~ 00002137 n 0000 ~ 04431553 n 0000 | that which exists\n\
09826204 18 n 02 car 0 auto 0 000 | a motor vehicle\n\
11100000 18 n 02 Abraham_Lincoln 0 Lincoln 0 001 @i 10467395 n 0000 | 16th President of the United States\n\
08932000 15 n 02 Paris 0 City_of_Light 0 001 @i 08524735 n 0000 | the capital of France\n";

    #[test]
    fn parses_synsets_and_instances() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("data.noun"), DATA_NOUN).unwrap();
        std::fs::write(dir.path().join("data.adj"), "00001000 00 a 02 big(a) 0 large 0 000 | above average\n").unwrap();
        let wn = WordNet::load(dir.path()).unwrap();
        assert_eq!(wn.instances(), ["Abraham Lincoln", "City of Light", "Lincoln", "Paris"]);
        assert!(wn.synonyms("car", "Auto"));
        assert!(wn.synonyms("cars", "auto"));
        assert!(wn.synonyms("big", "large"));
        assert!(wn.synonyms("Paris", "city_of_light"));
        assert!(!wn.synonyms("car", "entity"));
        assert!(!wn.synonyms("car", "unknownword"));
        let got: Vec<String> =
            super::super::EntityExtractor::extract(&wn.instance_matcher(), "Lincoln met Abraham Lincoln in Paris.")
                .into_iter()
                .map(|e| e.text)
                .collect();
        assert_eq!(got, vec!["Lincoln", "Abraham Lincoln", "Paris"]);
    }

    #[test]
    fn bad_line_names_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("data.noun"), "00001740 03 n zz entity\n").unwrap();
        let err = format!("{:#}", WordNet::load(dir.path()).err().unwrap());
        assert!(err.contains("data.noun:1"), "{err}");
        assert!(WordNet::load(&dir.path().join("nope")).is_err());
    }

    /// Runs only where `wordnet-base` is installed (it is optional).
    #[test]
    fn real_wordnet_when_installed() {
        let Some(wn) = WordNet::load_default().unwrap() else { return };
        assert!(wn.instances().len() > 5000, "{}", wn.instances().len());
        assert!(wn.instances().iter().any(|w| w == "Abraham Lincoln"));
        assert!(wn.synonyms("automobile", "car"));
    }
}
