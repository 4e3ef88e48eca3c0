//! `ragtime data fetch`: a dataset spec's `[source]`, the download (curl), the cut, the checksum, and the placing
//! of the file under the fetched-data folder through a temporary file and a rename; or, where the source cannot
//! be reached, the verified shared copy.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::cut::cut;
use super::{fetch_dir, find, shared_dir, Origin};

/// Where a dataset comes from (`[source]` in `datasets/NAME.toml`) and how its data file is cut from the
/// download.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// The dataset's own public release (page or file), for reference; not downloaded.
    #[serde(default)]
    pub release: Option<String>,
    /// What `ragtime data fetch` downloads: the file, or with `files` the folder (ending in `/`) their paths
    /// are appended to.
    pub url: String,
    /// sha256 of the data file as ragtime reads it (after `member`, `drop_keys_of` and `first`); the fetch is
    /// unverified when absent.
    #[serde(default)]
    pub sha256: Option<String>,
    /// The download is a `.tar.gz`: this member of it is the data.
    #[serde(default)]
    pub member: Option<String>,
    /// A JSON object: drop the entries whose keys are keys of the JSON object at this URL.
    #[serde(default)]
    pub drop_keys_of: Option<String>,
    /// Keep the first N lines (`.jsonl` files) or entries (JSON arrays and objects, re-laid out with
    /// one-space indentation).
    #[serde(default)]
    pub first: Option<usize>,
    /// A folder dataset: its files, each downloaded from `url` + `path` to `file/path`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<SourceFile>,
}

/// One file of a folder dataset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceFile {
    pub path: String,
    #[serde(default)]
    pub sha256: Option<String>,
}

impl Source {
    /// Checks the fields that do not depend on the network; errors say which field is wrong.
    pub fn validate(&self) -> Result<()> {
        let check = |what: &str, s: &Option<String>| -> Result<()> {
            match s {
                Some(h) if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) => {
                    bail!("[source] {what}: '{h}' is not a sha256 (64 hex digits)")
                }
                _ => Ok(()),
            }
        };
        check("sha256", &self.sha256)?;
        if self.files.is_empty() {
            return Ok(());
        }
        if !self.url.ends_with('/') {
            bail!("[source] url must end with '/' when `files` lists the files under it");
        }
        if self.sha256.is_some() || self.member.is_some() || self.drop_keys_of.is_some() || self.first.is_some() {
            bail!("[source] with `files`, give each file's sha256 there (sha256, member, drop_keys_of and first apply to a single file)");
        }
        for f in &self.files {
            if f.path.is_empty() || Path::new(&f.path).is_absolute() || f.path.split('/').any(|c| c == "..") {
                bail!("[source] files: '{}' must be a relative path inside the dataset folder", f.path);
            }
            check(&format!("files '{}' sha256", f.path), &f.sha256)?;
        }
        Ok(())
    }

    /// The files to place: (URL, path relative to the data folder, expected sha256).
    pub fn items(&self, file: &Path) -> Vec<(String, PathBuf, Option<String>)> {
        if self.files.is_empty() {
            return vec![(self.url.clone(), file.to_path_buf(), self.sha256.clone())];
        }
        self.files.iter().map(|f| (format!("{}{}", self.url, f.path), file.join(&f.path), f.sha256.clone())).collect()
    }
}

/// Hex sha256 of a file.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f = std::fs::File::open(path).with_context(|| format!("{}: cannot read", path.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf).with_context(|| format!("{}: cannot read", path.display()))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(format!("{:x}", h.finalize()))
}

/// Checks `path` against `want` (when known): `Ok(actual)`, or an error naming the file and both sums.
pub fn verify(path: &Path, want: Option<&str>) -> Result<String> {
    let got = sha256_file(path)?;
    if let Some(w) = want {
        if !got.eq_ignore_ascii_case(w) {
            bail!("{}: sha256 is {got}, the dataset spec expects {w}", path.display());
        }
    }
    Ok(got)
}

/// A download that could not be made (no network, no such URL): the caller may fall back to the shared copy.
#[derive(Debug, thiserror::Error)]
#[error("cannot download {url}: {reason}")]
pub struct DownloadError {
    pub url: String,
    pub reason: String,
}

