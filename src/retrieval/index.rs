//! Building the BM25 index: corpus passages -> tantivy index + `ragtime-index.json` manifest.
//!
//! - Analyzer `ragtime_en` (Elasticsearch's `english` analyzer, near enough): tantivy's simple
//!   tokenizer (splits on non-alphanumeric characters), tokens over 40 bytes dropped, lowercase,
//!   Lucene's English stopword set (the 33 words ES uses), Snowball English stemmer. ES's analyzer
//!   differs in using the Unicode standard tokenizer, a possessive filter and the Porter stemmer.
//! - Fields: `id` (stored, exact), `title`, `text` (stored). With [`FieldMode::Combined`] (default)
//!   one indexed field `contents` = title + "\n" + text, as FlashRAG indexes it for bm25s; with
//!   [`FieldMode::Separate`] title and text are indexed each on its own for Elasticsearch-style
//!   multi-field queries (see [`super::bm25::MultiField`]).
//! - Scoring: tantivy's BM25 (k1 = 1.2, b = 0.75, Lucene's IDF `ln(1 + (N - n + 0.5)/(n + 0.5))`
//!   and 1-byte field-norm quantization): Elasticsearch's defaults.
//! - Robustness: the writer commits every `commit_every` passages with a payload saying how many
//!   passages of the (deterministically ordered) corpus stream are in. A re-run with the same corpus
//!   and settings resumes after the last commit; with other settings it starts clean. The manifest is
//!   written last, atomically (temp file + rename), so its presence means the index is complete.
//! - Query speed: segments are merged into one at the end, and the doc store uses 4 KiB blocks.
//! - Shards (`ragtime index --shard i/n`, [`crate::shard`]): [`IndexOptions::shard`] keeps the passages whose id
//!   hashes to the shard; [`merge_indexes`] joins the shards' indexes into one segment, scores unchanged.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use tantivy::indexer::NoMergePolicy;
use tantivy::schema::{Field, IndexRecordOption, Schema, TextFieldIndexing, TextOptions, STORED, STRING};
use tantivy::tokenizer::{
    Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, StopWordFilter, TextAnalyzer,
};
use tantivy::{Index, IndexSettings, IndexWriter, TantivyDocument};

use crate::corpus::passages::{for_each_passage_at, CorpusFormat, CorpusOptions, OnBadLine, OwnStart};
use crate::shard::Shard;

/// Name of the manifest file inside an index directory; present only once the index is complete.
pub const MANIFEST: &str = "ragtime-index.json";
/// Name the analyzer is registered under in the tantivy schema.
pub const ANALYZER: &str = "ragtime_en";
/// Human-readable description of [`ANALYZER`], recorded in the manifest.
pub const ANALYZER_DESCRIPTION: &str =
    "simple tokenizer, remove tokens > 40 bytes, lowercase, Lucene English stopwords (33), Snowball English stemmer";

/// Which fields carry the postings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum FieldMode {
    /// One indexed field holding title + text (what FlashRAG does for bm25s).
    #[default]
    Combined,
    /// Title and text indexed separately (Elasticsearch `multi_match` over both).
    Separate,
}

impl std::str::FromStr for FieldMode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "combined" => Ok(Self::Combined),
            "separate" => Ok(Self::Separate),
            _ => Err(format!("unknown field mode {s:?} (expected combined or separate)")),
        }
    }
}

/// `ragtime-index.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub ragtime_version: String,
    pub corpus: PathBuf,
    pub format: Option<CorpusFormat>,
    pub passage_words: usize,
    pub passages: u64,
    pub skipped_lines: u64,
    /// Passages a resumed run found already committed by an interrupted one (0: built in one go).
    pub resumed_after: u64,
    pub fields: FieldMode,
    pub analyzer: String,
    pub k1: f32,
    pub b: f32,
    pub index_seconds: f64,
    /// The shard of the corpus this index holds (`ragtime index --shard`); none for a whole or merged index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<Shard>,
}

/// The ragtime analyzer (see the module docs).
pub fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(40))
        .filter(LowerCaser)
        .filter(StopWordFilter::new(Language::English).expect("tantivy built with stopwords"))
        .filter(Stemmer::new(Language::English))
        .build()
}

/// Schema fields.
#[derive(Debug, Clone, Copy)]
pub struct Fields {
    pub id: Field,
    pub title: Field,
    pub text: Field,
    /// Indexed fields searched by queries: `[contents]` or `[title, text]`.
    pub contents: Option<Field>,
}

