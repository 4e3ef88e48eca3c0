//! Readers for the text collections ragtime indexes and synthesizes from.
//!
//! - [`wikiextractor`]: WikiExtractor dumps (`--json` lines or `<doc>` blocks, `AA/wiki_00` trees, `.bz2`).

pub mod dpr;
pub mod jsonl;
pub mod passages;
pub mod wikiextractor;

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use anyhow::{Context, Result};

/// Open a text file for line reading, transparently decompressing `.bz2`.
pub fn open_text(path: &Path) -> Result<Box<dyn BufRead + Send>> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    if path.extension().is_some_and(|e| e == "bz2") {
        Ok(Box::new(BufReader::new(bzip2::read::MultiBzDecoder::new(file))))
    } else {
        Ok(Box::new(BufReader::new(file)))
    }
}

/// All regular files under `path` (or `path` itself if it is a file), sorted by path so that the
/// order is stable across runs (resumable jobs rely on it). Hidden files are skipped.
pub fn list_files(path: &Path) -> Result<Vec<std::path::PathBuf>> {
    let meta = std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
    if meta.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut out = Vec::new();
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))? {
            let entry = entry?;
            let p = entry.path();
            if p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with('.')) {
                continue;
            }
            if entry.file_type()?.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}
