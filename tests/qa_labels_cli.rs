//! `ragtime synth qa-labels` through the binary on a tiny random model: one row per generated sentence with the
//! model's hidden width, every row of a question labelled alike, the same rows with several lanes, a re-run adding
//! nothing, and the reserved test datasets and splits refused before the model loads.
#![allow(clippy::disallowed_methods)] // a test looks at paths directly (clippy.toml)

mod common;

use std::path::Path;

use ragtime::labels::read_all;
use ragtime::model::Arch;

/// Whether the binary succeeded, and its stderr.
fn ragtime(args: &[&str]) -> (bool, String) {
    let (ok, _, err) = common::ragtime(args);
    (ok, err)
}

fn rows(dir: &Path) -> Vec<ragtime::labels::HalluExample> {
    let mut r = read_all(dir).unwrap();
    r.sort_by(|a, b| (&a.article_id, a.trunc_offset).cmp(&(&b.article_id, b.trunc_offset)));
    r
}

#[test]
fn qa_labels_from_closed_book_answers() {
    let Some(tok) = ragtime::testing::require("models/smollm2-135m-instruct/tokenizer.json") else { return };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let model = common::write_tiny_gguf(Arch::Llama, root);
    let qa: Vec<(String, String)> = (0..6).map(|i| (format!("Who is person {i}?"), format!("person {i}"))).collect();
    let spec = common::write_qa_spec(root, "pool", &qa, 48, "train = \"0..5\"\ntest = \"5..6\"");
    let run = |out: &Path, extra: &[&str]| {
        let mut a = vec![
            "synth",
            "qa-labels",
            "--model",
            model.to_str().unwrap(),
            "--tokenizer",
            tok.to_str().unwrap(),
            "--dataset",
            spec.to_str().unwrap(),
            "--flush-every",
            "2",
            "--out",
            out.to_str().unwrap(),
        ];
        a.extend_from_slice(extra);
        ragtime(&a)
    };
    let one = root.join("one");
    let (ok, err) = run(&one, &[]);
    assert!(ok, "{err}");
    let r = rows(&one);
    assert!(!r.is_empty());
    let questions: std::collections::BTreeSet<&str> = r.iter().map(|x| x.article_id.as_str()).collect();
    assert!(questions.len() <= 5 && questions.iter().all(|q| *q != "5"), "train split only: {questions:?}");
    for x in &r {
        assert_eq!(x.hidden_mean_last.len(), 32, "the tiny model's hidden width");
        assert_eq!(x.hidden_final_entity.len(), 32);
        assert_eq!(x.template, "qa-closed-book");
        assert!(x.entropy_last.is_finite());
        // a question's sentences share its label
        let same: Vec<_> = r.iter().filter(|y| y.article_id == x.article_id).collect();
        assert!(same.iter().all(|y| y.label == x.label && y.rule == x.rule));
        assert_eq!(x.label == 1, ["wrong", "unanswered"].contains(&x.rule.as_str()));
    }
    // several lanes: the same rows
    let lanes = root.join("lanes");
    assert!(run(&lanes, &["--batch", "3"]).0);
    assert!(rows(&lanes) == r, "--batch 3 writes the rows of --batch 1");
    // two shards (--shard i/2 into one --out) merged: the dataset of one process, files and manifest alike
    let sharded = root.join("sharded");
    for i in 0..2 {
        let (ok, err) = run(&sharded, &["--shard", &format!("{i}/2")]);
        assert!(ok, "{err}");
    }
    let merged = root.join("merged");
    let (ok, err) = ragtime(&["merge", sharded.to_str().unwrap(), "--out", merged.to_str().unwrap(), "-q"]);
    assert!(ok, "{err}");
    assert!(read_all(&merged).unwrap() == read_all(&one).unwrap(), "merged rows in question order");
    for f in ["_manifest.json", "synth-config.json"] {
        let read = |d: &Path| std::fs::read_to_string(d.join(f)).unwrap();
        assert_eq!(read(&merged), read(&one), "{f}");
    }
    // a re-run resumes with nothing left to do
    assert!(run(&one, &[]).0);
    assert_eq!(rows(&one).len(), r.len());
    // a resumed directory with other settings is refused
    let (ok, err) = run(&one, &["--max-new-tokens", "8"]);
    assert!(!ok && err.contains("other settings"), "{err}");
    // reserved questions are refused before any output
    let never = root.join("never");
    let (ok, err) = run(&never, &["--split", "test"]);
    assert!(!ok && err.contains("training questions only"), "{err}");
    let (ok, err) = ragtime(&["synth", "qa-labels", "--dataset", "hotpotqa", "--out", never.to_str().unwrap()]);
    assert!(!ok && err.contains("reserved for testing"), "{err}");
    assert!(!never.exists());
}
