//! The shard contract every long job shares (`synth hallucination`, `synth qa-labels`, `synth autorag`, `index`,
//! `eval`), so that n processes — the tasks of a Slurm array job, or any n machines — can each do a part and
//! `ragtime merge` can put the parts back together into what one process would have written.
//!
//! # Which items a shard takes
//!
//! Shard `i/n` takes the items (articles, questions, passages) whose id hashes to `i`: the first 8 bytes of
//! SHA-256 of `"ragtime-shard\0"` + the id, big-endian, modulo `n` ([`Shard::owns`]; the prefix keeps the shards
//! independent of other splits by hash of the same ids, such as the detector's train/valid/test split). The split depends on the ids only, not on the
//! order of a file list or on the number of files, and the same id lands in the same shard on every machine and
//! in every later version.
//!
//! `i/n` comes from `--shard i/n`; without the flag, from Slurm's array variables: `i` is
//! `SLURM_ARRAY_TASK_ID`, `n` is `RAGTIME_SHARD_COUNT` when set (the sbatch templates set it, so that resubmitting
//! a few failed indices, `--array=3,7`, keeps `n`), else `SLURM_ARRAY_TASK_COUNT`. Array indices must therefore
//! run 0..n-1 (`--array=0-15` for 16 shards).
//!
//! # Layout of a sharded output
//!
//! ```text
//! OUT/
//!   .ragtime-output              "sharded <kind>"
//!   job.json                     the settings every shard must share (written by the first shard to start)
//!   part-00000-of-00004/         shard 0's output: the directory the job writes without sharding, resumable
//!   part-00000-of-00004.done     its completion marker (JSON, see [`Marker`]); absent while it runs
//!   part-00001-of-00004/ ...
//! ```
//!
//! A job may let its shards differ in how they compute rather than what ([`ENGINE_KEYS`]: the CPU's integer
//! products, weights rounded at load, the GPU's precision; [`ShardRun::begin_any_engine`], `synth autorag`, whose dialogues are training
//! data from any engine): those keys are then not job settings, each part records its own in its directory, and
//! the merge notes which part used which. The other jobs' shards must agree on them too.
//!
//! A shard starts by checking `job.json` (another job's shards in the same directory are refused before any
//! work) and removing its own old marker; it ends by writing the marker: item and row counts, the SHA-256 of
//! every file of its part, and the input position of each item so that the merge restores the input order. A
//! rerun of a shard resumes its part as the job always does. [`scan`] reads the markers for `ragtime merge`:
//! all `n` must be present, agree on kind, `n` and settings, and match their files; otherwise the error names the
//! missing or broken indices, ready for `sbatch --array=...`.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Value of [`Marker::format`].
pub const FORMAT: &str = "ragtime-shard";
/// The settings file of a sharded output.
pub const JOB_FILE: &str = "job.json";
/// How [`shard_of`] splits, recorded in `job.json` (`shard_hash`).
pub const SPLIT: &str = "sha256(\"ragtime-shard\\0\" + id)[0..8] big-endian mod n";
/// Environment variable that fixes `n` for Slurm array tasks (see the module doc).
pub const COUNT_VAR: &str = "RAGTIME_SHARD_COUNT";

