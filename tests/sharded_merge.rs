//! The shard contract, through the binary: each long job (`index`, `eval`, `synth hallucination`, `synth
//! autorag`) run as n shards into one directory — the shards started at the same time, as a Slurm array starts
//! them — then `ragtime merge`, equals the same job run by one process. Also: what `merge` says when shards are
//! missing, broken or made with other settings.
#![allow(clippy::disallowed_methods)] // a test looks at paths directly (clippy.toml)

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{run_ok, strings as s};
use ragtime::model::Arch;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ragtime"))
}

fn p(x: &Path) -> &str {
    x.to_str().unwrap()
}

/// Runs `args + --shard i/n` for every i at once (separate processes), and waits for all.
fn run_shards(args: &[String], n: usize) {
    let children: Vec<_> = (0..n)
        .map(|i| {
            let mut a = args.to_vec();
            a.extend(s(&["--shard", &format!("{i}/{n}")]));
            (
                a.clone(),
                bin()
                    .args(&a)
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap(),
            )
        })
        .collect();
    for (a, c) in children {
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "ragtime {}\n{}", a.join(" "), String::from_utf8_lossy(&o.stderr));
    }
}

/// The same job through the Slurm variables instead of the flag (one array task).
fn run_as_array_task(args: &[String], i: usize, n: usize) {
    let o = bin()
        .args(args)
        .env("SLURM_ARRAY_TASK_ID", i.to_string())
        .env("SLURM_ARRAY_TASK_COUNT", "1")
        .env("RAGTIME_SHARD_COUNT", n.to_string())
        .output()
        .unwrap();
    assert!(o.status.success(), "ragtime {} (array task {i})\n{}", args.join(" "), String::from_utf8_lossy(&o.stderr));
}

fn tokenizer() -> Option<PathBuf> {
    ragtime::testing::require("models/smollm2-135m-instruct/tokenizer.json")
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}
fn corpus(root: &Path, n: u64) -> PathBuf {
    let words = ["river", "mountain", "city", "painter", "volcano", "sea", "king", "bridge", "island", "forest"];
    let mut c = String::from("id\ttext\ttitle\n");
    for i in 0..n {
        let w = |k: u64| words[((i * 2654435761 + k * 40503) % 10) as usize];
        c.push_str(&format!(
            "{i}\tPassage {i} on the {} near the {} and the {} {}\tT{}\n",
            w(1),
            w(2),
            w(3),
            i % 97,
            i % 13
        ));
    }
    let path = root.join("c.tsv");
    std::fs::write(&path, c).unwrap();
    path
}

/// Every hit of a query (k above the corpus size), ties in score ordered by id: documents sit in another order
/// in a merged index, which may only reorder exact ties.
fn all_hits(index: &Path, q: &str) -> Vec<(String, String)> {
    let o = run_ok(&s(&["search", "--index", p(index), "-k", "10000", "--json", "--query", q]));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut hits: Vec<(String, String)> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (format!("{:.6}", h["score"].as_f64().unwrap()), h["id"].as_str().unwrap().to_string()))
        .collect();
    hits.sort_by(|a, b| b.0.parse::<f64>().unwrap().total_cmp(&a.0.parse::<f64>().unwrap()).then(a.1.cmp(&b.1)));
    hits
}

#[test]
fn sharded_index_merges_into_the_index_of_one_process() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let c = corpus(root, 3000);
    let args = |out: &Path| s(&["index", "--corpus", p(&c), "--out", p(out), "--threads", "1", "-q"]);
    let whole = root.join("whole");
    run_ok(&args(&whole));
    let sharded = root.join("sharded");
    run_shards(&args(&sharded), 3);
    // a rerun of a finished shard (a requeued array task) leaves it as it was
    run_as_array_task(&args(&sharded), 1, 3);
    let merged = root.join("merged");
    let o = run_ok(&s(&["merge", p(&sharded), "--check"]));
    assert!(String::from_utf8_lossy(&o.stdout).contains("all 3 shards complete (index); ready to merge"));
    assert!(!sharded.join("merged").exists(), "--check writes nothing");
    let o = run_ok(&s(&["merge", p(&sharded), "--out", p(&merged)]));
    assert!(String::from_utf8_lossy(&o.stdout).contains("3000 passages"), "{}", String::from_utf8_lossy(&o.stdout));
    let parts: u64 = (0..3)
        .map(|i| json(&sharded.join(format!("part-{i:05}-of-00003/ragtime-index.json")))["passages"].as_u64().unwrap())
        .inspect(|&n| assert!((800..1200).contains(&n), "balanced shards: {n}"))
        .sum();
    assert_eq!(parts, 3000);
    assert_eq!(json(&merged.join("ragtime-index.json"))["passages"], 3000);
    for q in ["river mountain", "painter 42", "volcano island forest", "Passage 2999", "king bridge 7"] {
        assert_eq!(all_hits(&whole, q), all_hits(&merged, q), "query {q}: same passages, same BM25 scores");
    }
}

