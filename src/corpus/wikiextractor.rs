//! WikiExtractor dumps: a file or a folder tree (`AA/wiki_00`, `AB/...`), plain or `.bz2`, in either
//! of WikiExtractor's output forms:
//!
//! - `--json`: one object per line, `{"id", "revid", "url", "title", "text"}`;
//! - default: `<doc id="..." url="..." title="...">` + text lines + `</doc>`.
//!
//! The form is detected per file from its first non-blank line.

use std::path::{Path, PathBuf};

use std::io::BufRead;

use anyhow::{bail, Context, Result};
use serde::Deserialize;

use super::{list_files, open_text_counted};

/// One article as WikiExtractor wrote it. `text` starts with the title line, as in real dumps.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Article {
    pub id: String,
    #[serde(default)]
    pub url: String,
    pub title: String,
    pub text: String,
}

impl Article {
    /// The article body without the leading title line and blank lines WikiExtractor puts first.
    pub fn body(&self) -> &str {
        let t = self.text.as_str();
        let rest = t.strip_prefix(self.title.as_str()).unwrap_or(t);
        rest.trim_start_matches(['\n', '\r'])
    }

    /// Byte offset of [`Article::body`] inside [`Article::text`].
    pub fn body_offset(&self) -> usize {
        self.text.len() - self.body().len()
    }
}

/// Where an article came from, for error messages and resumable jobs.
#[derive(Debug, Clone, PartialEq)]
pub struct Origin {
    pub file: PathBuf,
    pub line: usize,
    /// Bytes of `file` read when the item was handed out (compressed bytes for `.bz2`; see
    /// [`super::BytesRead`]), for progress lines.
    pub offset: u64,
}

/// Read every article of a dump (file or folder), in a stable order. Stops at the first line that
/// does not parse, with an error naming the file and line.
pub fn read_dump(path: &Path) -> Result<Vec<Article>> {
    let mut out = Vec::new();
    for_each_article(path, |a, _| {
        out.push(a);
        Ok(true)
    })?;
    Ok(out)
}

/// Stream the articles of a dump to `f`; `f` returns `Ok(false)` to stop early.
pub fn for_each_article(path: &Path, mut f: impl FnMut(Article, &Origin) -> Result<bool>) -> Result<()> {
    let files = list_files(path)?;
    if files.is_empty() {
        bail!("{}: no files found in this WikiExtractor dump", path.display());
    }
    for file in files {
        if !read_file(&file, &mut f)? {
            break;
        }
    }
    Ok(())
}

fn read_file(file: &Path, f: &mut impl FnMut(Article, &Origin) -> Result<bool>) -> Result<bool> {
    let (reader, read) = open_text_counted(file)?;
    // <doc> form state: (header attributes, text lines, start line)
    let mut doc: Option<(Article, Vec<String>, usize)> = None;
    for (i, line) in reader.lines().enumerate() {
        let lineno = i + 1;
        let line = line.with_context(|| format!("{}:{lineno}: cannot read line", file.display()))?;
        let origin = Origin { file: file.to_path_buf(), line: lineno, offset: read.get() };
        if let Some((header, lines, start)) = doc.as_mut() {
            if line.trim_end() == "</doc>" {
                let mut a = header.clone();
                a.text = unescape(lines.join("\n").trim_end());
                let o = Origin { file: file.to_path_buf(), line: *start, offset: read.get() };
                doc = None;
                if !f(a, &o)? {
                    return Ok(false);
                }
            } else {
                lines.push(line);
            }
            continue;
        }
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        if t.starts_with('{') {
            let a: Article = serde_json::from_str(t).with_context(|| {
                format!("{}:{lineno}: not a WikiExtractor JSON article (need id, title, text)", file.display())
            })?;
            if !f(a, &origin)? {
                return Ok(false);
            }
        } else if t.starts_with("<doc") {
            let attr = |name: &str| -> Option<String> {
                let key = format!("{name}=\"");
                let s = t.find(&key)? + key.len();
                let e = t[s..].find('"')? + s;
                Some(unescape(&t[s..e]))
            };
            let (Some(id), Some(title)) = (attr("id"), attr("title")) else {
                bail!("{}:{lineno}: <doc> header without id and title: {t}", file.display());
            };
            let header = Article { id, url: attr("url").unwrap_or_default(), title, text: String::new() };
            doc = Some((header, Vec::new(), lineno));
        } else {
            bail!(
                "{}:{lineno}: expected a JSON article or a <doc ...> header, found: {}",
                file.display(),
                truncate(t, 80)
            );
        }
    }
    if let Some((_, _, start)) = doc {
        bail!("{}:{start}: <doc> block is never closed with </doc> (truncated file?)", file.display());
    }
    Ok(true)
}

/// WikiExtractor escapes `<doc>` attributes and text as HTML entities by default.
fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"").replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
}

fn truncate(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn reads_json_and_doc_forms_in_a_tree() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("AA")).unwrap();
        std::fs::create_dir_all(dir.path().join("AB")).unwrap();
        std::fs::write(
            dir.path().join("AA/wiki_00"),
            "{\"id\": \"1\", \"revid\": \"\", \"url\": \"u\", \"title\": \"Ada\", \"text\": \"Ada\\n\\nAda was born in 1815.\"}\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("AB/wiki_00"),
            "<doc id=\"2\" url=\"x\" title=\"Tom &amp; Jerry\">\nTom &amp; Jerry\n\nA cartoon.\n</doc>\n",
        )
        .unwrap();
        let arts = read_dump(dir.path()).unwrap();
        assert_eq!(arts.len(), 2);
        assert_eq!(arts[0].id, "1");
        assert_eq!(arts[0].body(), "Ada was born in 1815.");
        assert_eq!(&arts[0].text[arts[0].body_offset()..], "Ada was born in 1815.");
        assert_eq!(arts[1].title, "Tom & Jerry");
        assert_eq!(arts[1].body(), "A cartoon.");
    }

    #[test]
    fn reads_bz2() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("wiki_00.bz2");
        let mut enc = bzip2::write::BzEncoder::new(std::fs::File::create(&p).unwrap(), bzip2::Compression::fast());
        enc.write_all(b"{\"id\": \"7\", \"title\": \"T\", \"text\": \"T\\n\\nBody.\"}\n").unwrap();
        enc.finish().unwrap();
        let arts = read_dump(&p).unwrap();
        assert_eq!(arts[0].body(), "Body.");
    }

    #[test]
    fn bad_line_names_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("wiki_00");
        std::fs::write(&p, "{\"id\": \"1\", \"title\": \"A\", \"text\": \"A\"}\n{\"id\": 2, broken\n").unwrap();
        let err = format!("{:#}", read_dump(&p).unwrap_err());
        assert!(err.contains("wiki_00:2"), "{err}");
        std::fs::write(&p, "<doc id=\"1\" title=\"A\">\nA\n").unwrap();
        let err = format!("{:#}", read_dump(&p).unwrap_err());
        assert!(err.contains("never closed"), "{err}");
    }

    #[test]
    fn reads_shared_valid_dump() {
        let p = crate::require_data!("wiki/dump_valid");
        let arts = read_dump(&p).unwrap();
        assert_eq!(arts.len(), 1000);
        assert_eq!(arts[0].title, "1st Parachute Battalion (Australia)");
    }
}
