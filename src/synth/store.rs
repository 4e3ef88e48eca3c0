//! Resumable Parquet store for synthetic hallucination examples (MIND's pseudo-training data).
//!
//! # Layout of a dataset directory
//!
//! ```text
//! datasets/hallucination/
//!   _manifest.json       model, templates, counts, label balance, and the shards with the articles each holds
//!   part-00000.parquet   one shard: all examples of a group of finished articles (snappy-compressed)
//!   part-00001.parquet
//!   ...
//! ```
//!
//! # Parquet schema (one row per example; every column non-null)
//!
//! | column                | type            | meaning |
//! |-----------------------|-----------------|---------|
//! | `article_id`          | utf8            | id of the Wikipedia article |
//! | `title`               | utf8            | its title |
//! | `template`            | utf8            | prompt template the continuation was generated with |
//! | `trunc_offset`        | uint32          | char offset into the article text where it was truncated (the original entity starts there) |
//! | `entity_label`        | utf8            | entity type of the original entity (`PERSON`, `DATE`, ...) |
//! | `original_entity`     | utf8            | the entity the article has at the truncation point |
//! | `generated_entity`    | utf8            | the entity the model generated in its place |
//! | `continuation`        | utf8            | the generated continuation text |
//! | `label`               | uint8           | 1 = hallucinated (generated entity differs), 0 = faithful |
//! | `rule`                | utf8            | the comparison rule that decided the label (`exact`, `overlap`, ...) |
//! | `entropy_last`        | float32         | entropy (nats) of the next-token distribution at the last prompt token |
//! | `entropy_entity_mean` | float32         | mean over the generated entity's tokens of the entropy of the distribution each was drawn from |
//! | `hidden_final_last`   | list\<float32\> | last-layer hidden state (after final norm) at the last prompt token, `hidden` values |
//! | `hidden_mean_last`    | list\<float32\> | mean over decoder layers of the layer outputs at the last prompt token |
//! | `hidden_final_entity` | list\<float32\> | `hidden_final` averaged over the generated entity's tokens |
//! | `hidden_mean_entity`  | list\<float32\> | `hidden_mean` averaged over the generated entity's tokens |
//!
//! The list columns use Arrow's standard `List<item: Float32>` layout, so `pandas.read_parquet(dir)` gives
//! numpy arrays per cell and `polars.read_parquet(dir + "/*.parquet")` gives `List(Float32)` columns
//! (checked with pandas 2 / pyarrow and polars). The manifest is named `_manifest.json` and temporary files
//! start with `.` so that directory readers (pyarrow skips `_*` and `.*`) see only shards. Only the shards
//! listed in the manifest belong to the dataset (see below); readers of the directory should run after the
//! writer finished or was re-opened.
//!
//! # Resumability
//!
//! The unit of work is an article. [`HalluStore::add_article`] buffers the examples of a *finished* article;
//! every `flush_every` articles the buffer becomes one shard, written to `.part-NNNNN.parquet.tmp`, synced, and
//! renamed into place; then `_manifest.json` (also via tmp + rename) records the shard with the ids of all
//! its articles (including articles that produced no example). The manifest is the commit point:
//!
//! - a process killed before the manifest rename leaves at most a `.tmp` file or a shard the manifest does
//!   not list; [`HalluStore::open`] deletes both, and the articles in them are not "done", so a re-run
//!   redoes them: no row is ever half-written, duplicated, or dropped;
//! - the buffer of a killed process is lost by design (those articles are redone);
//! - a re-run asks [`HalluStore::is_done`] and skips finished articles.
//!
//! A directory belongs to one model: [`HalluStore::open`] refuses a directory whose manifest names another
//! model id or hidden size.

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, ensure, Context, Result};
use arrow_array::builder::{Float32Builder, ListBuilder, StringBuilder, UInt32Builder, UInt8Builder};
use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, UInt32Type, UInt8Type};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::{ArrowWriter, ProjectionMask};
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use serde::{Deserialize, Serialize};

/// Value of [`Manifest::format`].
pub const FORMAT: &str = "ragtime-hallucination";
/// Version of the Parquet schema documented above.
pub const SCHEMA_VERSION: u32 = 1;
/// Name of the manifest file in a dataset directory.
pub const MANIFEST: &str = "_manifest.json";
/// Default number of articles per shard.
pub const DEFAULT_FLUSH_EVERY: usize = 64;

