//! kill -9 and resume, through the binary: `index`, `eval`, `synth hallucination`, `synth autorag`, `train
//! detector` and `train autorag` are killed (SIGKILL, no chance to clean up) part-way, re-run with the same
//! arguments, and their final output is compared with an uninterrupted run's: no row lost or doubled, the same
//! answers, rows, search results, weights and losses.
#![allow(clippy::disallowed_methods)] // a test looks at paths directly (clippy.toml)

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{run_ok, strings as s};
use ragtime::model::Arch;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ragtime"))
}

/// Starts `args`, waits until `ready` holds (polling), then kills the process with SIGKILL. Returns whether it
/// was killed (false: it finished first, and the test cannot say anything about resuming).
fn kill_when(args: &[String], ready: impl Fn() -> bool) -> bool {
    let mut child: Child = bin().args(args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let t0 = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "ragtime {} failed before it was killed", args.join(" "));
            return false;
        }
        if ready() {
            child.kill().unwrap(); // SIGKILL on Unix
            child.wait().unwrap();
            return true;
        }
        assert!(t0.elapsed() < Duration::from_secs(600), "ragtime {} never reached the kill point", args.join(" "));
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn lines(p: &Path) -> usize {
    std::fs::read_to_string(p).map(|t| t.lines().count()).unwrap_or(0)
}

fn tokenizer() -> Option<PathBuf> {
    ragtime::testing::require("models/smollm2-135m-instruct/tokenizer.json")
}

/// `eval`, killed after some answers are written (one may be torn), resumed: the same predictions, in the
/// same order, each question once.
#[test]
fn eval_killed_and_resumed_equals_an_uninterrupted_run() {
    let Some(tok) = tokenizer() else { return };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let model = common::write_tiny_gguf(Arch::Llama, root);
    let qa: Vec<_> = (0..30).map(|i| (format!("What is item {i} of the list?"), format!("item {i}"))).collect();
    let qa = common::write_qa(root, "qa", &qa);
    let corpus: String = (0..30).map(|i| format!("{i}\tThe list has item {i} in place {i}.\tList {i}\n")).collect();
    std::fs::write(root.join("c.tsv"), format!("id\ttext\ttitle\n{corpus}")).unwrap();
    let index = root.join("idx");
    common::index_corpus(&root.join("c.tsv"), &index);
    let args = |out: &Path| {
        s(&[
            "eval",
            "--model",
            model.to_str().unwrap(),
            "--tokenizer",
            tok.to_str().unwrap(),
            "--dataset",
            qa.to_str().unwrap(),
            "--trigger",
            "fixed-length",
            "--index",
            index.to_str().unwrap(),
            "--max-new-tokens",
            "96",
            "--out",
            out.to_str().unwrap(),
        ])
    };
    let whole = root.join("whole");
    run_ok(&args(&whole));
    for (trial, kill_after) in [3usize, 17].into_iter().enumerate() {
        let out = root.join(format!("killed-{trial}"));
        let preds = out.join("predictions.jsonl");
        let killed = kill_when(&args(&out), || lines(&preds) >= kill_after);
        if !killed {
            eprintln!("note: the run finished before the kill point");
        }
        run_ok(&args(&out));
        let read = |d: &Path| common::jsonl_without(&d.join("predictions.jsonl"), &["seconds"]);
        let (a, b) = (read(&whole), read(&out));
        assert_eq!(b.len(), 30, "each question once, none lost (kill after {kill_after})");
        assert_eq!(a, b, "the resumed run's predictions equal the uninterrupted run's");
        let metrics = |d: &Path| {
            let mut m: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(d.join("metrics.json")).unwrap()).unwrap();
            let m = m.as_object_mut().unwrap();
            for k in ["run", "seconds_per_question", "truncated_tail"] {
                m.remove(k);
            }
            serde_json::Value::Object(m.clone())
        };
        assert_eq!(metrics(&whole), metrics(&out));
    }
}

/// `index`, killed after its first resumable checkpoint, resumed: the same passages and the same search results
/// as an uninterrupted build.
#[test]
fn index_killed_and_resumed_equals_an_uninterrupted_build() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let words = ["river", "mountain", "city", "painter", "volcano", "sea", "king", "bridge", "island", "forest"];
    let mut corpus = String::from("id\ttext\ttitle\n");
    for i in 0..120_000u64 {
        let w = |k: u64| words[((i * 2654435761 + k * 40503) % 10) as usize];
        corpus.push_str(&format!(
            "{i}\tPassage {i} on the {} near the {} and the {} {}\tT{}\n",
            w(1),
            w(2),
            w(3),
            i % 97,
            i % 13
        ));
    }
    std::fs::write(root.join("c.tsv"), corpus).unwrap();
    let args = |out: &Path| {
        s(&[
            "index",
            "--corpus",
            root.join("c.tsv").to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--threads",
            "1",
            "--commit-every",
            "10000",
            "-q",
        ])
    };
    let whole = root.join("whole");
    run_ok(&args(&whole));
    let out = root.join("killed");
    let meta = out.join("meta.json");
    let killed =
        kill_when(&args(&out), || std::fs::read_to_string(&meta).map(|m| m.contains("passages_done")).unwrap_or(false));
    run_ok(&args(&out));
    let manifest = |d: &Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(d.join("ragtime-index.json")).unwrap()).unwrap()
    };
    let (a, b) = (manifest(&whole), manifest(&out));
    assert_eq!(a["passages"], b["passages"]);
    assert_eq!(b["passages"].as_u64(), Some(120_000));
    if killed {
        assert!(b["resumed_after"].as_u64().unwrap() > 0, "the second run resumed from the checkpoint: {b}");
    }
    for q in ["river mountain", "painter 42", "volcano island forest", "Passage 119999", "king bridge 7"] {
        let search = |d: &Path| {
            let o = bin().args(["search", "--index", d.to_str().unwrap(), "-k", "10", "--query", q]).output().unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            String::from_utf8_lossy(&o.stdout).into_owned()
        };
        assert_eq!(search(&whole), search(&out), "query {q}");
    }
}

