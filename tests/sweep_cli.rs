//! `ragtime sweep` end to end on a tiny random model, through the binary: one run per setting, sweep.jsonl and
//! pareto.svg, `--pick` writing calibrated points, `eval` loading them (`--budget`, the default budget, `none`),
//! `report --baseline` over the calibrated runs, `report --at` reading the sweep as curves, and a resumed sweep doing
//! no work twice.
#![allow(clippy::disallowed_methods)] // a test looks at paths directly (clippy.toml)

mod common;

use std::path::Path;

use ragtime::eval::sweep::{read_records, Calibrated};

use common::{model_args, ok, ragtime, tiny_eval as setup};

fn run_config(dir: &Path) -> toml::Value {
    toml::from_str(&std::fs::read_to_string(dir.join("config.toml")).unwrap()).unwrap()
}

#[test]
fn sweep_picks_budgets_that_eval_and_report_use() {
    let Some(s) = setup() else { return };
    let out = s.root.join("sweep");
    let cal = s.root.join("calibrated.toml");
    let mut args = vec!["sweep".to_string()];
    args.extend(model_args(&s));
    args.extend(
        [
            "--triggers",
            "none,single,fixed-length",
            "--batch",
            "2",
            "--pick",
            "--budgets",
            "1,2",
            "--calibrated",
            cal.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]
        .iter()
        .map(|x| x.to_string()),
    );
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let table = ok(&argv);

    // one run per setting: none, single, fixed-length's four intervals
    let records = read_records(&out.join("sweep.jsonl")).unwrap();
    let names: Vec<String> = records.iter().map(|r| r.run.clone()).collect();
    assert_eq!(
        names,
        ["none", "single", "fixed-length@n=16", "fixed-length@n=32", "fixed-length@n=64", "fixed-length@n=128"]
            .map(|n| format!("runs/{n}"))
    );
    for r in &records {
        assert_eq!(r.questions, 4, "{}: the validation split", r.run);
        assert!(out.join(&r.run).join("predictions.jsonl").is_file());
    }
    assert_eq!(records[0].retrievals_per_question, 0.0);
    assert_eq!(records[1].retrievals_per_question, 1.0);
    // fixed-length retrieves once up front and then every n tokens: shorter intervals retrieve more
    let fl: Vec<f64> = records[2..].iter().map(|r| r.retrievals_per_question).collect();
    assert!(fl.windows(2).all(|w| w[0] >= w[1]) && fl[0] > fl[3], "{fl:?}");
    assert!(table.contains("| fixed-length | trigger.n=16 | 4 |"), "{table}");
    let svg = std::fs::read_to_string(out.join("pareto.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("fixed-length"));

    // --pick: for each budget, the interval whose measured retrievals per question came nearest
    let file = Calibrated::load(&cal).unwrap().unwrap();
    assert_eq!(file.model, "tiny-llama");
    assert!(file.commands.len() == 1 && file.commands[0].starts_with("ragtime sweep --model "), "{:?}", file.commands);
    for b in [1.0, 2.0] {
        let p = file.lookup("fixed-length", "tinyqa", b).unwrap();
        let best = fl.iter().map(|c| (c - b).abs()).fold(f64::INFINITY, f64::min);
        assert!(((p.retrievals_per_question - b).abs() - best).abs() < 1e-9, "budget {b}: {p:?} vs {fl:?}");
        assert_eq!(p.split, "valid");
    }
    assert!(file.lookup("single", "tinyqa", 1.0).is_none(), "nothing to calibrate without a threshold");

    // eval on the test split at budget 2 takes the picked interval and records the budget
    let picked = file.lookup("fixed-length", "tinyqa", 2.0).unwrap().value.clone();
    let eval = |extra: &[&str], dir: &str| {
        let mut a = vec!["eval".to_string()];
        a.extend(model_args(&s));
        a.extend(
            ["--trigger", "fixed-length", "--split", "test", "--calibrated", cal.to_str().unwrap(), "--out"]
                .iter()
                .map(|x| x.to_string()),
        );
        a.push(s.root.join(dir).display().to_string());
        a.extend(extra.iter().map(|x| x.to_string()));
        let argv: Vec<&str> = a.iter().map(String::as_str).collect();
        ragtime(&argv)
    };
    let (success, _, err) = eval(&["--budget", "2"], "fl-2");
    assert!(success, "{err}");
    let c = run_config(&s.root.join("fl-2"));
    assert_eq!(c["budget"].as_float(), Some(2.0));
    assert_eq!(c["method_config"]["trigger"]["n"], picked);
    // another model's file is applied with a note saying so
    let renamed = s.root.join("renamed.toml");
    let mut other = file.clone();
    other.model = "tiny-llama-copy".into();
    other.save(&renamed).unwrap();
    let mut a = vec!["eval".to_string()];
    a.extend(model_args(&s));
    let rest = ["--trigger", "fixed-length", "--split", "test", "--budget", "2", "--calibrated"];
    a.extend(rest.iter().map(|x| x.to_string()));
    a.extend([renamed.display().to_string(), "--out".into(), s.root.join("fl-renamed").display().to_string()]);
    let (success, _, err) = ragtime(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(success, "{err}");
    let note = "renamed.toml: points calibrated for model 'tiny-llama-copy', applied to 'tiny-llama' (--model)";
    assert!(err.contains(note), "{err}");
    assert_eq!(run_config(&s.root.join("fl-renamed"))["method_config"]["trigger"]["n"], picked);
    assert!(!eval(&["--budget", "1"], "fl-1").2.contains("points calibrated for model"), "no note for its own file");
    // no --budget: the file's default budget (1)
    assert!(eval(&[], "fl-default").0);
    let c = run_config(&s.root.join("fl-default"));
    assert_eq!(c["budget"].as_float(), Some(1.0));
    assert_eq!(c["method_config"]["trigger"]["n"], file.lookup("fixed-length", "tinyqa", 1.0).unwrap().value);
    // --budget none: the config's own value, no budget recorded
    assert!(eval(&["--budget", "none"], "fl-none").0);
    let c = run_config(&s.root.join("fl-none"));
    assert!(c.get("budget").is_none());
    assert_eq!(c["method_config"]["trigger"]["n"].as_integer(), Some(16));
    // a budget the file does not have is an error naming the file and the budgets it has
    let (success, _, err) = eval(&["--budget", "3"], "fl-3");
    assert!(!success && err.contains("calibrated.toml") && err.contains("calibrated: 1, 2"), "{err}");
    assert!(!s.root.join("fl-3").exists(), "nothing written for a refused run");

    // report --baseline: per budget, with the no-budget runs beside
    let single = out.join("runs/single");
    let report = ok(&[
        "report",
        "--baseline",
        "fixed-length",
        "--resamples",
        "200",
        s.root.join("fl-2").to_str().unwrap(),
        s.root.join("fl-default").to_str().unwrap(),
        single.to_str().unwrap(),
    ]);
    assert!(
        report.contains("### Budget 1 retrievals/question") && report.contains("### Budget 2 retrievals/question"),
        "{report}"
    );
    assert!(report.contains("| single (reference) |"), "{report}");

    // report --at: the sweep's four intervals as one curve, read halfway between its two highest rates, linearly
    // between the two measured settings on either side (worked out here from sweep.jsonl), and at rate 1
    let mut pts: Vec<(f64, f64)> = records[2..].iter().map(|r| (r.retrievals_per_question, r.score())).collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (a, b) = (pts[pts.len() - 2], pts[pts.len() - 1]);
    assert!(b.0 > a.0, "{pts:?}");
    let rate = (a.0 + b.0) / 2.0;
    let expected = (a.1 + b.1) / 2.0;
    let runs: Vec<String> = records.iter().map(|r| out.join(&r.run).display().to_string()).collect();
    let at = format!("1,{rate}");
    // and --mean-over the same two settings' span: one straight line, whose mean is the reading halfway
    let over = format!("{}..{}", a.0, b.0);
    let mut argv =
        vec!["report", "--at", &at, "--mean-over", &over, "--baseline", "fixed-length", "--resamples", "200"];
    argv.extend(runs.iter().map(String::as_str));
    let report = ok(&argv);
    assert!(!report.contains("### Budget"), "--at replaces the budget tables: {report}");
    // each rate's table, its rows as cells: controller, settings, span, between, value, Δ, p, resamples kept
    let table_titled = |head: String| -> Vec<Vec<String>> {
        let t = report.split(&head).nth(1).unwrap_or_else(|| panic!("{head}: {report}"));
        let t = t.split("\n### ").next().unwrap();
        t.lines()
            .filter(|l| l.starts_with("| ") && !l.starts_with("| controller |"))
            .map(|l| l.trim_matches(|c| c == '|' || c == ' ').split(" | ").map(str::to_string).collect())
            .collect()
    };
    let table = |r: f64| table_titled(format!("### F1 at {r} retrievals/question"));
    let find = |t: &[Vec<String>], name: &str| t.iter().find(|r| r[0] == name).unwrap().clone();
    let t = table(rate);
    let fl_row = find(&t, "fixed-length");
    assert_eq!((fl_row[1].as_str(), fl_row[5].as_str()), ("4", "baseline"), "{report}");
    assert_eq!(fl_row[3], format!("{:.2}: {:.3} and {:.2}: {:.3}", a.0, a.1, b.0, b.1), "{report}");
    assert_eq!(fl_row[4], format!("{expected:.3}"), "{report}");
    assert_eq!(find(&t, "single")[3], "not reached", "{report}");
    // at rate 1, single (exactly one retrieval per question) is read where it was measured, none not at all
    let t = table(1.0);
    assert_eq!(find(&t, "single")[3], "measured", "{report}");
    assert_eq!(find(&t, "single")[7], "200", "every resample keeps single at rate 1: {report}");
    assert_eq!(find(&t, "none")[3], "not reached", "{report}");
    let t = table_titled(format!("### F1 averaged over {}–{} retrievals/question", a.0, b.0));
    let fl_row = find(&t, "fixed-length");
    assert_eq!(fl_row[3], format!("{:.2}: {:.3} to {:.2}: {:.3}", a.0, a.1, b.0, b.1), "{report}");
    assert_eq!(fl_row[4], format!("{expected:.3}"), "{report}");
    assert_eq!(find(&t, "single")[4], "–", "single is measured at 1 only: {report}");

    // a sweep of another controller into the same directory keeps the earlier lines and adds its own
    let mut more = vec!["sweep".to_string()];
    more.extend(model_args(&s));
    more.extend(["--triggers", "fixed-sentence", "--out", out.to_str().unwrap()].iter().map(|x| x.to_string()));
    ok(&more.iter().map(String::as_str).collect::<Vec<_>>());
    let merged = read_records(&out.join("sweep.jsonl")).unwrap();
    assert_eq!(merged.len(), records.len() + 1);
    assert_eq!(&merged[..records.len()], &records[..]);
    assert_eq!(merged[records.len()].run, "runs/fixed-sentence");

    // --grid: the same key over values given on the command line, added beside the config's grid
    let mut grid = vec!["sweep".to_string()];
    grid.extend(model_args(&s));
    grid.extend(
        ["--triggers", "fixed-length", "--grid", "fixed-length=8,24", "--out", out.to_str().unwrap()]
            .iter()
            .map(|x| x.to_string()),
    );
    ok(&grid.iter().map(String::as_str).collect::<Vec<_>>());
    let with_grid = read_records(&out.join("sweep.jsonl")).unwrap();
    assert_eq!(&with_grid[..merged.len()], &merged[..], "the earlier lines stay");
    let added: Vec<&str> = with_grid[merged.len()..].iter().map(|r| r.run.as_str()).collect();
    assert_eq!(added, ["runs/fixed-length@n=8", "runs/fixed-length@n=24"]);
    assert_eq!(run_config(&out.join("runs/fixed-length@n=8"))["method_config"]["trigger"]["n"].as_integer(), Some(8));

    // a second sweep resumes: every run is complete, so the records are the same
    let before = std::fs::read_to_string(out.join("sweep.jsonl")).unwrap();
    ok(&argv);
    let after = read_records(&out.join("sweep.jsonl")).unwrap();
    let before: Vec<_> = before.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()).collect();
    assert_eq!(after.len(), before.len(), "no line lost or doubled");
    for a in &after {
        let b = before.iter().find(|b| b["run"] == a.run.as_str()).unwrap();
        assert_eq!(a.f1, b["f1"].as_f64().unwrap());
        assert_eq!(a.retrievals_per_question, b["retrievals_per_question"].as_f64().unwrap());
    }
}

#[test]
fn sweep_refuses_bad_requests_before_any_work() {
    let Some(s) = setup() else { return };
    let run = |extra: &[&str]| {
        let mut a = vec!["sweep".to_string()];
        a.extend(model_args(&s));
        a.extend(extra.iter().map(|x| x.to_string()));
        let argv: Vec<&str> = a.iter().map(String::as_str).collect();
        ragtime(&argv)
    };
    let out = s.root.join("never");
    let o = out.to_str().unwrap();
    let (success, _, err) = run(&["--triggers", "fixed-length", "--split", "test", "--pick", "--out", o]);
    assert!(!success && err.contains("--pick with --split test"), "{err}");
    let (success, _, err) = run(&["--triggers", "fixed-length", "--set", "trigger.n=8", "--out", o]);
    assert!(!success && err.contains("trigger.n is what the sweep of fixed-length varies"), "{err}");
    let (success, _, err) = run(&["--triggers", "rnd", "--out", o]);
    assert!(!success && err.contains("configs/rnd.toml"), "{err}");
    let (success, _, err) = run(&["--triggers", "single", "--budgets=5000", "--out", o]);
    assert!(!success && err.contains("--budgets"), "{err}");
    let (success, _, err) = run(&["--triggers", "fixed-length", "--grid", "rind=0.1", "--out", o]);
    assert!(!success && err.contains("--grid rind=0.1: 'rind' is not among --triggers"), "{err}");
    let (success, _, err) = run(&["--triggers", "fixed-length", "--grid", "fixed-length", "--out", o]);
    assert!(!success && err.contains("expected CONTROLLER=V1,V2"), "{err}");
    let (success, _, err) = run(&["--triggers", "fixed-length", "--refine", "51", "--out", o]);
    assert!(!success && err.contains("--refine"), "{err}");
    let (success, _, err) = run(&["--triggers", "fixed-length", "--refine", "2", "--tolerance=-1", "--out", o]);
    assert!(!success && err.contains("--tolerance"), "{err}");
    let (success, _, err) = run(&["--triggers", "single", "--grid", "single=1,2", "--out", o]);
    assert!(!success && err.contains("--grid single=...") && err.contains("no [sweep] key"), "{err}");
    assert!(!out.exists(), "no output directory for a refused sweep");
    // a calibrated file ragtime did not write is refused before the sweep, and left alone
    let foreign = s.root.join("mine.toml");
    std::fs::write(&foreign, "# my notes\n").unwrap();
    let (success, _, err) =
        run(&["--triggers", "fixed-length", "--pick", "--calibrated", foreign.to_str().unwrap(), "--out", o]);
    assert!(!success && err.contains("mine.toml"), "{err}");
    assert_eq!(std::fs::read_to_string(&foreign).unwrap(), "# my notes\n");
    // so is another model's file: its points would be merged with this model's
    let other = s.root.join("other-model.toml");
    Calibrated::new("qwen2.5-coder-1.5b-instruct-q4_k_m", 1.0).save(&other).unwrap();
    let before = std::fs::read_to_string(&other).unwrap();
    let (success, _, err) =
        run(&["--triggers", "fixed-length", "--pick", "--calibrated", other.to_str().unwrap(), "--out", o]);
    assert!(!success, "{err}");
    assert!(
        err.contains(
            "other-model.toml: holds the points of model 'qwen2.5-coder-1.5b-instruct-q4_k_m', not of \
             'tiny-llama' (--model)"
        ),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&other).unwrap(), before);
    assert!(!out.exists(), "no output directory for a refused calibrated file either");
}

/// `--refine`: after a grid of fixed-length intervals 4 and 128, each further setting is the one
/// `eval::refine::next` names from the settings measured before it (the first the log midpoint of 4 and 128,
/// sqrt(512) = 22.6 -> 23), strictly inside the grid, until a setting meets the budget, none lies between, or
/// the N settings are spent; `--pick` reads them all; a rerun resumes without a doubled line.
#[test]
fn sweep_refines_toward_a_budget_between_its_grid_points() {
    use ragtime::eval::refine::{next, Next};
    let Some(s) = setup() else { return };
    let out = s.root.join("refine");
    let cal = s.root.join("refined.toml");
    let sweep = |extra: &[&str]| {
        let mut a = vec!["sweep".to_string()];
        a.extend(model_args(&s));
        a.extend(
            ["--triggers", "fixed-length", "--grid", "fixed-length=4,128", "--batch", "2", "--out"]
                .iter()
                .map(|x| x.to_string()),
        );
        a.push(out.display().to_string());
        a.extend(extra.iter().map(|x| x.to_string()));
        let argv: Vec<&str> = a.iter().map(String::as_str).collect();
        ok(&argv)
    };
    sweep(&[]);
    let grid = read_records(&out.join("sweep.jsonl")).unwrap();
    let (r4, r128) = (grid[0].retrievals_per_question, grid[1].retrievals_per_question);
    assert!(r4 > r128 + 0.5, "the grid brackets a budget: {r4} {r128}");
    let budget = format!("{}", (r4 + r128) / 2.0);
    let args =
        ["--refine", "4", "--tolerance", "0", "--budgets", &budget, "--pick", "--calibrated", cal.to_str().unwrap()];
    sweep(&args);
    let all = read_records(&out.join("sweep.jsonl")).unwrap();
    assert_eq!(&all[..2], &grid[..], "the grid's runs resumed, not redone");
    assert!(all.len() > 2, "at least one refined setting: {all:?}");
    let b: f64 = budget.parse().unwrap();
    for k in 2..all.len() {
        assert_eq!(next(&all[..k], "fixed-length", b, 0.0), Next::Probe(all[k].value.clone().unwrap()), "setting {k}");
        let n = all[k].value.as_ref().unwrap().as_integer().unwrap();
        assert!(n > 4 && n < 128, "{n}");
    }
    assert_eq!(all[2].value, Some(toml::Value::Integer(23)));
    assert_eq!(run_config(&out.join("runs/fixed-length@n=23"))["method_config"]["trigger"]["n"].as_integer(), Some(23));
    // the search stopped for a reason: met, no room, or four settings spent
    let ended = next(&all, "fixed-length", b, 0.0);
    assert!(all.len() == 6 || matches!(ended, Next::Met(_) | Next::NoRoom { .. }), "{ended:?} after {all:?}");
    // the pick is the nearest of every setting measured, refined ones included
    let p = Calibrated::load(&cal).unwrap().unwrap();
    let p = p.lookup("fixed-length", "tinyqa", b).unwrap();
    let best = all.iter().map(|r| (r.retrievals_per_question - b).abs()).fold(f64::INFINITY, f64::min);
    assert!(((p.retrievals_per_question - b).abs() - best).abs() < 1e-9, "{p:?}");
    // a rerun measures nothing new and doubles no line
    sweep(&args);
    assert_eq!(read_records(&out.join("sweep.jsonl")).unwrap(), all);
    // a budget beyond every rate measured is still picked (the nearest), with a warning that says so
    let far = format!("{}", r4 + 5.0);
    let mut a = vec!["sweep".to_string()];
    a.extend(model_args(&s));
    a.extend(common::strings(&["--triggers", "fixed-length", "--grid", "fixed-length=4,128", "--batch", "2"]));
    a.extend(common::strings(&["--budgets", &far, "--pick", "--calibrated", cal.to_str().unwrap(), "--out"]));
    a.push(out.display().to_string());
    let err = String::from_utf8_lossy(&common::run_ok(&a).stderr).into_owned();
    assert!(
        err.contains(&format!("warning: pick: fixed-length on tinyqa at budget {far}: the nearest setting")),
        "{err}"
    );
    assert!(err.contains("every setting swept gives fewer retrievals/question than"), "{err}");
    assert!(err.contains("widen --grid to bracket it"), "{err}");
    assert!(Calibrated::load(&cal).unwrap().unwrap().lookup("fixed-length", "tinyqa", r4 + 5.0).is_some());
}