/// Feature columns a detector can be trained on: `(name, is a hidden-size vector)`.
pub const FEATURE_COLUMNS: [(&str, bool); 6] = [
    ("hidden_final_last", true),
    ("hidden_mean_last", true),
    ("hidden_final_entity", true),
    ("hidden_mean_entity", true),
    ("entropy_last", false),
    ("entropy_entity_mean", false),
];

/// One labelled example: a continuation of a truncated article and the model internals at that point.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HalluExample {
    pub article_id: String,
    pub title: String,
    pub template: String,
    /// Char offset into the article text where it was truncated.
    pub trunc_offset: u32,
    pub entity_label: String,
    pub original_entity: String,
    pub generated_entity: String,
    pub continuation: String,
    /// 1 = hallucinated, 0 = faithful.
    pub label: u8,
    /// Which comparison rule decided the label.
    pub rule: String,
    pub entropy_last: f32,
    pub entropy_entity_mean: f32,
    pub hidden_final_last: Vec<f32>,
    pub hidden_mean_last: Vec<f32>,
    pub hidden_final_entity: Vec<f32>,
    pub hidden_mean_entity: Vec<f32>,
}

/// One shard as the manifest records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardInfo {
    /// File name inside the dataset directory.
    pub file: String,
    pub rows: usize,
    pub hallucinated: usize,
    /// Ids of the articles whose examples (possibly none) this shard holds.
    pub articles: Vec<String>,
}

/// `_manifest.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub schema_version: u32,
    /// Model the features come from (e.g. its GGUF file name).
    pub model_id: String,
    /// Its hidden size: the length of every `hidden_*` vector.
    pub hidden: usize,
    /// Prompt templates used, in order of first appearance.
    pub templates: Vec<String>,
    /// Finished articles (with or without examples).
    pub articles: usize,
    pub examples: usize,
    /// Label balance: `hallucinated + faithful == examples`.
    pub hallucinated: usize,
    pub faithful: usize,
    /// `hallucinated / examples` (0 when empty).
    pub hallucinated_rate: f64,
    /// Examples per comparison rule.
    pub rules: BTreeMap<String, usize>,
    pub shards: Vec<ShardInfo>,
}

impl Manifest {
    fn new(model_id: &str, hidden: usize) -> Self {
        Manifest {
            format: FORMAT.to_string(),
            schema_version: SCHEMA_VERSION,
            model_id: model_id.to_string(),
            hidden,
            templates: Vec::new(),
            articles: 0,
            examples: 0,
            hallucinated: 0,
            faithful: 0,
            hallucinated_rate: 0.0,
            rules: BTreeMap::new(),
            shards: Vec::new(),
        }
    }
}

/// Reads and checks `dir/_manifest.json`.
pub fn load_manifest(dir: &Path) -> Result<Manifest> {
    let path = dir.join(MANIFEST);
    let text = fs::read_to_string(&path).with_context(|| format!("{}: cannot read manifest", path.display()))?;
    let m: Manifest =
        serde_json::from_str(&text).with_context(|| format!("{}: malformed manifest", path.display()))?;
    ensure!(m.format == FORMAT, "{}: format is {:?}, expected {FORMAT:?}", path.display(), m.format);
    ensure!(
        m.schema_version == SCHEMA_VERSION,
        "{}: schema version {} is not the supported {SCHEMA_VERSION}",
        path.display(),
        m.schema_version
    );
    Ok(m)
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = tmp_path(path);
    {
        use std::io::Write;
        let mut f = fs::File::create(&tmp).with_context(|| format!("{}: cannot create", tmp.display()))?;
        f.write_all(bytes).with_context(|| format!("{}: cannot write", tmp.display()))?;
        f.sync_all().with_context(|| format!("{}: cannot sync", tmp.display()))?;
    }
    fs::rename(&tmp, path).with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()))
}

/// `dir/.name.tmp`: hidden, so directory readers skip it.
fn tmp_path(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp"))
}

fn shard_name(index: usize) -> String {
    format!("part-{index:05}.parquet")
}