/// `i/n`: this process does shard `i` of `n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl std::str::FromStr for Shard {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        let (a, b) = s.split_once('/').with_context(|| format!("shard '{s}': expected i/n, e.g. 0/4"))?;
        let index: usize = a.trim().parse().with_context(|| format!("shard '{s}': '{a}' is not a number"))?;
        let count: usize = b.trim().parse().with_context(|| format!("shard '{s}': '{b}' is not a number"))?;
        if count == 0 || index >= count {
            bail!("shard '{s}': need 0 <= i < n");
        }
        Ok(Shard { index, count })
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl Shard {
    /// `--shard` if given, else the Slurm array variables (see the module doc), else none.
    pub fn resolve(flag: Option<Shard>) -> Result<Option<Shard>> {
        Self::resolve_with(flag, |k| std::env::var(k).ok())
    }

    /// [`Shard::resolve`] with the environment given as a lookup (for tests).
    pub fn resolve_with(flag: Option<Shard>, env: impl Fn(&str) -> Option<String>) -> Result<Option<Shard>> {
        if flag.is_some() {
            return Ok(flag);
        }
        let Some(id) = env("SLURM_ARRAY_TASK_ID") else { return Ok(None) };
        let num = |k: &str, v: &str| -> Result<usize> {
            v.trim().parse().with_context(|| format!("environment variable {k}={v:?} is not a whole number"))
        };
        let index = num("SLURM_ARRAY_TASK_ID", &id)?;
        let (var, count) = match (env(COUNT_VAR), env("SLURM_ARRAY_TASK_COUNT")) {
            (Some(v), _) => (COUNT_VAR, num(COUNT_VAR, &v)?),
            (None, Some(v)) => ("SLURM_ARRAY_TASK_COUNT", num("SLURM_ARRAY_TASK_COUNT", &v)?),
            (None, None) => bail!(
                "SLURM_ARRAY_TASK_ID is set but neither {COUNT_VAR} nor SLURM_ARRAY_TASK_COUNT is: cannot tell the \
                 number of shards; pass --shard i/n"
            ),
        };
        ensure!(
            count > 0 && index < count,
            "Slurm array task {index} is not a shard of {count} ({var}={count}): array indices must run 0..n-1 \
             (--array=0-{}), or set {COUNT_VAR}",
            count.saturating_sub(1)
        );
        Ok(Some(Shard { index, count }))
    }

    /// Whether the item with this id belongs to this shard.
    pub fn owns(&self, id: &str) -> bool {
        shard_of(id, self.count) == self.index
    }

    /// Keeps the items of `items` this shard owns (by `id`), in their order, and returns `(id, position in the
    /// input)` of each: the order a shard's marker records for the merge.
    pub fn take<T>(&self, items: &mut Vec<T>, id: impl Fn(&T) -> &str) -> Vec<(String, u64)> {
        let order: Vec<(String, u64)> = items
            .iter()
            .enumerate()
            .filter(|(_, x)| self.owns(id(x)))
            .map(|(i, x)| (id(x).to_string(), i as u64))
            .collect();
        items.retain(|x| self.owns(id(x)));
        order
    }

    /// `part-00001-of-00004`.
    pub fn name(&self) -> String {
        format!("part-{:05}-of-{:05}", self.index, self.count)
    }

    fn marker_name(&self) -> String {
        format!("{}.done", self.name())
    }
}

/// What the id is prefixed with before hashing. Other splits by hash of the same ids (the detector's
/// train/valid/test split of articles hashes the bare id) must not line up with the shards: without the prefix,
/// shard 0 of 8 (hash divisible by 8) would hold no article of the detector's test split (hash 9 modulo 10).
pub const HASH_DOMAIN: &str = "ragtime-shard\0";

/// The shard (of `count`) the item `id` belongs to.
pub fn shard_of(id: &str, count: usize) -> usize {
    let mut h = Sha256::new();
    h.update(HASH_DOMAIN.as_bytes());
    h.update(id.as_bytes());
    let x = u64::from_be_bytes(h.finalize()[..8].try_into().expect("8 bytes"));
    (x % count as u64) as usize
}

/// One file of a part as its marker records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileSum {
    /// Path relative to the part directory.
    pub path: String,
    pub bytes: u64,
    pub sha256: String,
}

