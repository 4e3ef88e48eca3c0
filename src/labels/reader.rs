//! Reader side of a dataset directory: every example, or only the feature columns a detector trains on, from
//! the shards the manifest lists.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context, Result};
use arrow_array::cast::AsArray;
use arrow_array::types::{UInt32Type, UInt8Type};
use arrow_array::RecordBatch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ProjectionMask;

use super::manifest::load_manifest;
use super::schema::{column, f32_col, list_col, str_col};
use super::{HalluExample, FEATURE_COLUMNS};

fn read_shard(path: &Path, columns: Option<&[&str]>) -> Result<Vec<RecordBatch>> {
    crate::io::catch_decoder_panic(path, "parquet shard", || read_shard_inner(path, columns))
}

fn read_shard_inner(path: &Path, columns: Option<&[&str]>) -> Result<Vec<RecordBatch>> {
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
    // Not reserved from the manifest's counts: a damaged manifest must not size an allocation.
    let mut out = Vec::new();
    for shard in &m.shards {
        out.extend(read_file(&dir.join(&shard.file))?);
    }
    Ok(out)
}

/// The examples of one Parquet file of a dataset.
pub(super) fn read_file(path: &Path) -> Result<Vec<HalluExample>> {
    let mut out = Vec::new();
    for b in read_shard(path, None)? {
        let n = b.num_rows();
        let s = |name| str_col(&b, name, path);
        let (article_id, title, template) = (s("article_id")?, s("title")?, s("template")?);
        let (entity_label, original_entity) = (s("entity_label")?, s("original_entity")?);
        let (generated_entity, continuation, rule) = (s("generated_entity")?, s("continuation")?, s("rule")?);
        let offsets = column(&b, "trunc_offset", path)?
            .as_primitive_opt::<UInt32Type>()
            .with_context(|| format!("{}: trunc_offset is not uint32", path.display()))?
            .values()
            .to_vec();
        let labels = column(&b, "label", path)?
            .as_primitive_opt::<UInt8Type>()
            .with_context(|| format!("{}: label is not uint8", path.display()))?
            .values()
            .to_vec();
        let (el, em) = (f32_col(&b, "entropy_last", path)?, f32_col(&b, "entropy_entity_mean", path)?);
        let mut fl = list_col(&b, "hidden_final_last", path)?.into_iter();
        let mut ml = list_col(&b, "hidden_mean_last", path)?.into_iter();
        let mut fe = list_col(&b, "hidden_final_entity", path)?.into_iter();
        let mut me = list_col(&b, "hidden_mean_entity", path)?.into_iter();
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
    Ok(out)
}

/// How the prompt templates label the same truncation points: per template its examples and hallucinated share,
/// and over the points labelled by two templates (the first two in the manifest, e.g. MIND and RaDIO) their
/// agreement and Cohen's kappa.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateAgreement {
    /// (template, examples, hallucinated), in the manifest's order.
    pub templates: Vec<(String, usize, usize)>,
    /// Truncation points (article, offset) labelled by both of the first two templates.
    pub pairs: usize,
    /// Of those, the points both label alike.
    pub agree: usize,
    /// Cohen's kappa of the two labelings over the pairs (`None` without pairs or when chance agreement is 1).
    pub kappa: Option<f64>,
}

/// [`TemplateAgreement`] of the dataset in `dir` (reads the label columns only).
pub fn template_agreement(dir: impl AsRef<Path>) -> Result<TemplateAgreement> {
    use std::collections::HashMap;
    let dir = dir.as_ref();
    let m = load_manifest(dir)?;
    let cols = ["article_id", "template", "trunc_offset", "label"];
    let mut templates: Vec<(String, usize, usize)> = m.templates.iter().map(|t| (t.clone(), 0, 0)).collect();
    // (article, offset) -> labels under the first and the second template
    let mut points: HashMap<(String, u32), [Option<u8>; 2]> = HashMap::new();
    for shard in &m.shards {
        let path = dir.join(&shard.file);
        for b in read_shard(&path, Some(&cols))? {
            let (ids, tpl) = (str_col(&b, "article_id", &path)?, str_col(&b, "template", &path)?);
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
            for i in 0..b.num_rows() {
                let k = match templates.iter().position(|t| t.0 == tpl[i]) {
                    Some(k) => k,
                    None => {
                        templates.push((tpl[i].clone(), 0, 0));
                        templates.len() - 1
                    }
                };
                templates[k].1 += 1;
                templates[k].2 += usize::from(labels[i] == 1);
                if k < 2 {
                    points.entry((ids[i].clone(), offsets[i])).or_default()[k] = Some(labels[i]);
                }
            }
        }
    }
    let both: Vec<(u8, u8)> = points.values().filter_map(|p| Some((p[0]?, p[1]?))).collect();
    let pairs = both.len();
    let agree = both.iter().filter(|(a, b)| a == b).count();
    let kappa = (pairs > 0).then(|| {
        let n = pairs as f64;
        let (pa, pb) =
            (both.iter().filter(|p| p.0 == 1).count() as f64 / n, both.iter().filter(|p| p.1 == 1).count() as f64 / n);
        let chance = pa * pb + (1.0 - pa) * (1.0 - pb);
        (agree as f64 / n - chance) / (1.0 - chance)
    });
    let kappa = kappa.filter(|k| k.is_finite());
    Ok(TemplateAgreement { templates, pairs, agree, kappa })
}