#[test]
fn merge_names_missing_broken_and_mismatched_shards() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let c = corpus(root, 300);
    let out = root.join("sharded");
    let args = |words: &str| {
        s(&["index", "--corpus", p(&c), "--out", p(&out), "--threads", "1", "-q", "--passage-words", words])
    };
    run_ok(&[args("100"), s(&["--shard", "0/4"])].concat());
    run_ok(&[args("100"), s(&["--shard", "2/4"])].concat());
    // a shard with other settings is refused before it does anything
    let o = bin().args([args("50"), s(&["--shard", "1/4"])].concat()).output().unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("passage_words was 100, now 50"), "{err}");
    assert!(!out.join("part-00001-of-00004").exists());
    // missing shards: named, with the array indices to resubmit
    let o = bin().args(["merge", p(&out)]).output().unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("part-00001-of-00004: not started") && err.contains("--array=1,3"), "{err}");
    run_ok(&[args("100"), s(&["--shard", "1/4"])].concat());
    run_ok(&[args("100"), s(&["--shard", "3/4"])].concat());
    // a part changed after its shard finished: named
    let part = out.join("part-00003-of-00004");
    let victim = std::fs::read_dir(&part)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|f| f.extension().is_some_and(|x| x == "store"))
        .unwrap();
    std::fs::write(&victim, b"damaged").unwrap();
    let o = bin().args(["merge", p(&out)]).output().unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("changed since the shard finished") && err.contains("--array=3"), "{err}");
    // --shard on a directory of someone else's files: refused, nothing touched
    let mine = root.join("mine");
    std::fs::create_dir_all(&mine).unwrap();
    std::fs::write(mine.join("notes.txt"), "keep").unwrap();
    let o = bin().args(["index", "--corpus", p(&c), "--out", p(&mine), "--shard", "0/2", "-q"]).output().unwrap();
    assert!(!o.status.success());
    assert_eq!(std::fs::read_dir(&mine).unwrap().count(), 1);
    // a Slurm array numbered from 1 is refused with the fix
    let o = bin()
        .args(["index", "--corpus", p(&c), "--out", p(&root.join("x")), "-q"])
        .env("SLURM_ARRAY_TASK_ID", "4")
        .env("SLURM_ARRAY_TASK_COUNT", "4")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("--array=0-3"), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn sharded_eval_merges_into_the_run_of_one_process() {
    let Some(tok) = tokenizer() else { return };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let model = common::write_tiny_gguf(Arch::Llama, root);
    let qa: Vec<_> = (0..20).map(|i| (format!("What is item {i} of the list?"), format!("item {i}"))).collect();
    let qa = common::write_qa(root, "qa", &qa);
    let index = root.join("idx");
    common::index_corpus(&corpus(root, 50), &index);
    let args = |out: &Path| {
        s(&[
            "eval",
            "--model",
            p(&model),
            "--tokenizer",
            p(&tok),
            "--dataset",
            p(&qa),
            "--trigger",
            "fixed-length",
            "--index",
            p(&index),
            "--max-new-tokens",
            "40",
            "--out",
            p(out),
        ])
    };
    let whole = root.join("whole");
    run_ok(&args(&whole));
    let sharded = root.join("sharded");
    run_shards(&args(&sharded), 3);
    let merged = root.join("merged");
    run_ok(&s(&["merge", p(&sharded), "--out", p(&merged), "-q"]));
    let preds = |d: &Path| common::jsonl_without(&d.join("predictions.jsonl"), &["seconds"]);
    assert_eq!(preds(&whole).len(), 20);
    assert_eq!(preds(&whole), preds(&merged), "the same predictions, in question order");
    let cfg = |d: &Path| std::fs::read_to_string(d.join("config.toml")).unwrap();
    assert_eq!(cfg(&whole), cfg(&merged));
    assert!(cfg(&sharded.join("part-00000-of-00003")).contains("shard = \"0/3\""));
    let metrics = |d: &Path| {
        let mut m = json(&d.join("metrics.json"));
        for k in ["run", "seconds_per_question"] {
            m.as_object_mut().unwrap().remove(k);
        }
        m
    };
    assert_eq!(metrics(&whole), metrics(&merged));
    // merging again into the finished merge changes nothing
    run_ok(&s(&["merge", p(&sharded), "--out", p(&merged), "-q"]));
    assert_eq!(preds(&whole), preds(&merged));
}