/// Writer side of a dataset directory. See the module doc for the resumption protocol.
pub struct HalluStore {
    dir: PathBuf,
    manifest: Manifest,
    done: HashSet<String>,
    pending: Vec<(String, Vec<HalluExample>)>,
    flush_every: usize,
}

impl HalluStore {
    /// Opens (or creates) `dir` for examples of `model_id` with hidden size `hidden`. Refuses a directory made
    /// for another model; deletes leftovers of a killed run (`*.tmp`, shards the manifest does not list).
    pub fn open(dir: impl AsRef<Path>, model_id: &str, hidden: usize) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir).with_context(|| format!("{}: cannot create directory", dir.display()))?;
        let manifest = if dir.join(MANIFEST).exists() {
            let m = load_manifest(&dir)?;
            if m.model_id != model_id || m.hidden != hidden {
                bail!(
                    "{}: dataset was made with model {:?} (hidden size {}), not {:?} (hidden size {}); \
                     use another --out directory",
                    dir.display(),
                    m.model_id,
                    m.hidden,
                    model_id,
                    hidden
                );
            }
            m
        } else {
            Manifest::new(model_id, hidden)
        };
        let listed: HashSet<&str> = manifest.shards.iter().map(|s| s.file.as_str()).collect();
        for shard in &manifest.shards {
            let p = dir.join(&shard.file);
            ensure!(p.is_file(), "{}: listed in {MANIFEST} but missing", p.display());
        }
        for entry in fs::read_dir(&dir).with_context(|| format!("{}: cannot list", dir.display()))? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let orphan_shard = name.starts_with("part-") && name.ends_with(".parquet") && !listed.contains(name.as_str());
            if name.ends_with(".tmp") || orphan_shard {
                fs::remove_file(entry.path())
                    .with_context(|| format!("{}: cannot remove leftover of a killed run", entry.path().display()))?;
            }
        }
        let done = manifest.shards.iter().flat_map(|s| s.articles.iter().cloned()).collect();
        let store = HalluStore { dir, manifest, done, pending: Vec::new(), flush_every: DEFAULT_FLUSH_EVERY };
        store.write_manifest()?;
        Ok(store)
    }

    /// Articles per shard (at least 1).
    pub fn with_flush_every(mut self, n: usize) -> Self {
        self.flush_every = n.max(1);
        self
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The manifest as of the last written shard.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Was this article finished (stored, or buffered in this process)? The synthesis loop skips it.
    pub fn is_done(&self, article_id: &str) -> bool {
        self.done.contains(article_id) || self.pending.iter().any(|(id, _)| id == article_id)
    }

    /// Number of finished articles (stored and buffered).
    pub fn articles_done(&self) -> usize {
        self.done.len() + self.pending.len()
    }

    /// Records a finished article with all its examples (possibly none). Writes a shard every
    /// `flush_every` articles.
    pub fn add_article(&mut self, article_id: &str, examples: Vec<HalluExample>) -> Result<()> {
        ensure!(!self.is_done(article_id), "{}: article {article_id:?} was already stored", self.dir.display());
        let hidden = self.manifest.hidden;
        for (i, ex) in examples.iter().enumerate() {
            ensure!(
                ex.article_id == article_id,
                "article {article_id:?}: example {i} has article_id {:?}",
                ex.article_id
            );
            ensure!(ex.label <= 1, "article {article_id:?}: example {i} has label {}, expected 0 or 1", ex.label);
            for (name, v) in [
                ("hidden_final_last", &ex.hidden_final_last),
                ("hidden_mean_last", &ex.hidden_mean_last),
                ("hidden_final_entity", &ex.hidden_final_entity),
                ("hidden_mean_entity", &ex.hidden_mean_entity),
            ] {
                ensure!(
                    v.len() == hidden,
                    "article {article_id:?}: example {i} has {} values in {name}, expected the hidden size {hidden}",
                    v.len()
                );
            }
        }
        self.pending.push((article_id.to_string(), examples));
        if self.pending.len() >= self.flush_every {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes the buffered articles as one shard and commits it in the manifest (no-op when nothing is buffered).
    pub fn flush(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let file = shard_name(self.manifest.shards.len());
        let path = self.dir.join(&file);
        let rows: Vec<HalluExample> = self.pending.iter().flat_map(|(_, ex)| ex.iter().cloned()).collect();
        let batch = to_batch(&rows)?;
        let tmp = tmp_path(&path);
        {
            let f = fs::File::create(&tmp).with_context(|| format!("{}: cannot create", tmp.display()))?;
            let props = WriterProperties::builder().set_compression(Compression::SNAPPY).build();
            let mut w = ArrowWriter::try_new(f.try_clone()?, batch.schema(), Some(props))
                .with_context(|| format!("{}: cannot start parquet writer", tmp.display()))?;
            w.write(&batch).with_context(|| format!("{}: cannot write rows", tmp.display()))?;
            w.close().with_context(|| format!("{}: cannot finish parquet file", tmp.display()))?;
            f.sync_all().with_context(|| format!("{}: cannot sync", tmp.display()))?;
        }
        fs::rename(&tmp, &path).with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()))?;

        let m = &mut self.manifest;
        let hallucinated = rows.iter().filter(|r| r.label == 1).count();
        for r in &rows {
            if !m.templates.contains(&r.template) {
                m.templates.push(r.template.clone());
            }
            *m.rules.entry(r.rule.clone()).or_insert(0) += 1;
        }
        m.articles += self.pending.len();
        m.examples += rows.len();
        m.hallucinated += hallucinated;
        m.faithful += rows.len() - hallucinated;
        m.hallucinated_rate = if m.examples == 0 { 0.0 } else { m.hallucinated as f64 / m.examples as f64 };
        let articles: Vec<String> = self.pending.drain(..).map(|(id, _)| id).collect();
        self.done.extend(articles.iter().cloned());
        m.shards.push(ShardInfo { file, rows: rows.len(), hallucinated, articles });
        self.write_manifest()
    }

    /// Flushes the buffer and returns the final manifest. Dropping a store without calling this loses the
    /// buffered articles (a re-run redoes them), exactly like a killed process.
    pub fn finish(mut self) -> Result<Manifest> {
        self.flush()?;
        Ok(self.manifest)
    }

    fn write_manifest(&self) -> Result<()> {
        let json = serde_json::to_string_pretty(&self.manifest)?;
        write_atomic(&self.dir.join(MANIFEST), json.as_bytes())
    }
}