impl std::fmt::Display for TemplateAgreement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let per: Vec<String> = self
            .templates
            .iter()
            .map(|(t, n, h)| format!("{t} {n} examples, {:.1}% hallucinated", 100.0 * *h as f64 / (*n).max(1) as f64))
            .collect();
        write!(f, "{}", per.join("; "))?;
        if self.pairs > 0 && self.templates.len() >= 2 {
            write!(
                f,
                "; {} and {} agree on {} of {} shared truncation points ({:.1}%, Cohen's kappa {})",
                self.templates[0].0,
                self.templates[1].0,
                self.agree,
                self.pairs,
                100.0 * self.agree as f64 / self.pairs as f64,
                self.kappa.map(|k| format!("{k:.3}")).unwrap_or_else(|| "undefined".into())
            )?;
        }
        Ok(())
    }
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
    let stream = FeatureStream::open(dirs, features)?;
    let mut t = FeatureTable {
        model_id: stream.model_id.clone(),
        hidden: stream.hidden,
        columns: stream.columns.clone(),
        dim: stream.dim,
        // Grown from the rows actually read, not reserved from the manifest's counts (which a damaged manifest
        // can make arbitrarily large).
        article_ids: Vec::new(),
        labels: Vec::new(),
        x: Vec::new(),
    };
    stream.for_each(&stream.in_order(), |b| {
        t.article_ids.extend(b.article_ids);
        t.labels.extend(b.labels);
        t.x.extend(b.x);
        Ok(())
    })?;
    Ok(t)
}

/// Reads only `article_id`, `label` and the given feature columns (names from [`FEATURE_COLUMNS`]).
pub fn read_features(dir: impl AsRef<Path>, features: &[&str]) -> Result<FeatureTable> {
    read_features_many(&[dir.as_ref()], features)
}

/// The feature rows of one Parquet shard, as [`FeatureTable`] holds them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FeatureBatch {
    pub article_ids: Vec<String>,
    pub labels: Vec<u8>,
    /// Row-major `labels.len() x dim`.
    pub x: Vec<f32>,
}

/// The feature columns of one or more datasets, read one shard at a time: what a detector trains on when the
/// rows need not, or do not, fit in memory (`train detector --stream`). Memory is one shard's rows (a shard
/// holds `--flush-every` articles), whatever the number of shards.
#[derive(Debug, Clone, PartialEq)]
pub struct FeatureStream {
    pub model_id: String,
    pub hidden: usize,
    /// `(column, width)` in concatenation order.
    pub columns: Vec<(String, usize)>,
    /// Width of a row: the sum of the column widths.
    pub dim: usize,
    /// Every committed shard of every dataset, in the order given and the manifests' order.
    pub shards: Vec<PathBuf>,
}

