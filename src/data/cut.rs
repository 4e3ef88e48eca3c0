//! Re-laying out a downloaded file as the shared copy is laid out, byte for byte, so its checksum can be checked:
//! the first lines of JSON lines, or a JSON array's / object's entries written as Python's `json.dump` does.

use anyhow::{bail, Result};

/// Cuts a downloaded text: the first `first` lines (JSON lines), or a JSON array's / object's entries minus the
/// keys in `drop` and then the first `first`, re-laid out as Python's `json.dump(indent=1, ensure_ascii=False)`
/// writes it (the layout of the shared derived files; their sources use 4-space indentation and, for PubMedQA,
/// `\uXXXX` escapes).
pub fn cut(text: &str, is_lines: bool, drop: &[String], first: Option<usize>) -> Result<String> {
    if is_lines {
        if !drop.is_empty() {
            bail!("drop_keys_of applies to a JSON object, not to JSON lines");
        }
        let n = first.unwrap_or(usize::MAX);
        let mut out = String::new();
        let mut count = 0;
        for line in text.split_inclusive('\n') {
            if count == n {
                break;
            }
            out.push_str(line);
            count += 1;
        }
        if count < n && first.is_some() {
            bail!("has {count} lines, fewer than the {n} to keep");
        }
        return Ok(out);
    }
    let (open, entries) = json::top_level(text)?;
    let mut kept: Vec<&json::Entry> = entries
        .iter()
        .filter(|e| match &e.key {
            Some(k) => !drop.iter().any(|d| json::key_equals(k, d)),
            None => true,
        })
        .collect();
    if !drop.is_empty() && open != b'{' {
        bail!("drop_keys_of applies to a JSON object, not to an array");
    }
    if let Some(n) = first {
        if kept.len() < n {
            bail!("has {} entries, fewer than the {n} to keep", kept.len());
        }
        kept.truncate(n);
    }
    let close = if open == b'{' { '}' } else { ']' };
    if kept.is_empty() {
        return Ok(format!("{}{close}", open as char));
    }
    let mut out = String::new();
    out.push(open as char);
    for (i, e) in kept.iter().enumerate() {
        out.push_str(if i == 0 { "\n " } else { ",\n " });
        if let Some(k) = &e.key {
            json::write_string(k, &mut out);
            out.push_str(": ");
        }
        json::reindent(e.value, 1, &mut out);
    }
    out.push('\n');
    out.push(close);
    Ok(out)
}

/// A minimal JSON scanner that keeps keys in order and numbers byte for byte, and writes strings as Python's
/// `json.dump(ensure_ascii=False)` does (`\u0394` becomes `Δ`; quotes, backslashes and control characters
/// stay escaped). A parse into `serde_json::Value` would sort the keys, and the checksums are of exact bytes.
mod json {
    use anyhow::{bail, Result};

