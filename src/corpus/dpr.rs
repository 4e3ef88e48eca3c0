//! DPR's passage file `psgs_w100.tsv`: one passage a line, `id\ttext\ttitle`, with an optional header
//! line `id\ttext\ttitle`. Plain or `.bz2`.
//!
//! DPR wrote the file with Python's `csv` module, so a `text` (or `title`) field containing a quote is
//! wrapped in double quotes with inner quotes doubled (`"He said ""hi"""`); such fields are unquoted
//! here. Fields never contain tabs or newlines, so a line is always one passage.

use std::path::Path;

use anyhow::Result;

use super::wikiextractor::Origin;
use super::{for_each_line, OnBadLine};

/// One row of a DPR passage file.
#[derive(Debug, Clone, PartialEq)]
pub struct DprRow {
    pub id: String,
    pub text: String,
    pub title: String,
}

/// Parse one line (without its newline). `Err` says what is wrong with it.
pub fn parse_line(line: &str) -> std::result::Result<DprRow, String> {
    let line = line.strip_suffix('\r').unwrap_or(line);
    let mut parts = line.split('\t');
    let (Some(id), Some(text), Some(title)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(format!("expected 3 tab-separated fields (id, text, title), found {}", line.split('\t').count()));
    };
    if parts.next().is_some() {
        return Err(format!("expected 3 tab-separated fields (id, text, title), found {}", line.split('\t').count()));
    }
    let id = id.trim();
    if id.is_empty() {
        return Err("empty passage id".to_string());
    }
    Ok(DprRow { id: id.to_string(), text: unquote(text), title: unquote(title) })
}

/// Undo Python `csv` quoting: `"a ""b"""` -> `a "b"`. Unquoted fields are returned as they are.
fn unquote(field: &str) -> String {
    if field.len() >= 2 && field.starts_with('"') && field.ends_with('"') {
        field[1..field.len() - 1].replace("\"\"", "\"")
    } else {
        field.to_string()
    }
}

fn is_header(line: &str) -> bool {
    let mut p = line.trim_end().split('\t');
    matches!((p.next(), p.next(), p.next()), (Some("id"), Some("text"), Some("title")))
}

/// Stream the rows of one DPR file to `f` (`Ok(false)` stops). Lines that do not parse stop the read
/// with an error naming file and line, or with [`OnBadLine::Skip`] are reported on stderr and counted
/// in `skipped`. Blank lines are ignored.
pub fn for_each_row(
    file: &Path,
    on_bad: OnBadLine,
    skipped: &mut u64,
    f: impl FnMut(DprRow, &Origin) -> Result<bool>,
) -> Result<bool> {
    let parse = |lineno: usize, line: &str| {
        if line.trim().is_empty() || (lineno == 1 && is_header(line)) {
            None
        } else {
            Some(parse_line(line))
        }
    };
    for_each_line(file, on_bad, skipped, parse, f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_and_csv_quoted_fields() {
        let r = parse_line("12\t\"Aaron ( or ; \"\"Ahärôn\"\") is a prophet\"\tAaron").unwrap();
        assert_eq!(
            r,
            DprRow { id: "12".into(), text: "Aaron ( or ; \"Ahärôn\") is a prophet".into(), title: "Aaron".into() }
        );
        let r = parse_line("3\tplain text\tTitle\r").unwrap();
        assert_eq!(r.title, "Title");
        assert!(parse_line("3\tonly two").unwrap_err().contains("found 2"));
        assert!(parse_line("3\ta\tb\tc").unwrap_err().contains("found 4"));
    }

    #[test]
    fn header_is_optional_and_bad_lines_are_counted_or_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("psgs.tsv");
        std::fs::write(&p, "id\ttext\ttitle\n1\tt one\tA\nbroken line\n2\tt two\tB\n").unwrap();
        let mut ids = Vec::new();
        let mut skipped = 0;
        for_each_row(&p, OnBadLine::Skip, &mut skipped, |r, o| {
            ids.push((r.id, o.line));
            Ok(true)
        })
        .unwrap();
        assert_eq!(ids, vec![("1".to_string(), 2), ("2".to_string(), 4)]);
        assert_eq!(skipped, 1);
        let err = for_each_row(&p, OnBadLine::Stop, &mut 0, |_, _| Ok(true)).unwrap_err();
        assert!(format!("{err:#}").contains("psgs.tsv:3: expected 3"), "{err:#}");
        // Without a header the first line is a passage.
        std::fs::write(&p, "7\tseven\tS\n").unwrap();
        let mut n = 0;
        for_each_row(&p, OnBadLine::Stop, &mut 0, |_, _| {
            n += 1;
            Ok(true)
        })
        .unwrap();
        assert_eq!(n, 1);
    }
}
