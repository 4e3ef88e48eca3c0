//! File handling the resumable stores share: replacing a file atomically, reading JSON lines, and pinning an
//! output directory to the settings it was made with.
//!
//! The stores (`ragtime eval` runs, synthesized dialogues, hallucination shards, the BM25 manifest, model
//! exports) survive a kill at any point because of three rules, kept here once:
//!
//! - a file that is rewritten as a whole goes to a hidden temporary file beside it (`.NAME.tmp`, which directory
//!   readers such as pyarrow skip), is synced, and is renamed over the old one, so a reader sees the old or the
//!   new file, never half of one ([`write_atomic`], [`write_atomic_with`]);
//! - an append-only JSON-lines file may end in a torn line (a writer killed mid-line): [`read_jsonl`] reports
//!   it apart from the records so the caller can drop it, while any other bad line is an error naming
//!   `file:line`;
//! - a directory records the settings of the run that made it, and a later run with other settings is refused
//!   rather than mixed in ([`pin_settings`] keeps and returns them; the caller decides what must match);
//! - a command writes only into a directory it made or recognises as its own kind of output, and checks that
//!   before any work ([`claim_output_dir`]): a directory with someone else's files is refused, never cleared;
//!   a single output file likewise replaces only a file of its own kind ([`claim_output_file`]);
//! - one process at a time writes an output directory: the claim takes an exclusive lock on [`LOCK_FILE`] in it
//!   and holds it while the output is written ([`OutputLock`]), so a second run with the same `--out` (launched
//!   twice by mistake, or a requeued cluster task whose first copy still runs) is refused before it touches a
//!   file, instead of clearing the first one's temporaries or appending the same rows twice. The OS drops the
//!   lock when the process ends, however it ends, so a killed run resumes as before.
//!
//! Whether a path is there is asked with [`probe`] or [`exists`], never `Path::exists`: that says "no" for a
//! path the OS refuses (permission denied, a path through a file, a symbolic-link loop), which a caller would
//! then report as "not found". The file layer's error is [`FileError`].

use std::fs::{File, Metadata};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use arrow_array::RecordBatch;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// The file layer's error: which file, and what is wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// Nothing at the path; `hint` says how to make it (empty for none).
    #[error("{}: {what} not found{}", .path.display(), if .hint.is_empty() { String::new() } else { format!(" ({})", .hint) })]
    NotFound { path: PathBuf, what: String, hint: String },
    /// The OS refused the path (permission denied, a path through a file, a symbolic-link loop, ...); its own
    /// words follow as the cause.
    #[error("{}: cannot {action}", .path.display())]
    Os {
        path: PathBuf,
        action: String,
        #[source]
        source: std::io::Error,
    },
    /// Something is at the path, but not what belongs there (a file where a directory belongs).
    #[error("{}: {detail}", .path.display())]
    Kind { path: PathBuf, detail: String },
}