    /// One top-level entry: its raw key (with quotes) for objects, and its raw value.
    pub struct Entry<'a> {
        pub key: Option<&'a str>,
        pub value: &'a str,
    }

    /// Whether a raw quoted key is the string `s` (keys with escapes compare unescaped).
    pub fn key_equals(raw: &str, s: &str) -> bool {
        serde_json::from_str::<String>(raw).is_ok_and(|k| k == s)
    }

    /// Writes a raw quoted string re-escaped the way Python's `ensure_ascii=False` escapes (serde_json's string
    /// escapes are the same set); a string that does not decode (a lone surrogate escape) is kept as it is.
    pub fn write_string(raw: &str, out: &mut String) {
        match serde_json::from_str::<String>(raw).ok().and_then(|s| serde_json::to_string(&s).ok()) {
            Some(s) => out.push_str(&s),
            None => out.push_str(raw),
        }
    }

    fn skip_ws(b: &[u8], mut i: usize) -> usize {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    }

    /// End (exclusive) of the string starting at `i` (a `"`).
    fn string_end(b: &[u8], mut i: usize) -> Result<usize> {
        i += 1;
        while i < b.len() {
            match b[i] {
                b'\\' => i += 2,
                b'"' => return Ok(i + 1),
                _ => i += 1,
            }
        }
        bail!("unterminated JSON string")
    }

    /// End (exclusive) of the value starting at `i`.
    fn value_end(b: &[u8], i: usize) -> Result<usize> {
        match b.get(i) {
            None => bail!("JSON ends where a value was expected"),
            Some(b'"') => string_end(b, i),
            Some(b'{') | Some(b'[') => {
                let mut depth = 0usize;
                let mut j = i;
                while j < b.len() {
                    match b[j] {
                        b'"' => {
                            j = string_end(b, j)?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                return Ok(j + 1);
                            }
                        }
                        _ => {}
                    }
                    j += 1;
                }
                bail!("unterminated JSON array or object")
            }
            Some(_) => {
                let mut j = i;
                while j < b.len() && !matches!(b[j], b',' | b'}' | b']') && !b[j].is_ascii_whitespace() {
                    j += 1;
                }
                Ok(j)
            }
        }
    }

    /// The entries of a top-level array or object, and its opening byte.
    pub fn top_level(text: &str) -> Result<(u8, Vec<Entry<'_>>)> {
        let b = text.as_bytes();
        let mut i = skip_ws(b, 0);
        let open = match b.get(i) {
            Some(&c @ (b'[' | b'{')) => c,
            _ => bail!("not a JSON array or object"),
        };
        let close = if open == b'{' { b'}' } else { b']' };
        let mut entries = Vec::new();
        i = skip_ws(b, i + 1);
        if b.get(i) == Some(&close) {
            return Ok((open, entries));
        }
        loop {
            let key = if open == b'{' {
                if b.get(i) != Some(&b'"') {
                    bail!("expected a key at byte {i}");
                }
                let e = string_end(b, i)?;
                let k = &text[i..e];
                i = skip_ws(b, e);
                if b.get(i) != Some(&b':') {
                    bail!("expected ':' at byte {i}");
                }
                i = skip_ws(b, i + 1);
                Some(k)
            } else {
                None
            };
            let e = value_end(b, i)?;
            entries.push(Entry { key, value: &text[i..e] });
            i = skip_ws(b, e);
            match b.get(i) {
                Some(b',') => i = skip_ws(b, i + 1),
                Some(&c) if c == close => break,
                _ => bail!("expected ',' or '{}' at byte {i}", close as char),
            }
        }
        if skip_ws(b, i + 1) != b.len() {
            bail!("text after the top-level JSON value");
        }
        Ok((open, entries))
    }

    /// Writes `raw` (one JSON value) with `level`-space indentation, one item a line, `": "` after keys, and
    /// empty arrays and objects as `[]` and `{}`.
    pub fn reindent(raw: &str, level: usize, out: &mut String) {
        let b = raw.as_bytes();
        let mut depth = level;
        let mut i = 0;
        let newline = |out: &mut String, d: usize| {
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', d));
        };
        while i < b.len() {
            match b[i] {
                b'"' => {
                    let e = string_end(b, i).unwrap_or(b.len());
                    write_string(&raw[i..e], out);
                    i = e;
                    continue;
                }
                c @ (b'{' | b'[') => {
                    let j = skip_ws(b, i + 1);
                    if matches!(b.get(j), Some(b'}') | Some(b']')) {
                        out.push(c as char);
                        out.push(b[j] as char);
                        i = j + 1;
                        continue;
                    }
                    out.push(c as char);
                    depth += 1;
                    newline(out, depth);
                }
                c @ (b'}' | b']') => {
                    depth -= 1;
                    newline(out, depth);
                    out.push(c as char);
                }
                b',' => {
                    out.push(',');
                    newline(out, depth);
                }
                b':' => out.push_str(": "),
                c if c.is_ascii_whitespace() => {}
                _ => {
                    // a number, true, false or null: copy to the next structural byte
                    let s = i;
                    while i < b.len() && !matches!(b[i], b',' | b'}' | b']' | b':') && !b[i].is_ascii_whitespace() {
                        i += 1;
                    }
                    out.push_str(&raw[s..i]);
                    continue;
                }
            }
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_keeps_first_lines() {
        assert_eq!(cut("a\nb\nc\n", true, &[], Some(2)).unwrap(), "a\nb\n");
        assert!(cut("a\n", true, &[], Some(2)).unwrap_err().to_string().contains("fewer than the 2"));
    }

    #[test]
    fn cut_relays_out_json_like_python_indent_1() {
        let src = "[\n    {\n        \"id\": 1,\n        \"a\": [\n            \"x, y\",\n            \"\\\"q\\\" \\u0394\\u03a8m\\t\\/\"\n        ],\n        \"e\": [],\n        \"f\": -1.5e3\n    },\n    {\"id\": 2}\n]";
        let want = "[\n {\n  \"id\": 1,\n  \"a\": [\n   \"x, y\",\n   \"\\\"q\\\" ΔΨm\\t/\"\n  ],\n  \"e\": [],\n  \"f\": -1.5e3\n }\n]";
        assert_eq!(cut(src, false, &[], Some(1)).unwrap(), want);
        let obj = "{\"1\": {\"q\": \"a\"}, \"2\": {\"q\": \"b\"}, \"3\": {}}";
        assert_eq!(cut(obj, false, &["2".into()], None).unwrap(), "{\n \"1\": {\n  \"q\": \"a\"\n },\n \"3\": {}\n}");
        assert!(cut("[1, 2]", false, &[], Some(3)).unwrap_err().to_string().contains("fewer than the 3"));
        assert!(cut("[1, 2", false, &[], None).is_err());
    }

    #[test]
    fn cut_reproduces_the_shared_derived_files() {
        // The shared 2Wiki and PubMedQA files are cuts written with indent=1: re-laying them out is the identity.
        for rel in ["qa/2wikimultihopqa/dev_100.json", "qa/pubmedqa/pqal_dev_500.json"] {
            let Some(p) = crate::testing::require(rel) else { return };
            let text = std::fs::read_to_string(&p).unwrap();
            assert_eq!(cut(&text, false, &[], None).unwrap(), text, "{rel}");
        }
    }
}