/// Downloads `url` to `dest` with curl (no TLS stack in ragtime itself).
pub fn download(url: &str, dest: &Path) -> Result<()> {
    let out = Command::new("curl")
        .args([
            "--fail",
            "--silent",
            "--show-error",
            "--location",
            "--connect-timeout",
            "20",
            "--retry",
            "2",
            "--output",
        ])
        .arg(dest)
        .arg(url)
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("`curl` is not installed (ragtime downloads with it): install curl, or place the data beside the repository in ../shared/data")
        }
        Err(e) => return Err(anyhow!(e).context("cannot run curl")),
    };
    if !out.status.success() {
        let _ = std::fs::remove_file(dest);
        let err = String::from_utf8_lossy(&out.stderr);
        let reason = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("curl failed").trim().to_string();
        return Err(DownloadError { url: url.to_string(), reason }.into());
    }
    Ok(())
}

/// A temporary path beside `dest` (same folder, so the final rename is atomic).
fn temp_beside(dest: &Path, tag: &str) -> PathBuf {
    let name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    dest.with_file_name(format!(".{name}.{tag}.{}.part", std::process::id()))
}

/// Removes a temporary file when dropped (the download failed or was cut wrongly).
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Downloads one data file of `source` to `dest`: download, cut (`member`, `drop_keys_of`, `first`), check the
/// sha256, then rename into place. Returns the file's sha256.
pub fn fetch_file(source: &Source, url: &str, dest: &Path, sha256: Option<&str>) -> Result<String> {
    let dir = dest.parent().ok_or_else(|| anyhow!("{}: no parent folder", dest.display()))?;
    // The folders this call creates, removed again (when still empty) if nothing is placed.
    let created: Vec<PathBuf> = dir
        .ancestors()
        .take_while(|d| !d.as_os_str().is_empty() && matches!(crate::io::exists(d), Ok(false)))
        .map(Path::to_path_buf)
        .collect();
    std::fs::create_dir_all(dir).with_context(|| format!("{}: cannot create folder", dir.display()))?;
    let placed = fetch_file_in(source, url, dest, sha256);
    if placed.is_err() {
        for d in &created {
            let _ = std::fs::remove_dir(d);
        }
    }
    placed
}

