//! `ragtime data fetch NAME...` downloads datasets into `datasets/data/` (checksum-verified; falls back to a
//! verified shared copy where the source cannot be reached); `ragtime data list` shows where each dataset is
//! found and its splits; `ragtime data corpus NAME --out FILE` writes the passages its questions ship with as a
//! corpus for `ragtime index`.

use anyhow::{bail, Context, Result};
use clap::{Args as ClapArgs, Subcommand};

use ragtime::data::{self, Origin, Placed};
use ragtime::eval::DatasetSpec;

#[derive(ClapArgs, Debug)]
pub struct DataArgs {
    #[command(subcommand)]
    pub command: DataCommand,
}

#[derive(Subcommand, Debug)]
pub enum DataCommand {
    /// Download datasets (datasets/NAME.toml [source]) into datasets/data/, verifying their sha256.
    Fetch(FetchArgs),
    /// Each dataset, where its data is found (fetched / shared / missing) and its splits.
    List,
    /// The passages a dataset's questions ship with (their contexts and supporting paragraphs: BioASQ's snippets,
    /// IIRC's contexts, ...), de-duplicated, as a JSON-lines corpus {id, title, text} for `ragtime index`.
    Corpus(CorpusArgs),
}

#[derive(ClapArgs, Debug)]
pub struct CorpusArgs {
    /// Dataset name (datasets/NAME.toml), spec file or data file.
    pub name: String,
    /// The corpus file to write (JSON lines); it must not exist yet.
    #[arg(long)]
    pub out: std::path::PathBuf,
    /// Only the passages of questions of these kinds (span, yes_no, yes_no_maybe, list; comma-separated); all
    /// kinds when absent. BioASQ: `--kinds yes_no,span` leaves out the list questions' snippets.
    #[arg(long, value_delimiter = ',')]
    pub kinds: Vec<ragtime::qa::AnswerKind>,
}

#[derive(ClapArgs, Debug)]
pub struct FetchArgs {
    /// Dataset names (see `ragtime data list`).
    #[arg(required_unless_present = "all")]
    pub names: Vec<String>,
    /// Every dataset with a [source].
    #[arg(long, conflicts_with = "names")]
    pub all: bool,
}

fn spec(name: &str) -> Result<DatasetSpec> {
    let Some(path) = DatasetSpec::find_toml(name) else {
        ragtime::usage_bail!("unknown dataset '{name}' (known: {})", DatasetSpec::known_names().join(", "));
    };
    DatasetSpec::parse_toml_file(&path)
}

pub fn run(args: DataArgs) -> Result<()> {
    match args.command {
        DataCommand::Fetch(a) => fetch(a),
        DataCommand::List => list(),
        DataCommand::Corpus(a) => corpus(a),
    }
}

/// One passage of `data corpus`.
#[derive(serde::Serialize)]
struct Passage<'a> {
    id: String,
    title: &'a str,
    text: &'a str,
}

/// Every question of the file (whatever the spec's `kinds` keep: a corpus serves all of them; `--kinds` chooses),
/// its contexts and supporting paragraphs in file order; a passage whose title and whitespace-collapsed text came
/// before is skipped.
fn corpus(args: CorpusArgs) -> Result<()> {
    if ragtime::io::exists(&args.out)? {
        ragtime::usage_bail!(
            "--out {}: the file exists; `data corpus` writes a new file only (remove it or name another)",
            args.out.display()
        );
    }
    let spec = DatasetSpec::load(&args.name)?;
    let kinds = (!args.kinds.is_empty()).then_some(args.kinds);
    let kept = DatasetSpec { kinds, ..spec };
    let examples = kept.load_examples()?;
    let mut seen = std::collections::HashSet::new();
    let (mut rows, mut repeats) = (Vec::new(), 0);
    for doc in examples.iter().flat_map(|e| e.contexts.iter().chain(&e.supporting)) {
        if doc.text.trim().is_empty() {
            continue;
        }
        if seen.insert((ragtime::qa::collapse_ws(&doc.title), ragtime::qa::collapse_ws(&doc.text))) {
            rows.push(Passage { id: format!("{}-{}", kept.name, rows.len()), title: &doc.title, text: &doc.text });
        } else {
            repeats += 1;
        }
    }
    if rows.is_empty() {
        bail!("{}: its {} questions ship no passages to make a corpus of", kept.file.display(), examples.len());
    }
    if let Some(dir) = args.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--out {}: cannot create its folder", args.out.display()))?;
    }
    ragtime::io::write_atomic(&args.out, &ragtime::io::jsonl_bytes(&rows)?)
        .with_context(|| format!("--out {}: cannot write", args.out.display()))?;
    println!(
        "{}: {} passages from {} questions ({repeats} repeats skipped) -> {}",
        kept.name,
        rows.len(),
        examples.len(),
        args.out.display()
    );
    Ok(())
}

