//! Every `ragtime ...` command written in the README, the docs (the results' reproduction commands included), the
//! scripts and the configs names a subcommand the binary has and only flags that its `--help` lists, so a flag
//! renamed in the code cannot leave a result behind whose command no longer reproduces it.
//! `docs/results/probe-bad-inputs.md` is left out: it records bad command lines on purpose.
#![allow(clippy::disallowed_methods)] // a test looks at paths directly (clippy.toml)

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use regex::Regex;

/// What one (sub)command's `--help` offers.
#[derive(Debug, Clone, Default)]
struct Help {
    flags: BTreeSet<String>,
    subcommands: BTreeSet<String>,
}

impl Help {
    /// Read from `--help` text: every `--flag` it mentions, and the names listed under `Commands:`.
    fn parse(text: &str) -> Help {
        let flag = Regex::new(r"--[a-z0-9][a-z0-9-]*").unwrap();
        let flags = flag.find_iter(text).map(|m| m.as_str().to_string()).collect();
        let subcommands = text
            .split_once("Commands:\n")
            .map(|(_, rest)| {
                rest.lines()
                    .take_while(|l| l.starts_with("  "))
                    .filter_map(|l| l.split_whitespace().next())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        Help { flags, subcommands }
    }
}

/// The words of each `ragtime ...` command in `text` (lines continued with `\` joined), with its line number:
/// the words after `ragtime` up to the end of the command (a shell separator, a redirection, a comment or the end
/// of inline code).
fn commands(text: &str) -> Vec<(usize, Vec<String>)> {
    let start = Regex::new(r#"(?:^|[\s`(/"'])ragtime\s+([a-z]\S*)"#).unwrap();
    let mut out = Vec::new();
    let mut number = 0;
    let mut lines = text.lines().peekable();
    while let Some(first) = lines.next() {
        number += 1;
        let at = number;
        let mut line = first.to_string();
        while line.ends_with('\\') {
            line.pop();
            match lines.next() {
                Some(next) => {
                    number += 1;
                    line.push(' ');
                    line.push_str(next);
                }
                None => break,
            }
        }
        for m in start.captures_iter(&line) {
            let from = m.get(1).unwrap().start();
            let rest = &line[from..];
            let end = rest.find(['`', ';', '|', '&', ')', '>', '<']).unwrap_or(rest.len());
            let rest = rest[..end].split(" #").next().unwrap_or("");
            out.push((at, rest.split_whitespace().map(str::to_string).collect()));
        }
    }
    out
}

/// What is wrong with one command's words, given each (sub)command's help; `None` for prose that merely follows
/// the word "ragtime" (its first word no subcommand).
fn problems(words: &[String], help: &mut dyn FnMut(&[String]) -> Help) -> Option<Vec<String>> {
    let top = help(&[]);
    let first = words.first().filter(|w| top.subcommands.contains(*w) && *w != "help")?;
    let mut path = vec![first.clone()];
    let mut h = help(&path);
    let mut rest = &words[1..];
    if !h.subcommands.is_empty() {
        match rest.first() {
            Some(w) if h.subcommands.contains(w) => {
                path.push(w.clone());
                h = help(&path);
                rest = &rest[1..];
            }
            Some(w) if !w.starts_with('-') => return Some(vec![format!("`ragtime {first} {w}`: no such subcommand")]),
            _ => {}
        }
    }
    let name = Regex::new(r"^--[a-z0-9][a-z0-9-]*").unwrap();
    let unknown =
        rest.iter().filter_map(|w| name.find(w).map(|m| m.as_str().to_string())).filter(|f| !h.flags.contains(f));
    Some(unknown.map(|f| format!("`ragtime {}`: no flag {f}", path.join(" "))).collect())
}

/// `--help` of the binary's (sub)command `path`.
fn binary_help(path: &[String]) -> Help {
    let out = Command::new(env!("CARGO_BIN_EXE_ragtime")).args(path).arg("--help").output().expect("runs the binary");
    assert!(out.status.success(), "ragtime {} --help", path.join(" "));
    Help::parse(&String::from_utf8_lossy(&out.stdout))
}

/// The files whose commands are checked, below the repository root.
fn files(root: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, ext: &[&str], out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, ext, out);
            } else if p.extension().and_then(|x| x.to_str()).is_some_and(|x| ext.contains(&x)) {
                out.push(p);
            }
        }
    }
    let mut out = vec![root.join("README.md")];
    walk(&root.join("docs"), &["md"], &mut out);
    walk(&root.join("scripts"), &["sh", "py"], &mut out);
    walk(&root.join("configs"), &["toml"], &mut out);
    walk(&root.join("datasets"), &["toml"], &mut out);
    out.retain(|p| !p.ends_with("docs/results/probe-bad-inputs.md"));
    out.sort();
    out
}