/// The Arrow schema of a shard (see the module doc).
pub fn schema() -> SchemaRef {
    let list = DataType::List(Arc::new(Field::new_list_field(DataType::Float32, true)));
    let mut fields = Vec::new();
    for name in [
        "article_id",
        "title",
        "template",
    ] {
        fields.push(Field::new(name, DataType::Utf8, false));
    }
    fields.push(Field::new("trunc_offset", DataType::UInt32, false));
    for name in ["entity_label", "original_entity", "generated_entity", "continuation"] {
        fields.push(Field::new(name, DataType::Utf8, false));
    }
    fields.push(Field::new("label", DataType::UInt8, false));
    fields.push(Field::new("rule", DataType::Utf8, false));
    fields.push(Field::new("entropy_last", DataType::Float32, false));
    fields.push(Field::new("entropy_entity_mean", DataType::Float32, false));
    for name in ["hidden_final_last", "hidden_mean_last", "hidden_final_entity", "hidden_mean_entity"] {
        fields.push(Field::new(name, list.clone(), false));
    }
    Arc::new(Schema::new(fields))
}

fn to_batch(rows: &[HalluExample]) -> Result<RecordBatch> {
    fn strings(rows: &[HalluExample], f: impl Fn(&HalluExample) -> &str) -> ArrayRef {
        let mut b = StringBuilder::new();
        for r in rows {
            b.append_value(f(r));
        }
        Arc::new(b.finish())
    }
    fn floats(rows: &[HalluExample], f: impl Fn(&HalluExample) -> f32) -> ArrayRef {
        let mut b = Float32Builder::new();
        for r in rows {
            b.append_value(f(r));
        }
        Arc::new(b.finish())
    }
    fn lists(rows: &[HalluExample], f: impl Fn(&HalluExample) -> &[f32]) -> ArrayRef {
        let mut b = ListBuilder::new(Float32Builder::new());
        for r in rows {
            b.values().append_slice(f(r));
            b.append(true);
        }
        Arc::new(b.finish())
    }
    let mut offsets = UInt32Builder::new();
    let mut labels = UInt8Builder::new();
    for r in rows {
        offsets.append_value(r.trunc_offset);
        labels.append_value(r.label);
    }
    let columns: Vec<ArrayRef> = vec![
        strings(rows, |r| &r.article_id),
        strings(rows, |r| &r.title),
        strings(rows, |r| &r.template),
        Arc::new(offsets.finish()),
        strings(rows, |r| &r.entity_label),
        strings(rows, |r| &r.original_entity),
        strings(rows, |r| &r.generated_entity),
        strings(rows, |r| &r.continuation),
        Arc::new(labels.finish()),
        strings(rows, |r| &r.rule),
        floats(rows, |r| r.entropy_last),
        floats(rows, |r| r.entropy_entity_mean),
        lists(rows, |r| &r.hidden_final_last),
        lists(rows, |r| &r.hidden_mean_last),
        lists(rows, |r| &r.hidden_final_entity),
        lists(rows, |r| &r.hidden_mean_entity),
    ];
    Ok(RecordBatch::try_new(schema(), columns)?)
}

