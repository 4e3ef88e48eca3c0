//! `scripts/gpu-suite.sh` without a GPU: its steps run stub binaries, so what is checked is the orchestration —
//! each step's outcome in the summary (done, failed with its last log line, skipped for a missing input or for lack
//! of time), its table and log, the archive, the test binaries' build folder linked, and the folders it refuses.
#![allow(clippy::disallowed_methods)] // a test looks at paths directly (clippy.toml)

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// An executable shell script at `path`.
fn stub(path: &Path, body: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
}

/// Exit code, stdout and stderr of the suite with `env` and `args`.
fn suite(env: &[(&str, &Path)], extra: &[(&str, &str)], args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new("bash");
    cmd.arg(repo().join("scripts/gpu-suite.sh")).args(args).env_remove("RUST_BACKTRACE");
    for (k, v) in env {
        cmd.env(k, v);
    }
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("runs bash");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// The outcome column of `step`'s row in the summary.
fn outcome<'a>(summary: &'a str, step: &str) -> &'a str {
    let row = summary.lines().find(|l| l.starts_with(&format!("| {step} |"))).unwrap_or_else(|| panic!("{summary}"));
    row.split('|').nth(2).unwrap().trim()
}

#[test]
fn steps_are_done_failed_or_skipped_and_written_down() {
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("b");
    // the reductions benchmark fails; one test binary passes; no store writer, no fusion build
    stub(&bin.join("ragtime"), "echo ragtime-stub \"$@\"");
    stub(&bin.join("bench_staged_reductions"), "echo 'no GPU here' >&2; exit 3");
    stub(&bin.join("tests/t1"), "echo 'test a_cuda_test ... ok'; echo 'test result: ok. 1 passed'");
    let built = tmp.path().join("build/here");
    fs::write(bin.join("built-in"), format!("{}\n", built.display())).unwrap();
    let (data, out, work) = (tmp.path().join("data"), tmp.path().join("out"), tmp.path().join("work"));
    fs::create_dir_all(&data).unwrap();
    let archive = tmp.path().join("suite.tgz");
    let env = [
        ("BINDIR", bin.as_path()),
        ("RAGTIME_DATA", data.as_path()),
        ("OUT", out.as_path()),
        ("WORK", work.as_path()),
        ("ARCHIVE", archive.as_path()),
    ];
    // 89 s: under generate's minimum of 90 whatever the time taken, and 29 s of margin over the tests step's 60
    let knobs = [("DEADLINE", "89"), ("RESERVE", "0"), ("MODEL", "smollm2")];
    let (code, stdout, stderr) = suite(&env, &knobs, &["env", "reductions", "tests", "generate", "detector", "fusion"]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");

    let summary = fs::read_to_string(out.join("summary.md")).unwrap();
    assert_eq!(stdout, summary, "the summary is printed at the end");
    assert_eq!(outcome(&summary, "env"), "done");
    assert_eq!(outcome(&summary, "reductions"), "failed (exit 3): no GPU here");
    assert_eq!(outcome(&summary, "tests"), "done");
    assert!(
        outcome(&summary, "generate").starts_with("skipped: ") && outcome(&summary, "generate").ends_with("needs 90")
    );
    assert!(
        outcome(&summary, "detector").contains("missing") && outcome(&summary, "detector").contains("fake_label_store")
    );
    assert!(outcome(&summary, "fusion").contains("ragtime-cuda-fusion"), "{summary}");

    // each step that ran has its table and log; the test lines are kept, the build folder linked to the checkout
    assert!(fs::read_to_string(out.join("env.md")).unwrap().contains("ragtime-stub --version"));
    assert!(fs::read_to_string(out.join("reductions.log")).unwrap().contains("no GPU here"));
    let tests = fs::read_to_string(out.join("tests.md")).unwrap();
    assert!(tests.contains("#### t1") && tests.contains("test a_cuda_test ... ok"), "{tests}");
    assert!(fs::symlink_metadata(&built).unwrap().file_type().is_symlink());
    assert_eq!(built.canonicalize().unwrap(), repo().canonicalize().unwrap());
    assert!(!out.join("generate.md").exists(), "a skipped step writes nothing");

    // the archive holds the results folder
    let list = Command::new("tar").arg("tzf").arg(&archive).output().unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    for f in ["out/summary.md", "out/env.md", "out/reductions.log", "out/tests.md"] {
        assert!(list.lines().any(|l| l == f), "{f} not in the archive:\n{list}");
    }
}

#[test]
fn refuses_folders_it_did_not_make_and_unknown_steps() {
    let tmp = tempfile::tempdir().unwrap();
    let theirs = tmp.path().join("theirs");
    fs::create_dir_all(&theirs).unwrap();
    fs::write(theirs.join("notes.txt"), "mine").unwrap();
    let mine = tmp.path().join("mine");
    let bin = tmp.path().join("b");
    for (out, work) in [(&theirs, &mine), (&mine, &theirs)] {
        let env = [("BINDIR", bin.as_path()), ("OUT", out.as_path()), ("WORK", work.as_path())];
        let (code, _, stderr) = suite(&env, &[], &["env"]);
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains(&theirs.display().to_string()) && stderr.contains("not a"), "{stderr}");
        assert_eq!(fs::read_to_string(theirs.join("notes.txt")).unwrap(), "mine");
        assert_eq!(fs::read_dir(&theirs).unwrap().count(), 1, "nothing written into a folder of someone else's");
    }
    // an archive that exists before the run is not overwritten
    let archive = theirs.join("notes.txt");
    let (out, work) = (tmp.path().join("out"), tmp.path().join("work"));
    let env = [("BINDIR", bin.as_path()), ("OUT", out.as_path()), ("WORK", work.as_path()), ("ARCHIVE", &archive)];
    let (code, _, stderr) = suite(&env, &[], &["env"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("ARCHIVE=") && stderr.contains("exists"), "{stderr}");
    assert_eq!(fs::read_to_string(&archive).unwrap(), "mine");
    assert!(!out.exists() && !work.exists(), "nothing made before the refusal");

    let env = [("OUT", mine.as_path()), ("WORK", mine.as_path())];
    let (code, _, stderr) = suite(&env, &[], &["warp"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("unknown step 'warp'"), "{stderr}");
    let (code, _, stderr) = suite(&env, &[("MODEL", "gpt")], &["env"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("MODEL=gpt"), "{stderr}");
}

#[test]
fn dry_run_lists_each_step_and_what_it_lacks() {
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("b");
    stub(&bin.join("ragtime"), "exit 0");
    let env = [("BINDIR", bin.as_path())];
    let (code, stdout, stderr) = suite(&env, &[("DRY", "1"), ("MODEL", "smollm2")], &[]);
    assert_eq!(code, 0, "{stderr}");
    let steps = [
        "env",
        "reductions",
        "tests",
        "generate",
        "profile",
        "fusion",
        "synth",
        "train",
        "train-lora",
        "train-pack",
        "detector",
        "compile",
    ];
    let lines: Vec<&str> = stdout.lines().skip(1).collect();
    assert_eq!(lines.len(), steps.len(), "{stdout}");
    for (line, step) in lines.iter().zip(steps) {
        assert!(line.starts_with(&format!("{step} ")), "{line}");
    }
    assert!(lines[1].contains("missing: ") && lines[1].contains("bench_staged_reductions"), "{}", lines[1]);
    assert!(lines[5].contains("ragtime-cuda-fusion"), "{}", lines[5]);
    assert!(!lines[0].contains("missing"), "{}", lines[0]);
}