#[test]
fn every_documented_command_uses_flags_the_binary_has() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut cache: HashMap<Vec<String>, Help> = HashMap::new();
    let mut help = |path: &[String]| cache.entry(path.to_vec()).or_insert_with(|| binary_help(path)).clone();
    let (mut checked, mut wrong) = (0, Vec::new());
    for file in files(root) {
        let text = std::fs::read_to_string(&file).unwrap();
        for (line, words) in commands(&text) {
            let Some(found) = problems(&words, &mut help) else { continue };
            checked += 1;
            let shown = file.strip_prefix(root).unwrap().display().to_string();
            wrong.extend(found.into_iter().map(|p| format!("{shown}:{line}: {p}")));
        }
    }
    eprintln!("{checked} commands checked");
    assert!(checked > 300, "the commands were found: {checked}");
    assert!(wrong.is_empty(), "{} commands the binary would refuse:\n{}", wrong.len(), wrong.join("\n"));
}

/// The checker on a hand-made page and a made-up binary (eval with --trigger and --limit; synth with one
/// subcommand, hallucination, taking --wiki): a flag the help lacks, a misspelt subcommand, a continued line
/// reported at its first line, and prose, a pipe, a comment and inline code's end each ending a command.
#[test]
fn the_checker_finds_what_the_binary_would_refuse() {
    let page = "Run `ragtime eval --trigger rind --limit 5` then ragtime eval --trigger rind --top 3 | head.\n\
                ragtime is fast; ragtime synth hallucinatoin --wiki d\n\
                ragtime synth hallucination \\\n  --wiki d \\\n  --wikii e # --nope\n\
                target/release/ragtime eval --limit=2 > out.txt --ignored\n";
    let mut help = |path: &[String]| {
        let text = match path.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
            [] => "Commands:\n  eval  Answer\n  synth  Make\n  help  Print\n\nOptions:\n  -h, --help\n",
            ["eval"] => "Options:\n      --trigger <T>\n      --limit <N>  (see `ragtime sweep --batch`)\n",
            ["synth"] => "Commands:\n  hallucination  Labels\n\nOptions:\n  -h, --help\n",
            ["synth", "hallucination"] => "Options:\n      --wiki <DIR>\n",
            other => panic!("{other:?}"),
        };
        Help::parse(text)
    };
    let found: Vec<(usize, Vec<String>)> = commands(page)
        .into_iter()
        .filter_map(|(line, words)| Some((line, problems(&words, &mut help)?)))
        .filter(|(_, p)| !p.is_empty())
        .collect();
    assert_eq!(
        found,
        vec![
            (1, vec!["`ragtime eval`: no flag --top".to_string()]),
            (2, vec!["`ragtime synth hallucinatoin`: no such subcommand".to_string()]),
            (3, vec!["`ragtime synth hallucination`: no flag --wikii".to_string()]),
        ]
    );
    // every command was read, and prose ("ragtime is fast") passed over
    assert_eq!(commands(page).len(), 6);
    assert_eq!(commands(page).iter().filter(|(_, w)| problems(w, &mut help).is_none()).count(), 1);
    assert_eq!(commands(page)[5], (6, vec!["eval".to_string(), "--limit=2".to_string()]));
}