/// What is at `path`: `Ok(None)` when nothing is (and nothing else is wrong), its metadata when something is,
/// and [`FileError::Os`] with the OS's reason otherwise. Symbolic links are followed.
pub fn probe(path: &Path) -> std::result::Result<Option<Metadata>, FileError> {
    match std::fs::metadata(path) {
        Ok(m) => Ok(Some(m)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(FileError::Os { path: path.to_path_buf(), action: "read".into(), source }),
    }
}

/// Whether something is at `path`, as [`probe`]: an error (not `false`) where the OS refuses to say.
pub fn exists(path: &Path) -> std::result::Result<bool, FileError> {
    probe(path).map(|m| m.is_some())
}

/// Whether something is at `path` or the OS refuses to say, for a search that takes the first candidate: a
/// refused candidate is taken, so that reading it reports the OS's reason instead of "not found".
pub fn present_or_refused(path: &Path) -> bool {
    exists(path).unwrap_or(true)
}

/// Whether `path` is a directory (following links), as [`probe`]: an error where the OS refuses to say.
pub fn is_dir(path: &Path) -> std::result::Result<bool, FileError> {
    probe(path).map(|m| m.is_some_and(|m| m.is_dir()))
}

/// Whether `path` is a regular file (following links), as [`probe`]: an error where the OS refuses to say.
pub fn is_file(path: &Path) -> std::result::Result<bool, FileError> {
    probe(path).map(|m| m.is_some_and(|m| m.is_file()))
}

/// `path` must be a directory: [`FileError::NotFound`] (`what`, `hint`) when nothing is there,
/// [`FileError::Kind`] for a file, [`FileError::Os`] when the OS refuses.
pub fn require_dir(path: &Path, what: &str, hint: &str) -> std::result::Result<(), FileError> {
    match probe(path)? {
        Some(m) if m.is_dir() => Ok(()),
        Some(_) => Err(FileError::Kind {
            path: path.to_path_buf(),
            detail: format!("not a directory (the {what} is a directory)"),
        }),
        None => Err(FileError::NotFound { path: path.to_path_buf(), what: what.into(), hint: hint.into() }),
    }
}

/// The marker file ragtime leaves in every output directory it claims: the kind of output, one line.
pub const OUTPUT_MARKER: &str = ".ragtime-output";

/// Claims `dir` for an output of `kind` (`"detector"`, `"eval run"`, ...) before any work is done, so that a
/// mistaken `--out` fails in a second, not after hours, and nothing of the user's is touched:
/// - missing: created (with its parents);
/// - an empty directory, or one that [`OUTPUT_MARKER`] says holds a `kind` output (a previous run of the same
///   command, to resume or replace), or one holding `signature` (the main file of a `kind` output that ragtime
///   wrote before it left markers, e.g. `detector.json`; [`OUTPUT_MARKER`] for none): accepted;
/// - anything else (a file; another kind of output; a directory with other files): refused, naming the flag and
///   a few of the files found.
///
/// It then locks the directory for this process ([`lock_output_dir`]: refused while another process writes
/// there) and leaves the marker, which also shows that the directory is writable. The directory stays locked
/// while the returned [`OutputLock`] lives.
pub fn claim_output_dir(dir: &Path, flag: &str, kind: &str, signature: &str) -> Result<OutputLock> {
    check_output_dir(dir, flag, kind, |entries| entries.iter().any(|e| e == signature))?;
    let lock = lock_output_dir(dir, flag)?;
    write_output_marker(dir, flag, kind)?;
    Ok(lock)
}

/// [`claim_output_dir`] with the test for a directory without the marker given as `ours(entries)`: whether a
/// directory holding these entries is a `kind` output (an empty one always is), and without the lock: for the
/// directory several processes claim at once (the shards of a job, each of which locks its own part). The marker
/// goes through a temporary file of the process's own and a rename, so none sees another's half-written marker.
pub fn claim_output_dir_with(dir: &Path, flag: &str, kind: &str, ours: impl Fn(&[String]) -> bool) -> Result<()> {
    check_output_dir(dir, flag, kind, ours)?;
    write_output_marker(dir, flag, kind)
}

/// The checks of [`claim_output_dir`], creating `dir` where nothing is. [`LOCK_FILE`] alone does not make a
/// directory someone else's (a shard locks its part before the job claims it).
fn check_output_dir(dir: &Path, flag: &str, kind: &str, ours: impl Fn(&[String]) -> bool) -> Result<()> {
    let shown = dir.display();
    let found = probe(dir).with_context(|| format!("{flag} {shown}"))?;
    if found.as_ref().is_some_and(|m| !m.is_dir()) {
        bail!("{flag} {shown}: exists and is not a directory");
    }
    if found.is_some() {
        let marker = dir.join(OUTPUT_MARKER);
        let entries: Vec<String> = std::fs::read_dir(dir)
            .with_context(|| format!("{flag} {shown}: cannot list the directory"))?
            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
            .filter(|n| !n.as_ref().is_ok_and(|n| n == LOCK_FILE))
            .collect::<std::io::Result<_>>()
            .with_context(|| format!("{flag} {shown}: cannot list the directory"))?;
        if is_file(&marker)? {
            let found =
                std::fs::read_to_string(&marker).with_context(|| format!("{}: cannot read", marker.display()))?;
            let found = found.trim();
            if found != kind {
                bail!("{flag} {shown}: holds a ragtime {found}, not a {kind}; use another directory");
            }
        } else if !entries.is_empty() && !ours(&entries) {
            let mut some: Vec<&str> = entries.iter().map(String::as_str).take(3).collect();
            some.sort_unstable();
            let more = if entries.len() > 3 { format!(" and {} more", entries.len() - 3) } else { String::new() };
            bail!(
                "{flag} {shown}: not empty and not a ragtime {kind} (found {}{more}); ragtime writes only into a \
                 new or empty directory or its own earlier output",
                some.join(", ")
            );
        }
    } else {
        std::fs::create_dir_all(dir).with_context(|| format!("{flag} {shown}: cannot create the directory"))?;
    }
    Ok(())
}

/// Writes [`OUTPUT_MARKER`] saying `kind` into `dir`, through a temporary file of this process's own.
fn write_output_marker(dir: &Path, flag: &str, kind: &str) -> Result<()> {
    let tmp = dir.join(format!(".{}.{}.tmp", OUTPUT_MARKER.trim_start_matches('.'), std::process::id()));
    let written = File::create(&tmp)
        .and_then(|mut f| f.write_all(format!("{kind}\n").as_bytes()).and_then(|_| f.sync_all()))
        .and_then(|_| std::fs::rename(&tmp, dir.join(OUTPUT_MARKER)));
    written.with_context(|| format!("{flag} {}: cannot write in the directory", dir.display()))
}

/// The lock file in every output directory ragtime writes ([`lock_output_dir`]). Hidden, so that directory
/// readers (pyarrow, the shard checksums) skip it; it stays after the run, holding the last writer's process id
/// and host, and is locked only while a process writes.
pub const LOCK_FILE: &str = ".ragtime.lock";

/// The directories this process holds locked: canonical path, the open lock file (its lock lives as long as the
/// file is open) and how many [`OutputLock`]s share it.
static HELD: std::sync::Mutex<Vec<(PathBuf, File, usize)>> = std::sync::Mutex::new(Vec::new());

fn held() -> std::sync::MutexGuard<'static, Vec<(PathBuf, File, usize)>> {
    HELD.lock().unwrap_or_else(|e| e.into_inner())
}

