//! JSON-lines corpora, one document per line, plain or `.bz2`, a file or a folder tree:
//!
//! - `{"id", "title", "text"}` — generic, and WikiExtractor's `--json` form (`url`, `revid` ignored;
//!   WikiExtractor's leading title line in `text` is dropped, see [`JsonDoc::body`]);
//! - `{"id", "contents"}` — FlashRAG's corpus layout, `contents` = `"Title"\ntext`.
//!
//! `id` may be a string or a number.

use std::path::Path;

use anyhow::Result;
use serde::Deserialize;

use super::wikiextractor::Origin;
use super::{for_each_line, OnBadLine};

/// One document of a JSON-lines corpus.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonDoc {
    pub id: String,
    pub title: String,
    pub text: String,
}

impl JsonDoc {
    /// The text without a leading copy of the title (WikiExtractor starts `text` with the title line).
    pub fn body(&self) -> &str {
        let t = self.text.as_str();
        match t.strip_prefix(self.title.as_str()) {
            Some(rest) if !self.title.is_empty() && (rest.is_empty() || rest.starts_with(['\n', '\r'])) => {
                rest.trim_start_matches(['\n', '\r'])
            }
            _ => t,
        }
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Id {
    S(String),
    N(serde_json::Number),
}

#[derive(Deserialize)]
struct Raw {
    id: Id,
    title: Option<String>,
    text: Option<String>,
    contents: Option<String>,
}

/// Parse one line. `Err` says what is wrong with it.
pub fn parse_line(line: &str) -> std::result::Result<JsonDoc, String> {
    let raw: Raw = serde_json::from_str(line).map_err(|e| format!("not a JSON document with id, title, text: {e}"))?;
    let id = match raw.id {
        Id::S(s) => s,
        Id::N(n) => n.to_string(),
    };
    match (raw.title, raw.text, raw.contents) {
        (Some(title), Some(text), _) => Ok(JsonDoc { id, title, text }),
        (_, _, Some(contents)) => {
            let (first, rest) = contents.split_once('\n').unwrap_or((contents.as_str(), ""));
            let title = first.trim().trim_matches('"').to_string();
            Ok(JsonDoc { id, title, text: rest.to_string() })
        }
        _ => Err("JSON document needs \"title\" and \"text\" (or FlashRAG's \"contents\")".to_string()),
    }
}

/// Stream the documents of one file to `f` (`Ok(false)` stops). Bad lines stop with an error naming
/// file and line, or with [`OnBadLine::Skip`] are reported on stderr and counted in `skipped`.
pub fn for_each_doc(
    file: &Path,
    on_bad: OnBadLine,
    skipped: &mut u64,
    f: impl FnMut(JsonDoc, &Origin) -> Result<bool>,
) -> Result<bool> {
    let parse = |_: usize, line: &str| {
        let t = line.trim();
        (!t.is_empty()).then(|| parse_line(t))
    };
    for_each_line(file, on_bad, skipped, parse, f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_generic_wikiextractor_and_flashrag_lines() {
        let d = parse_line(r#"{"id": 5, "title": "Ada", "text": "Ada was born."}"#).unwrap();
        assert_eq!(d, JsonDoc { id: "5".into(), title: "Ada".into(), text: "Ada was born.".into() });
        assert_eq!(d.body(), "Ada was born.", "title as first word of a sentence is not a title line");
        let w = parse_line(r#"{"id": "9", "revid": "1", "url": "u", "title": "Ada", "text": "Ada\n\nShe was born."}"#)
            .unwrap();
        assert_eq!(w.body(), "She was born.");
        let f = parse_line(r#"{"id": "0", "contents": "\"Ada Lovelace\"\nShe wrote programs."}"#).unwrap();
        assert_eq!((f.title.as_str(), f.text.as_str()), ("Ada Lovelace", "She wrote programs."));
        assert!(parse_line(r#"{"id": "1", "title": "x"}"#).unwrap_err().contains("needs"));
        assert!(parse_line("{broken").unwrap_err().contains("not a JSON"));
    }

    #[test]
    fn bad_lines_name_file_and_line_or_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.jsonl");
        std::fs::write(
            &p,
            "{\"id\":1,\"title\":\"A\",\"text\":\"a\"}\n\n{oops\n{\"id\":2,\"title\":\"B\",\"text\":\"b\"}\n",
        )
        .unwrap();
        let err = for_each_doc(&p, OnBadLine::Stop, &mut 0, |_, _| Ok(true)).unwrap_err();
        assert!(format!("{err:#}").contains("c.jsonl:3: not a JSON"), "{err:#}");
        let (mut n, mut skipped) = (0, 0);
        for_each_doc(&p, OnBadLine::Skip, &mut skipped, |_, _| {
            n += 1;
            Ok(true)
        })
        .unwrap();
        assert_eq!((n, skipped), (2, 1));
    }

    /// A line that is not UTF-8 is a bad line: named with its file and line, or skipped and counted.
    #[test]
    fn invalid_utf8_is_a_bad_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.jsonl");
        let mut bytes =
            b"{\"id\":1,\"title\":\"A\",\"text\":\"a\"}\n{\"id\":2,\"title\":\"\xff\",\"text\":\"b\"}\n".to_vec();
        bytes.extend_from_slice(b"{\"id\":3,\"title\":\"C\",\"text\":\"c\"}\n");
        std::fs::write(&p, bytes).unwrap();
        let err = for_each_doc(&p, OnBadLine::Stop, &mut 0, |_, _| Ok(true)).unwrap_err();
        assert!(format!("{err:#}").contains("c.jsonl:2: not UTF-8"), "{err:#}");
        let (mut ids, mut skipped) = (Vec::new(), 0);
        for_each_doc(&p, OnBadLine::Skip, &mut skipped, |d, o| {
            ids.push((d.id, o.line));
            Ok(true)
        })
        .unwrap();
        assert_eq!((ids, skipped), (vec![("1".to_string(), 1), ("3".to_string(), 3)], 1));
    }
}
