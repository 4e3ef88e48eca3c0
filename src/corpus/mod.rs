//! Readers for the text collections ragtime indexes and synthesizes from.
//!
//! - [`dpr`]: DPR's `psgs_w100.tsv` passages;
//! - [`jsonl`]: JSON lines (generic `{id, title, text}`, WikiExtractor `--json`, FlashRAG `{id, contents}`);
//! - [`wikiextractor`]: WikiExtractor dumps (`--json` lines or `<doc>` blocks, `AA/wiki_00` trees, `.bz2`);
//! - [`passages`]: one passage stream over all of them, for `ragtime index`.
//!
//! The readers share this module's line handling ([`OnBadLine`], [`warn_skip`], [`open_text`]); `passages`
//! sits above them, so no reader depends on it.

pub mod dpr;
pub mod jsonl;
pub mod passages;
pub mod wikiextractor;

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context, Result};

/// What to do with a corpus line that does not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnBadLine {
    /// Stop with an error naming file and line.
    Stop,
    /// Report it on stderr (the first few), count it, go on.
    Skip,
}

/// Report a skipped line on stderr; after the first 20 only every 1000th is reported.
pub fn warn_skip(count: u64, file: &Path, line: usize, why: &str) {
    if count <= 20 || count.is_multiple_of(1000) {
        eprintln!("warning: {}:{line}: {why}; skipped (skipped lines so far: {count})", file.display());
    }
}

/// Streams the parsed lines of `file` to `f` (`Ok(false)` from `f` stops). `parse(lineno, line)` returns `None`
/// for a line to pass over (blank, header) and `Some(Err(why))` for a bad one, which stops the read with an error
/// naming file and line or, with [`OnBadLine::Skip`], is reported on stderr and counted in `skipped`. A line that
/// is not UTF-8 is a bad line like any other.
pub fn for_each_line<T>(
    file: &Path,
    on_bad: OnBadLine,
    skipped: &mut u64,
    mut parse: impl FnMut(usize, &str) -> Option<std::result::Result<T, String>>,
    mut f: impl FnMut(T, &wikiextractor::Origin) -> Result<bool>,
) -> Result<bool> {
    let (mut reader, read) = open_text_counted(file)?;
    let mut buf = Vec::new();
    let mut lineno = 0;
    loop {
        buf.clear();
        let n = reader
            .read_until(b'\n', &mut buf)
            .with_context(|| format!("{}:{}: cannot read line", file.display(), lineno + 1))?;
        if n == 0 {
            return Ok(true);
        }
        lineno += 1;
        let parsed = match std::str::from_utf8(&buf) {
            Ok(line) => parse(lineno, line.trim_end_matches(['\n', '\r'])),
            Err(e) => Some(Err(format!("not UTF-8 (byte {})", e.valid_up_to()))),
        };
        match parsed {
            None => {}
            Some(Ok(item)) => {
                let origin = wikiextractor::Origin { file: file.to_path_buf(), line: lineno, offset: read.get() };
                let go_on = f(item, &origin)?;
                if !go_on {
                    return Ok(false);
                }
            }
            Some(Err(why)) => match on_bad {
                OnBadLine::Stop => {
                    bail!("{}:{lineno}: {why} (pass --skip-bad-lines to skip such lines)", file.display())
                }
                OnBadLine::Skip => {
                    *skipped += 1;
                    warn_skip(*skipped, file, lineno, &why);
                }
            },
        }
    }
}

/// Open a text file for line reading, transparently decompressing `.bz2`.
pub fn open_text(path: &Path) -> Result<Box<dyn BufRead + Send>> {
    open_text_counted(path).map(|(reader, _)| reader)
}

/// [`open_text`], with the count of bytes the reader has taken from the file (compressed bytes for `.bz2`), for
/// the share of a corpus read so far in progress lines.
pub fn open_text_counted(path: &Path) -> Result<(Box<dyn BufRead + Send>, BytesRead)> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let read = BytesRead::default();
    let file = Counting { inner: file, read: read.clone() };
    let reader: Box<dyn BufRead + Send> = if path.extension().is_some_and(|e| e == "bz2") {
        Box::new(BufReader::new(bzip2::read::MultiBzDecoder::new(file)))
    } else {
        Box::new(BufReader::new(file))
    };
    Ok((reader, read))
}

/// Bytes taken from a file by the reader of [`open_text_counted`] so far; the reader reads ahead, so this runs up
/// to a buffer (8 KiB) ahead of the line handed out last.
#[derive(Debug, Clone, Default)]
pub struct BytesRead(Arc<AtomicU64>);

impl BytesRead {
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A reader that adds what it reads to a [`BytesRead`].
struct Counting<R> {
    inner: R,
    read: BytesRead,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.0.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
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
