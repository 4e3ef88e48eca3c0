//! Every `ragtime ...` command written in the README, the docs (the results' reproduction commands included), the
//! scripts and the configs names a subcommand the binary has, only flags that its `--help` lists, and, by name,
//! only methods and dataset specs that ship (`configs/`, `datasets/`), so a flag or a file renamed cannot leave a
//! result behind whose command no longer reproduces it.
//! `docs/results/probe-bad-inputs.md` is left out: it records bad command lines on purpose.
#![allow(clippy::disallowed_methods)] // a test looks at paths directly (clippy.toml)

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::LazyLock;

use regex::Regex;

/// A long flag, `--name`.
static FLAG: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"--[a-z0-9][a-z0-9-]*").unwrap());
/// Where a command starts: the word `ragtime` (alone or at the end of a path) and the subcommand after it.
static START: LazyLock<Regex> = LazyLock::new(|| Regex::new(r#"(?:^|[\s`(/"'])ragtime\s+([a-z]\S*)"#).unwrap());

/// What one (sub)command's `--help` offers.
#[derive(Debug, Clone, Default)]
struct Help {
    flags: BTreeSet<String>,
    subcommands: BTreeSet<String>,
}

impl Help {
    /// Read from `--help` text: every `--flag` it mentions, and the names listed under `Commands:`.
    fn parse(text: &str) -> Help {
        let flags = FLAG.find_iter(text).map(|m| m.as_str().to_string()).collect();
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
        for m in START.captures_iter(&line) {
            let from = m.get(1).unwrap().start();
            let rest = &line[from..];
            let end = rest.find(['`', ';', '|', '&', ')', '>', '<']).unwrap_or(rest.len());
            let rest = rest[..end].split(" #").next().unwrap_or("");
            out.push((at, rest.split_whitespace().map(str::to_string).collect()));
        }
    }
    out
}

/// The methods (`configs/NAME.toml`) and dataset specs (`datasets/NAME.toml`) that ship with ragtime: what a
/// `--trigger`, `--triggers` or `--dataset` given by name must be one of.
#[derive(Debug, Default)]
struct Shipped {
    triggers: BTreeSet<String>,
    datasets: BTreeSet<String>,
}

impl Shipped {
    fn read(root: &Path) -> Shipped {
        let stems = |dir: &str| -> BTreeSet<String> {
            std::fs::read_dir(root.join(dir))
                .unwrap()
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "toml"))
                .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
                .collect()
        };
        Shipped { triggers: stems("configs"), datasets: stems("datasets") }
    }

    /// What is wrong with the value of `flag`: a name (lower-case letters, digits and dashes; a placeholder such
    /// as `NAME`, a `$VARIABLE`, a path or `...` is no name) that ships with no method or dataset spec.
    fn problem(&self, flag: &str, value: &str) -> Option<String> {
        let is_name =
            |v: &str| !v.is_empty() && v.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        let (known, what) = match flag {
            "--trigger" | "--triggers" => (&self.triggers, "method config in configs/"),
            "--dataset" => (&self.datasets, "dataset spec in datasets/"),
            _ => return None,
        };
        let unknown: Vec<&str> = value.split(',').filter(|v| is_name(v) && !known.contains(*v)).collect();
        (!unknown.is_empty()).then(|| format!("{flag} {}: no {what}", unknown.join(",")))
    }
}

