//! Writer side of a dataset directory: [`HalluStore`] buffers finished articles, writes them as shards and
//! commits each in the manifest; re-opened, it removes a killed run's leftovers (see the [`super`] doc).

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context, Result};

use super::manifest::{load_manifest, Manifest, ShardInfo};
use super::schema::to_batch;
use super::{HalluExample, DEFAULT_FLUSH_EVERY, MANIFEST, OUTPUT_KIND};
use crate::io::{write_atomic, write_parquet_batch};

fn shard_name(index: usize) -> String {
    format!("part-{index:05}.parquet")
}

/// Writer side of a dataset directory. See the module doc for the resumption protocol.
pub struct HalluStore {
    dir: PathBuf,
    manifest: Manifest,
    done: HashSet<String>,
    pending: Vec<(String, Vec<HalluExample>)>,
    flush_every: usize,
    /// The directory, locked for this process while the store is open.
    _lock: crate::io::OutputLock,
}

impl HalluStore {
    /// Opens (or creates) `dir` for examples of `model_id` with hidden size `hidden`. Refuses a directory that
    /// is not a hallucination dataset ragtime wrote ([`crate::io::claim_output_dir`]) or that was made for another
    /// model; in its own directory, deletes the leftovers of a killed run (`*.tmp`, shards the manifest does not
    /// list).
    pub fn open(dir: impl AsRef<Path>, model_id: &str, hidden: usize) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        let lock = crate::io::claim_output_dir(&dir, "dataset directory", OUTPUT_KIND, MANIFEST)?;
        let manifest = if crate::io::exists(&dir.join(MANIFEST))? {
            let m = load_manifest(&dir)?;
            if m.model_id != model_id || m.hidden != hidden {
                bail!(
                    "{}: dataset was made with model {:?} (hidden size {}), not {:?} (hidden size {}); \
                     use another --out directory",
                    dir.display(),
                    m.model_id,
                    m.hidden,
                    model_id,
                    hidden
                );
            }
            m
        } else {
            Manifest::new(model_id, hidden)
        };
        let listed: HashSet<&str> = manifest.shards.iter().map(|s| s.file.as_str()).collect();
        for shard in &manifest.shards {
            let p = dir.join(&shard.file);
            ensure!(crate::io::is_file(&p)?, "{}: listed in {MANIFEST} but missing", p.display());
        }
        for entry in fs::read_dir(&dir).with_context(|| format!("{}: cannot list", dir.display()))? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let orphan_shard =
                name.starts_with("part-") && name.ends_with(".parquet") && !listed.contains(name.as_str());
            if name.ends_with(".tmp") || orphan_shard {
                fs::remove_file(entry.path())
                    .with_context(|| format!("{}: cannot remove leftover of a killed run", entry.path().display()))?;
            }
        }
        let done = manifest.shards.iter().flat_map(|s| s.articles.iter().cloned()).collect();
        let store =
            HalluStore { dir, manifest, done, pending: Vec::new(), flush_every: DEFAULT_FLUSH_EVERY, _lock: lock };
        store.write_manifest()?;
        Ok(store)
    }

    /// Articles per shard (at least 1).
    pub fn with_flush_every(mut self, n: usize) -> Self {
        self.flush_every = n.max(1);
        self
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The manifest as of the last written shard.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Was this article finished (stored, or buffered in this process)? The synthesis loop skips it.
    pub fn is_done(&self, article_id: &str) -> bool {
        self.done.contains(article_id) || self.pending.iter().any(|(id, _)| id == article_id)
    }

    /// Number of finished articles (stored and buffered).
    pub fn articles_done(&self) -> usize {
        self.done.len() + self.pending.len()
    }

    /// Records a finished article with all its examples (possibly none). Writes a shard every
    /// `flush_every` articles.
    pub fn add_article(&mut self, article_id: &str, examples: Vec<HalluExample>) -> Result<()> {
        ensure!(!self.is_done(article_id), "{}: article {article_id:?} was already stored", self.dir.display());
        let hidden = self.manifest.hidden;
        for (i, ex) in examples.iter().enumerate() {
            ensure!(
                ex.article_id == article_id,
                "article {article_id:?}: example {i} has article_id {:?}",
                ex.article_id
            );
            ensure!(ex.label <= 1, "article {article_id:?}: example {i} has label {}, expected 0 or 1", ex.label);
            for (name, v) in [
                ("hidden_final_last", &ex.hidden_final_last),
                ("hidden_mean_last", &ex.hidden_mean_last),
                ("hidden_final_entity", &ex.hidden_final_entity),
                ("hidden_mean_entity", &ex.hidden_mean_entity),
            ] {
                ensure!(
                    v.len() == hidden,
                    "article {article_id:?}: example {i} has {} values in {name}, expected the hidden size {hidden}",
                    v.len()
                );
            }
        }
        self.pending.push((article_id.to_string(), examples));
        if self.pending.len() >= self.flush_every {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes the buffered articles as one shard and commits it in the manifest (no-op when nothing is buffered).
    pub fn flush(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let file = shard_name(self.manifest.shards.len());
        let path = self.dir.join(&file);
        let rows: Vec<HalluExample> = self.pending.iter().flat_map(|(_, ex)| ex.iter().cloned()).collect();
        let batch = to_batch(&rows)?;
        write_parquet_batch(&path, &batch)?;

        let m = &mut self.manifest;
        let hallucinated = rows.iter().filter(|r| r.label == 1).count();
        for r in &rows {
            if !m.templates.contains(&r.template) {
                m.templates.push(r.template.clone());
            }
            *m.rules.entry(r.rule.clone()).or_insert(0) += 1;
        }
        m.articles += self.pending.len();
        m.examples += rows.len();
        m.hallucinated += hallucinated;
        m.faithful += rows.len() - hallucinated;
        m.hallucinated_rate = if m.examples == 0 { 0.0 } else { m.hallucinated as f64 / m.examples as f64 };
        let articles: Vec<String> = self.pending.drain(..).map(|(id, _)| id).collect();
        self.done.extend(articles.iter().cloned());
        m.shards.push(ShardInfo { file, rows: rows.len(), hallucinated, articles });
        self.write_manifest()
    }

    /// Flushes the buffer and returns the final manifest. Dropping a store without calling this loses the
    /// buffered articles (a re-run redoes them), exactly like a killed process.
    pub fn finish(mut self) -> Result<Manifest> {
        self.flush()?;
        Ok(self.manifest)
    }

    fn write_manifest(&self) -> Result<()> {
        let json = serde_json::to_string_pretty(&self.manifest)?;
        write_atomic(&self.dir.join(MANIFEST), json.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{corpus, example};
    use super::super::read_all;
    use super::*;

    /// `--out` pointed at a directory of someone else's Parquet files: refused before anything is written, and
    /// their files stay as they were (a dataset directory used to delete `part-*.parquet` it did not list).
    #[test]
    fn a_foreign_directory_is_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("part-00000.parquet"), b"the user's own shard").unwrap();
        fs::write(dir.path().join("notes.txt"), b"notes").unwrap();
        let e = HalluStore::open(dir.path(), "m", 3).err().expect("refused").to_string();
        assert!(e.contains("not a ragtime hallucination dataset (found notes.txt, part-00000.parquet)"), "{e}");
        assert_eq!(fs::read(dir.path().join("part-00000.parquet")).unwrap(), b"the user's own shard");
        let mut names: Vec<_> = fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        names.sort();
        assert_eq!(names, ["notes.txt", "part-00000.parquet"], "nothing added, nothing removed");
    }

    #[test]
    fn resumes_after_kill_with_each_row_once() {
        let dir = tempfile::tempdir().unwrap();
        let data = corpus(9, 3);
        // First run: killed after 5 articles. With 2 articles per shard, a0..a3 are committed (2 shards),
        // a4 is buffered and lost.
        {
            let mut s = HalluStore::open(dir.path(), "m", 3).unwrap().with_flush_every(2);
            for (id, ex) in &data[..5] {
                s.add_article(id, ex.clone()).unwrap();
            }
            // kill: no finish()
        }
        // A kill while writing the third shard leaves a tmp file; a kill between the shard rename and the
        // manifest rename leaves a shard the manifest does not list.
        fs::write(dir.path().join(".part-00002.parquet.tmp"), b"half a parquet file").unwrap();
        fs::copy(dir.path().join("part-00000.parquet"), dir.path().join("part-00002.parquet")).unwrap();
        fs::write(dir.path().join("._manifest.json.tmp"), b"{ half").unwrap();
        assert_eq!(read_all(dir.path()).unwrap().len(), data[..4].iter().map(|d| d.1.len()).sum::<usize>());

        // Re-run over all articles, skipping finished ones.
        let mut s = HalluStore::open(dir.path(), "m", 3).unwrap().with_flush_every(2);
        assert!(!dir.path().join("part-00002.parquet").exists());
        assert!(!dir.path().join(".part-00002.parquet.tmp").exists());
        assert!(!dir.path().join("._manifest.json.tmp").exists());
        let mut redone = Vec::new();
        for (id, ex) in &data {
            if s.is_done(id) {
                continue;
            }
            redone.push(id.clone());
            s.add_article(id, ex.clone()).unwrap();
        }
        assert_eq!(redone, vec!["a4", "a5", "a6", "a7", "a8"]);
        assert!(s.add_article("a8", vec![]).is_err(), "a duplicate article is refused");
        let m = s.finish().unwrap();
        let expected: Vec<HalluExample> = data.iter().flat_map(|(_, e)| e.clone()).collect();
        assert_eq!(read_all(dir.path()).unwrap(), expected);
        assert_eq!(m.articles, 9);
        assert_eq!(m.examples, expected.len());
        assert_eq!(m.hallucinated, expected.iter().filter(|e| e.label == 1).count());
        let mut ids: Vec<&String> = m.shards.iter().flat_map(|s| &s.articles).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 9);
    }

    #[test]
    fn refuses_another_model_and_bad_rows() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = HalluStore::open(dir.path(), "smollm2", 3).unwrap();
        let mut bad = example("x", 0, 2);
        assert!(s.add_article("x", vec![bad.clone()]).is_err(), "hidden size 2 in a hidden-3 store");
        bad = example("y", 0, 3);
        assert!(s.add_article("x", vec![bad]).is_err(), "article id mismatch");
        drop(s);
        let err = HalluStore::open(dir.path(), "qwen", 3).err().unwrap().to_string();
        assert!(err.contains("smollm2"), "{err}");
        assert!(HalluStore::open(dir.path(), "smollm2", 4).is_err());
        assert!(HalluStore::open(dir.path(), "smollm2", 3).is_ok());
    }
}