fn column<'a>(batch: &'a RecordBatch, name: &str, file: &Path) -> Result<&'a ArrayRef> {
    batch.column_by_name(name).with_context(|| format!("{}: no column {name:?}", file.display()))
}

fn str_col(batch: &RecordBatch, name: &str, file: &Path) -> Result<Vec<String>> {
    let c = column(batch, name, file)?;
    let a = c.as_string_opt::<i32>().with_context(|| format!("{}: column {name:?} is not utf8", file.display()))?;
    Ok((0..a.len()).map(|i| a.value(i).to_string()).collect())
}

fn f32_col(batch: &RecordBatch, name: &str, file: &Path) -> Result<Vec<f32>> {
    let c = column(batch, name, file)?;
    let a = c
        .as_primitive_opt::<Float32Type>()
        .with_context(|| format!("{}: column {name:?} is not float32", file.display()))?;
    Ok(a.values().to_vec())
}

fn list_col(batch: &RecordBatch, name: &str, file: &Path) -> Result<Vec<Vec<f32>>> {
    let c = column(batch, name, file)?;
    let l = c.as_list_opt::<i32>().with_context(|| format!("{}: column {name:?} is not a list", file.display()))?;
    (0..l.len())
        .map(|i| {
            let v = l.value(i);
            let p = v
                .as_primitive_opt::<Float32Type>()
                .with_context(|| format!("{}: column {name:?} is not a list of float32", file.display()))?;
            Ok(p.values().to_vec())
        })
        .collect()
}

fn read_shard(path: &Path, columns: Option<&[&str]>) -> Result<Vec<RecordBatch>> {
    let f = fs::File::open(path).with_context(|| format!("{}: cannot open shard", path.display()))?;
    let mut builder = ParquetRecordBatchReaderBuilder::try_new(f)
        .with_context(|| format!("{}: not a readable parquet file", path.display()))?;
    if let Some(cols) = columns {
        let arrow = builder.schema().clone();
        let mut roots = Vec::new();
        for c in cols {
            roots.push(arrow.index_of(c).with_context(|| format!("{}: no column {c:?}", path.display()))?);
        }
        let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
        builder = builder.with_projection(mask);
    }
    let reader = builder.build().with_context(|| format!("{}: cannot read", path.display()))?;
    reader.map(|b| b.with_context(|| format!("{}: corrupt row group", path.display()))).collect()
}

