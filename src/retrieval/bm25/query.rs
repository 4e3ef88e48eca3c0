//! From user text to what is searched: the index's analysis of a query into terms, and the tantivy query
//! (a disjunction of term queries, per field combined as [`super::MultiField`] says) that block-WAND runs.

use tantivy::query::{BooleanQuery, DisjunctionMaxQuery, Occur, Query, TermQuery};
use tantivy::schema::IndexRecordOption;
use tantivy::Term;

use super::{Bm25Index, MultiField};

impl Bm25Index {
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
    pub(super) fn build_query(&self, terms: &[String]) -> Option<Box<dyn Query>> {
        if terms.is_empty() {
            return None;
        }
        let disjunction = |field| -> Box<dyn Query> {
            let clauses = terms
                .iter()
                .map(|t| {
                    let q: Box<dyn Query> =
                        Box::new(TermQuery::new(Term::from_field_text(field, t), IndexRecordOption::WithFreqs));
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
                    MultiField::Best => Box::new(DisjunctionMaxQuery::with_tie_breaker(per_field, self.tie_breaker)),
                    MultiField::Most => {
                        Box::new(BooleanQuery::new(per_field.into_iter().map(|q| (Occur::Should, q)).collect()))
                    }
                }
            }
        })
    }
}