pub fn schema(mode: FieldMode) -> (Schema, Fields) {
    let mut b = Schema::builder();
    let indexed = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default().set_tokenizer(ANALYZER).set_index_option(IndexRecordOption::WithFreqs),
    );
    let stored_only = TextOptions::default().set_stored();
    let id = b.add_text_field("id", STRING | STORED);
    let (title, text, contents) = match mode {
        FieldMode::Combined => {
            let title = b.add_text_field("title", stored_only.clone());
            let text = b.add_text_field("text", stored_only);
            (title, text, Some(b.add_text_field("contents", indexed)))
        }
        FieldMode::Separate => {
            let title = b.add_text_field("title", indexed.clone().set_stored());
            let text = b.add_text_field("text", indexed.set_stored());
            (title, text, None)
        }
    };
    (b.build(), Fields { id, title, text, contents })
}

/// Register [`ANALYZER`] on an opened or created index (tantivy does not persist tokenizers).
pub fn register_analyzer(index: &Index) {
    index.tokenizers().register(ANALYZER, analyzer());
}

/// Settings of `ragtime index`.
#[derive(Debug, Clone)]
pub struct IndexOptions {
    pub corpus: CorpusOptions,
    pub fields: FieldMode,
    /// Indexing threads (tantivy workers); the corpus is read on the calling thread.
    pub threads: usize,
    /// Total memory budget of the indexing workers, in bytes (tantivy needs >= 15 MB per thread).
    pub memory_bytes: usize,
    /// Commit (a resumable checkpoint) every this many passages.
    pub commit_every: u64,
    /// Rebuild from scratch even if a complete index or a resumable checkpoint exists.
    pub force: bool,
    /// Print progress to stderr.
    pub progress: bool,
    /// Index only the passages of this shard (by passage id, see [`crate::shard`]).
    pub shard: Option<Shard>,
}

impl Default for IndexOptions {
    fn default() -> Self {
        Self {
            corpus: CorpusOptions { format: None, passage_words: 100, on_bad: OnBadLine::Stop },
            fields: FieldMode::Combined,
            threads: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(8),
            memory_bytes: 1 << 30,
            commit_every: 1_000_000,
            force: false,
            progress: false,
            shard: None,
        }
    }
}

/// What a commit payload records, to decide whether a later run may resume.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Checkpoint {
    corpus: PathBuf,
    format: Option<CorpusFormat>,
    passage_words: usize,
    fields: FieldMode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    shard: Option<Shard>,
    /// Passages of the stream (of the shard's passages, when sharded) already in the index.
    passages_done: u64,
}