/// `part-IIIII-of-NNNNN.done`: a finished shard.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Marker {
    pub format: String,
    /// The kind of output (`"eval run"`, `"hallucination dataset"`, ...).
    pub kind: String,
    pub index: usize,
    pub count: usize,
    /// The settings all shards share (the content of `job.json`).
    pub job: serde_json::Value,
    /// Items (articles, questions, passages) this shard took.
    pub items: usize,
    /// Rows it wrote (examples, predictions, dialogues, passages).
    pub rows: usize,
    /// `(id, position in the input)` of each item, when the merge needs the input order back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub order: Vec<(String, u64)>,
    pub files: Vec<FileSum>,
    pub seconds: f64,
}

/// Settings keys of how a part computes, not of what it computes (`--int8-dot`, `--quantize`, `--dtype`,
/// `--cpu-kernels`), in which the shards of a job started by [`ShardRun::begin_any_engine`] may differ (see the
/// module doc).
pub const ENGINE_KEYS: &[&str] = &["int8_dot", "dtype", "quantize", "cpu_kernels"];

/// `settings` without the [`ENGINE_KEYS`] (an object's top-level keys; anything else as it is), and the
/// engine keys it had with their values.
pub fn split_engine_keys(
    settings: &serde_json::Value,
) -> (serde_json::Value, serde_json::Map<String, serde_json::Value>) {
    let mut v = settings.clone();
    let mut engine = serde_json::Map::new();
    if let Some(m) = v.as_object_mut() {
        for k in ENGINE_KEYS {
            if let Some(x) = m.remove(*k) {
                engine.insert(k.to_string(), x);
            }
        }
    }
    (v, engine)
}

/// `settings` without the [`ENGINE_KEYS`] ([`split_engine_keys`]).
pub fn without_engine_keys(settings: &serde_json::Value) -> serde_json::Value {
    split_engine_keys(settings).0
}

/// A shard at work: its part directory, and the marker it leaves when done.
pub struct ShardRun {
    root: PathBuf,
    shard: Shard,
    kind: String,
    job: serde_json::Value,
    start: std::time::Instant,
    /// The part directory, locked for this process until the marker is written ([`crate::io::lock_output_dir`]).
    _lock: crate::io::OutputLock,
}

impl ShardRun {
    /// Claims `root` (flag `flag`) as a sharded output of `kind`, checks or writes `job.json` with `job` (the
    /// settings every shard must share), locks this shard's part directory for the process (a second copy of the
    /// same shard, still running, is refused: [`crate::io::lock_output_dir`]), removes this shard's old marker,
    /// and returns the run; the shard's own output goes to [`ShardRun::part_dir`].
    pub fn begin(root: &Path, flag: &str, shard: Shard, kind: &str, job: serde_json::Value) -> Result<Self> {
        Self::start(root, flag, shard, kind, job, false)
    }

    /// As [`ShardRun::begin`] for a job whose shards may differ in the [`ENGINE_KEYS`] (each part records its
    /// own; the job's merge says which part used what): they are left out of `job.json` and of the comparison.
    pub fn begin_any_engine(root: &Path, flag: &str, shard: Shard, kind: &str, job: serde_json::Value) -> Result<Self> {
        Self::start(root, flag, shard, kind, job, true)
    }