/// This process's hold on an output directory ([`lock_output_dir`]); the lock is released when the last
/// `OutputLock` of the directory is dropped, or when the process ends.
#[derive(Debug)]
#[must_use = "the directory is locked only while the OutputLock lives"]
pub struct OutputLock {
    /// The canonical directory; `None` where its file system cannot lock (nothing held).
    dir: Option<PathBuf>,
}

impl Drop for OutputLock {
    fn drop(&mut self) {
        let Some(dir) = &self.dir else { return };
        let mut held = held();
        if let Some(i) = held.iter().position(|(d, _, _)| d == dir) {
            held[i].2 -= 1;
            if held[i].2 == 0 {
                held.swap_remove(i); // closing the file releases the lock
            }
        }
    }
}

/// Locks the existing directory `dir` (the value of `flag`) for this process: an exclusive lock on its
/// [`LOCK_FILE`] (`flock`, which the OS releases when the process ends, even on `kill -9`). Another process
/// holding it is an error naming the flag, the directory and that process (its id and host, as it wrote them
/// into the file); the directory is left as it was. Within one process the lock is shared: a second call for the
/// same directory (the command, then the store it opens there) returns another hold on it. On a file system
/// that cannot lock (some network mounts), a note says so and the run goes on unguarded.
pub fn lock_output_dir(dir: &Path, flag: &str) -> Result<OutputLock> {
    use std::io::{Read, Seek};
    let shown = dir.display();
    let canonical = std::fs::canonicalize(dir).with_context(|| format!("{flag} {shown}: cannot resolve the path"))?;
    let mut held = held();
    if let Some(entry) = held.iter_mut().find(|(d, _, _)| *d == canonical) {
        entry.2 += 1;
        return Ok(OutputLock { dir: Some(canonical) });
    }
    let path = canonical.join(LOCK_FILE);
    let owner = |file: &mut File| {
        let mut owner = String::new();
        let _ = file.read_to_string(&mut owner);
        let owner = owner.trim();
        if owner.is_empty() {
            String::new()
        } else {
            format!(" ({owner})")
        }
    };
    let cannot_open = || format!("{flag} {shown}: cannot write in the directory");
    let (mut file, locked) = open_and_lock(&path, cannot_open, &format!("{flag} {shown}"), owner)?;
    if !locked {
        return Ok(OutputLock { dir: None });
    }
    let owner = format!("pid {} on {}\n", std::process::id(), host_name());
    file.set_len(0)
        .and_then(|_| file.rewind())
        .and_then(|_| file.write_all(owner.as_bytes()))
        .with_context(|| format!("{}: cannot write", path.display()))?;
    held.push((canonical.clone(), file, 1));
    Ok(OutputLock { dir: Some(canonical) })
}