/// Build (or resume building) the index of `corpus` in `out`. Returns the manifest written.
pub fn build_index(corpus: &Path, out: &Path, opts: &IndexOptions) -> Result<Manifest> {
    let start = Instant::now();
    let corpus_abs =
        std::fs::canonicalize(corpus).with_context(|| format!("cannot read corpus {}", corpus.display()))?;
    let manifest_path = out.join(MANIFEST);
    if crate::io::exists(&manifest_path)? && !opts.force {
        bail!("{}: a complete index is already there (remove it, or pass --force to rebuild)", out.display());
    }
    let want = Checkpoint {
        corpus: corpus_abs.clone(),
        format: opts.corpus.format,
        passage_words: opts.corpus.passage_words,
        fields: opts.fields,
        shard: opts.shard,
        passages_done: 0,
    };
    let _lock = lock_index_dir(out, "index directory")?;
    let resume_from = if opts.force { None } else { resumable(out, &want) };
    let index = match resume_from {
        Some(done) => {
            if opts.progress {
                eprintln!("resuming {} after {done} passages already committed", out.display());
            }
            Index::open_in_dir(out).with_context(|| format!("{}: cannot open partial index", out.display()))?
        }
        None => {
            clear_index_dir(out)?;
            let (schema, _) = schema(opts.fields);
            // 4 KiB doc-store blocks (tantivy: 16 KiB): fetching a passage decompresses ~5 passages, not ~25.
            let settings = IndexSettings { docstore_blocksize: 4096, ..IndexSettings::default() };
            Index::builder()
                .schema(schema)
                .settings(settings)
                .create_in_dir(out)
                .with_context(|| format!("{}: cannot create index", out.display()))?
        }
    };
    let skip = resume_from.unwrap_or(0);
    register_analyzer(&index);
    let fields = fields_of(&index.schema())?;
    let threads = opts.threads.max(1);
    // tantivy wants 15 MB to 4 GB per thread.
    let memory = opts.memory_bytes.clamp(threads * (16 << 20), threads * (4000 << 20));
    let mut writer: IndexWriter<TantivyDocument> =
        index.writer_with_num_threads(threads, memory).with_context(|| {
            format!("{}: cannot open index writer (is another `ragtime index` running on it?)", out.display())
        })?;
    // No background merges: the segments are merged once, at the end, into one (each passage is
    // rewritten once, and an explicit merge cannot race a background one).
    writer.set_merge_policy(Box::new(NoMergePolicy));

    let mut seen: u64 = 0; // passages of the stream, including those committed before a resume
    let mut skipped: u64 = 0;
    let mut last_report = Instant::now();
    let t_index = Instant::now();
    let commit = |writer: &mut IndexWriter<TantivyDocument>, done: u64| -> Result<()> {
        let mut prepared = writer.prepare_commit().with_context(|| format!("{}: commit failed", out.display()))?;
        prepared.set_payload(&serde_json::to_string(&Checkpoint { passages_done: done, ..want.clone() })?);
        prepared.commit().with_context(|| format!("{}: commit failed", out.display()))?;
        Ok(())
    };
    let mut own = OwnStart::default();
    for_each_passage_at(corpus, opts.corpus, &mut skipped, |p, at| {
        if opts.shard.is_some_and(|s| !s.owns(&p.id)) {
            return Ok(true);
        }
        seen += 1;
        if seen <= skip {
            return Ok(true);
        }
        own.mark(at);
        let mut doc = TantivyDocument::default();
        doc.add_text(fields.id, &p.id);
        doc.add_text(fields.title, &p.title);
        doc.add_text(fields.text, &p.text);
        if let Some(c) = fields.contents {
            doc.add_text(c, format!("{}\n{}", p.title, p.text));
        }
        writer.add_document(doc)?;
        if seen.is_multiple_of(opts.commit_every) {
            commit(&mut writer, seen)?;
        }
        if opts.progress && seen.is_multiple_of(1024) && last_report.elapsed().as_secs_f64() >= 2.0 {
            last_report = Instant::now();
            let rate = (seen - skip) as f64 / t_index.elapsed().as_secs_f64();
            eprint!("\rindexed {seen} passages ({rate:.0}/s), {}   ", own.describe(at));
        }
        Ok(true)
    })?;
    if opts.progress {
        eprintln!("\rread {seen} passages; committing and merging...                 ");
    }
    commit(&mut writer, seen)?;
    // One segment: every query term is then looked up once, not once per segment.
    let segments = index.searchable_segment_ids()?;
    if segments.len() > 1 {
        if opts.progress {
            eprintln!("merging {} segments into one...", segments.len());
        }
        writer.merge(&segments).wait().with_context(|| format!("{}: merging segments failed", out.display()))?;
        commit(&mut writer, seen)?;
    }
    writer.wait_merging_threads().with_context(|| format!("{}: merging segments failed", out.display()))?;

    let num_docs = index.reader()?.searcher().num_docs();
    if num_docs != seen {
        bail!(
            "{}: index holds {num_docs} passages but the corpus stream has {seen}; not writing the manifest",
            out.display()
        );
    }
    let manifest = Manifest {
        ragtime_version: env!("CARGO_PKG_VERSION").to_string(),
        corpus: corpus_abs,
        format: opts.corpus.format,
        passage_words: opts.corpus.passage_words,
        passages: seen,
        skipped_lines: skipped,
        resumed_after: skip,
        fields: opts.fields,
        analyzer: format!("{ANALYZER}: {ANALYZER_DESCRIPTION}"),
        k1: 1.2,
        b: 0.75,
        index_seconds: start.elapsed().as_secs_f64(),
        shard: opts.shard,
    };
    write_manifest(out, &manifest)?;
    Ok(manifest)
}

