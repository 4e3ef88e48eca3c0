//! What the binary says, and which exit code it gives, for a bad command line and for a path the OS refuses:
//! 2 for a request the command line makes that cannot be met (a `--set` typo, an unknown split, an empty
//! prompt), 1 for everything else, and the OS's own reason — never "not found" — for a path that exists but
//! cannot be read.
#![allow(clippy::disallowed_methods)] // a test looks at paths directly (clippy.toml)

mod common;

use std::path::Path;
use std::process::Command;

use common::{model_args, tiny_eval, write_toy_label_store};

/// Exit code and stderr of one run of the binary.
fn run(args: &[&str]) -> (i32, String) {
    run_in(Path::new("."), args)
}

/// [`run`] in the working directory `dir`.
fn run_in(dir: &Path, args: &[&str]) -> (i32, String) {
    let out =
        Command::new(env!("CARGO_BIN_EXE_ragtime")).current_dir(dir).args(args).output().expect("runs the binary");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// `eval --trigger none` of the tiny setting's first question, 4 tokens at most, with `extra` flags.
fn eval_none(s: &common::Setup, extra: &[&str]) -> (i32, String) {
    let mut a: Vec<String> =
        ["eval", "--trigger", "none", "--limit", "1", "--max-new-tokens", "4"].map(String::from).to_vec();
    a.extend(model_args(s));
    a.extend(extra.iter().map(|x| x.to_string()));
    run(&a.iter().map(String::as_str).collect::<Vec<_>>())
}

fn first_error(stderr: &str) -> &str {
    stderr.lines().find(|l| l.starts_with("error:")).unwrap_or("")
}

/// Usage errors found after clap has parsed the flags exit with 2, like clap's own; the message names the flag.
#[test]
fn usage_errors_exit_2() {
    let Some(s) = tiny_eval() else { return };
    let out = s.root.join("never");
    let o = out.to_str().unwrap();
    let eval = |extra: &[&str]| {
        let mut a: Vec<String> = vec!["eval".into(), "--trigger".into(), "rind".into(), "--limit".into(), "1".into()];
        a.extend(model_args(&s));
        a.extend(["--out".to_string(), o.to_string()]);
        a.extend(extra.iter().map(|x| x.to_string()));
        run(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let cases: &[(&[&str], &str)] = &[
        (&["--set", "triger.theta=0.3"], "error: --set 'triger.theta=0.3': unknown table [triger] (valid: trigger,"),
        // a key inside a table: attributed to the --set, valid keys listed closest first
        (
            &["--set", "trigger.thetta=0.3"],
            "error: --set 'trigger.thetta=0.3': rind: unknown key 'thetta' (valid: theta,",
        ),
        (&["--set", "trigger.theta=nan"], "error: --set 'trigger.theta=nan': 'trigger.theta' = NaN: must be a finite"),
        (
            &["--set", "trigger.theta=\"high\""],
            "error: --set 'trigger.theta=\"high\"': rind: config key 'theta': expected",
        ),
        (&["--split", "nope"], "error: --split nope: dataset 'tinyqa' has no such split (known: test, valid)"),
        // no question selected: no run of metrics that nothing measured
        (&["--skip", "100000"], "error: --skip 100000: selects no question (the split has "),
        (&["--budget", "1", "--set", "trigger.theta=0.3"], "error: --budget and --set trigger.theta=... both set"),
        (&["--dtype", "bf16"], "error: --dtype bf16: only the batched engine computes in bf16 or f16"),
        (&["--dtype", "f16", "--engine", "reference"], "error: --dtype f16: only the batched engine computes"),
        (&["--int8-dot", "--engine", "batched"], "error: --int8-dot: only the CPU engine multiplies in integers"),
    ];
    for (extra, want) in cases {
        let (code, err) = eval(extra);
        assert_eq!(code, 2, "{extra:?}: {err}");
        assert!(first_error(&err).starts_with(want), "{extra:?}: {err}");
    }
    assert!(!out.exists(), "no output directory for a refused command line");
    // a method without a shipped config: the error lists the ones there are (sweep: --triggers, no --config)
    for (cmd, flag, hint) in [("eval", "--trigger", true), ("sweep", "--triggers", false)] {
        let mut a: Vec<String> = vec![cmd.into(), flag.into(), "rnd".into()];
        a.extend(model_args(&s));
        a.extend(["--out".to_string(), o.to_string()]);
        let (code, err) = run(&a.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(code, 2, "{cmd}: {err}");
        let e = first_error(&err);
        assert!(e.starts_with(&format!("error: {flag} rnd: no such method (no configs/rnd.toml; shipped: ")), "{err}");
        assert!(e.contains(" etc, ") && e.contains(" rind, ") && !e.contains("autorag-train"), "{err}");
        assert_eq!(e.contains("--config FILE"), hint, "{err}");
    }
    assert!(!out.exists(), "no output directory for an unknown method");
    let mut a: Vec<String> = vec!["sweep".into(), "--triggers".into(), "rind".into(), "--limit".into(), "0".into()];
    a.extend(model_args(&s));
    a.extend(["--out".to_string(), o.to_string()]);
    let (code, err) = run(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!((code, first_error(&err)), (2, "error: --limit 0: selects no question"), "{err}");
    assert!(!out.exists(), "no output directory for a sweep of no questions");
    // the same unknown key written in a config file is the file's fault, not the command line's: exit 1
    let cfg = s.root.join("mine.toml");
    std::fs::write(&cfg, "[trigger]\nname = \"rind\"\ntheta = 1.0\nthetta = 0.3\n").unwrap();
    let (code, err) = eval(&["--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(first_error(&err).contains("mine.toml: rind: unknown key 'thetta' (valid: theta,"), "{err}");
    // a number out of its range in a config file, likewise (rejection sampling takes 1..=1000 samples)
    let cfg = s.root.join("synth.toml");
    std::fs::write(&cfg, "[synth]\nsamples = 0\n").unwrap();
    let mut a: Vec<String> = vec!["synth".into(), "autorag".into(), "--config".into(), cfg.display().to_string()];
    a.extend(model_args(&s));
    a.extend(["--out".to_string(), o.to_string()]);
    let (code, err) = run(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 1, "{err}");
    assert!(first_error(&err).contains("synth.toml: [synth] samples = 0: expected 1..=1000"), "{err}");
    let (code, err) = run(&["inspect", "--model", &s.model, "--tokenizer", &s.tokenizer, "--prompt", ""]);
    assert_eq!((code, first_error(&err)), (2, "error: --prompt: the prompt is empty"), "{err}");
    let (code, err) = run(&["generate", "--model", &s.model, "--prompt", "Rome", "--warmup", "1"]);
    assert_eq!(
        (code, first_error(&err)),
        (2, "error: --warmup needs --prompts (one --prompt is timed after an 8-token warm-up of its own)"),
        "{err}"
    );
    let (code, err) = run(&["search", "--index", &s.index, "--query", "Rome", "--strategy", "fastest"]);
    assert_eq!(code, 2, "{err}");
    assert!(first_error(&err).starts_with("error: --strategy \"fastest\": expected auto"), "{err}");
}

/// `data fetch` of a name no dataset has is a usage error (exit 2) that lists the names there are, found before
/// anything is fetched: a known name before it is not fetched (no download, no line about it).
#[test]
fn data_fetch_of_an_unknown_name_is_a_usage_error() {
    let (code, err) = run(&["data", "fetch", "hotpotqa", "nope"]);
    assert_eq!(code, 2, "{err}");
    assert!(first_error(&err).starts_with("error: unknown dataset 'nope' (known: "), "{err}");
    assert!(first_error(&err).contains("hotpotqa"), "{err}");
    assert_eq!(err.lines().count(), 1, "nothing else said or done: {err}");
}

/// `report --html` writes a new file or replaces a page it wrote, and refuses any other file, which it leaves as
/// it was (it used to write over whatever was there, a run's own predictions.jsonl included).
#[test]
fn report_html_replaces_only_its_own_page() {
    let Some(s) = tiny_eval() else { return };
    let run_dir = s.root.join("run");
    let (code, err) = eval_none(&s, &["--out", run_dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let r = run_dir.to_str().unwrap();
    let predictions = run_dir.join("predictions.jsonl");
    let before = std::fs::read(&predictions).unwrap();
    let (code, err) = run(&["report", r, "--html", predictions.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(first_error(&err).ends_with("predictions.jsonl: exists and is not a page `ragtime report` wrote; ragtime replaces only its own earlier output (remove the file or name another)"), "{err}");
    assert_eq!(std::fs::read(&predictions).unwrap(), before, "the file is left as it was");
    let page = s.root.join("report.html");
    for _ in 0..2 {
        let (code, err) = run(&["report", r, "--html", page.to_str().unwrap()]);
        assert_eq!(code, 0, "a new page, then the same page again: {err}");
    }
    assert!(std::fs::read_to_string(&page).unwrap().starts_with("<!DOCTYPE html>"));
    let (code, err) = run(&["report", r, "--html", s.root.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(first_error(&err).ends_with(": is a directory; name a file"), "{err}");
}

/// `synth autorag` makes training data, so the datasets reserved for testing controllers are refused before the
/// model loads or `--out` is made.
#[test]
fn synth_autorag_refuses_the_reserved_test_datasets() {
    let Some(s) = tiny_eval() else { return };
    let out = s.root.join("dialogues");
    for name in ["hotpotqa", "2wikimultihopqa", "musique"] {
        let args = ["synth", "autorag", "--model", &s.model, "--tokenizer", &s.tokenizer, "--dataset", name];
        let mut a: Vec<&str> = args.to_vec();
        a.extend(["--index", &s.index, "--out", out.to_str().unwrap()]);
        let (code, err) = run(&a);
        assert_eq!(code, 2, "{name}: {err}");
        let want = format!("error: --dataset {name}: its questions are reserved for testing controllers;");
        assert!(first_error(&err).starts_with(&want), "{err}");
        assert!(!out.exists(), "{name}: --out made");
    }
}

/// `synth autorag` leaves BioASQ's list questions out (a dialogue ends in one answer): a file of list questions
/// only is refused before the model loads or `--out` is made.
#[test]
fn synth_autorag_refuses_list_questions_only() {
    let Some(s) = tiny_eval() else { return };
    let golden = s.root.join("lists.json");
    let q = r#"{"id": "l", "body": "List COX enzymes.", "type": "list", "exact_answer": [["COX-1"], ["COX-2"]]}"#;
    std::fs::write(&golden, format!(r#"{{"questions": [{q}]}}"#)).unwrap();
    let out = s.root.join("dialogues");
    let (g, o) = (golden.to_str().unwrap(), out.to_str().unwrap());
    let (code, err) = run(&[
        "synth",
        "autorag",
        "--model",
        &s.model,
        "--tokenizer",
        &s.tokenizer,
        "--dataset",
        g,
        "--layout",
        "bioasq",
        "--index",
        &s.index,
        "--out",
        o,
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("synth autorag: 1 list questions of lists left out"), "{err}");
    assert!(first_error(&err).ends_with("only list questions, which Auto-RAG synthesis leaves out"), "{err}");
    assert!(!out.exists(), "--out made");
}

/// A flag the chosen trigger has no use for is said to be ignored, and the run goes on: `--budget` for a trigger
/// without a threshold, `--detector` for one other than `mlp`.
#[test]
fn flags_a_trigger_ignores_are_noted() {
    let Some(s) = tiny_eval() else { return };
    let out = s.root.join("none");
    let (code, err) = eval_none(&s, &["--budget", "2", "--detector", "/no/detector", "--out", out.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("note: --budget 2: --trigger none has no threshold to calibrate; run as configured"), "{err}");
    assert!(err.contains("note: --detector /no/detector: --trigger none reads no detector; ignored"), "{err}");
    assert!(out.join("metrics.json").exists(), "{err}");
}

/// The instruction a dataset spec puts before each question (`question_prefix`) is part of the prompt: a run
/// records it in config.toml, and resuming the run with another instruction is refused, not mixed into it.
#[test]
fn a_run_with_another_question_prefix_is_not_resumed() {
    let Some(s) = tiny_eval() else { return };
    let spec = std::fs::read_to_string(&s.spec).unwrap();
    let prefixed = s.root.join("tinyqa-prefixed.toml");
    std::fs::write(&prefixed, format!("question_prefix = \"Answer with a name.\\n\"\n{spec}")).unwrap();
    let with_spec = |spec: &Path, out: &Path| {
        let mut a: Vec<String> =
            ["eval", "--trigger", "none", "--limit", "1", "--max-new-tokens", "4"].map(String::from).to_vec();
        a.extend(model_args(&s).into_iter().map(|x| if x == s.spec { spec.display().to_string() } else { x }));
        a.extend(["--out".to_string(), out.display().to_string()]);
        run(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let config = |out: &Path| -> toml::Value {
        toml::from_str(&std::fs::read_to_string(out.join("config.toml")).unwrap()).unwrap()
    };
    let plain = s.root.join("plain");
    let (code, err) = with_spec(Path::new(&s.spec), &plain);
    assert_eq!(code, 0, "{err}");
    assert!(config(&plain).get("question_prefix").is_none(), "recorded only when there is one");
    let predictions = std::fs::read(plain.join("predictions.jsonl")).unwrap();
    let (code, err) = with_spec(&prefixed, &plain);
    assert_eq!(code, 1, "{err}");
    assert!(first_error(&err).contains("holds a run with a different config"), "{err}");
    assert_eq!(std::fs::read(plain.join("predictions.jsonl")).unwrap(), predictions, "the run is left as it was");

    let with = s.root.join("prefixed");
    let (code, err) = with_spec(&prefixed, &with);
    assert_eq!(code, 0, "{err}");
    assert_eq!(config(&with)["question_prefix"].as_str(), Some("Answer with a name.\n"));
}

/// A path the OS refuses is reported with the OS's reason; before, `Path::exists` said "no" and the command said
/// "not found". Root reads every file, so the refusals here are a path through a file and a symbolic-link loop.
#[test]
fn refused_paths_are_not_reported_as_missing() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, "x").unwrap();
    let through = file.join("index");
    let (code, err) = run(&["search", "--index", through.to_str().unwrap(), "--query", "Rome"]);
    assert_eq!(code, 1, "{err}");
    assert!(first_error(&err).ends_with("/file/index: cannot read: Not a directory (os error 20)"), "{err}");
    let missing = dir.path().join("none");
    let (code, err) = run(&["search", "--index", missing.to_str().unwrap(), "--query", "Rome"]);
    assert_eq!(code, 1, "{err}");
    assert!(first_error(&err).contains("/none: no such index directory"), "{err}");
    let (a, b) = (dir.path().join("a.gguf"), dir.path().join("b.gguf"));
    std::os::unix::fs::symlink(&a, &b).unwrap();
    std::os::unix::fs::symlink(&b, &a).unwrap();
    let (code, err) = run(&["generate", "--model", a.to_str().unwrap(), "--prompt", "Rome is"]);
    assert_eq!(code, 1, "{err}");
    assert!(first_error(&err).contains("a.gguf: cannot read: Too many levels of symbolic links"), "{err}");
    let (code, err) = run(&["generate", "--model", missing.to_str().unwrap(), "--prompt", "Rome is"]);
    assert_eq!(code, 1, "{err}");
    assert!(first_error(&err).contains("/none: model not found (run scripts/setup.sh"), "{err}");
}

/// Inputs are checked before the output directory is made: a wrong --data leaves no directory behind.
#[test]
fn bad_inputs_leave_no_output_directory() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("detector");
    let missing = dir.path().join("none");
    let (code, err) = run(&["train", "detector", "--data", missing.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(first_error(&err).contains("/none/_manifest.json: cannot read manifest"), "{err}");
    assert!(!out.exists(), "train detector made --out before finding --data missing");
    // a feature named twice, with --data that is there: refused before --out is made
    let store = dir.path().join("labels");
    write_toy_label_store(&store, 2);
    let (code, err) = run(&[
        "train",
        "detector",
        "--data",
        store.to_str().unwrap(),
        "--features",
        "entropy_last,hidden_mean_last,entropy_last",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!((code, first_error(&err)), (2, "error: --features: 'entropy_last' named twice"), "{err}");
    assert!(!out.exists(), "train detector made --out before refusing --features");
    let Some(s) = tiny_eval() else { return };
    let out = s.root.join("finetune");
    let args = ["train", "autorag", "--model", &s.model, "--tokenizer", &s.tokenizer, "--data"];
    let mut a: Vec<&str> = args.to_vec();
    a.extend([missing.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    let (code, err) = run(&a);
    assert_eq!(code, 1, "{err}");
    assert!(first_error(&err).contains("/none: cannot read"), "{err}");
    assert!(!out.exists(), "train autorag made --out before finding --data missing");
    // a dtype training cannot use is a usage error, found before anything is read
    let mut f16 = a.clone();
    f16.extend(["--dtype", "f16"]);
    let (code, err) = run(&f16);
    assert_eq!(code, 2, "{err}");
    assert!(first_error(&err).contains("--dtype f16: f16 training needs loss scaling"), "{err}");
    assert!(!out.exists(), "train autorag made --out before refusing --dtype f16");
    // an explicit --config that is not there is an error (it used to fall back to built-in defaults)
    let cfg = s.root.join("my-train.toml");
    a.extend(["--config", cfg.to_str().unwrap()]);
    let (code, err) = run(&a);
    assert_eq!(code, 1, "{err}");
    assert!(first_error(&err).contains("my-train.toml: cannot read method config"), "{err}");
}

/// The shipped method configs are found from any working directory (they were looked up relative to it, so
/// `eval` outside the repository failed with "configs/rind.toml: cannot read"): the run below gets as far as
/// the `--set` check, which needs the config read.
#[test]
fn shipped_configs_are_found_from_another_directory() {
    let Some(s) = tiny_eval() else { return };
    let elsewhere = tempfile::tempdir().unwrap();
    let mut a: Vec<String> = vec!["eval".into(), "--trigger".into(), "rind".into()];
    a.extend(model_args(&s));
    a.extend(["--set".into(), "trigger.thetta=0.3".into(), "--out".into(), s.root.join("r").display().to_string()]);
    let (code, err) = run_in(elsewhere.path(), &a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 2, "{err}");
    assert!(first_error(&err).contains("rind: unknown key 'thetta' (valid: theta,"), "{err}");
}

/// `data corpus` writes each passage the questions ship with once (a snippet two questions share is one passage),
/// in file order, those of the question kinds `--kinds` names (all by default), and refuses to write over a file
/// that exists, which it leaves as it was; an unknown kind is refused naming the flag.
#[test]
fn data_corpus_writes_each_passage_once_and_never_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    let golden = dir.path().join("golden.json");
    let shared = r#"{"document": "http://www.ncbi.nlm.nih.gov/pubmed/1", "text": "Aspirin  inhibits COX-1."}"#;
    let other = r#"{"document": "http://www.ncbi.nlm.nih.gov/pubmed/2", "text": "COX-2 is inducible."}"#;
    let listed = r#"{"document": "http://www.ncbi.nlm.nih.gov/pubmed/3", "text": "Only a list question cites this."}"#;
    let shared_again = shared.replace("Aspirin  inhibits", "Aspirin inhibits");
    std::fs::write(
        &golden,
        format!(
            r#"{{"questions": [
  {{"id": "a", "body": "Does aspirin inhibit COX-1?", "type": "yesno", "exact_answer": "yes", "snippets": [{shared}, {other}]}},
  {{"id": "b", "body": "Which enzyme does aspirin inhibit?", "type": "factoid", "exact_answer": [["COX-1"]], "snippets": [{shared_again}]}},
  {{"id": "c", "body": "List COX enzymes.", "type": "list", "exact_answer": [["COX-1"], ["COX-2"]], "snippets": [{listed}]}}
]}}"#
        ),
    )
    .unwrap();
    let out = dir.path().join("corpus").join("bioasq.jsonl");
    let (code, err) = run(&["data", "corpus", golden.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let rows: Vec<serde_json::Value> =
        std::fs::read_to_string(&out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let texts: Vec<&str> = rows.iter().map(|r| r["text"].as_str().unwrap()).collect();
    assert_eq!(texts, ["Aspirin  inhibits COX-1.", "COX-2 is inducible.", "Only a list question cites this."]);
    assert_eq!(rows[0]["title"], "http://www.ncbi.nlm.nih.gov/pubmed/1");
    assert_ne!(rows[0]["id"], rows[1]["id"]);
    let without_lists = dir.path().join("corpus").join("bioasq-no-lists.jsonl");
    let a = ["data", "corpus", golden.to_str().unwrap(), "--out", without_lists.to_str().unwrap(), "--kinds"];
    let (code, err) = run(&[&a[..], &["yes_no,span"]].concat());
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(&without_lists).unwrap();
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(!text.contains("Only a list question"), "{text}");
    let (code, err) = run(&[&a[..], &["yes_no,lists"]].concat());
    assert_eq!(code, 2, "{err}");
    assert!(first_error(&err).contains("'--kinds <KINDS>': unknown question kind 'lists'"), "{err}");
    let before = std::fs::read(&out).unwrap();
    let (code, err) = run(&["data", "corpus", golden.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(first_error(&err).contains("bioasq.jsonl: the file exists"), "{err}");
    assert_eq!(std::fs::read(&out).unwrap(), before);
}

/// [`common::snapshot`] of `dir` without the lock file.
fn files_under(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    common::snapshot(dir).into_iter().filter(|(p, _)| !p.ends_with(ragtime::io::LOCK_FILE)).collect()
}

/// The lock a running ragtime process holds on the output directory `dir` (its lock file, with the owner line it
/// writes), held by this test process instead.
fn hold_as_another_process(dir: &Path) -> std::fs::File {
    use std::io::Write;
    std::fs::create_dir_all(dir).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(dir.join(ragtime::io::LOCK_FILE))
        .unwrap();
    f.try_lock().expect("no ragtime process holds it");
    f.write_all(b"pid 4242 on node7\n").unwrap();
    f
}

/// The same output written by two processes at once (a job launched twice, a requeued cluster task whose first
/// copy still runs): the second is refused before it touches a file, naming the directory and the process that
/// writes it; once that process is gone, the output resumes as always.
#[test]
fn an_output_another_process_writes_is_refused_and_left_alone() {
    let Some(s) = tiny_eval() else { return };
    let refused = |what: &str, code: i32, err: &str, dir: &Path| {
        assert_eq!(code, 1, "{what}: {err}");
        let want = format!(
            "error: --out {}: another ragtime process is writing there (pid 4242 on node7); wait for it to end",
            dir.display()
        );
        assert!(first_error(err).starts_with(&want), "{what}: {err}");
    };
    // an eval run, its first process still writing
    let run_dir = s.root.join("run");
    let r = run_dir.to_str().unwrap();
    let (code, err) = eval_none(&s, &["--out", r]);
    assert_eq!(code, 0, "{err}");
    let before = files_under(&run_dir);
    let held = hold_as_another_process(&run_dir);
    let (code, err) = eval_none(&s, &["--out", r]);
    refused("eval", code, &err, &run_dir);
    assert_eq!(files_under(&run_dir), before, "the refused eval changed the run");
    drop(held);
    let (code, err) = eval_none(&s, &["--out", r]);
    assert_eq!(code, 0, "the lock file of a process that ended blocks nothing: {err}");

    // a shard run twice at once: the second stops before it removes the first one's marker
    let sharded = s.root.join("sharded");
    let sh = sharded.to_str().unwrap();
    let (code, err) = eval_none(&s, &["--out", sh, "--shard", "0/2"]);
    assert_eq!(code, 0, "{err}");
    let part = sharded.join("part-00000-of-00002");
    assert!(sharded.join("part-00000-of-00002.done").is_file());
    let before = files_under(&sharded);
    let held = hold_as_another_process(&part);
    let (code, err) = eval_none(&s, &["--out", sh, "--shard", "0/2"]);
    refused("eval --shard 0/2", code, &err, &part);
    assert_eq!(files_under(&sharded), before, "the refused shard changed the job's files");
    // nor is a merge read from a part being written (refused before it looks for the missing shard 1)
    let (code, err) = run(&["merge", sh]);
    assert_eq!(code, 1, "{err}");
    let want =
        format!("error: shard part {}: another ragtime process is writing there (pid 4242 on node7)", part.display());
    assert!(first_error(&err).starts_with(&want), "{err}");
    assert_eq!(files_under(&sharded), before, "the refused merge changed the job's files");
    drop(held);

    // an index build: the second would clear the first one's partial index
    let index = s.root.join("index2");
    let held = hold_as_another_process(&index);
    let corpus = s.root.join("corpus.tsv");
    let (code, err) = run(&["index", "--corpus", corpus.to_str().unwrap(), "--out", index.to_str().unwrap()]);
    refused("index", code, &err, &index);
    assert_eq!(files_under(&index), vec![], "the refused index build wrote files");
    drop(held);
}
