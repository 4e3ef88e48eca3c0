//! Extraction measured against a reference NER: spaCy `en_core_web_sm` entities of the shared valid dump
//! (`../shared/reference/spacy_entities_wiki_valid.jsonl`: one JSON object per line, `{id, title, text,
//! entities: [{text, label, start, end}]}`, character offsets into `text` = `Article::text`).
//!
//! Span precision/recall/F1, two ways:
//! - exact: a predicted span counts if a reference span has the same start and end;
//! - overlap: a predicted span counts if it overlaps a reference span (of any label), and a
//!   reference span counts as found if any predicted span overlaps it.
//!
//! Precision is over predicted spans, recall over reference spans, F1 their harmonic mean. Per label,
//! our spans of label L are compared with the reference spans whose spaCy label maps to L
//! ([`spacy_label`]; all name-like labels map to [`EntityLabel::Name`]).

use std::collections::HashMap;
use std::fmt;
use std::io::BufRead;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::{Entity, EntityExtractor, EntityLabel};
use crate::corpus::wikiextractor::Article;

#[derive(Debug, Clone, Deserialize)]
pub struct RefEntity {
    pub text: String,
    pub label: String,
    pub start: usize,
    pub end: usize,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RefArticle {
    pub id: String,
    pub text: String,
    pub entities: Vec<RefEntity>,
}

/// Read the reference JSONL; errors name the file and line.
pub fn read_reference(path: &Path) -> Result<Vec<RefArticle>> {
    let reader = crate::corpus::open_text(path)?;
    let mut out = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let line = line.with_context(|| format!("{}:{}: cannot read line", path.display(), i + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let a: RefArticle = serde_json::from_str(&line).with_context(|| {
            format!(
                "{}:{}: not a reference article (need id, text, entities[{{text, label, start, end}}])",
                path.display(),
                i + 1
            )
        })?;
        let n = a.text.chars().count();
        if let Some(e) = a.entities.iter().find(|e| e.start >= e.end || e.end > n) {
            bail!(
                "{}:{}: entity {:?} has offsets {}..{} outside the text ({} chars)",
                path.display(),
                i + 1,
                e.text,
                e.start,
                e.end,
                n
            );
        }
        out.push(a);
    }
    Ok(out)
}

/// Our label for a spaCy/OntoNotes label.
pub fn spacy_label(label: &str) -> Option<EntityLabel> {
    Some(match label {
        "DATE" => EntityLabel::Date,
        "TIME" => EntityLabel::Time,
        "CARDINAL" => EntityLabel::Cardinal,
        "QUANTITY" => EntityLabel::Quantity,
        "ORDINAL" => EntityLabel::Ordinal,
        "PERCENT" => EntityLabel::Percent,
        "MONEY" => EntityLabel::Money,
        "PERSON" | "ORG" | "GPE" | "NORP" | "LOC" | "FAC" | "PRODUCT" | "EVENT" | "WORK_OF_ART" | "LAW"
        | "LANGUAGE" => EntityLabel::Name,
        _ => return None,
    })
}

/// Matched and total counts on both sides.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Counts {
    pub pred_matched: usize,
    pub pred: usize,
    pub gold_matched: usize,
    pub gold: usize,
}

impl Counts {
    pub fn precision(&self) -> f64 {
        if self.pred == 0 {
            0.0
        } else {
            self.pred_matched as f64 / self.pred as f64
        }
    }
    pub fn recall(&self) -> f64 {
        if self.gold == 0 {
            0.0
        } else {
            self.gold_matched as f64 / self.gold as f64
        }
    }
    pub fn f1(&self) -> f64 {
        let (p, r) = (self.precision(), self.recall());
        if p + r == 0.0 {
            0.0
        } else {
            2.0 * p * r / (p + r)
        }
    }
    fn add(&mut self, o: Counts) {
        self.pred_matched += o.pred_matched;
        self.pred += o.pred;
        self.gold_matched += o.gold_matched;
        self.gold += o.gold;
    }
}

/// Count matches between predicted and gold spans (char offsets, end exclusive).
pub fn count(pred: &[(usize, usize)], gold: &[(usize, usize)], overlap: bool) -> Counts {
    let hit = |a: &(usize, usize), b: &(usize, usize)| if overlap { a.0 < b.1 && b.0 < a.1 } else { a == b };
    Counts {
        pred_matched: pred.iter().filter(|p| gold.iter().any(|g| hit(p, g))).count(),
        pred: pred.len(),
        gold_matched: gold.iter().filter(|g| pred.iter().any(|p| hit(p, g))).count(),
        gold: gold.len(),
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub articles: usize,
    pub exact: Counts,
    pub overlap: Counts,
    /// Per our label: (label, exact, overlap), our spans of that label against mapped reference spans.
    pub per_label: Vec<(EntityLabel, Counts, Counts)>,
    /// Per spaCy label: share of its spans overlapped by any of ours (recall only).
    pub spacy_recall: Vec<(String, usize, usize)>,
}

/// Run `extractor` on every reference article (found in `articles` by id; the texts must agree).
pub fn evaluate(extractor: &dyn EntityExtractor, articles: &[Article], reference: &[RefArticle]) -> Result<Report> {
    let by_id: HashMap<&str, &Article> = articles.iter().map(|a| (a.id.as_str(), a)).collect();
    let mut exact = Counts::default();
    let mut overlap = Counts::default();
    let mut per: HashMap<EntityLabel, (Counts, Counts)> = HashMap::new();
    let mut spacy: HashMap<String, (usize, usize)> = HashMap::new();
    for r in reference {
        let Some(a) = by_id.get(r.id.as_str()) else { bail!("reference article {} is not in the dump", r.id) };
        if a.text != r.text {
            bail!("reference article {}: its text differs from the dump's (different dump?)", r.id);
        }
        let pred: Vec<Entity> = extractor.extract(&a.text);
        let ps: Vec<(usize, usize)> = pred.iter().map(|e| (e.start, e.end)).collect();
        let gs: Vec<(usize, usize)> = r.entities.iter().map(|e| (e.start, e.end)).collect();
        exact.add(count(&ps, &gs, false));
        overlap.add(count(&ps, &gs, true));
        for label in EntityLabel::ALL {
            let p: Vec<_> = pred.iter().filter(|e| e.label == label).map(|e| (e.start, e.end)).collect();
            let g: Vec<_> =
                r.entities.iter().filter(|e| spacy_label(&e.label) == Some(label)).map(|e| (e.start, e.end)).collect();
            let slot = per.entry(label).or_default();
            slot.0.add(count(&p, &g, false));
            slot.1.add(count(&p, &g, true));
        }
        for g in &r.entities {
            let slot = spacy.entry(g.label.clone()).or_default();
            slot.1 += 1;
            if ps.iter().any(|p| p.0 < g.end && g.start < p.1) {
                slot.0 += 1;
            }
        }
    }
    let per_label =
        EntityLabel::ALL.iter().map(|l| (*l, per[l].0, per[l].1)).filter(|(_, e, _)| e.pred + e.gold > 0).collect();
    let mut spacy_recall: Vec<(String, usize, usize)> = spacy.into_iter().map(|(k, (m, n))| (k, m, n)).collect();
    spacy_recall.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
    Ok(Report { articles: reference.len(), exact, overlap, per_label, spacy_recall })
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} articles; spans: ours {}, reference {}", self.articles, self.exact.pred, self.exact.gold)?;
        writeln!(
            f,
            "{:<10} {:>7} {:>7} {:>7}   {:>7} {:>7} {:>7}   {:>6} {:>6}",
            "label", "ex.P", "ex.R", "ex.F1", "ov.P", "ov.R", "ov.F1", "ours", "ref"
        )?;
        let row = |f: &mut fmt::Formatter<'_>, name: &str, e: &Counts, o: &Counts| {
            writeln!(
                f,
                "{:<10} {:>7.3} {:>7.3} {:>7.3}   {:>7.3} {:>7.3} {:>7.3}   {:>6} {:>6}",
                name,
                e.precision(),
                e.recall(),
                e.f1(),
                o.precision(),
                o.recall(),
                o.f1(),
                e.pred,
                e.gold
            )
        };
        row(f, "ALL", &self.exact, &self.overlap)?;
        for (l, e, o) in &self.per_label {
            row(f, l.as_str(), e, o)?;
        }
        writeln!(f, "reference recall by spaCy label (overlapped by any of our spans):")?;
        for (k, m, n) in &self.spacy_recall {
            writeln!(f, "  {:<12} {:>5}/{:<5} {:.3}", k, m, n, if *n == 0 { 0.0 } else { *m as f64 / *n as f64 })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entities::CombinedExtractor;

    #[test]
    fn counts_by_hand() {
        // pred: [0,5) exact hit, [10,14) overlaps gold [12,20), [30,32) nothing.
        // gold: [0,5), [12,20), [40,45).
        let pred = [(0, 5), (10, 14), (30, 32)];
        let gold = [(0, 5), (12, 20), (40, 45)];
        let e = count(&pred, &gold, false);
        assert_eq!(e, Counts { pred_matched: 1, pred: 3, gold_matched: 1, gold: 3 });
        assert!((e.f1() - 1.0 / 3.0).abs() < 1e-12); // P = R = 1/3
        let o = count(&pred, &gold, true);
        assert_eq!(o, Counts { pred_matched: 2, pred: 3, gold_matched: 2, gold: 3 });
        assert!((o.f1() - 2.0 / 3.0).abs() < 1e-12);
        // Touching spans do not overlap.
        assert_eq!(count(&[(0, 5)], &[(5, 9)], true).pred_matched, 0);
    }

    #[test]
    fn bad_reference_line_names_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ref.jsonl");
        std::fs::write(&p, "{\"id\": \"1\", \"text\": \"abc\", \"entities\": []}\n{\"id\": \"2\", \"text\": \"ab\", \"entities\": [{\"text\": \"x\", \"label\": \"ORG\", \"start\": 1, \"end\": 9}]}\n").unwrap();
        let err = format!("{:#}", read_reference(&p).unwrap_err());
        assert!(err.contains("ref.jsonl:2") && err.contains("outside"), "{err}");
        std::fs::write(&p, "{\"id\": 1}\n").unwrap();
        assert!(format!("{:#}", read_reference(&p).unwrap_err()).contains("ref.jsonl:1"));
    }

    /// The acceptance measurement: rules + names + gazetteer of the dump's titles (no
    /// WordNet, so the number does not depend on an optional install) against spaCy on the 1000 valid
    /// articles. Overlap F1 must reach 0.70.
    #[test]
    fn spacy_reference_on_shared_valid_dump() {
        let dump = crate::require_data!("wiki/dump_valid");
        let reference = crate::require_data!("../reference/spacy_entities_wiki_valid.jsonl");
        let articles = crate::corpus::wikiextractor::read_dump(&dump).unwrap();
        let refs = read_reference(&reference).unwrap();
        assert_eq!(refs.len(), 1000);
        let x = CombinedExtractor::from_articles(&articles, None);
        let report = evaluate(&x, &articles, &refs).unwrap();
        eprintln!("{report}");
        // Target overlap F1 0.70 (measured: overlap F1 0.922, exact F1 0.763; docs/synthesis.md).
        assert!(report.overlap.f1() >= 0.70, "overlap F1 {:.3}\n{report}", report.overlap.f1());
        // Regression guard on exact spans (no target for it; a little below the measured 0.763).
        assert!(report.exact.f1() >= 0.72, "exact F1 {:.3}\n{report}", report.exact.f1());
    }
}