/// The index directories of a sharded `ragtime index` (see [`crate::shard`]) merged into one index in `out`:
/// their segments become one segment (tantivy's `merge_indices`), so document frequencies and average lengths,
/// and with them every BM25 score, are those of an index built in one go. Documents are in shard order, which
/// changes nothing but the order of exact ties. Returns the manifest written (passage and skipped-line counts
/// summed, `index_seconds` the sum over the shards plus the merge).
pub fn merge_indexes(parts: &[PathBuf], out: &Path) -> Result<Manifest> {
    let start = Instant::now();
    let mut manifests = Vec::with_capacity(parts.len());
    let mut indices = Vec::with_capacity(parts.len());
    for p in parts {
        let path = p.join(MANIFEST);
        let text = std::fs::read_to_string(&path).with_context(|| format!("{}: cannot read", path.display()))?;
        let m: Manifest = serde_json::from_str(&text).with_context(|| format!("{}: malformed", path.display()))?;
        let index = Index::open_in_dir(p).with_context(|| format!("{}: cannot open the index", p.display()))?;
        register_analyzer(&index);
        manifests.push(m);
        indices.push(index);
    }
    let Some(first) = manifests.first().cloned() else { bail!("no index to merge") };
    for (p, m) in parts.iter().zip(&manifests) {
        if (&m.corpus, m.format, m.passage_words, m.fields)
            != (&first.corpus, first.format, first.passage_words, first.fields)
        {
            bail!("{}: built from another corpus or with other settings than {}", p.display(), parts[0].display());
        }
    }
    if crate::io::exists(&out.join(MANIFEST))? {
        bail!("{}: a complete index is already there; merge into a new directory", out.display());
    }
    let _lock = lock_index_dir(out, "index directory")?;
    // a merge stopped half-way: its partial files are redone
    if crate::io::exists(&out.join("meta.json"))? {
        clear_index_dir(out)?;
    }
    let dir = tantivy::directory::MmapDirectory::open(out)
        .with_context(|| format!("{}: cannot open as an index directory", out.display()))?;
    let merged = tantivy::indexer::merge_indices(&indices, dir)
        .with_context(|| format!("{}: merging the shard indexes failed", out.display()))?;
    let passages: u64 = manifests.iter().map(|m| m.passages).sum();
    let num_docs = merged.reader()?.searcher().num_docs();
    if num_docs != passages {
        bail!(
            "{}: merged index holds {num_docs} passages, the shards {passages}; not writing the manifest",
            out.display()
        );
    }
    let manifest = Manifest {
        passages,
        skipped_lines: manifests.iter().map(|m| m.skipped_lines).sum(),
        resumed_after: 0,
        index_seconds: manifests.iter().map(|m| m.index_seconds).sum::<f64>() + start.elapsed().as_secs_f64(),
        shard: None,
        ragtime_version: env!("CARGO_PKG_VERSION").to_string(),
        ..first
    };
    write_manifest(out, &manifest)?;
    Ok(manifest)
}

/// Writes the manifest atomically: it is the commit point of a finished index.
fn write_manifest(out: &Path, m: &Manifest) -> Result<()> {
    crate::io::write_atomic(&out.join(MANIFEST), serde_json::to_string_pretty(m)?.as_bytes())
}

/// `Some(passages_done)` if `out` holds a partial index committed with the same settings.
fn resumable(out: &Path, want: &Checkpoint) -> Option<u64> {
    let index = Index::open_in_dir(out).ok()?;
    let payload = index.load_metas().ok()?.payload?;
    let cp: Checkpoint = serde_json::from_str(&payload).ok()?;
    (Checkpoint { passages_done: 0, ..cp.clone() } == *want).then_some(cp.passages_done)
}

/// An empty directory (but for the lock file), or one holding a tantivy index (ours, partial or complete).
fn looks_like_ours(dir: &Path) -> Result<bool> {
    let mut entries = std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))?;
    let empty = entries.all(|e| e.is_ok_and(|e| e.file_name() == crate::io::LOCK_FILE));
    Ok(empty || crate::io::exists(&dir.join("meta.json"))? || crate::io::exists(&dir.join(MANIFEST))?)
}

/// Locks `out` for this process as an index directory (`flag` names it in errors): refused, and left as it is,
/// where it exists and is neither empty nor a ragtime index; created where missing; then
/// [`crate::io::lock_output_dir`], so a second process building into it at the same time is refused before it
/// clears or resumes the first one's files. `ragtime index` takes it for the BM25 and dense builds together.
pub fn lock_index_dir(out: &Path, flag: &str) -> Result<crate::io::OutputLock> {
    if crate::io::exists(out)? && !looks_like_ours(out)? {
        bail!("{}: exists and is not an empty directory or a ragtime index; refusing to overwrite it", out.display());
    }
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    crate::io::lock_output_dir(out, flag)
}

/// Removes everything in the locked index directory `out` but its lock file: a partial index that cannot be
/// resumed, before a build starts again.
fn clear_index_dir(out: &Path) -> Result<()> {
    for e in std::fs::read_dir(out).with_context(|| format!("cannot list {}", out.display()))? {
        let e = e.with_context(|| format!("cannot list {}", out.display()))?;
        if e.file_name() == crate::io::LOCK_FILE {
            continue;
        }
        let p = e.path();
        let removed = if e.file_type().is_ok_and(|t| t.is_dir()) {
            std::fs::remove_dir_all(&p)
        } else {
            std::fs::remove_file(&p)
        };
        removed.with_context(|| format!("cannot clear {}", p.display()))?;
    }
    Ok(())
}

/// Look the ragtime fields up in an index's schema.
pub fn fields_of(schema: &Schema) -> Result<Fields> {
    let get = |n: &str| {
        schema.get_field(n).map_err(|_| anyhow::anyhow!("index schema has no field {n:?}; not a ragtime index"))
    };
    Ok(Fields { id: get("id")?, title: get("title")?, text: get("text")?, contents: schema.get_field("contents").ok() })
}
