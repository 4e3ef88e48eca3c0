//! The resumable output directory of `ragtime synth autorag`.
//!
//! ```text
//! config.json        the synthesis settings; a re-run with other settings is refused
//! attempts.jsonl     one Attempt per tried question (kept or not, and why): the commit point
//! dialogues.jsonl    the kept dialogues (one per kept question, or several: `[synth] keep`), in question order
//!                    (the record `ragtime train autorag` reads)
//! dialogues.parquet  the same dialogues as Parquet, rewritten from dialogues.jsonl at the end of a run
//! stats.json         yield statistics (Stats), rewritten at the end of a run
//! ```
//!
//! Resuming: a question's dialogue lines are written (and flushed) before its attempt line, so a question counts
//! as done once its attempt is written. [`DialogueStore::open`] drops a truncated last line of either file and
//! any dialogue without an attempt (a kill between the writes), then skips the done questions.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::de::DeserializeOwned;

use super::parquet::write_parquet;
use super::stats::Stats;
use super::Attempt;
use crate::autorag::dialogue::Dialogue;
use crate::io::{jsonl_bytes, pin_settings, read_jsonl, write_atomic};

pub const CONFIG_FILE: &str = "config.json";
/// The kind of output a dialogue directory is ([`crate::io::claim_output_dir`]).
pub const OUTPUT_KIND: &str = "autorag dialogues";
pub const ATTEMPTS_FILE: &str = "attempts.jsonl";
pub const DIALOGUES_FILE: &str = "dialogues.jsonl";
pub const PARQUET_FILE: &str = "dialogues.parquet";
pub const STATS_FILE: &str = "stats.json";

/// The records of one of the directory's JSON-lines files (none when it does not exist yet), and whether its
/// last line is torn (the caller rewrites the file without it).
fn read_records<T: DeserializeOwned>(path: &Path) -> Result<(Vec<T>, bool)> {
    if !crate::io::exists(path)? {
        return Ok((vec![], false));
    }
    let lines = read_jsonl(path, "line")?;
    let torn = lines.torn.is_some();
    Ok((lines.records(), torn))
}

/// The resumable output directory of `ragtime synth autorag` (see the module doc).
pub struct DialogueStore {
    dir: PathBuf,
    attempts: Vec<Attempt>,
    done: HashSet<String>,
    attempts_file: File,
    dialogues_file: File,
    /// The directory, locked for this process while the store is open.
    _lock: crate::io::OutputLock,
}