/// Opens `path` (the file a command appends to, named by `flag`; created where missing, its content kept) and
/// locks it for this process as [`lock_output_dir`] locks a directory: another process writing it is an error,
/// and the file is left as it was. The lock lives as long as the returned file is open.
pub fn open_locked(path: &Path, flag: &str) -> Result<File> {
    let cannot_open = || format!("{}: cannot write", path.display());
    Ok(open_and_lock(path, cannot_open, &format!("{flag}: {}", path.display()), |_| String::new())?.0)
}

/// Opens `path` for reading and writing (created where missing, its content kept; `cannot_open` is the error's
/// context where it cannot be) and takes an exclusive lock on it without waiting. Another process holding it is an
/// error that reads `{what}: another ragtime process is writing there{owner(file)}; ...`; on a file system that
/// cannot lock, a note on stderr, and the file comes back unlocked (`false`).
fn open_and_lock(
    path: &Path,
    cannot_open: impl FnOnce() -> String,
    what: &str,
    owner: impl FnOnce(&mut File) -> String,
) -> Result<(File, bool)> {
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .with_context(cannot_open)?;
    match file.try_lock() {
        Ok(()) => Ok((file, true)),
        Err(std::fs::TryLockError::WouldBlock) => {
            let owner = owner(&mut file);
            bail!("{what}: another ragtime process is writing there{owner}; wait for it to end, or write elsewhere")
        }
        Err(std::fs::TryLockError::Error(e)) => {
            eprintln!(
                "note: {what}: cannot lock ({e}); a second process writing here at the same time would not be stopped"
            );
            Ok((file, false))
        }
    }
}

/// This machine's name, for [`lock_output_dir`]'s owner line (`"?"` where the OS does not say).
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "?".into())
}

/// How many leading bytes of an existing file [`claim_output_file`] hands its `ours` test.
pub const OUTPUT_HEAD_BYTES: u64 = 64 * 1024;

/// Checks, before any work, that a command may write the single file `path` (the value of `flag`): nothing there,
/// or a file whose first bytes (up to [`OUTPUT_HEAD_BYTES`]) `ours` recognises as `what` (the same command's
/// earlier output, which it writes again). Anything else (someone else's file, a directory) is refused, naming
/// the flag, and left as it was.
pub fn claim_output_file(path: &Path, flag: &str, what: &str, ours: impl Fn(&[u8]) -> bool) -> Result<()> {
    use std::io::Read;
    let shown = path.display();
    match probe(path).with_context(|| format!("{flag} {shown}"))? {
        None => Ok(()),
        Some(m) if m.is_dir() => bail!("{flag} {shown}: is a directory; name a file"),
        Some(_) => {
            let mut head = Vec::new();
            File::open(path)
                .and_then(|f| f.take(OUTPUT_HEAD_BYTES).read_to_end(&mut head))
                .with_context(|| format!("{flag} {shown}: cannot read"))?;
            if !ours(&head) {
                bail!(
                    "{flag} {shown}: exists and is not {what}; ragtime replaces only its own earlier output (remove \
                     the file or name another)"
                );
            }
            Ok(())
        }
    }
}

/// The temporary file beside `path`: `dir/.NAME.tmp`, hidden so that directory readers skip it.
pub fn tmp_path(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp"))
}

/// Replaces `path` with `bytes` atomically: temporary file in the same directory, fsync, rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic_with(path, |tmp| {
        let mut f = File::create(tmp).with_context(|| format!("{}: cannot create", tmp.display()))?;
        f.write_all(bytes).with_context(|| format!("{}: cannot write", tmp.display()))
    })
}

/// Replaces `path` atomically with what `write` puts at the temporary path it is given (for writers that
/// create their own file, such as Parquet and safetensors); the file is then synced and renamed into place.
pub fn write_atomic_with(path: &Path, write: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let tmp = tmp_path(path);
    write(&tmp)?;
    File::open(&tmp).and_then(|f| f.sync_all()).with_context(|| format!("{}: cannot sync", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()))
}