/// `synth hallucination` over real article openings with a tiny random model, killed after its first shard,
/// resumed: the same rows (every column, features bit for bit), none lost or doubled.
#[test]
fn synth_killed_and_resumed_writes_the_rows_of_an_uninterrupted_run() {
    let Some(tok) = tokenizer() else { return };
    let Some(wiki) = ragtime::testing::require("wiki/dump_valid") else { return };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let model = common::write_tiny_gguf(Arch::Llama, root);
    let args = |out: &Path| {
        s(&[
            "synth",
            "hallucination",
            "--model",
            model.to_str().unwrap(),
            "--tokenizer",
            tok.to_str().unwrap(),
            "--wiki",
            wiki.to_str().unwrap(),
            "--limit",
            "10",
            "--flush-every",
            "2",
            "--extra-tokens",
            "4",
            "--max-entities",
            "3",
            "--no-wordnet",
            "--out",
            out.to_str().unwrap(),
        ])
    };
    let whole = root.join("whole");
    run_ok(&args(&whole));
    let out = root.join("killed");
    let killed = kill_when(&args(&out), || {
        std::fs::read_dir(&out)
            .map(|d| d.filter_map(|e| e.ok()).any(|e| e.file_name().to_string_lossy().starts_with("part-")))
            .unwrap_or(false)
    });
    if !killed {
        eprintln!("note: the run finished before the kill point");
    }
    run_ok(&args(&out));
    let rows = |d: &Path| {
        let mut r = ragtime::labels::read_all(d).unwrap();
        r.sort_by(|a, b| {
            (&a.article_id, a.trunc_offset, &a.template).cmp(&(&b.article_id, b.trunc_offset, &b.template))
        });
        r
    };
    let (a, b) = (rows(&whole), rows(&out));
    assert!(!a.is_empty());
    assert_eq!(a.len(), b.len(), "no row lost or doubled");
    assert!(a == b, "the resumed run's rows equal the uninterrupted run's");
}
/// `synth autorag`, killed after some questions are recorded (a line may be torn), resumed: the same attempts and
/// dialogues as an uninterrupted run, each question once.
#[test]
fn synth_autorag_killed_and_resumed_equals_an_uninterrupted_run() {
    let Some(tok) = tokenizer() else { return };
    if ragtime::testing::require("fewshot/autorag").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let model = common::write_tiny_gguf(Arch::Llama, root);
    let qa: Vec<_> = (0..16).map(|i| (format!("Where is place {i}?"), "river".to_string())).collect();
    let qa = common::write_qa(root, "qa", &qa);
    let corpus: String = (0..30).map(|i| format!("{i}\tPlace {i} lies by the river.\tPlace {i}\n")).collect();
    std::fs::write(root.join("c.tsv"), format!("id\ttext\ttitle\n{corpus}")).unwrap();
    let index = root.join("idx");
    common::index_corpus(&root.join("c.tsv"), &index);
    let args = |out: &Path| {
        s(&[
            "synth",
            "autorag",
            "--model",
            model.to_str().unwrap(),
            "--tokenizer",
            tok.to_str().unwrap(),
            "--dataset",
            qa.to_str().unwrap(),
            "--index",
            index.to_str().unwrap(),
            "--max-iter",
            "3",
            "--candidates",
            "2",
            "--out",
            out.to_str().unwrap(),
        ])
    };
    let whole = root.join("whole");
    run_ok(&args(&whole));
    let out = root.join("killed");
    let attempts = out.join("attempts.jsonl");
    if !kill_when(&args(&out), || lines(&attempts) >= 4) {
        eprintln!("note: the run finished before the kill point");
    }
    run_ok(&args(&out));
    for f in ["attempts.jsonl", "dialogues.jsonl"] {
        let (a, b) =
            (common::jsonl_without(&whole.join(f), &["seconds"]), common::jsonl_without(&out.join(f), &["seconds"]));
        assert_eq!(a, b, "{f}: the resumed run's records equal the uninterrupted run's");
    }
    assert_eq!(lines(&out.join("attempts.jsonl")), 16, "each question once");
}