impl DialogueStore {
    /// Opens or creates `dir` for a run with `config` (any JSON); refuses a directory made with another config;
    /// repairs the leftovers of a killed run (see the module doc).
    pub fn open(dir: &Path, config: &serde_json::Value) -> Result<Self> {
        let lock = crate::io::claim_output_dir(dir, "dialogue directory", OUTPUT_KIND, CONFIG_FILE)?;
        let text = serde_json::to_string_pretty(config)?;
        if pin_settings(&dir.join(CONFIG_FILE), &text, |t| Ok(serde_json::from_str::<serde_json::Value>(t)?))?
            .is_some_and(|old| &old != config)
        {
            bail!(
                "{}: the directory holds dialogues synthesized with other settings; use another --out (or delete it)",
                dir.display()
            );
        }
        let apath = dir.join(ATTEMPTS_FILE);
        let dpath = dir.join(DIALOGUES_FILE);
        let (attempts, a_trunc): (Vec<Attempt>, bool) = read_records(&apath)?;
        let (dialogues, d_trunc): (Vec<Dialogue>, bool) = read_records(&dpath)?;
        let mut done = HashSet::new();
        for (i, a) in attempts.iter().enumerate() {
            if !done.insert(a.id.clone()) {
                bail!("{}: attempt {} repeats id '{}'", apath.display(), i + 1, a.id);
            }
        }
        // dialogues of questions with an attempt: exactly as many as each attempt says it kept
        let want: HashMap<&str, usize> =
            attempts.iter().filter(|a| a.kept).map(|a| (a.id.as_str(), a.dialogue_count())).collect();
        let good: Vec<&Dialogue> = dialogues.iter().filter(|d| want.contains_key(d.id.as_str())).collect();
        let mut have: HashMap<&str, usize> = HashMap::new();
        for d in &good {
            *have.entry(d.id.as_str()).or_default() += 1;
        }
        if let Some((id, n)) = want.iter().find(|(id, n)| have.get(*id).copied().unwrap_or(0) != **n) {
            bail!(
                "{}: question '{id}' kept {n} dialogue(s) by {} but {} has {}; the directory is damaged",
                dir.display(),
                ATTEMPTS_FILE,
                DIALOGUES_FILE,
                have.get(id).copied().unwrap_or(0)
            );
        }
        if a_trunc {
            write_atomic(&apath, &jsonl_bytes(&attempts)?)?;
        }
        if d_trunc || good.len() != dialogues.len() {
            write_atomic(&dpath, &jsonl_bytes(&good)?)?;
        }
        let open = |p: &Path| {
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .with_context(|| format!("{}: cannot open for appending", p.display()))
        };
        Ok(DialogueStore {
            dir: dir.to_path_buf(),
            attempts_file: open(&apath)?,
            dialogues_file: open(&dpath)?,
            attempts,
            done,
            _lock: lock,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether question `id` was already tried.
    pub fn is_done(&self, id: &str) -> bool {
        self.done.contains(id)
    }

    pub fn attempts(&self) -> &[Attempt] {
        &self.attempts
    }

    /// Records one tried question: its dialogues first (as many as the attempt kept), then the attempt (the
    /// commit point).
    pub fn record(&mut self, attempt: &Attempt, dialogues: &[Dialogue]) -> Result<()> {
        if self.done.contains(&attempt.id) {
            bail!("{}: question '{}' is already recorded", self.dir.display(), attempt.id);
        }
        if attempt.dialogue_count() != dialogues.len() || dialogues.iter().any(|d| d.id != attempt.id) {
            bail!(
                "attempt '{}': kept {} dialogue(s) but {} given for it",
                attempt.id,
                attempt.dialogue_count(),
                dialogues.iter().filter(|d| d.id == attempt.id).count()
            );
        }
        if !dialogues.is_empty() {
            let mut lines = String::new();
            for d in dialogues {
                lines += &(serde_json::to_string(d)? + "\n");
            }
            self.dialogues_file
                .write_all(lines.as_bytes())
                .and_then(|_| self.dialogues_file.flush())
                .with_context(|| format!("{}: cannot write", self.dir.join(DIALOGUES_FILE).display()))?;
        }
        let line = serde_json::to_string(attempt)? + "\n";
        self.attempts_file
            .write_all(line.as_bytes())
            .and_then(|_| self.attempts_file.flush())
            .with_context(|| format!("{}: cannot write", self.dir.join(ATTEMPTS_FILE).display()))?;
        self.done.insert(attempt.id.clone());
        self.attempts.push(attempt.clone());
        Ok(())
    }

    /// Statistics of every attempt so far.
    pub fn stats(&self) -> Stats {
        Stats::of(&self.attempts)
    }

    /// Writes dialogues.parquet (from dialogues.jsonl) and stats.json; returns the statistics.
    pub fn finish(self) -> Result<Stats> {
        let dpath = self.dir.join(DIALOGUES_FILE);
        let (dialogues, _) = read_records::<Dialogue>(&dpath)?;
        write_parquet(&self.dir.join(PARQUET_FILE), &dialogues)?;
        let s = self.stats();
        write_atomic(&self.dir.join(STATS_FILE), (serde_json::to_string_pretty(&s)? + "\n").as_bytes())?;
        Ok(s)
    }
}

/// Every attempt of a dataset directory's attempts.jsonl.
pub fn read_attempts(dir: &Path) -> Result<Vec<Attempt>> {
    Ok(read_records(&dir.join(ATTEMPTS_FILE))?.0)
}

/// Every dialogue of a dataset directory's dialogues.jsonl.
pub fn read_dialogues(dir: &Path) -> Result<Vec<Dialogue>> {
    Ok(read_records(&dir.join(DIALOGUES_FILE))?.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autorag::filter::SubAnswer;
    use crate::autorag::synth::fixtures::{attempt, dialogue};
    use crate::autorag::synth::parquet::read_parquet;
    use std::fs;

    #[test]
    fn store_resumes_and_repairs() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = serde_json::json!({"model": "m", "max_iter": 3});
        {
            let mut s = DialogueStore::open(dir.path(), &cfg).unwrap();
            s.record(&attempt("1", true, 1, vec![None]), &[dialogue("1")]).unwrap();
            s.record(&attempt("2", false, 1, vec![None]), &[]).unwrap();
            assert!(s.record(&attempt("2", false, 1, vec![None]), &[]).is_err());
            assert!(s.record(&attempt("3", true, 1, vec![None]), &[]).is_err());
            assert!(s.record(&attempt("3", true, 1, vec![None]), &[dialogue("4")]).is_err());
        }
        // a kill after the dialogue line of "3" but before its attempt, and a half-written attempt line
        let mut f = OpenOptions::new().append(true).open(dir.path().join(DIALOGUES_FILE)).unwrap();
        writeln!(f, "{}", serde_json::to_string(&dialogue("3")).unwrap()).unwrap();
        let mut f = OpenOptions::new().append(true).open(dir.path().join(ATTEMPTS_FILE)).unwrap();
        write!(f, "{{\"id\": \"3\", \"ke").unwrap();
        drop(f);
        assert!(DialogueStore::open(dir.path(), &serde_json::json!({"model": "other"})).is_err());
        let mut s = DialogueStore::open(dir.path(), &cfg).unwrap();
        assert!(s.is_done("1") && s.is_done("2") && !s.is_done("3"));
        assert_eq!(read_dialogues(dir.path()).unwrap().iter().map(|d| d.id.as_str()).collect::<Vec<_>>(), ["1"]);
        s.record(&attempt("3", true, 1, vec![Some(SubAnswer::Answer)]), &[dialogue("3")]).unwrap();
        let stats = s.finish().unwrap();
        assert_eq!((stats.tried, stats.kept), (3, 2));
        let back = read_parquet(&dir.path().join(PARQUET_FILE)).unwrap();
        assert_eq!(back, vec![dialogue("1"), dialogue("3")]);
        let st: Stats = serde_json::from_str(&fs::read_to_string(dir.path().join(STATS_FILE)).unwrap()).unwrap();
        assert_eq!(st, stats);
        // a malformed complete line is an error naming file and line
        fs::write(dir.path().join(ATTEMPTS_FILE), "{\"id\": 1}\n").unwrap();
        let e = DialogueStore::open(dir.path(), &cfg).err().unwrap();
        assert!(format!("{e:#}").contains("attempts.jsonl:1"), "{e:#}");
    }

    /// Several dialogues of one question (`[synth] keep`): all written before the attempt; a kill between them
    /// loses the question's partial dialogues, not those recorded before.
    #[test]
    fn store_keeps_several_dialogues_per_question() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = serde_json::json!({"keep": 3});
        let mut two = attempt("1", true, 1, vec![None]);
        (two.samples, two.kept_samples) = (3, vec![0, 2]);
        let mut second = dialogue("1");
        second.final_answer = "a2".into();
        {
            let mut s = DialogueStore::open(dir.path(), &cfg).unwrap();
            assert!(s.record(&two, &[dialogue("1")]).is_err(), "two kept, one given");
            s.record(&two, &[dialogue("1"), second.clone()]).unwrap();
        }
        // killed after the first of question 2's two dialogues
        let mut f = OpenOptions::new().append(true).open(dir.path().join(DIALOGUES_FILE)).unwrap();
        writeln!(f, "{}", serde_json::to_string(&dialogue("2")).unwrap()).unwrap();
        drop(f);
        let mut s = DialogueStore::open(dir.path(), &cfg).unwrap();
        assert!(s.is_done("1") && !s.is_done("2"));
        let mut two2 = two.clone();
        two2.id = "2".into();
        s.record(&two2, &[dialogue("2"), dialogue("2")]).unwrap();
        let stats = s.finish().unwrap();
        assert_eq!((stats.tried, stats.kept, stats.dialogues), (2, 2, 4));
        let ids: Vec<String> = read_dialogues(dir.path()).unwrap().into_iter().map(|d| d.id).collect();
        assert_eq!(ids, ["1", "1", "2", "2"]);
        assert_eq!(read_dialogues(dir.path()).unwrap()[1], second);
        // an attempt that says two but one dialogue on disk: damaged, named
        let lines = fs::read_to_string(dir.path().join(DIALOGUES_FILE)).unwrap();
        let first3: String = lines.lines().take(3).map(|l| format!("{l}\n")).collect();
        fs::write(dir.path().join(DIALOGUES_FILE), first3).unwrap();
        let e = DialogueStore::open(dir.path(), &cfg).err().unwrap();
        assert!(format!("{e:#}").contains("question '2' kept 2 dialogue(s)"), "{e:#}");
    }
}