/// Replaces `path` atomically with `batch` as one snappy-compressed Parquet file.
pub fn write_parquet_batch(path: &Path, batch: &RecordBatch) -> Result<()> {
    use parquet::arrow::ArrowWriter;
    use parquet::basic::Compression;
    use parquet::file::properties::WriterProperties;
    write_atomic_with(path, |tmp| {
        let f = File::create(tmp).with_context(|| format!("{}: cannot create", tmp.display()))?;
        let props = WriterProperties::builder().set_compression(Compression::SNAPPY).build();
        let mut w = ArrowWriter::try_new(f, batch.schema(), Some(props))
            .with_context(|| format!("{}: cannot start parquet writer", tmp.display()))?;
        w.write(batch).with_context(|| format!("{}: cannot write rows", tmp.display()))?;
        w.close().with_context(|| format!("{}: cannot finish parquet file", tmp.display()))?;
        Ok(())
    })
}

/// `rows` as JSON lines, each ending in a newline.
pub fn jsonl_bytes<T: Serialize>(rows: &[T]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for r in rows {
        out.extend(serde_json::to_string(r)?.into_bytes());
        out.push(b'\n');
    }
    Ok(out)
}

/// A torn last line of a JSON-lines file: no final newline and not valid JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct Torn {
    /// Byte length of the file without it (what to truncate the file to).
    pub offset: u64,
    /// Its 1-based line number.
    pub line: usize,
    /// Why it does not parse.
    pub error: String,
}

/// A JSON-lines file as read by [`read_jsonl`].
#[derive(Debug)]
pub struct JsonLines<T> {
    pub path: PathBuf,
    /// What a line holds, for error messages (`prediction`, `JSON line`, ...).
    pub what: String,
    /// The records with their 1-based line numbers; blank lines are skipped.
    pub rows: Vec<(usize, T)>,
    /// The torn last line, if any (a writer killed mid-line); not in `rows`.
    pub torn: Option<Torn>,
}

impl<T> JsonLines<T> {
    /// The records without line numbers (a torn last line dropped).
    pub fn records(self) -> Vec<T> {
        self.rows.into_iter().map(|(_, r)| r).collect()
    }

    /// The records of a file no writer appends to: a torn last line is malformed like any other.
    pub fn strict(self) -> Result<Vec<(usize, T)>> {
        if let Some(t) = &self.torn {
            bail!("{}:{}: malformed {}: {}", self.path.display(), t.line, self.what, t.error);
        }
        Ok(self.rows)
    }
}

/// Runs `read`, a third-party decoder of the file `path`, and turns a panic in it into an error naming the file
/// (`what` says what the file should be). The Parquet and Arrow readers panic on some damaged metadata instead of
/// returning an error, and candle's GGUF reader on a zero `general.alignment`; a damaged file must be an error
/// like any other. (The panic message is still printed by the panic hook.)
pub fn catch_decoder_panic<T>(path: &Path, what: &str, read: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(read)).unwrap_or_else(|p| {
        let msg = panic_message(p.as_ref()).unwrap_or("the decoder failed");
        bail!("{}: not a readable {what} ({msg})", path.display())
    })
}

/// The message of a caught panic's payload (`panic!` with a string or a format), if it has one.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> Option<&str> {
    payload.downcast_ref::<String>().map(String::as_str).or_else(|| payload.downcast_ref::<&str>().copied())
}

/// Reads a JSON-lines file of `T` (`what` names a line's record in errors). A bad line is an error naming
/// `file:line`, except a torn last line, which is reported in [`JsonLines::torn`].
pub fn read_jsonl<T: DeserializeOwned>(path: &Path, what: &str) -> Result<JsonLines<T>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{}: cannot read", path.display()))?;
    let mut rows = Vec::new();
    let mut torn = None;
    let mut offset = 0usize;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let body = line.trim();
        if !body.is_empty() {
            match serde_json::from_str::<T>(body) {
                Ok(r) => rows.push((i + 1, r)),
                Err(e) if !line.ends_with('\n') => {
                    torn = Some(Torn { offset: offset as u64, line: i + 1, error: e.to_string() })
                }
                Err(e) => bail!("{}:{}: malformed {what}: {e}", path.display(), i + 1),
            }
        }
        offset += line.len();
    }
    Ok(JsonLines { path: path.to_path_buf(), what: what.to_string(), rows, torn })
}