/// `train detector`, killed while it trains, run again: the checkpoint of an uninterrupted run (training holds
/// nothing on disk until the end, and the end is two atomic renames).
#[test]
fn train_detector_killed_and_rerun_writes_the_detector_of_an_uninterrupted_run() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // 3,000 random examples over 300 articles, hidden 64: a few seconds of training
    let data = root.join("labels");
    common::write_toy_label_store(&data, 300);
    let args = |out: &Path| {
        s(&["train", "detector", "--data", data.to_str().unwrap(), "--epochs", "30", "--out", out.to_str().unwrap()])
    };
    let whole = root.join("whole");
    run_ok(&args(&whole));
    let out = root.join("killed");
    let t0 = Instant::now();
    let killed = kill_when(&args(&out), || out.exists() && t0.elapsed() > Duration::from_millis(700));
    if killed {
        assert!(!out.join("model.safetensors").exists() || out.join("detector.json").exists(), "no half checkpoint");
    } else {
        eprintln!("note: the run finished before the kill point");
    }
    run_ok(&args(&out));
    let info = |d: &Path| {
        let mut v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(d.join("detector.json")).unwrap()).unwrap();
        // wall times are not results: the run's and each epoch's
        if let Some(t) = v.get_mut("training").and_then(|t| t.as_object_mut()) {
            t.remove("seconds");
            for e in t.get_mut("history").and_then(|h| h.as_array_mut()).into_iter().flatten() {
                e.as_object_mut().map(|e| e.remove("secs"));
            }
        }
        v
    };
    assert_eq!(info(&whole), info(&out));
    assert!(
        std::fs::read(whole.join("model.safetensors")).unwrap()
            == std::fs::read(out.join("model.safetensors")).unwrap(),
        "the same weights, byte for byte"
    );
    // the same for --stream (shards read from disk through a shuffle buffer): killed and rerun, it writes the
    // detector of an uninterrupted streamed run, byte for byte (the buffer's draws are seeded)
    let streamed = |out: &Path| {
        let mut a = args(out);
        a.extend(s(&["--stream", "--shuffle-buffer", "500"]));
        a
    };
    let whole = root.join("whole-stream");
    run_ok(&streamed(&whole));
    let out = root.join("killed-stream");
    let t0 = Instant::now();
    if !kill_when(&streamed(&out), || out.exists() && t0.elapsed() > Duration::from_millis(700)) {
        eprintln!("note: the streamed run finished before the kill point");
    }
    run_ok(&streamed(&out));
    assert_eq!(info(&whole), info(&out));
    assert!(
        std::fs::read(whole.join("model.safetensors")).unwrap()
            == std::fs::read(out.join("model.safetensors")).unwrap(),
        "the same streamed weights, byte for byte"
    );
}

/// `train autorag`, killed after a checkpoint, resumed from it: the weights and the loss history of an
/// uninterrupted run.
#[test]
fn train_autorag_killed_and_resumed_equals_an_uninterrupted_run() {
    let Some(tok) = tokenizer() else { return };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let model = common::write_tiny_gguf(Arch::Llama, root);
    let dialogues: String = (0..40)
        .map(|i| {
            let d = serde_json::json!({
                "id": format!("d{i}"), "dataset": "toy", "question": format!("Where was person {i} born?"),
                "answers": ["Paris"], "iterations": 1, "final_answer": "Paris",
                "turns": [
                    {"input": format!("Where was person {i} born?"), "output": format!("Retrieval Query: person {i} birthplace")},
                    {"input": format!("Retrieved Document_1: Person {i} was born in Paris."), "output": "Final Answer: Paris"},
                ],
            });
            format!("{d}\n")
        })
        .collect();
    std::fs::write(root.join("d.jsonl"), dialogues).unwrap();
    let args = |out: &Path| {
        s(&[
            "train",
            "autorag",
            "--data",
            root.join("d.jsonl").to_str().unwrap(),
            "--model",
            model.to_str().unwrap(),
            "--tokenizer",
            tok.to_str().unwrap(),
            "--epochs",
            "4",
            "--batch-size",
            "1",
            "--grad-accum",
            "2",
            "--lr",
            "1e-3",
            "--save-every",
            "3",
            "--eval-every",
            "10",
            "--out",
            out.to_str().unwrap(),
        ])
    };
    let whole = root.join("whole");
    run_ok(&args(&whole));
    let out = root.join("killed");
    let state = out.join("checkpoint").join("state.json");
    if !kill_when(&args(&out), || state.exists()) {
        eprintln!("note: the run finished before the kill point");
    }
    run_ok(&args(&out));
    let report = |d: &Path| {
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(d.join("train_report.json")).unwrap()).unwrap();
        let losses: Vec<(u64, String)> = v["history"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["step"].as_u64().unwrap(), format!("{:.6}", r["loss"].as_f64().unwrap())))
            .collect();
        (v["step"].clone(), losses)
    };
    let (a, b) = (report(&whole), report(&out));
    assert!(!a.1.is_empty());
    assert_eq!(a, b, "the same updates and losses");
    assert!(
        std::fs::read(whole.join("model.safetensors")).unwrap()
            == std::fs::read(out.join("model.safetensors")).unwrap(),
        "the same weights"
    );
}