/// Every example of the dataset in `dir`, shard by shard in manifest order (only committed shards).
pub fn read_all(dir: impl AsRef<Path>) -> Result<Vec<HalluExample>> {
    let dir = dir.as_ref();
    let m = load_manifest(dir)?;
    let mut out = Vec::with_capacity(m.examples);
    for shard in &m.shards {
        let path = dir.join(&shard.file);
        for b in read_shard(&path, None)? {
            let n = b.num_rows();
            let s = |name| str_col(&b, name, &path);
            let (article_id, title, template) = (s("article_id")?, s("title")?, s("template")?);
            let (entity_label, original_entity) = (s("entity_label")?, s("original_entity")?);
            let (generated_entity, continuation, rule) = (s("generated_entity")?, s("continuation")?, s("rule")?);
            let offsets = column(&b, "trunc_offset", &path)?
                .as_primitive_opt::<UInt32Type>()
                .with_context(|| format!("{}: trunc_offset is not uint32", path.display()))?
                .values()
                .to_vec();
            let labels = column(&b, "label", &path)?
                .as_primitive_opt::<UInt8Type>()
                .with_context(|| format!("{}: label is not uint8", path.display()))?
                .values()
                .to_vec();
            let (el, em) = (f32_col(&b, "entropy_last", &path)?, f32_col(&b, "entropy_entity_mean", &path)?);
            let mut fl = list_col(&b, "hidden_final_last", &path)?.into_iter();
            let mut ml = list_col(&b, "hidden_mean_last", &path)?.into_iter();
            let mut fe = list_col(&b, "hidden_final_entity", &path)?.into_iter();
            let mut me = list_col(&b, "hidden_mean_entity", &path)?.into_iter();
            for i in 0..n {
                out.push(HalluExample {
                    article_id: article_id[i].clone(),
                    title: title[i].clone(),
                    template: template[i].clone(),
                    trunc_offset: offsets[i],
                    entity_label: entity_label[i].clone(),
                    original_entity: original_entity[i].clone(),
                    generated_entity: generated_entity[i].clone(),
                    continuation: continuation[i].clone(),
                    label: labels[i],
                    rule: rule[i].clone(),
                    entropy_last: el[i],
                    entropy_entity_mean: em[i],
                    hidden_final_last: fl.next().unwrap_or_default(),
                    hidden_mean_last: ml.next().unwrap_or_default(),
                    hidden_final_entity: fe.next().unwrap_or_default(),
                    hidden_mean_entity: me.next().unwrap_or_default(),
                });
            }
        }
    }
    Ok(out)
}

/// Feature columns of a dataset, concatenated per row in the order asked: what the detector trains on.
#[derive(Debug, Clone, PartialEq)]
pub struct FeatureTable {
    pub model_id: String,
    pub hidden: usize,
    /// `(column, width)` in concatenation order.
    pub columns: Vec<(String, usize)>,
    /// Width of a row: the sum of the column widths.
    pub dim: usize,
    pub article_ids: Vec<String>,
    pub labels: Vec<u8>,
    /// Row-major `labels.len() x dim`.
    pub x: Vec<f32>,
}

impl FeatureTable {
    pub fn len(&self) -> usize {
        self.labels.len()
    }
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }
    pub fn row(&self, i: usize) -> &[f32] {
        &self.x[i * self.dim..(i + 1) * self.dim]
    }
}

/// [`read_features`] over several dataset directories (e.g. the shards of a `--shard i/n` synthesis), rows
/// concatenated in the order given. All must come from the same model.
pub fn read_features_many<P: AsRef<Path>>(dirs: &[P], features: &[&str]) -> Result<FeatureTable> {
    ensure!(!dirs.is_empty(), "no dataset directory given");
    let mut t = read_features(dirs[0].as_ref(), features)?;
    for d in &dirs[1..] {
        let u = read_features(d.as_ref(), features)?;
        ensure!(
            u.model_id == t.model_id && u.hidden == t.hidden,
            "{}: made with model {:?} (hidden {}), but {} with {:?} (hidden {})",
            d.as_ref().display(),
            u.model_id,
            u.hidden,
            dirs[0].as_ref().display(),
            t.model_id,
            t.hidden
        );
        t.article_ids.extend(u.article_ids);
        t.labels.extend(u.labels);
        t.x.extend(u.x);
    }
    Ok(t)
}