/// Pins an output directory to the settings a run was made with, kept in the file `path`: when `path` does
/// not exist, writes `text` there (atomically) and returns `None`; otherwise returns the stored settings, parsed
/// with `parse`, for the caller to compare with its own (and refuse the directory when they differ).
pub fn pin_settings<V>(path: &Path, text: &str, parse: impl Fn(&str) -> Result<V>) -> Result<Option<V>> {
    if !exists(path)? {
        write_atomic(path, text.as_bytes())?;
        return Ok(None);
    }
    let old = std::fs::read_to_string(path).with_context(|| format!("{}: cannot read", path.display()))?;
    Ok(Some(parse(&old).with_context(|| format!("{}: malformed settings", path.display()))?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file under `dir` with its bytes, sorted by path.
    fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| is_file(p).unwrap())
            .map(|p| (p.clone(), std::fs::read(&p).unwrap()))
            .collect();
        out.sort();
        out
    }

    /// Another process's lock on the directory, as this process cannot hold one itself: a second open file
    /// description of the lock file (`flock` locks belong to those, so two conflict within one process too).
    fn foreign_lock(dir: &Path) -> File {
        let f = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(dir.join(LOCK_FILE)).unwrap();
        f.try_lock().expect("nobody else holds the lock");
        f
    }

    /// A claimed directory is locked while its `OutputLock` lives; a claim of a directory another process holds
    /// is refused with that process named, and writes nothing (not even the marker); dropping the lock frees it.
    #[test]
    fn a_claimed_directory_is_locked_until_the_lock_is_dropped() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("run");
        let lock = claim_output_dir(&dir, "--out", "eval run", "config.toml").unwrap();
        let owner = std::fs::read_to_string(dir.join(LOCK_FILE)).unwrap();
        assert!(owner.starts_with(&format!("pid {} on ", std::process::id())), "{owner}");
        let other = std::fs::File::open(dir.join(LOCK_FILE)).unwrap();
        assert!(matches!(other.try_lock(), Err(std::fs::TryLockError::WouldBlock)), "claimed but not locked");
        drop(lock);
        other.try_lock().expect("dropping the OutputLock releases the directory");
        drop(other);

        std::fs::write(dir.join("predictions.jsonl"), "{\"id\": \"q1\"}\n").unwrap();
        let before = snapshot(&dir);
        let held = foreign_lock(&dir);
        std::fs::write(dir.join(LOCK_FILE), "pid 4242 on node7\n").unwrap();
        let before_with_owner = snapshot(&dir);
        let e = claim_output_dir(&dir, "--out", "eval run", "config.toml").unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "--out {}: another ragtime process is writing there (pid 4242 on node7); wait for it to end, or \
                 write elsewhere",
                dir.display()
            )
        );
        assert_eq!(snapshot(&dir), before_with_owner, "a refused claim wrote in the directory");
        drop(held);
        let _lock = claim_output_dir(&dir, "--out", "eval run", "config.toml").unwrap();
        let after: Vec<_> = snapshot(&dir).into_iter().filter(|(p, _)| !p.ends_with(LOCK_FILE)).collect();
        let before: Vec<_> = before.into_iter().filter(|(p, _)| !p.ends_with(LOCK_FILE)).collect();
        assert_eq!(after, before, "the claim after the other process ended changed a file");
    }

    /// Within one process the lock is shared: the command claims its `--out`, then the store it opens there
    /// claims it again; the directory stays locked until the last hold is dropped.
    #[test]
    fn one_process_may_hold_its_directory_twice() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("run");
        let first = claim_output_dir(&dir, "--out", "eval run", "config.toml").unwrap();
        // through another spelling of the same path
        let second = claim_output_dir(&root.path().join(".").join("run"), "run directory", "eval run", "config.toml")
            .expect("this process's second claim of its own directory");
        let other = std::fs::File::open(dir.join(LOCK_FILE)).unwrap();
        drop(first);
        assert!(matches!(other.try_lock(), Err(std::fs::TryLockError::WouldBlock)), "released while still held");
        drop(second);
        other.try_lock().expect("released after the last hold");
    }

    /// The lock file alone does not make a directory someone else's (a shard locks its part before the job claims
    /// it), and the shared directory of a sharded job is claimed without a lock.
    #[test]
    fn a_directory_holding_only_the_lock_file_is_claimed_as_empty() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("part");
        std::fs::create_dir(&dir).unwrap();
        let held = lock_output_dir(&dir, "--out").unwrap();
        let again = claim_output_dir(&dir, "--out", "eval run", "config.toml").expect("only the lock file in it");
        drop((held, again));
        let shared = root.path().join("shared");
        claim_output_dir_with(&shared, "--out", "sharded eval run", |_| true).unwrap();
        assert!(!exists(&shared.join(LOCK_FILE)).unwrap(), "the shards' shared directory was locked");
    }

    /// `open_locked`: the file keeps its content and is refused to a second writer while open.
    #[test]
    fn open_locked_keeps_the_file_and_refuses_a_second_writer() {
        let root = tempfile::tempdir().unwrap();
        let path = root.path().join("out.jsonl.partial");
        std::fs::write(&path, "{\"id\": 1}\n").unwrap();
        let file = open_locked(&path, "--out").unwrap();
        let other = File::open(&path).unwrap();
        assert!(matches!(other.try_lock(), Err(std::fs::TryLockError::WouldBlock)), "open but not locked");
        drop(other);
        let again = File::open(&path).unwrap();
        // as another process sees it: a second call opens its own file description
        let e = open_locked(&path, "--out").unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "--out: {}: another ragtime process is writing there; wait for it to end, or write elsewhere",
                path.display()
            )
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{\"id\": 1}\n");
        drop(file);
        again.try_lock().expect("closing the file releases it");
    }

    /// A single output file: written where nothing is, replaced where the test recognises the head, refused (and
    /// left as it was) for anything else or a directory.
    #[test]
    fn claim_output_file_replaces_only_its_own_kind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.txt");
        let ours = |head: &[u8]| head.starts_with(b"OURS");
        claim_output_file(&path, "--x", "an x", ours).unwrap();
        std::fs::write(&path, "OURS and more").unwrap();
        claim_output_file(&path, "--x", "an x", ours).unwrap();
        std::fs::write(&path, "theirs").unwrap();
        let e = claim_output_file(&path, "--x", "an x", ours).unwrap_err().to_string();
        assert!(e.starts_with(&format!("--x {}: exists and is not an x;", path.display())), "{e}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "theirs");
        let e = claim_output_file(dir.path(), "--x", "an x", ours).unwrap_err().to_string();
        assert!(e.ends_with("is a directory; name a file"), "{e}");
        // the test sees at most OUTPUT_HEAD_BYTES
        std::fs::write(&path, vec![b'a'; OUTPUT_HEAD_BYTES as usize + 10]).unwrap();
        claim_output_file(&path, "--x", "an x", |head| head.len() as u64 == OUTPUT_HEAD_BYTES).unwrap();
    }

    /// Only "nothing there" is `None`; a path the OS refuses is an error with the OS's own words (with
    /// `Path::exists` both were `false`, and the callers said "not found").
    #[test]
    fn probe_tells_missing_from_refused() {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        assert!(probe(&root.path().join("none")).unwrap().is_none());
        assert!(probe(&file).unwrap().unwrap().is_file());
        let through = file.join("child");
        assert!(!through.exists());
        let e = anyhow::Error::new(probe(&through).unwrap_err());
        assert!(format!("{e:#}").ends_with("/f/child: cannot read: Not a directory (os error 20)"), "{e:#}");
        #[cfg(unix)]
        {
            let (a, b) = (root.path().join("a"), root.path().join("b"));
            std::os::unix::fs::symlink(&a, &b).unwrap();
            std::os::unix::fs::symlink(&b, &a).unwrap();
            let e = format!("{:#}", anyhow::Error::new(exists(&a).unwrap_err()));
            assert!(e.contains("Too many levels of symbolic links"), "{e}");
        }
        let e = require_dir(&file, "index", "").unwrap_err().to_string();
        assert!(e.ends_with("/f: not a directory (the index is a directory)"), "{e}");
        let e = require_dir(&root.path().join("none"), "index", "build one").unwrap_err().to_string();
        assert!(e.ends_with("/none: index not found (build one)"), "{e}");
    }

    #[test]
    fn output_dirs_are_claimed_only_when_new_empty_or_ours() {
        let root = tempfile::tempdir().unwrap();
        // missing: created, marked
        let new = root.path().join("a/b");
        let _ = claim_output_dir(&new, "--out", "detector", "detector.json").unwrap();
        assert_eq!(std::fs::read_to_string(new.join(OUTPUT_MARKER)).unwrap(), "detector\n");
        // ours: claimed again
        let _ = claim_output_dir(&new, "--out", "detector", "detector.json").unwrap();
        // another kind of ragtime output: refused
        let e = claim_output_dir(&new, "--out", "eval run", "config.toml").unwrap_err().to_string();
        assert!(e.contains("holds a ragtime detector, not a eval run"), "{e}");
        // empty: claimed
        let empty = root.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        let _ = claim_output_dir(&empty, "--out", "detector", "detector.json").unwrap();
        // someone else's files: refused, untouched, no marker left
        let theirs = root.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::fs::write(theirs.join("part-00000.parquet"), b"mine").unwrap();
        let e = claim_output_dir(&theirs, "--out", "hallucination dataset", "_manifest.json").unwrap_err().to_string();
        assert!(e.starts_with("--out ") && e.contains("part-00000.parquet") && e.contains("not empty"), "{e}");
        assert_eq!(std::fs::read(theirs.join("part-00000.parquet")).unwrap(), b"mine");
        assert!(!theirs.join(OUTPUT_MARKER).exists() && !theirs.join(LOCK_FILE).exists());
        // an output written before markers existed: recognised by its main file
        let old = root.path().join("old");
        std::fs::create_dir(&old).unwrap();
        std::fs::write(old.join("detector.json"), b"{}").unwrap();
        let _ = claim_output_dir(&old, "--out", "detector", "detector.json").unwrap();
        // a file: refused
        let file = root.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        let e = claim_output_dir(&file, "--out", "detector", "detector.json").unwrap_err().to_string();
        assert!(e.contains("not a directory"), "{e}");
    }
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Row {
        id: String,
    }

    fn row(id: &str) -> Row {
        Row { id: id.into() }
    }

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("stats.json");
        write_atomic(&p, b"old").unwrap();
        write_atomic(&p, b"new").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        assert_eq!(tmp_path(&p), dir.path().join(".stats.json.tmp"));
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["stats.json"]);
        // a writer that fails leaves the old file in place
        assert!(write_atomic_with(&p, |_| bail!("disk full")).is_err());
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        write_atomic_with(&p, |tmp| Ok(std::fs::write(tmp, "via path")?)).unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "via path");
        assert!(!tmp_path(&p).exists());
    }

    #[test]
    fn jsonl_errors_name_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("rows.jsonl");
        std::fs::write(&p, "{\"id\": \"a\"}\n\n{\"id\": 2}\n{\"id\": \"c\"}\n").unwrap();
        let e = read_jsonl::<Row>(&p, "row").unwrap_err();
        assert!(format!("{e:#}").contains("rows.jsonl:3: malformed row"), "{e:#}");
        let e = read_jsonl::<Row>(&dir.path().join("missing.jsonl"), "row").unwrap_err();
        assert!(format!("{e:#}").contains("missing.jsonl: cannot read"), "{e:#}");
    }

    #[test]
    fn torn_last_line_is_reported_apart() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("rows.jsonl");
        let mut text = String::from_utf8(jsonl_bytes(&[row("a"), row("b")]).unwrap()).unwrap();
        let whole = text.len() as u64;
        text.push_str("{\"id\": \"c");
        std::fs::write(&p, &text).unwrap();
        let j = read_jsonl::<Row>(&p, "row").unwrap();
        let torn = j.torn.clone().unwrap();
        assert_eq!((torn.offset, torn.line), (whole, 3));
        assert_eq!(j.rows, vec![(1, row("a")), (2, row("b"))]);
        let e = read_jsonl::<Row>(&p, "row").unwrap().strict().unwrap_err();
        assert!(e.to_string().starts_with(&format!("{}:3: malformed row", p.display())), "{e}");
        assert_eq!(j.records(), vec![row("a"), row("b")]);
        // a complete last line without a newline is a record, not a torn line
        std::fs::write(&p, "{\"id\": \"a\"}").unwrap();
        let j = read_jsonl::<Row>(&p, "row").unwrap();
        assert!(j.torn.is_none());
        assert_eq!(j.strict().unwrap(), vec![(1, row("a"))]);
    }

    #[test]
    fn settings_are_pinned() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.json");
        let parse = |t: &str| Ok(serde_json::from_str::<serde_json::Value>(t)?);
        let a = serde_json::json!({"seed": 1});
        assert_eq!(pin_settings(&p, &a.to_string(), parse).unwrap(), None);
        assert_eq!(pin_settings(&p, "ignored", parse).unwrap(), Some(a));
        std::fs::write(&p, "{ half").unwrap();
        let e = pin_settings(&p, "", parse).unwrap_err();
        assert!(format!("{e:#}").contains("config.json: malformed settings"), "{e:#}");
    }
}