fn fetch_file_in(source: &Source, url: &str, dest: &Path, sha256: Option<&str>) -> Result<String> {
    let raw = TempFile(temp_beside(dest, "download"));
    download(url, &raw.0)?;
    let mut bytes = None;
    if let Some(member) = &source.member {
        let out = Command::new("tar").arg("-xzOf").arg(&raw.0).arg(member).output().context("cannot run tar")?;
        if !out.status.success() {
            bail!("{url}: cannot extract '{member}': {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        bytes = Some(out.stdout);
    }
    if source.drop_keys_of.is_some() || source.first.is_some() {
        let data = match bytes.take() {
            Some(b) => b,
            None => std::fs::read(&raw.0).with_context(|| format!("{}: cannot read", raw.0.display()))?,
        };
        let text = String::from_utf8(data).map_err(|_| anyhow!("{url}: not UTF-8 text"))?;
        let drop: Vec<String> = match &source.drop_keys_of {
            Some(u) => {
                let keys = TempFile(temp_beside(dest, "keys"));
                download(u, &keys.0)?;
                let t = std::fs::read_to_string(&keys.0).with_context(|| format!("{u}: not UTF-8 text"))?;
                let v: serde_json::Map<String, serde_json::Value> =
                    serde_json::from_str(&t).with_context(|| format!("{u}: not a JSON object"))?;
                v.keys().cloned().collect()
            }
            None => Vec::new(),
        };
        let is_lines = dest.extension().is_some_and(|e| e == "jsonl");
        bytes = Some(cut(&text, is_lines, &drop, source.first).with_context(|| url.to_string())?.into_bytes());
    }
    let out = match bytes {
        Some(b) => {
            let t = TempFile(temp_beside(dest, "cut"));
            std::fs::write(&t.0, b).with_context(|| format!("{}: cannot write", t.0.display()))?;
            t
        }
        None => raw,
    };
    let sum = verify(&out.0, sha256).with_context(|| format!("downloaded from {url}"))?;
    std::fs::rename(&out.0, dest).with_context(|| format!("{}: cannot move into place", dest.display()))?;
    Ok(sum)
}

/// Where a dataset's data stands: each data file's path and origin, or `None` where it is missing.
pub fn locate(file: &Path, source: Option<&Source>) -> Vec<(PathBuf, Option<(PathBuf, Origin)>)> {
    let rels: Vec<PathBuf> = match source {
        Some(s) => s.items(file).into_iter().map(|(_, rel, _)| rel).collect(),
        None => vec![file.to_path_buf()],
    };
    rels.into_iter().map(|r| (r.clone(), find(&r))).collect()
}

/// What [`fetch`] did for one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placed {
    /// Downloaded to this path.
    Downloaded(PathBuf),
    /// Already in the fetch folder with the right checksum.
    AlreadyFetched(PathBuf),
    /// Not downloadable; the shared copy at this path has the right checksum (or none is recorded).
    Shared(PathBuf),
}

/// Fetches a dataset's files into [`fetch_dir`]. A file already there is kept when its checksum matches and is
/// an error otherwise (ragtime never overwrites a file it may not have written). When a download fails for
/// want of a network or a reachable URL, `note` gets one line saying so, and the files are taken from the shared
/// folder after their checksums are verified.
pub fn fetch(name: &str, file: &Path, source: &Source, note: &mut dyn FnMut(&str)) -> Result<Vec<Placed>> {
    fetch_into(name, file, source, &fetch_dir(), &shared_dir(), note)
}

/// [`fetch`] with explicit folders.
pub fn fetch_into(
    name: &str,
    file: &Path,
    source: &Source,
    fetch_root: &Path,
    shared_root: &Path,
    note: &mut dyn FnMut(&str),
) -> Result<Vec<Placed>> {
    let mut placed = Vec::new();
    let mut offline = false;
    for (url, rel, sha) in source.items(file) {
        let dest = fetch_root.join(&rel);
        if crate::io::exists(&dest)? {
            verify(&dest, sha.as_deref()).with_context(|| {
                format!("{name}: {} is already there with other contents; remove it to fetch again", dest.display())
            })?;
            placed.push(Placed::AlreadyFetched(dest));
            continue;
        }
        if !offline {
            match fetch_file(source, &url, &dest, sha.as_deref()) {
                Ok(_) => {
                    placed.push(Placed::Downloaded(dest));
                    continue;
                }
                Err(e) => match e.downcast_ref::<DownloadError>() {
                    Some(d) => {
                        note(&format!("{name}: {d}; looking for the shared copy in {}", shared_root.display()));
                        offline = true;
                    }
                    None => return Err(e.context(format!("{name}: fetch failed"))),
                },
            }
        }
        let shared = shared_root.join(&rel);
        if !crate::io::exists(&shared)? {
            bail!("{name}: cannot download {url}, and {} does not exist", shared.display());
        }
        verify(&shared, sha.as_deref())
            .with_context(|| format!("{name}: the shared copy does not match the dataset spec"))?;
        placed.push(Placed::Shared(shared));
    }
    Ok(placed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_validation_names_the_field() {
        let mut s = Source {
            release: None,
            url: "https://x/".into(),
            sha256: Some("abc".into()),
            member: None,
            drop_keys_of: None,
            first: None,
            files: vec![],
        };
        assert!(s.validate().unwrap_err().to_string().contains("sha256"));
        s.sha256 = None;
        s.files = vec![SourceFile { path: "../x".into(), sha256: None }];
        assert!(s.validate().unwrap_err().to_string().contains("../x"));
        s.files[0].path = "a/b.json".into();
        s.validate().unwrap();
        assert_eq!(
            s.items(Path::new("qa/d")),
            vec![(String::from("https://x/a/b.json"), PathBuf::from("qa/d/a/b.json"), None)]
        );
        s.url = "https://x".into();
        assert!(s.validate().unwrap_err().to_string().contains("end with '/'"));
    }

    #[test]
    fn verify_names_file_and_sums() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.txt");
        std::fs::write(&p, "abc").unwrap();
        let sum = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(verify(&p, Some(sum)).unwrap(), sum);
        let err = verify(&p, Some(&"0".repeat(64))).unwrap_err().to_string();
        assert!(err.contains("f.txt") && err.contains(sum), "{err}");
    }

    fn src(url: String, sha256: Option<String>, first: Option<usize>) -> Source {
        Source { release: None, url, sha256, member: None, drop_keys_of: None, first, files: vec![] }
    }

    #[test]
    fn fetch_downloads_cuts_verifies_and_keeps() {
        let dir = tempfile::tempdir().unwrap();
        let upstream = dir.path().join("up.jsonl");
        std::fs::write(&upstream, "{\"a\": 1}\n{\"a\": 2}\n{\"a\": 3}\n").unwrap();
        let want = format!("{:x}", Sha256::digest(b"{\"a\": 1}\n{\"a\": 2}\n"));
        let (fetched, shared) = (dir.path().join("fetched"), dir.path().join("shared"));
        let s = src(format!("file://{}", upstream.display()), Some(want.clone()), Some(2));
        let rel = Path::new("qa/x/x.jsonl");
        let placed = fetch_into("x", rel, &s, &fetched, &shared, &mut |l: &str| panic!("{l}")).unwrap();
        assert_eq!(placed, vec![Placed::Downloaded(fetched.join(rel))]);
        assert_eq!(sha256_file(&fetched.join(rel)).unwrap(), want);
        let leftovers: Vec<_> =
            std::fs::read_dir(fetched.join("qa/x")).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(leftovers.len(), 1, "{leftovers:?}");
        // a second fetch keeps the file
        let placed = fetch_into("x", rel, &s, &fetched, &shared, &mut |l: &str| panic!("{l}")).unwrap();
        assert_eq!(placed, vec![Placed::AlreadyFetched(fetched.join(rel))]);
        // a file of other contents is neither overwritten nor accepted
        std::fs::write(fetched.join(rel), "mine\n").unwrap();
        let err = format!("{:#}", fetch_into("x", rel, &s, &fetched, &shared, &mut |_: &str| {}).unwrap_err());
        assert!(err.contains("already there") && err.contains("x.jsonl"), "{err}");
        assert_eq!(std::fs::read_to_string(fetched.join(rel)).unwrap(), "mine\n");
        // a wrong checksum leaves nothing behind
        std::fs::remove_file(fetched.join(rel)).unwrap();
        let bad = src(format!("file://{}", upstream.display()), Some("0".repeat(64)), Some(2));
        let err = format!("{:#}", fetch_into("x", rel, &bad, &fetched, &shared, &mut |_: &str| {}).unwrap_err());
        assert!(err.contains("sha256") && err.contains(&want), "{err}");
        assert_eq!(std::fs::read_dir(fetched.join("qa/x")).unwrap().count(), 0);
    }

    #[test]
    fn fetch_falls_back_to_a_verified_shared_copy() {
        let dir = tempfile::tempdir().unwrap();
        let (fetched, shared) = (dir.path().join("fetched"), dir.path().join("shared"));
        let rel = Path::new("qa/y/y.json");
        let s = src(
            format!("file://{}/nowhere.json", dir.path().display()),
            Some(format!("{:x}", Sha256::digest(b"[]"))),
            None,
        );
        let mut notes = Vec::new();
        let err = format!(
            "{:#}",
            fetch_into("y", rel, &s, &fetched, &shared, &mut |l: &str| notes.push(l.to_string())).unwrap_err()
        );
        assert!(err.contains("cannot download") && err.contains("does not exist"), "{err}");
        assert_eq!(notes.len(), 1);
        std::fs::create_dir_all(shared.join("qa/y")).unwrap();
        std::fs::write(shared.join(rel), "[]").unwrap();
        let placed = fetch_into("y", rel, &s, &fetched, &shared, &mut |_: &str| {}).unwrap();
        assert_eq!(placed, vec![Placed::Shared(shared.join(rel))]);
        assert!(!fetched.exists(), "a failed download leaves no folders behind");
        std::fs::write(shared.join(rel), "[1]").unwrap();
        let err = format!("{:#}", fetch_into("y", rel, &s, &fetched, &shared, &mut |_: &str| {}).unwrap_err());
        assert!(err.contains("shared copy does not match"), "{err}");
    }
}