fn fetch(args: FetchArgs) -> Result<()> {
    let names = if args.all { DatasetSpec::known_names() } else { args.names };
    // every name is checked before anything is fetched
    let specs = names.iter().map(|n| spec(n)).collect::<Result<Vec<_>>>()?;
    let mut failed = Vec::new();
    for (name, spec) in names.iter().zip(&specs) {
        let Some(source) = &spec.source else {
            if args.all {
                continue;
            }
            bail!("dataset '{name}': its spec has no [source] to fetch from");
        };
        match data::fetch(name, &spec.file, source, &mut |line: &str| eprintln!("{line}")) {
            Ok(placed) => report(name, &placed),
            Err(e) => {
                eprintln!("error: {e:#}");
                failed.push(name.as_str());
            }
        }
    }
    if !failed.is_empty() {
        bail!("could not fetch: {}", failed.join(", "));
    }
    Ok(())
}

fn report(name: &str, placed: &[Placed]) {
    let (mut down, mut kept, mut shared) = (0, 0, 0);
    for p in placed {
        match p {
            Placed::Downloaded(_) => down += 1,
            Placed::AlreadyFetched(_) => kept += 1,
            Placed::Shared(_) => shared += 1,
        }
    }
    let where_ = |p: &Placed| match p {
        Placed::Downloaded(p) | Placed::AlreadyFetched(p) | Placed::Shared(p) => p.display().to_string(),
    };
    let first = placed.first().map(where_).unwrap_or_default();
    let more = if placed.len() > 1 { format!(" (+{} more files)", placed.len() - 1) } else { String::new() };
    if shared > 0 {
        println!("{name}: using the shared copy, sha256 verified: {first}{more}");
    } else if down > 0 {
        println!(
            "{name}: fetched, sha256 verified: {first}{more}{}",
            if kept > 0 { format!(" ({kept} already there)") } else { String::new() }
        );
    } else {
        println!("{name}: already fetched: {first}{more}");
    }
}

fn list() -> Result<()> {
    let names = DatasetSpec::known_names();
    let mut rows = Vec::new();
    for name in &names {
        let path = DatasetSpec::find_toml(name).context("spec vanished")?;
        let spec = DatasetSpec::parse_toml_file(&path)?;
        let found = data::locate(&spec.file, spec.source.as_ref());
        let origins: Vec<Option<Origin>> = found.iter().map(|(_, f)| f.as_ref().map(|(_, o)| *o)).collect();
        let status = if origins.iter().any(Option::is_none) {
            if origins.iter().all(Option::is_none) {
                "missing"
            } else {
                "partial"
            }
        } else if origins.iter().all(|o| *o == Some(Origin::Fetched)) {
            "fetched"
        } else if origins.iter().all(|o| *o == Some(Origin::Shared)) {
            "shared"
        } else {
            "fetched+shared"
        };
        let place = match data::find(&spec.file) {
            Some((p, _)) => p.display().to_string(),
            None => spec.file.display().to_string(),
        };
        let splits: Vec<String> = spec.splits.iter().map(|(k, r)| format!("{k} {}", String::from(*r))).collect();
        rows.push((name.clone(), status, place, splits.join(", ")));
    }
    let w = rows.iter().map(|r| r.0.len()).max().unwrap_or(4).max(7);
    println!("{:w$}  {:14}  {:28}  file", "dataset", "data", "splits");
    for (name, status, place, splits) in rows {
        println!("{name:w$}  {status:14}  {splits:28}  {place}");
    }
    let roots: Vec<String> = data::roots().iter().map(|r| r.display().to_string()).collect();
    println!("\ndata folders searched, in order: {}", roots.join(", "));
    Ok(())
}