/// What is wrong with one command's words, given each (sub)command's help and what ships; `None` for prose that
/// merely follows the word "ragtime" (its first word no subcommand).
fn problems(words: &[String], help: &mut dyn FnMut(&[String]) -> Help, shipped: &Shipped) -> Option<Vec<String>> {
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
    let mut found = Vec::new();
    for (i, w) in rest.iter().enumerate() {
        let Some(flag) = FLAG.find(w).filter(|m| m.start() == 0).map(|m| m.as_str()) else { continue };
        if !h.flags.contains(flag) {
            found.push(format!("no flag {flag}"));
            continue;
        }
        let value = match w.split_once('=') {
            Some((_, v)) => Some(v),
            None => rest.get(i + 1).map(String::as_str),
        };
        found.extend(value.and_then(|v| shipped.problem(flag, v)));
    }
    Some(found.into_iter().map(|p| format!("`ragtime {}`: {p}", path.join(" "))).collect())
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
    let shipped = Shipped::read(root);
    assert!(shipped.triggers.contains("rind") && shipped.datasets.contains("hotpotqa"), "{shipped:?}");
    let (mut checked, mut wrong) = (0, Vec::new());
    for file in files(root) {
        let text = std::fs::read_to_string(&file).unwrap();
        for (line, words) in commands(&text) {
            let Some(found) = problems(&words, &mut help, &shipped) else { continue };
            checked += 1;
            let shown = file.strip_prefix(root).unwrap().display().to_string();
            wrong.extend(found.into_iter().map(|p| format!("{shown}:{line}: {p}")));
        }
    }
    eprintln!("{checked} commands checked");
    assert!(checked > 300, "the commands were found: {checked}");
    assert!(wrong.is_empty(), "{} commands the binary would refuse:\n{}", wrong.len(), wrong.join("\n"));
}

/// The checker on a hand-made page and a made-up binary (eval with --trigger, --dataset and --limit; synth with
/// one subcommand, hallucination, taking --wiki) that ships the methods rind and etc and the dataset hotpotqa: a
/// flag the help lacks, a misspelt subcommand, an unknown method or dataset by name (a path, a placeholder or a
/// variable passes), a continued line reported at its first line, and prose, a pipe, a comment and inline code's
/// end each ending a command.
#[test]
fn the_checker_finds_what_the_binary_would_refuse() {
    let page = "Run `ragtime eval --trigger rind --limit 5` then ragtime eval --trigger rind --top 3 | head.\n\
                ragtime is fast; ragtime synth hallucinatoin --wiki d\n\
                ragtime synth hallucination \\\n  --wiki d \\\n  --wikii e # --nope\n\
                target/release/ragtime eval --limit=2 > out.txt --ignored\n\
                ragtime eval --trigger rnd --dataset=hotpotqa; ragtime eval --trigger rind,etc,flare --dataset hotpot\n\
                ragtime eval --trigger $T --dataset ../x/y.toml; ragtime eval --trigger NAME --dataset NAME\n";
    let mut help = |path: &[String]| {
        let text = match path.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
            [] => "Commands:\n  eval  Answer\n  synth  Make\n  help  Print\n\nOptions:\n  -h, --help\n",
            ["eval"] => {
                "Options:\n      --trigger <T>\n      --dataset <D>\n      --limit <N>  (see `ragtime sweep --batch`)\n"
            }
            ["synth"] => "Commands:\n  hallucination  Labels\n\nOptions:\n  -h, --help\n",
            ["synth", "hallucination"] => "Options:\n      --wiki <DIR>\n",
            other => panic!("{other:?}"),
        };
        Help::parse(text)
    };
    let shipped =
        Shipped { triggers: ["rind", "etc"].map(String::from).into(), datasets: ["hotpotqa"].map(String::from).into() };
    let found: Vec<(usize, Vec<String>)> = commands(page)
        .into_iter()
        .filter_map(|(line, words)| Some((line, problems(&words, &mut help, &shipped)?)))
        .filter(|(_, p)| !p.is_empty())
        .collect();
    assert_eq!(
        found,
        vec![
            (1, vec!["`ragtime eval`: no flag --top".to_string()]),
            (2, vec!["`ragtime synth hallucinatoin`: no such subcommand".to_string()]),
            (3, vec!["`ragtime synth hallucination`: no flag --wikii".to_string()]),
            (7, vec!["`ragtime eval`: --trigger rnd: no method config in configs/".to_string()]),
            (
                7,
                vec![
                    "`ragtime eval`: --trigger flare: no method config in configs/".to_string(),
                    "`ragtime eval`: --dataset hotpot: no dataset spec in datasets/".to_string()
                ]
            ),
        ]
    );
    // every command was read, and prose ("ragtime is fast") passed over
    assert_eq!(commands(page).len(), 10);
    assert_eq!(commands(page).iter().filter(|(_, w)| problems(w, &mut help, &shipped).is_none()).count(), 1);
    assert_eq!(commands(page)[5], (6, vec!["eval".to_string(), "--limit=2".to_string()]));
}
