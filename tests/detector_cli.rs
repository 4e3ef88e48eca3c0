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

/// `--members 3`: three networks from seeds 42, 43, 44, each one's kept epoch printed, then the ensemble's table;
/// `--evaluate` of the ensemble reproduces the metrics its report stored (both from the f32 inference path);
/// `--stream` trains an ensemble too; `--members 0` is refused.
#[test]
fn members_train_an_ensemble_that_evaluate_reads() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("labels");
    common::write_toy_label_store(&data, 80);
    let det = dir.path().join("ens");
    let (d, o) = (data.to_str().unwrap(), det.to_str().unwrap());
    let (success, table, err) =
        ragtime(&["train", "detector", "--data", d, "--epochs", "3", "--members", "3", "--out", o]);
    assert!(success, "{err}");
    for (k, seed) in [(0, 42), (1, 43), (2, 44)] {
        assert!(err.contains(&format!("network {k} (seed {seed}): kept epoch")), "{err}");
    }
    assert!(err.contains("the ensemble of the 3 networks"), "{err}");
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(det.join("detector.json")).unwrap()).unwrap();
    assert_eq!(info["members"], 3);
    assert_eq!(info["ensemble"]["rest"].as_array().unwrap().len(), 2);
    let printed = roc_aucs(&table);
    let evaluated = roc_aucs(&ok(&["train", "detector", "--evaluate", o, "--data", d]));
    for ((split, auc), (split2, again)) in printed.iter().zip(&evaluated[..3]) {
        assert_eq!(split, split2);
        let stored = info["ensemble"]["best"][split]["roc_auc"].as_f64().unwrap();
        assert!(
            (auc - stored).abs() <= 5e-5 && auc == again,
            "{split}: printed {auc}, stored {stored}, evaluate {again}"
        );
    }

    let streamed = dir.path().join("ens-stream");
    let s = streamed.to_str().unwrap();
    ok(&["train", "detector", "--data", d, "--epochs", "2", "--members", "2", "--stream", "--out", s]);
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(streamed.join("detector.json")).unwrap()).unwrap();
    assert_eq!((info["members"].as_u64(), info["ensemble"]["best"]["test"]["n"].is_u64()), (Some(2), true));

    let (success, _, err) = ragtime(&["train", "detector", "--data", d, "--members", "0", "--out", o]);
    assert!(!success && err.contains("--members"), "{err}");
}