#[test]
fn sharded_synth_hallucination_merges_into_the_dataset_of_one_process() {
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
            p(&model),
            "--tokenizer",
            p(&tok),
            "--wiki",
            p(&wiki),
            "--limit",
            "12",
            "--flush-every",
            "3",
            "--extra-tokens",
            "4",
            "--max-entities",
            "2",
            "--no-wordnet",
            "--out",
            p(out),
        ])
    };
    let whole = root.join("whole");
    run_ok(&args(&whole));
    let sharded = root.join("sharded");
    run_shards(&args(&sharded), 4);
    let merged = root.join("merged");
    run_ok(&s(&["merge", p(&sharded), "--out", p(&merged), "-q"]));
    let (a, b) = (ragtime::labels::read_all(&whole).unwrap(), ragtime::labels::read_all(&merged).unwrap());
    assert!(!a.is_empty());
    assert!(a == b, "the same rows in the same order, features bit for bit");
    let (ma, mb) = (json(&whole.join("_manifest.json")), json(&merged.join("_manifest.json")));
    assert_eq!(ma, mb, "the same manifest: articles per file, counts, label balance");
    assert_eq!(json(&whole.join("synth-config.json")), json(&merged.join("synth-config.json")));
}

#[test]
fn sharded_synth_autorag_merges_into_the_dialogues_of_one_process() {
    let Some(tok) = tokenizer() else { return };
    if ragtime::testing::require("fewshot/autorag").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let model = common::write_tiny_gguf(Arch::Llama, root);
    let qa: Vec<_> = (0..8).map(|i| (format!("Where is passage {i}?"), "river".to_string())).collect();
    let qa = common::write_qa(root, "qa", &qa);
    let index = root.join("idx");
    common::index_corpus(&corpus(root, 50), &index);
    let args = |out: &Path| {
        s(&[
            "synth",
            "autorag",
            "--model",
            p(&model),
            "--tokenizer",
            p(&tok),
            "--dataset",
            p(&qa),
            "--index",
            p(&index),
            "--max-iter",
            "2",
            "--candidates",
            "2",
            "--out",
            p(out),
        ])
    };
    let whole = root.join("whole");
    run_ok(&args(&whole));
    let sharded = root.join("sharded");
    run_shards(&args(&sharded), 3);
    let merged = root.join("merged");
    run_ok(&s(&["merge", p(&sharded), "--out", p(&merged), "-q"]));
    for f in ["attempts.jsonl", "dialogues.jsonl"] {
        let rows = |d: &Path| common::jsonl_without(&d.join(f), &["seconds"]);
        assert_eq!(rows(&whole), rows(&merged), "{f}");
    }
    assert_eq!(common::jsonl_without(&whole.join("attempts.jsonl"), &[]).len(), 8);
    let stats = |d: &Path| {
        let mut v = json(&d.join("stats.json"));
        v.as_object_mut().unwrap().remove("seconds_per_question");
        v
    };
    assert_eq!(stats(&whole), stats(&merged));
    assert_eq!(json(&whole.join("config.json")), json(&merged.join("config.json")));

    // shards may differ in how they compute (a CPU shard with integer products beside the others): the job's
    // settings leave that out, each part records its own, and the merged config says which part used what
    let mixed = root.join("mixed");
    let shard = |i: usize, extra: &[&str]| {
        let mut a = args(&mixed);
        a.extend(s(&["--shard", &format!("{i}/3")]));
        a.extend(s(extra));
        run_ok(&a);
    };
    shard(0, &["--int8-dot"]);
    shard(1, &[]);
    shard(2, &[]);
    assert_eq!(json(&mixed.join("part-00000-of-00003/config.json"))["int8_dot"], true);
    assert!(json(&mixed.join("job.json")).get("int8_dot").is_none());
    let merged = root.join("merged-mixed");
    run_ok(&s(&["merge", p(&mixed), "--out", p(&merged), "-q"]));
    let config = json(&merged.join("config.json"));
    assert_eq!(config["part_engines"], serde_json::json!({"part-00000-of-00003": {"int8_dot": true}}));
    assert!(config.get("int8_dot").is_none());
    assert_eq!(common::jsonl_without(&merged.join("attempts.jsonl"), &[]).len(), 8);
    // a shard with other settings of what it computes is still refused
    let mut a = args(&mixed);
    a.extend(s(&["--shard", "1/3", "--seed", "5"]));
    let out = bin().args(&a).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("other settings") && err.contains("synth"), "{err}");
}