    fn start(
        root: &Path,
        flag: &str,
        shard: Shard,
        kind: &str,
        job: serde_json::Value,
        any_engine: bool,
    ) -> Result<Self> {
        claim_shared_dir(root, flag, &format!("sharded {kind}"))?;
        let engine_free = |v: &serde_json::Value| if any_engine { without_engine_keys(v) } else { v.clone() };
        // the split itself is a setting: shards that hash ids another way must not share an output
        let mut job = engine_free(&job);
        if let Some(m) = job.as_object_mut() {
            m.insert("shard_hash".into(), serde_json::Value::String(SPLIT.into()));
        }
        // as it reads back from text (serde_json's float parsing need not return the very f64 it printed)
        let job: serde_json::Value = serde_json::from_str(&serde_json::to_string(&job)?)?;
        let path = root.join(JOB_FILE);
        let text = serde_json::to_string_pretty(&job)? + "\n";
        if !crate::io::exists(&path)? {
            // first shard to start: a unique temporary file, then a hard link, which fails if another shard won
            let tmp = root.join(format!(".{JOB_FILE}.{}.tmp", std::process::id()));
            crate::io::write_atomic(&tmp, text.as_bytes())?;
            let linked = std::fs::hard_link(&tmp, &path);
            let _ = std::fs::remove_file(&tmp);
            match linked {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e).with_context(|| format!("{}: cannot write", path.display())),
            }
        }
        let have: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(&path).with_context(|| format!("{}: cannot read", path.display()))?,
        )
        .with_context(|| format!("{}: malformed", path.display()))?;
        // a job.json written before the engine keys were left out still holds them
        let have = engine_free(&have);
        if have != job {
            bail!(
                "{flag} {}: its shards were started with other settings ({}); {}; use another {flag} or the same \
                 settings",
                root.display(),
                path.display(),
                first_difference(&have, &job)
            );
        }
        // shards of another n in the same directory would split the items differently
        for e in std::fs::read_dir(root).with_context(|| format!("{}: cannot list", root.display()))? {
            let name = e.with_context(|| format!("{}: cannot list", root.display()))?.file_name();
            let name = name.to_string_lossy();
            if let Some((_, n)) = parse_part_name(name.trim_end_matches(".done")) {
                if n != shard.count {
                    bail!(
                        "{flag} {}: holds shards of {n} ({name}), not of {}; use the same n or another {flag}",
                        root.display(),
                        shard.count
                    );
                }
            }
        }
        // the same shard running twice at once (a requeued task whose first copy still runs): the second stops
        // here, before it touches the first one's marker or part
        let part = root.join(shard.name());
        std::fs::create_dir_all(&part).with_context(|| format!("{}: cannot create", part.display()))?;
        let lock = crate::io::lock_output_dir(&part, flag)?;
        let marker = root.join(shard.marker_name());
        if crate::io::exists(&marker)? {
            std::fs::remove_file(&marker).with_context(|| format!("{}: cannot remove", marker.display()))?;
        }
        let start = std::time::Instant::now();
        Ok(ShardRun { root: root.to_path_buf(), shard, kind: kind.to_string(), job, start, _lock: lock })
    }

    /// Where this shard writes what the job writes without sharding.
    pub fn part_dir(&self) -> PathBuf {
        self.root.join(self.shard.name())
    }

    pub fn shard(&self) -> Shard {
        self.shard
    }

    /// Writes the marker: the shard is complete.
    pub fn finish(self, items: usize, rows: usize, order: Vec<(String, u64)>) -> Result<Marker> {
        let files = checksum_dir(&self.part_dir())?;
        let m = Marker {
            format: FORMAT.to_string(),
            kind: self.kind,
            index: self.shard.index,
            count: self.shard.count,
            job: self.job,
            items,
            rows,
            order,
            files,
            seconds: self.start.elapsed().as_secs_f64(),
        };
        let path = self.root.join(self.shard.marker_name());
        crate::io::write_atomic(&path, (serde_json::to_string(&m)? + "\n").as_bytes())?;
        Ok(m)
    }
}

/// The first key at which two settings objects differ, for error messages.
fn first_difference(a: &serde_json::Value, b: &serde_json::Value) -> String {
    if let (Some(a), Some(b)) = (a.as_object(), b.as_object()) {
        let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
        for k in keys {
            if a.get(k) != b.get(k) {
                let show = |v: Option<&serde_json::Value>| v.map(|v| v.to_string()).unwrap_or_else(|| "unset".into());
                return format!("{k} was {}, now {}", show(a.get(k)), show(b.get(k)));
            }
        }
    }
    "they differ".to_string()
}

