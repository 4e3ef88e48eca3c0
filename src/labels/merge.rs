//! Merging the datasets of a sharded synthesis (`ragtime merge`, see [`crate::shard`]) into one, articles in
//! input order: the dataset one process would have written with the same `flush_every`.
//!
//! Each part lists its articles in input order (shard by shard in its manifest) and the caller gives the input
//! position of every article, so the merge walks the parts like a k-way merge, holding one Parquet file per part
//! in memory at a time.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Result};

use super::reader::read_file;
use super::{load_manifest, HalluExample, HalluStore, Manifest, ShardInfo};

/// The articles of one part, in its order, with their examples, read one Parquet file at a time.
struct Cursor {
    dir: PathBuf,
    files: VecDeque<ShardInfo>,
    articles: VecDeque<(String, Vec<HalluExample>)>,
}

impl Cursor {
    /// The next article of the part; it must be `id` (the order the markers recorded).
    fn next(&mut self, id: &str) -> Result<Vec<HalluExample>> {
        while self.articles.is_empty() {
            let Some(info) = self.files.pop_front() else {
                bail!("{}: has no more articles, but the shard marker lists {id:?}", self.dir.display())
            };
            let mut rows = read_file(&self.dir.join(&info.file))?.into_iter().peekable();
            for a in info.articles {
                let mut ex = Vec::new();
                while rows.peek().is_some_and(|r| r.article_id == a) {
                    ex.push(rows.next().expect("peeked"));
                }
                self.articles.push_back((a, ex));
            }
            if let Some(r) = rows.next() {
                bail!(
                    "{}: row of article {:?} out of the manifest's order",
                    self.dir.join(&info.file).display(),
                    r.article_id
                );
            }
        }
        let (a, ex) = self.articles.pop_front().expect("non-empty");
        ensure!(a == id, "{}: next article is {a:?}, but the shard marker lists {id:?}", self.dir.display());
        Ok(ex)
    }

    fn is_done(&self) -> bool {
        self.articles.is_empty() && self.files.is_empty()
    }
}

/// Writes into `out` the dataset of the part directories `parts`, article by article in `order` (input
/// position, part index, article id), resuming a merge into `out` that was stopped; checks that the parts share model and hidden size and that every article
/// of every part is written once.
pub fn merge(parts: &[PathBuf], order: &[(u64, usize, &str)], out: &Path, flush_every: usize) -> Result<Manifest> {
    let manifests: Vec<Manifest> = parts.iter().map(|p| load_manifest(p)).collect::<Result<_>>()?;
    let first = manifests.first().ok_or_else(|| anyhow::anyhow!("no parts to merge"))?;
    for (p, m) in parts.iter().zip(&manifests) {
        ensure!(
            m.model_id == first.model_id && m.hidden == first.hidden,
            "{}: model {} (hidden {}), but {} has {} (hidden {})",
            p.display(),
            m.model_id,
            m.hidden,
            parts[0].display(),
            first.model_id,
            first.hidden
        );
    }
    // a merge killed half-way resumes like a synthesis: the articles already committed are skipped
    let mut store = HalluStore::open(out, &first.model_id, first.hidden)?.with_flush_every(flush_every);
    let mut cursors: Vec<Cursor> = parts
        .iter()
        .zip(&manifests)
        .map(|(p, m)| Cursor { dir: p.clone(), files: m.shards.iter().cloned().collect(), articles: VecDeque::new() })
        .collect();
    for &(_, part, id) in order {
        let ex = cursors[part].next(id)?;
        if !store.is_done(id) {
            store.add_article(id, ex)?;
        }
    }
    for c in &cursors {
        ensure!(c.is_done(), "{}: holds articles its shard marker does not list", c.dir.display());
    }
    store.finish()
}
