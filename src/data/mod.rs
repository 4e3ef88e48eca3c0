//! Where data files are found, and how `ragtime data fetch` downloads a dataset.
//!
//! Data-relative paths (a dataset spec's `file`, `exemplars` and `corpus`, the tokenizer the tests use) are
//! looked up in two folders, in order:
//! 1. the fetched data, `datasets/data/` in the repository (written by `ragtime data fetch`, git-ignored);
//! 2. the shared data folder, `../shared/data` beside the repository.
//!
//! Both mirror one layout (`qa/<dataset>/...`, `fewshot/...`, `models/...`), so one relative path names a file
//! in either. `RAGTIME_DATA=DIR` replaces both with `DIR` (fetches then write there too): it points ragtime at a
//! data folder kept elsewhere, and `RAGTIME_DATA=/nonexistent` shows what a machine without data sees.
//!
//! Downloading and checking a dataset is [`fetch`](mod@fetch); re-laying out a downloaded file as the shared copy
//! is laid out is [`cut`].

pub mod cut;
pub mod fetch;

use std::path::{Path, PathBuf};

pub use fetch::{fetch, locate, sha256_file, verify, Placed, Source, SourceFile};

/// The environment variable that replaces the data folders.
pub const ENV_DATA: &str = "RAGTIME_DATA";

fn env_root() -> Option<PathBuf> {
    std::env::var_os(ENV_DATA).filter(|v| !v.is_empty()).map(PathBuf::from)
}

fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The folder `ragtime data fetch` writes into: `$RAGTIME_DATA`, else `datasets/data` in the repository.
pub fn fetch_dir() -> PathBuf {
    env_root().unwrap_or_else(|| repo_root().join("datasets/data"))
}

/// The shared data folder: `$RAGTIME_DATA`, else `../shared/data` beside the repository.
pub fn shared_dir() -> PathBuf {
    env_root().unwrap_or_else(|| {
        let p = repo_root().join("../shared/data");
        p.canonicalize().unwrap_or(p)
    })
}

/// The folders searched for a data-relative path, in order.
pub fn roots() -> Vec<PathBuf> {
    match env_root() {
        Some(r) => vec![r],
        None => vec![fetch_dir(), shared_dir()],
    }
}

/// Which folder a data file was found in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// `datasets/data` (or `$RAGTIME_DATA`).
    Fetched,
    /// `../shared/data`.
    Shared,
}

/// The first existing `root/rel` of [`roots`], with its origin; `None` when no folder holds it.
pub fn find(rel: &Path) -> Option<(PathBuf, Origin)> {
    if rel.is_absolute() {
        return crate::io::present_or_refused(rel).then(|| (rel.to_path_buf(), Origin::Fetched));
    }
    roots().into_iter().enumerate().find_map(|(i, r)| {
        let p = r.join(rel);
        crate::io::present_or_refused(&p).then_some((p, if i == 0 { Origin::Fetched } else { Origin::Shared }))
    })
}

/// A data-relative path resolved: absolute paths as they are, else the first folder of [`roots`] that holds
/// it, else its place in the shared folder (so that a later "cannot read" names the usual location).
pub fn resolve(rel: &Path) -> PathBuf {
    if rel.is_absolute() {
        return rel.to_path_buf();
    }
    find(rel).map(|(p, _)| p).unwrap_or_else(|| shared_dir().join(rel))
}