/// [`crate::io::claim_output_dir_with`] for the directory all shards share: besides the marker it may hold only
/// shard parts and markers (`part-IIIII-of-NNNNN[.done]`), `job.json` and hidden temporary files.
fn claim_shared_dir(dir: &Path, flag: &str, kind: &str) -> Result<()> {
    crate::io::claim_output_dir_with(dir, flag, kind, |entries| {
        entries.iter().all(|n| {
            parse_part_name(n.trim_end_matches(".done")).is_some()
                || n == JOB_FILE
                || (n.starts_with('.') && n.ends_with(".tmp"))
        })
    })
}

/// SHA-256 and size of every file under `dir` (recursively), hidden files (locks, temporaries) excepted, sorted
/// by path.
pub fn checksum_dir(dir: &Path) -> Result<Vec<FileSum>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("{}: cannot list", d.display()))? {
            let e = e.with_context(|| format!("{}: cannot list", d.display()))?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            let p = e.path();
            if crate::io::is_dir(&p)? {
                stack.push(p);
                continue;
            }
            let (bytes, sha256) = hash_file(&p)?;
            let rel = p.strip_prefix(dir).expect("under dir").to_string_lossy().replace('\\', "/");
            out.push(FileSum { path: rel, bytes, sha256 });
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

fn hash_file(path: &Path) -> Result<(u64, String)> {
    let mut f = std::fs::File::open(path).with_context(|| format!("{}: cannot open", path.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        let k = f.read(&mut buf).with_context(|| format!("{}: cannot read", path.display()))?;
        if k == 0 {
            break;
        }
        n += k as u64;
        h.update(&buf[..k]);
    }
    Ok((n, h.finalize().iter().map(|b| format!("{b:02x}")).collect()))
}

/// The complete shards of a sharded output, as [`scan`] found them.
#[derive(Debug)]
pub struct ShardSet {
    pub root: PathBuf,
    pub kind: String,
    pub count: usize,
    pub job: serde_json::Value,
    /// Part directory and marker of shard 0, 1, ... n-1.
    pub parts: Vec<(PathBuf, Marker)>,
}

impl ShardSet {
    /// The items of all shards in input order, each with the index of the shard holding it.
    pub fn input_order(&self) -> Vec<(u64, usize, &str)> {
        let mut all: Vec<(u64, usize, &str)> = self
            .parts
            .iter()
            .enumerate()
            .flat_map(|(s, (_, m))| m.order.iter().map(move |(id, pos)| (*pos, s, id.as_str())))
            .collect();
        all.sort_unstable();
        all
    }
}

/// Locks every shard part directory in `root` for this process ([`crate::io::lock_output_dir`]), so that none is
/// written while `ragtime merge` reads it: a shard still running (a requeued copy of a finished one included) is
/// an error naming its part and the process, and no shard can start on a part until the locks are dropped.
pub fn lock_parts(root: &Path) -> Result<Vec<crate::io::OutputLock>> {
    let mut parts = Vec::new();
    for e in std::fs::read_dir(root).with_context(|| format!("{}: cannot list the directory", root.display()))? {
        let e = e.with_context(|| format!("{}: cannot list the directory", root.display()))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if parse_part_name(&name).is_some() && crate::io::is_dir(&e.path())? {
            parts.push(e.path());
        }
    }
    parts.sort();
    parts.iter().map(|p| crate::io::lock_output_dir(p, "shard part")).collect()
}

/// Reads and checks the markers of the sharded output in `root`: every shard `0..n` present, one kind, one `n`,
/// one set of settings, and each part's files as its marker recorded them. The error lists what is missing or
/// broken and the array indices to resubmit.
pub fn scan(root: &Path) -> Result<ShardSet> {
    let entries = std::fs::read_dir(root).with_context(|| format!("{}: cannot list the directory", root.display()))?;
    let mut markers: BTreeMap<usize, (PathBuf, Result<Marker>)> = BTreeMap::new();
    let mut parts_seen: BTreeMap<usize, usize> = BTreeMap::new(); // index -> count, from part directory names
    for e in entries {
        let e = e.with_context(|| format!("{}: cannot list the directory", root.display()))?;
        let name = e.file_name().to_string_lossy().into_owned();
        let Some((i, n)) = parse_part_name(name.trim_end_matches(".done")) else { continue };
        if name.ends_with(".done") {
            let m = read_marker(&e.path());
            markers.insert(i, (e.path(), m));
            parts_seen.entry(i).or_insert(n);
        } else if crate::io::is_dir(&e.path())? {
            parts_seen.entry(i).or_insert(n);
        }
    }
    if markers.is_empty() {
        bail!(
            "{}: no finished shard (no part-IIIII-of-NNNNN.done marker){}",
            root.display(),
            if parts_seen.is_empty() {
                "; not a sharded ragtime output".to_string()
            } else {
                format!("; {} shard(s) started but none finished", parts_seen.len())
            }
        );
    }
    // n and the settings: those of the most markers that read
    let good: Vec<&Marker> = markers.values().filter_map(|(_, m)| m.as_ref().ok()).collect();
    ensure!(!good.is_empty(), "{}: no shard marker could be read: {}", root.display(), describe_bad(&markers));
    let count = most_common(good.iter().map(|m| m.count));
    let job_path = root.join(JOB_FILE);
    let job: serde_json::Value = match std::fs::read_to_string(&job_path) {
        Ok(t) => serde_json::from_str(&t).with_context(|| format!("{}: malformed", job_path.display()))?,
        Err(_) => good[0].job.clone(),
    };
    // (a job whose shards may differ in them: begin_any_engine; the others' markers all hold the same values)
    let job = without_engine_keys(&job);
    let kind = good[0].kind.clone();
    let mut problems: Vec<(usize, String)> = Vec::new();
    let mut parts: Vec<(PathBuf, Marker)> = Vec::new();
    for i in 0..count {
        let name = Shard { index: i, count }.name();
        match markers.remove(&i) {
            None => {
                let why = if crate::io::is_dir(&root.join(&name))? { "started, not finished" } else { "not started" };
                problems.push((i, format!("{name}: {why}")));
            }
            Some((path, Err(e))) => problems.push((i, format!("{}: {e:#}", path.display()))),
            Some((path, Ok(m))) => {
                let bad = if m.count != count {
                    Some(format!("a shard of {}, not of {count}", m.count))
                } else if m.kind != kind {
                    Some(format!("a {}, not a {kind}", m.kind))
                } else if without_engine_keys(&m.job) != job {
                    Some(format!("other settings: {}", first_difference(&job, &m.job)))
                } else {
                    verify_files(&root.join(&name), &m.files).err().map(|e| format!("{e:#}"))
                };
                match bad {
                    Some(why) => problems.push((i, format!("{}: {why}", path.display()))),
                    None => parts.push((root.join(&name), m)),
                }
            }
        }
    }
    for (i, (path, _)) in markers {
        problems.push((i, format!("{}: shard index {i} is outside 0..{count}", path.display())));
    }
    if !problems.is_empty() {
        let indices: Vec<String> = problems.iter().filter(|(i, _)| *i < count).map(|(i, _)| i.to_string()).collect();
        bail!(
            "{}: {} of {count} shards are not complete and sound:\n  {}\nrerun them (same command, --shard i/{count}; \
             on Slurm: sbatch --array={} with {COUNT_VAR}={count}), then merge again",
            root.display(),
            problems.len(),
            problems.iter().map(|(_, p)| p.as_str()).collect::<Vec<_>>().join("\n  "),
            indices.join(",")
        );
    }
    Ok(ShardSet { root: root.to_path_buf(), kind, count, job, parts })
}

fn describe_bad(markers: &BTreeMap<usize, (PathBuf, Result<Marker>)>) -> String {
    markers
        .values()
        .filter_map(|(p, m)| m.as_ref().err().map(|e| format!("{}: {e:#}", p.display())))
        .collect::<Vec<_>>()
        .join("; ")
}

fn most_common(xs: impl Iterator<Item = usize>) -> usize {
    let mut c: BTreeMap<usize, usize> = BTreeMap::new();
    for x in xs {
        *c.entry(x).or_default() += 1;
    }
    c.into_iter().max_by_key(|&(x, k)| (k, std::cmp::Reverse(x))).map(|(x, _)| x).unwrap_or(0)
}

fn parse_part_name(s: &str) -> Option<(usize, usize)> {
    let rest = s.strip_prefix("part-")?;
    let (i, n) = rest.split_once("-of-")?;
    (i.len() == 5 && n.len() == 5).then_some(())?;
    let (i, n) = (i.parse().ok()?, n.parse().ok()?);
    (n > 0).then_some((i, n))
}

fn read_marker(path: &Path) -> Result<Marker> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{}: cannot read", path.display()))?;
    let m: Marker = serde_json::from_str(&text).context("malformed marker")?;
    ensure!(m.format == FORMAT, "format is {:?}, expected {FORMAT:?}", m.format);
    Ok(m)
}

fn verify_files(dir: &Path, want: &[FileSum]) -> Result<()> {
    for f in want {
        let p = dir.join(&f.path);
        let (bytes, sha) = hash_file(&p).with_context(|| format!("{}: missing or unreadable", p.display()))?;
        ensure!(
            bytes == f.bytes && sha == f.sha256,
            "{}: changed since the shard finished ({bytes} bytes, expected {})",
            p.display(),
            f.bytes
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recorded_split_names_the_hash_domain() {
        // `SPLIT` is what job.json records; it must spell the prefix `shard_of` hashes.
        let spelled = HASH_DOMAIN.replace('\0', "\\0");
        assert!(SPLIT.contains(&format!("sha256(\"{spelled}\" + id)")), "{SPLIT} vs {spelled}");
    }

    #[test]
    fn parsing_and_names() {
        assert_eq!("1/4".parse::<Shard>().unwrap(), Shard { index: 1, count: 4 });
        assert!("4/4".parse::<Shard>().is_err());
        assert!("x/4".parse::<Shard>().is_err());
        assert!("3".parse::<Shard>().is_err());
        assert_eq!(Shard { index: 3, count: 16 }.name(), "part-00003-of-00016");
        assert_eq!(parse_part_name("part-00003-of-00016"), Some((3, 16)));
        assert_eq!(parse_part_name("part-00000.parquet"), None);
    }

    #[test]
    fn every_id_has_exactly_one_shard_and_shards_are_balanced() {
        let n = 4;
        let mut sizes = [0usize; 4];
        for k in 0..4000 {
            let id = format!("article-{k}");
            let owners: Vec<usize> = (0..n).filter(|&i| Shard { index: i, count: n }.owns(&id)).collect();
            assert_eq!(owners.len(), 1);
            sizes[owners[0]] += 1;
        }
        assert!(sizes.iter().all(|&s| (900..1100).contains(&s)), "{sizes:?}");
        // pinned: the split must not change between versions (shards of one job may run different builds)
        assert_eq!(shard_of("Albert Einstein", 16), shard_of("Albert Einstein", 16));
        let sha = Sha256::digest(b"ragtime-shard\x0012");
        assert_eq!(shard_of("12", 7) as u64, u64::from_be_bytes(sha[..8].try_into().unwrap()) % 7);
    }

    #[test]
    fn slurm_variables() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        let flag = Some(Shard { index: 1, count: 2 });
        assert_eq!(Shard::resolve_with(flag, env(&[("SLURM_ARRAY_TASK_ID", "0")])).unwrap(), flag);
        assert_eq!(Shard::resolve_with(None, env(&[])).unwrap(), None);
        let s = Shard::resolve_with(None, env(&[("SLURM_ARRAY_TASK_ID", "3"), ("SLURM_ARRAY_TASK_COUNT", "4")]));
        assert_eq!(s.unwrap(), Some(Shard { index: 3, count: 4 }));
        // a resubmission of two indices keeps n through RAGTIME_SHARD_COUNT
        let s = Shard::resolve_with(
            None,
            env(&[("SLURM_ARRAY_TASK_ID", "7"), ("SLURM_ARRAY_TASK_COUNT", "2"), ("RAGTIME_SHARD_COUNT", "16")]),
        );
        assert_eq!(s.unwrap(), Some(Shard { index: 7, count: 16 }));
        let e = Shard::resolve_with(None, env(&[("SLURM_ARRAY_TASK_ID", "4"), ("SLURM_ARRAY_TASK_COUNT", "4")]));
        assert!(format!("{:#}", e.unwrap_err()).contains("--array=0-3"));
        let e = Shard::resolve_with(None, env(&[("SLURM_ARRAY_TASK_ID", "x"), ("SLURM_ARRAY_TASK_COUNT", "4")]));
        assert!(format!("{:#}", e.unwrap_err()).contains("SLURM_ARRAY_TASK_ID"));
        assert!(Shard::resolve_with(None, env(&[("SLURM_ARRAY_TASK_ID", "0")])).is_err());
    }

    fn finish_shard(root: &Path, i: usize, n: usize, job: serde_json::Value, body: &str) -> Result<Marker> {
        let run = ShardRun::begin(root, "--out", Shard { index: i, count: n }, "test output", job)?;
        std::fs::create_dir_all(run.part_dir()).unwrap();
        std::fs::write(run.part_dir().join("rows.txt"), body).unwrap();
        run.finish(1, 1, vec![(format!("item{i}"), (10 - i) as u64)])
    }

    #[test]
    fn markers_scan_and_name_what_is_missing_or_broken() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("out");
        let job = serde_json::json!({"model": "m", "seed": 1});
        finish_shard(&root, 0, 3, job.clone(), "a").unwrap();
        finish_shard(&root, 2, 3, job.clone(), "c").unwrap();
        // a shard with other settings is refused before it does anything
        let e = finish_shard(&root, 1, 3, serde_json::json!({"model": "m", "seed": 2}), "b").unwrap_err();
        assert!(format!("{e:#}").contains("seed was 1, now 2"), "{e:#}");
        // a shard of another n: refused
        let e = finish_shard(&root, 0, 4, job.clone(), "a").unwrap_err();
        assert!(format!("{e:#}").contains("holds shards of 3"), "{e:#}");
        let e = scan(&root).unwrap_err();
        let msg = format!("{e:#}");
        assert!(msg.contains("part-00001-of-00003: not started") && msg.contains("--array=1"), "{msg}");
        finish_shard(&root, 1, 3, job.clone(), "b").unwrap();
        let set = scan(&root).unwrap();
        assert_eq!((set.count, set.kind.as_str(), set.parts.len()), (3, "test output", 3));
        // input order restored from the recorded positions
        let order: Vec<&str> = set.input_order().iter().map(|(_, _, id)| *id).collect();
        assert_eq!(order, ["item2", "item1", "item0"]);
        // a part file changed after its marker: broken, named
        std::fs::write(root.join("part-00002-of-00003/rows.txt"), "changed").unwrap();
        let msg = format!("{:#}", scan(&root).unwrap_err());
        assert!(msg.contains("rows.txt: changed since the shard finished") && msg.contains("--array=2"), "{msg}");
        // a directory with someone else's files is never claimed, even files named like parts of a dataset
        for theirs in ["notes.txt", "part-00000.parquet"] {
            let other = dir.path().join(format!("mine-{theirs}"));
            std::fs::create_dir_all(&other).unwrap();
            std::fs::write(other.join(theirs), "x").unwrap();
            assert!(finish_shard(&other, 0, 2, job.clone(), "a").is_err(), "{theirs}");
            assert_eq!(std::fs::read_dir(&other).unwrap().count(), 1);
        }
    }
}
