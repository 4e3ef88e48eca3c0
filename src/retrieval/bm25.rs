//! BM25 retrieval over a ragtime tantivy index ([`super::index`]).
//!
//! Queries are analyzed with the index's analyzer and turned into a disjunction of term queries built
//! here (no query parser), so user text with quotes, colons or brackets never fails to parse. A
//! repeated query term counts once per occurrence, as in Lucene's/Elasticsearch's `match` query.
//!
//! Multi-field scoring ([`MultiField`]) matters only for indexes built with
//! [`FieldMode::Separate`](super::index::FieldMode::Separate): Elasticsearch's `multi_match` default (`best_fields`: the better of the
//! title score and the text score) or `most_fields` (their sum). DRAGIN queries ES with
//! `multi_match` over title and text; FlashRAG's bm25s and Pyserini index title + text as one field,
//! which is [`FieldMode::Combined`](super::index::FieldMode::Combined), the default (it measured closest to bm25s, see NOTE-issue3.md).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use rayon::prelude::*;
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, DisjunctionMaxQuery, Occur, Query, TermQuery};
use tantivy::schema::{IndexRecordOption, Value};
use tantivy::tokenizer::TextAnalyzer;
use tantivy::{Index, IndexReader, ReloadPolicy, TantivyDocument, Term};

use super::index::{fields_of, register_analyzer, Fields, Manifest, MANIFEST};
use super::{Passage, Retriever};

/// How title and text scores combine in a [`FieldMode::Separate`](super::index::FieldMode::Separate) index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MultiField {
    /// max(title score, text score): Elasticsearch `multi_match` `best_fields` (tie_breaker 0).
    #[default]
    Best,
    /// title score + text score: Elasticsearch `most_fields`.
    Most,
}

/// A BM25 index opened for search. Cheap to share across threads.
pub struct Bm25Index {
    dir: PathBuf,
    reader: IndexReader,
    fields: Fields,
    analyzer: TextAnalyzer,
    manifest: Manifest,
    multi_field: MultiField,
}

impl Bm25Index {
    /// Open a complete index built by `ragtime index`.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        if !dir.is_dir() {
            bail!("{}: no such index directory (build one with `ragtime index --corpus PATH --out DIR`)", dir.display());
        }
        let mpath = dir.join(MANIFEST);
        if !mpath.exists() {
            bail!(
                "{}: not a complete ragtime index: {MANIFEST} is missing (indexing was interrupted or never ran; \
                 re-run `ragtime index` with the same arguments to resume)",
                dir.display()
            );
        }
        let manifest: Manifest = serde_json::from_slice(&std::fs::read(&mpath).with_context(|| format!("cannot read {}", mpath.display()))?)
            .with_context(|| format!("{}: corrupt manifest", mpath.display()))?;
        let index = Index::open_in_dir(dir).with_context(|| format!("{}: corrupt index (cannot open it with tantivy)", dir.display()))?;
        register_analyzer(&index);
        let fields = fields_of(&index.schema()).with_context(|| format!("{}: corrupt index", dir.display()))?;
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .with_context(|| format!("{}: corrupt index (cannot open a reader)", dir.display()))?;
        let n = reader.searcher().num_docs();
        if n != manifest.passages {
            bail!("{}: corrupt index: it holds {n} passages, its manifest says {}", dir.display(), manifest.passages);
        }
        let analyzer = index.tokenizers().get(super::index::ANALYZER).expect("registered above");
        Ok(Self { dir: dir.to_path_buf(), reader, fields, analyzer, manifest, multi_field: MultiField::default() })
    }

    /// Choose how title and text scores combine (only matters for a [`FieldMode::Separate`](super::index::FieldMode::Separate) index).
    pub fn with_multi_field(mut self, m: MultiField) -> Self {
        self.multi_field = m;
        self
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Number of passages in the index.
    pub fn len(&self) -> u64 {
        self.manifest.passages
    }

    pub fn is_empty(&self) -> bool {
        self.manifest.passages == 0
    }

    /// The query's terms after analysis (lowercase, stopwords removed, stemmed), in order, repeats kept.
    pub fn analyze(&self, query: &str) -> Vec<String> {
        let mut analyzer = self.analyzer.clone();
        let mut stream = analyzer.token_stream(query);
        let mut out = Vec::new();
        while stream.advance() {
            out.push(stream.token().text.clone());
        }
        out
    }

    /// The tantivy query for `query`, or `None` if no term survives analysis.
    fn build_query(&self, query: &str) -> Option<Box<dyn Query>> {
        let terms = self.analyze(query);
        if terms.is_empty() {
            return None;
        }
        let disjunction = |field| -> Box<dyn Query> {
            let clauses = terms
                .iter()
                .map(|t| {
                    let q: Box<dyn Query> = Box::new(TermQuery::new(Term::from_field_text(field, t), IndexRecordOption::WithFreqs));
                    (Occur::Should, q)
                })
                .collect();
            Box::new(BooleanQuery::new(clauses))
        };
        Some(match self.fields.contents {
            Some(c) => disjunction(c),
            None => {
                let per_field = vec![disjunction(self.fields.title), disjunction(self.fields.text)];
                match self.multi_field {
                    MultiField::Best => Box::new(DisjunctionMaxQuery::new(per_field)),
                    MultiField::Most => Box::new(BooleanQuery::new(per_field.into_iter().map(|q| (Occur::Should, q)).collect())),
                }
            }
        })
    }

    fn search_inner(&self, query: &str, k: usize) -> Result<Vec<Passage>> {
        let Some(q) = self.build_query(query) else { return Ok(Vec::new()) };
        if k == 0 {
            return Ok(Vec::new());
        }
        let searcher = self.reader.searcher();
        let top = searcher
            .search(&q, &TopDocs::with_limit(k).order_by_score())
            .with_context(|| format!("{}: search failed", self.dir.display()))?;
        top.into_iter()
            .map(|(score, addr)| {
                let doc: TantivyDocument = searcher.doc(addr).with_context(|| format!("{}: cannot read a stored passage", self.dir.display()))?;
                let get = |f| doc.get_first(f).and_then(|v| v.as_str()).unwrap_or("").to_string();
                Ok(Passage { id: get(self.fields.id), title: get(self.fields.title), text: get(self.fields.text), score })
            })
            .collect()
    }
}

impl Retriever for Bm25Index {
    fn search(&self, query: &str, k: usize) -> Result<Vec<Passage>> {
        self.search_inner(query, k)
    }

    /// Queries in parallel on rayon's current thread pool.
    fn search_batch(&self, queries: &[String], k: usize) -> Result<Vec<Vec<Passage>>> {
        queries.par_iter().map(|q| self.search_inner(q, k)).collect()
    }
}
