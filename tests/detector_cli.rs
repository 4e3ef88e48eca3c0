//! `ragtime train detector --evaluate` through the binary: a trained detector scored on its own label store
//! reproduces, split by split, the metrics its training report kept; bad requests name what is wrong.
#![allow(clippy::disallowed_methods)] // a test looks at paths directly (clippy.toml)

mod common;

use common::{ok, ragtime};

/// `(split, ROC-AUC)` of each line `--evaluate` prints.
fn roc_aucs(table: &str) -> Vec<(String, f64)> {
    table
        .lines()
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let at = w.iter().position(|x| *x == "ROC-AUC").expect("a ROC-AUC column") + 1;
            (w[0].to_string(), w[at].parse().unwrap())
        })
        .collect()
}

#[test]
fn evaluate_reproduces_the_training_report_on_its_own_store() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("labels");
    common::write_toy_label_store(&data, 80);
    let det = dir.path().join("det");
    let (d, o) = (data.to_str().unwrap(), det.to_str().unwrap());
    ok(&["train", "detector", "--data", d, "--epochs", "5", "--out", o]);
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(det.join("detector.json")).unwrap()).unwrap();

    let table = ok(&["train", "detector", "--evaluate", o, "--data", d]);
    let got = roc_aucs(&table);
    let names: Vec<&str> = got.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(names, ["train", "valid", "test", "all"], "{table}");
    for (split, auc) in &got[..3] {
        let kept = info["training"]["best"][split]["roc_auc"].as_f64().unwrap();
        // the report's scores come from burn's forward pass, these from the f32 inference path: printed to 4
        // decimals, the two agree to the last one
        assert!((auc - kept).abs() <= 1e-4 + 5e-5, "{split}: evaluate {auc}, training kept {kept}\n{table}");
    }
    assert!(got[3].1 > 0.8, "a learnable label: {table}");
    assert!(table.lines().last().unwrap().contains("examples     800"), "every row in 'all': {table}");
    assert!(!dir.path().join("checkpoints").exists(), "--evaluate writes nothing");

    // refusals name the flag or file
    let missing = dir.path().join("nope");
    let (success, _, err) = ragtime(&["train", "detector", "--evaluate", missing.to_str().unwrap(), "--data", d]);
    assert!(!success && err.contains("--evaluate") && err.contains("nope"), "{err}");
    let (success, _, err) = ragtime(&["train", "detector", "--evaluate", o, "--data", d, "--stream"]);
    assert!(!success && err.contains("--stream"), "{err}");
    let (success, _, err) = ragtime(&["train", "detector", "--evaluate", o, "--data", missing.to_str().unwrap()]);
    assert!(!success && err.contains("nope"), "{err}");
}