/// Reads only `article_id`, `label` and the given feature columns (names from [`FEATURE_COLUMNS`]).
pub fn read_features(dir: impl AsRef<Path>, features: &[&str]) -> Result<FeatureTable> {
    let dir = dir.as_ref();
    let m = load_manifest(dir)?;
    ensure!(!features.is_empty(), "no feature columns asked");
    let mut columns = Vec::new();
    for f in features {
        let Some(&(name, is_vec)) = FEATURE_COLUMNS.iter().find(|(n, _)| n == f) else {
            let known: Vec<&str> = FEATURE_COLUMNS.iter().map(|(n, _)| *n).collect();
            bail!("unknown feature {f:?}; known: {}", known.join(", "));
        };
        ensure!(!columns.iter().any(|(n, _): &(String, usize)| n == name), "feature {name:?} asked twice");
        columns.push((name.to_string(), if is_vec { m.hidden } else { 1 }));
    }
    let dim = columns.iter().map(|c| c.1).sum();
    let mut owned: Vec<String> = vec!["article_id".into(), "label".into()];
    owned.extend(columns.iter().map(|c| c.0.clone()));
    let cols: Vec<&str> = owned.iter().map(|s| s.as_str()).collect();
    let mut t = FeatureTable {
        model_id: m.model_id.clone(),
        hidden: m.hidden,
        columns,
        dim,
        article_ids: Vec::with_capacity(m.examples),
        labels: Vec::with_capacity(m.examples),
        x: Vec::with_capacity(m.examples * dim),
    };
    for shard in &m.shards {
        let path = dir.join(&shard.file);
        for b in read_shard(&path, Some(&cols))? {
            let n = b.num_rows();
            t.article_ids.extend(str_col(&b, "article_id", &path)?);
            let labels = column(&b, "label", &path)?
                .as_primitive_opt::<UInt8Type>()
                .with_context(|| format!("{}: label is not uint8", path.display()))?;
            t.labels.extend(labels.values().iter());
            let mut parts: Vec<Vec<Vec<f32>>> = Vec::new();
            for (name, width) in &t.columns {
                if *width == 1 && !FEATURE_COLUMNS.iter().any(|(n, v)| n == name && *v) {
                    parts.push(f32_col(&b, name, &path)?.into_iter().map(|v| vec![v]).collect());
                } else {
                    let l = list_col(&b, name, &path)?;
                    for (i, v) in l.iter().enumerate() {
                        ensure!(
                            v.len() == *width,
                            "{}: row {i} of {name:?} has {} values, manifest says hidden size {width}",
                            path.display(),
                            v.len()
                        );
                    }
                    parts.push(l);
                }
            }
            for i in 0..n {
                for p in &parts {
                    t.x.extend_from_slice(&p[i]);
                }
            }
        }
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example(article: &str, k: usize, hidden: usize) -> HalluExample {
        let seed = article.bytes().map(|b| b as f32).sum::<f32>() + k as f32;
        let v = |o: f32| (0..hidden).map(|j| seed * 0.01 + o + j as f32).collect::<Vec<f32>>();
        HalluExample {
            article_id: article.to_string(),
            title: format!("Title of {article}"),
            template: "Continue: {text}".to_string(),
            trunc_offset: 10 * k as u32,
            entity_label: "PERSON".to_string(),
            original_entity: format!("Alice {k}"),
            generated_entity: if k % 2 == 0 { format!("Alice {k}") } else { "Bob".to_string() },
            continuation: format!("continuation {k} of {article} — ünïcode"),
            label: (k % 2) as u8,
            rule: if k % 2 == 0 { "exact".to_string() } else { "overlap".to_string() },
            entropy_last: 0.5 + k as f32,
            entropy_entity_mean: 1.5 + k as f32,
            hidden_final_last: v(0.0),
            hidden_mean_last: v(100.0),
            hidden_final_entity: v(200.0),
            hidden_mean_entity: v(300.0),
        }
    }

    /// Articles `a0..a{n}`: article `i` has `i % 3` examples (so some have none).
    fn corpus(n: usize, hidden: usize) -> Vec<(String, Vec<HalluExample>)> {
        (0..n)
            .map(|i| {
                let id = format!("a{i}");
                let ex = (0..i % 3).map(|k| example(&id, k, hidden)).collect();
                (id, ex)
            })
            .collect()
    }

    #[test]
    fn roundtrip_manifest_and_features() {
        let dir = tempfile::tempdir().unwrap();
        let data = corpus(5, 4);
        let mut s = HalluStore::open(dir.path(), "m", 4).unwrap().with_flush_every(2);
        for (id, ex) in &data {
            s.add_article(id, ex.clone()).unwrap();
        }
        let m = s.finish().unwrap();
        let expected: Vec<HalluExample> = data.iter().flat_map(|(_, e)| e.clone()).collect();
        assert_eq!(read_all(dir.path()).unwrap(), expected);
        // a0:0, a1:1 (label 0), a2:2 (labels 0,1), a3:0, a4:1 (label 0) -> 4 examples, 1 hallucinated
        assert_eq!((m.articles, m.examples, m.hallucinated, m.faithful), (5, 4, 1, 3));
        assert_eq!(m.hallucinated_rate, 0.25);
        assert_eq!(m.shards.len(), 3);
        assert_eq!(m.shards[0].articles, vec!["a0", "a1"]);
        assert_eq!(m.rules.get("exact"), Some(&3));
        assert_eq!(m.templates, vec!["Continue: {text}".to_string()]);
        assert_eq!(load_manifest(dir.path()).unwrap(), m);

        let t = read_features(dir.path(), &["entropy_last", "hidden_mean_entity"]).unwrap();
        assert_eq!(t.dim, 5);
        assert_eq!(t.len(), 4);
        assert_eq!(t.labels, vec![0, 0, 1, 0]);
        assert_eq!(t.article_ids, vec!["a1", "a2", "a2", "a4"]);
        let e = &expected[2];
        let mut row = vec![e.entropy_last];
        row.extend(&e.hidden_mean_entity);
        assert_eq!(t.row(2), row.as_slice());
        assert!(read_features(dir.path(), &["nope"]).is_err());
    }

    #[test]
    fn resumes_after_kill_with_each_row_once() {
        let dir = tempfile::tempdir().unwrap();
        let data = corpus(9, 3);
        // First run: killed after 5 articles. With 2 articles per shard, a0..a3 are committed (2 shards),
        // a4 is buffered and lost.
        {
            let mut s = HalluStore::open(dir.path(), "m", 3).unwrap().with_flush_every(2);
            for (id, ex) in &data[..5] {
                s.add_article(id, ex.clone()).unwrap();
            }
            // kill: no finish()
        }
        // A kill while writing the third shard leaves a tmp file; a kill between the shard rename and the
        // manifest rename leaves a shard the manifest does not list.
        fs::write(dir.path().join(".part-00002.parquet.tmp"), b"half a parquet file").unwrap();
        fs::copy(dir.path().join("part-00000.parquet"), dir.path().join("part-00002.parquet")).unwrap();
        fs::write(dir.path().join("._manifest.json.tmp"), b"{ half").unwrap();
        assert_eq!(read_all(dir.path()).unwrap().len(), data[..4].iter().map(|d| d.1.len()).sum::<usize>());

        // Re-run over all articles, skipping finished ones.
        let mut s = HalluStore::open(dir.path(), "m", 3).unwrap().with_flush_every(2);
        assert!(!dir.path().join("part-00002.parquet").exists());
        assert!(!dir.path().join(".part-00002.parquet.tmp").exists());
        assert!(!dir.path().join("._manifest.json.tmp").exists());
        let mut redone = Vec::new();
        for (id, ex) in &data {
            if s.is_done(id) {
                continue;
            }
            redone.push(id.clone());
            s.add_article(id, ex.clone()).unwrap();
        }
        assert_eq!(redone, vec!["a4", "a5", "a6", "a7", "a8"]);
        assert!(s.add_article("a8", vec![]).is_err(), "a duplicate article is refused");
        let m = s.finish().unwrap();
        let expected: Vec<HalluExample> = data.iter().flat_map(|(_, e)| e.clone()).collect();
        assert_eq!(read_all(dir.path()).unwrap(), expected);
        assert_eq!(m.articles, 9);
        assert_eq!(m.examples, expected.len());
        assert_eq!(m.hallucinated, expected.iter().filter(|e| e.label == 1).count());
        let mut ids: Vec<&String> = m.shards.iter().flat_map(|s| &s.articles).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 9);
    }

    #[test]
    fn refuses_another_model_and_bad_rows() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = HalluStore::open(dir.path(), "smollm2", 3).unwrap();
        let mut bad = example("x", 0, 2);
        assert!(s.add_article("x", vec![bad.clone()]).is_err(), "hidden size 2 in a hidden-3 store");
        bad = example("y", 0, 3);
        assert!(s.add_article("x", vec![bad]).is_err(), "article id mismatch");
        drop(s);
        let err = HalluStore::open(dir.path(), "qwen", 3).err().unwrap().to_string();
        assert!(err.contains("smollm2"), "{err}");
        assert!(HalluStore::open(dir.path(), "smollm2", 4).is_err());
        assert!(HalluStore::open(dir.path(), "smollm2", 3).is_ok());
    }
}