/// The feature columns `features` names, in order, each with whether it is a hidden-size vector: every name one of
/// [`FEATURE_COLUMNS`], none twice. Reads nothing, so a command can check its flag before any work.
pub fn feature_columns(features: &[&str]) -> Result<Vec<(&'static str, bool)>> {
    let mut columns: Vec<(&'static str, bool)> = Vec::new();
    for f in features {
        let Some(&(name, is_vec)) = FEATURE_COLUMNS.iter().find(|(n, _)| n == f) else {
            let known: Vec<&str> = FEATURE_COLUMNS.iter().map(|(n, _)| *n).collect();
            bail!("unknown feature {f:?}; known: {}", known.join(", "));
        };
        ensure!(!columns.iter().any(|(n, _)| *n == name), "'{name}' named twice");
        columns.push((name, is_vec));
    }
    Ok(columns)
}

impl FeatureStream {
    /// Checks the manifests of `dirs` (same model and hidden size) and the feature names; reads no shard.
    pub fn open<P: AsRef<Path>>(dirs: &[P], features: &[&str]) -> Result<Self> {
        ensure!(!dirs.is_empty(), "no dataset directory given");
        ensure!(!features.is_empty(), "no feature columns asked");
        let first = dirs[0].as_ref();
        let m0 = load_manifest(first)?;
        let columns: Vec<(String, usize)> = feature_columns(features)?
            .into_iter()
            .map(|(name, is_vec)| (name.to_string(), if is_vec { m0.hidden } else { 1 }))
            .collect();
        let dim = columns.iter().try_fold(0usize, |d, c| d.checked_add(c.1)).with_context(|| {
            format!("{}: hidden size {} is impossibly large", first.join(super::MANIFEST).display(), m0.hidden)
        })?;
        let mut shards = Vec::new();
        for d in dirs {
            let d = d.as_ref();
            let m = if d == first { m0.clone() } else { load_manifest(d)? };
            ensure!(
                m.model_id == m0.model_id && m.hidden == m0.hidden,
                "{}: made with model {:?} (hidden {}), but {} with {:?} (hidden {})",
                d.display(),
                m.model_id,
                m.hidden,
                first.display(),
                m0.model_id,
                m0.hidden
            );
            shards.extend(m.shards.iter().map(|s| d.join(&s.file)));
        }
        Ok(FeatureStream { model_id: m0.model_id, hidden: m0.hidden, columns, dim, shards })
    }

    /// The shard indexes in stored order.
    pub fn in_order(&self) -> Vec<usize> {
        (0..self.shards.len()).collect()
    }

    /// Calls `f` with the rows of each shard in `order` (indexes into [`FeatureStream::shards`]).
    pub fn for_each(&self, order: &[usize], mut f: impl FnMut(FeatureBatch) -> Result<()>) -> Result<()> {
        let mut owned: Vec<String> = vec!["article_id".into(), "label".into()];
        owned.extend(self.columns.iter().map(|c| c.0.clone()));
        let cols: Vec<&str> = owned.iter().map(|s| s.as_str()).collect();
        for &i in order {
            let path = &self.shards[i];
            let mut out = FeatureBatch::default();
            for b in read_shard(path, Some(&cols))? {
                self.decode(&b, path, &mut out)?;
            }
            f(out)?;
        }
        Ok(())
    }

    /// Article ids and labels of every row, shard by shard in stored order; no feature column is read.
    pub fn for_each_label(&self, mut f: impl FnMut(Vec<String>, Vec<u8>) -> Result<()>) -> Result<()> {
        for path in &self.shards {
            for b in read_shard(path, Some(&["article_id", "label"]))? {
                f(str_col(&b, "article_id", path)?, labels_of(&b, path)?)?;
            }
        }
        Ok(())
    }

    fn decode(&self, b: &RecordBatch, path: &Path, out: &mut FeatureBatch) -> Result<()> {
        let n = b.num_rows();
        out.article_ids.extend(str_col(b, "article_id", path)?);
        out.labels.extend(labels_of(b, path)?);
        let mut parts: Vec<Vec<Vec<f32>>> = Vec::new();
        for (name, width) in &self.columns {
            if *width == 1 && !FEATURE_COLUMNS.iter().any(|(n, v)| n == name && *v) {
                parts.push(f32_col(b, name, path)?.into_iter().map(|v| vec![v]).collect());
            } else {
                let l = list_col(b, name, path)?;
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
        // Every part's rows were checked against the widths, so this is the size of data already read.
        out.x.reserve(n * self.dim);
        for i in 0..n {
            for p in &parts {
                out.x.extend_from_slice(&p[i]);
            }
        }
        Ok(())
    }
}

fn labels_of(b: &RecordBatch, path: &Path) -> Result<Vec<u8>> {
    let labels = column(b, "label", path)?
        .as_primitive_opt::<UInt8Type>()
        .with_context(|| format!("{}: label is not uint8", path.display()))?;
    Ok(labels.values().to_vec())
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::corpus;
    use super::super::{load_manifest, HalluStore};
    use super::*;

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

    /// Two templates over five truncation points, by hand: A labels (1, 1, 0, 1, 0), B labels the first four
    /// (1, 0, 0, 1). Pairs 4, agreement 3 (p1, p3, p4); P(A=1) = 3/4, P(B=1) = 1/2, chance agreement
    /// 3/4 * 1/2 + 1/4 * 1/2 = 1/2, kappa = (3/4 - 1/2) / (1 - 1/2) = 0.5.
    #[test]
    fn template_agreement_by_hand() {
        let dir = tempfile::tempdir().unwrap();
        let base = corpus(3, 4).into_iter().flat_map(|(_, e)| e).next().unwrap();
        let ex = |tpl: &str, offset: u32, label: u8| HalluExample {
            article_id: "a".into(),
            template: tpl.into(),
            trunc_offset: offset,
            label,
            ..base.clone()
        };
        let rows = vec![
            ex("A", 1, 1),
            ex("B", 1, 1),
            ex("A", 2, 1),
            ex("B", 2, 0),
            ex("A", 3, 0),
            ex("B", 3, 0),
            ex("A", 4, 1),
            ex("B", 4, 1),
            ex("A", 5, 0),
        ];
        let mut s = HalluStore::open(dir.path(), "m", 4).unwrap();
        s.add_article("a", rows).unwrap();
        s.finish().unwrap();
        let t = template_agreement(dir.path()).unwrap();
        assert_eq!(t.templates, vec![("A".to_string(), 5, 3), ("B".to_string(), 4, 2)]);
        assert_eq!((t.pairs, t.agree), (4, 3));
        assert!((t.kappa.unwrap() - 0.5).abs() < 1e-12);
        assert!(t
            .to_string()
            .contains("A and B agree on 3 of 4 shared truncation points (75.0%, Cohen's kappa 0.500)"));
    }
}
