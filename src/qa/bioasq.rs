//! BioASQ Task B golden files ({questions: [{id, body, type, exact_answer, ideal_answer, snippets, ...}]}); a
//! folder is read as every `*.json` below it, sorted by path.
//!
//! Questions with an exact answer are kept: `yesno` (gold yes/no, kind YesNo), `factoid` (every synonym of every
//! listed answer is an alias, kind Span) and `list` (kind List: each entry of `exact_answer` with its synonyms in
//! [`Example::entries`], every synonym also an alias), scored by BioASQ's list precision, recall and F-measure.
//! `summary` questions (no exact answer) are skipped. MIRAGE, which these files come from, evaluates the yes/no
//! questions only (`datasets/bioasq.toml`); `datasets/bioasq-list.toml` reads the list questions. The snippets
//! become context docs (title = the PubMed URL).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::{non_empty_answers, read_json, str_field, AnswerKind, At, Doc, Example};

/// Every `*.json` file below `dir`, sorted by path.
pub fn json_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).with_context(|| format!("{}: cannot list folder", d.display()))? {
            let p = entry?.path();
            if crate::io::is_dir(&p)? {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "json") {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

pub fn load(path: &Path) -> Result<Vec<Example>> {
    if crate::io::is_dir(path)? {
        let files = json_files(path)?;
        if files.is_empty() {
            bail!("{}: no *.json files in folder", path.display());
        }
        let mut out = Vec::new();
        for f in files {
            out.extend(load_file(&f)?);
        }
        return Ok(out);
    }
    load_file(path)
}

fn flatten(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|x| flatten(x, out)),
        _ => {}
    }
}

fn load_file(path: &Path) -> Result<Vec<Example>> {
    let doc = read_json(path)?;
    let Some(Value::Array(questions)) = doc.get("questions") else {
        bail!("{}: expected an object with a 'questions' list", path.display())
    };
    let mut out = Vec::new();
    for (index, q) in questions.iter().enumerate() {
        let at = At { path, line: None, index };
        let mut entries = Vec::new();
        let (kind, answers) = match str_field(q, "type", &at)?.as_str() {
            "yesno" => {
                let a = str_field(q, "exact_answer", &at)?.trim().to_ascii_lowercase();
                if a != "yes" && a != "no" {
                    bail!("{at}: yes/no question with exact_answer '{a}'");
                }
                (AnswerKind::YesNo, vec![a])
            }
            "factoid" => {
                let mut answers = Vec::new();
                flatten(q.get("exact_answer").unwrap_or(&Value::Null), &mut answers);
                (AnswerKind::Span, non_empty_answers(answers, &at)?)
            }
            "list" => {
                let Some(Value::Array(listed)) = q.get("exact_answer") else {
                    bail!("{at}: list question without an exact_answer list");
                };
                for entry in listed {
                    let mut synonyms = Vec::new();
                    flatten(entry, &mut synonyms);
                    let synonyms: Vec<String> =
                        synonyms.iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
                    if !synonyms.is_empty() {
                        entries.push(synonyms);
                    }
                }
                (AnswerKind::List, non_empty_answers(entries.concat(), &at)?)
            }
            "summary" => continue,
            other => bail!("{at}: unknown question type '{other}'"),
        };
        let contexts = match q.get("snippets") {
            Some(Value::Array(s)) => s
                .iter()
                .filter_map(|s| {
                    let text = s.get("text")?.as_str()?.to_string();
                    let title = s.get("document").and_then(Value::as_str).unwrap_or("").to_string();
                    Some(Doc { title, text })
                })
                .collect(),
            _ => vec![],
        };
        out.push(Example {
            id: str_field(q, "id", &at)?,
            question: str_field(q, "body", &at)?,
            answers,
            kind,
            supporting: vec![],
            contexts,
            entries,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_one_file_and_the_folder() {
        let ex = load(&crate::require_data!("qa/bioasq/Task7BGoldenEnriched/7B1_golden.json")).unwrap();
        // 7B1 has 39 factoid + 29 yesno + 12 list (+ 20 summary, skipped), counted with Python.
        assert_eq!(ex.len(), 80);
        assert_eq!(ex.iter().filter(|e| e.kind == AnswerKind::YesNo).count(), 29);
        let f = ex.iter().find(|e| e.id == "5be48c39133db5eb7800001d").unwrap();
        assert_eq!(f.answers, vec!["PD-L1 status"]);
        let all = load(&crate::require_data!("qa/bioasq")).unwrap();
        // 409 yes/no questions in the 15 files (one answers "Yes"), counted with Python.
        assert_eq!(all.iter().filter(|e| e.kind == AnswerKind::YesNo).count(), 409);
        // 260 list questions, 4.0 entries each on average (1,005 in all), counted with Python.
        let lists: Vec<&Example> = all.iter().filter(|e| e.kind == AnswerKind::List).collect();
        assert_eq!((lists.len(), lists.iter().map(|e| e.entries.len()).sum::<usize>()), (260, 1005));
        let l = lists.iter().find(|e| e.id == "5c61f379e842deac67000006").unwrap();
        assert_eq!(l.entries[0], vec!["c.1516C>T", "p.Arg506Ter"]);
        assert_eq!((l.entries.len(), l.answers.len()), (3, 6));
        assert!(ex.iter().all(|e| (e.kind == AnswerKind::List) != e.entries.is_empty()));
    }
}
