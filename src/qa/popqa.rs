//! PopQA: a table (TSV or CSV with a header row, RFC 4180 quoting) or JSON lines, with the columns `question`,
//! `possible_answers` (a JSON list written as a string, as in the released popQA.tsv; a real list in JSON lines)
//! or `answers`, and `s_wiki_title` (the subject's Wikipedia title; read but not needed for scoring). The id is the
//! `id` column when present and not blank, else the 0-based row index.

use std::path::Path;

use anyhow::{bail, Result};
use serde_json::Value;

use super::{id_or_index, non_empty_answers, read_jsonl, read_text, str_field, str_list, AnswerKind, At, Example};

/// A parsed CSV row: its line number and fields.
type CsvRow = (usize, Vec<String>);

pub fn load(path: &Path) -> Result<Vec<Example>> {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
    match ext.as_str() {
        "tsv" => load_table(path, b'\t'),
        "csv" => load_table(path, b','),
        _ => load_jsonl(path),
    }
}

fn answers_of(v: &Value, at: &At) -> Result<Vec<String>> {
    let key = if v.get("possible_answers").is_some() { "possible_answers" } else { "answers" };
    match v.get(key) {
        Some(Value::String(s)) if s.trim_start().starts_with('[') => {
            let parsed: Value =
                serde_json::from_str(s).map_err(|e| anyhow::anyhow!("{at}: '{key}' is not a JSON list: {e}"))?;
            str_list(&serde_json::json!({ key: parsed }), key, at)
        }
        Some(_) => str_list(v, key, at),
        None => bail!("{at}: missing field 'possible_answers' (or 'answers')"),
    }
}

fn example(v: &Value, index: usize, at: &At) -> Result<Example> {
    let id = match v.get("id") {
        // a table's blank cell
        Some(Value::String(s)) if s.is_empty() => index.to_string(),
        _ => id_or_index(v, &["id"], at)?,
    };
    Ok(Example::bare(id, str_field(v, "question", at)?, non_empty_answers(answers_of(v, at)?, at)?, AnswerKind::Span))
}

fn load_jsonl(path: &Path) -> Result<Vec<Example>> {
    read_jsonl(path)?
        .into_iter()
        .enumerate()
        .map(|(index, (line, v))| example(&v, index, &At { path, line: Some(line), index }))
        .collect()
}

fn load_table(path: &Path, delim: u8) -> Result<Vec<Example>> {
    let text = read_text(path)?;
    let rows =
        parse_delimited(&text, delim).map_err(|(line, msg)| anyhow::anyhow!("{}:{line}: {msg}", path.display()))?;
    let mut rows = rows.into_iter();
    let Some((_, header)) = rows.next() else { bail!("{}: empty file", path.display()) };
    if !header.iter().any(|h| h == "question") {
        bail!("{}:1: header has no 'question' column (found: {})", path.display(), header.join(", "));
    }
    let mut out = Vec::new();
    for (index, (line, row)) in rows.enumerate() {
        let at = At { path, line: Some(line), index };
        if row.len() != header.len() {
            bail!("{at}: {} fields, the header has {}", row.len(), header.len());
        }
        let obj: serde_json::Map<String, Value> =
            header.iter().cloned().zip(row.into_iter().map(Value::String)).collect();
        out.push(example(&Value::Object(obj), index, &at)?);
    }
    Ok(out)
}

/// Splits delimited text into rows of fields: `(1-based line where the row starts, fields)`. Fields may be quoted
/// with `"` (a doubled `""` inside is one quote; quoted fields may hold delimiters and newlines). Blank lines are
/// skipped. Errors give the line and what is wrong.
pub(crate) fn parse_delimited(text: &str, delim: u8) -> std::result::Result<Vec<CsvRow>, (usize, String)> {
    let delim = delim as char;
    let mut rows = Vec::new();
    let mut line = 1usize;
    let mut chars = text.chars().peekable();
    while chars.peek().is_some() {
        let start = line;
        let mut fields = Vec::new();
        let mut field = String::new();
        let mut in_quotes = false;
        let mut was_quoted = false;
        loop {
            let Some(c) = chars.next() else {
                if in_quotes {
                    return Err((start, "unterminated quoted field".into()));
                }
                break;
            };
            if in_quotes {
                match c {
                    '"' if chars.peek() == Some(&'"') => {
                        chars.next();
                        field.push('"');
                    }
                    '"' => in_quotes = false,
                    '\n' => {
                        line += 1;
                        field.push(c);
                    }
                    _ => field.push(c),
                }
            } else if c == '"' && field.is_empty() && !was_quoted {
                in_quotes = true;
                was_quoted = true;
            } else if c == delim {
                fields.push(std::mem::take(&mut field));
                was_quoted = false;
            } else if c == '\n' {
                line += 1;
                break;
            } else if c == '\r' && chars.peek() == Some(&'\n') {
                continue;
            } else {
                if was_quoted {
                    return Err((start, "text after a closing quote".into()));
                }
                field.push(c);
            }
        }
        fields.push(field);
        if !(fields.len() == 1 && fields[0].is_empty() && !was_quoted) {
            rows.push((start, fields));
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_tsv_with_quoted_json_answers() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("popQA.tsv");
        std::fs::write(&p, "id\tsubj\tprop\ts_wiki_title\tquestion\tpossible_answers\n\
            4222362\tGeorge Rankin\toccupation\tGeorge Rankin\tWhat is George Rankin's occupation?\t\"[\"\"politician\"\", \"\"political leader\"\"]\"\n\
            \n\
            7\tX\tcapital\tX\tWhat is the capital of X?\t[\"Y\"]\n").unwrap();
        let ex = load(&p).unwrap();
        assert_eq!(ex.len(), 2);
        assert_eq!(ex[0].id, "4222362");
        assert_eq!(ex[0].answers, vec!["politician", "political leader"]);
        assert_eq!(ex[1].answers, vec!["Y"]);
    }

    #[test]
    fn reads_csv_and_jsonl() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("popqa.csv");
        std::fs::write(
            &p,
            "question,answers,s_wiki_title\r\n\"Who wrote \"\"X\"\", the book?\",\"[\"\"A, B\"\"]\",X\r\n",
        )
        .unwrap();
        let ex = load(&p).unwrap();
        assert_eq!(ex[0].question, "Who wrote \"X\", the book?");
        assert_eq!(ex[0].answers, vec!["A, B"]);
        assert_eq!(ex[0].id, "0");
        let j = dir.path().join("popqa.jsonl");
        std::fs::write(&j, "{\"question\":\"q\",\"possible_answers\":\"[\\\"a\\\"]\",\"s_wiki_title\":\"T\"}\n{\"question\":\"q2\",\"answers\":[\"b\"],\"s_wiki_title\":\"T\"}\n").unwrap();
        let ex = load(&j).unwrap();
        assert_eq!((ex[0].answers[0].as_str(), ex[1].answers[0].as_str()), ("a", "b"));
    }

    #[test]
    fn ragged_row_names_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.tsv");
        std::fs::write(&p, "question\tpossible_answers\nq1\t[\"a\"]\nq2\n").unwrap();
        let err = format!("{:#}", load(&p).unwrap_err());
        assert!(err.contains("p.tsv:3: 1 fields, the header has 2"), "{err}");
        std::fs::write(&p, "question\tpossible_answers\nq1\t[\"a\"\n").unwrap();
        let err = format!("{:#}", load(&p).unwrap_err());
        assert!(err.contains("p.tsv:2") && err.contains("not a JSON list"), "{err}");
    }
}
