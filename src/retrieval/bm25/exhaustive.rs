//! Exhaustive top k, term at a time ([`super::TopK::Exhaustive`]): every posting of every query term adds its
//! BM25 score into a per-thread accumulator, scored exactly as tantivy scores it, then the best k are picked.

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use tantivy::fieldnorm::FieldNormReader;
use tantivy::query::Bm25StatisticsProvider;
use tantivy::schema::{Field, IndexRecordOption};
use tantivy::{DocAddress, DocId, Score, Searcher, Term};

use super::Bm25Index;

/// tantivy's BM25 constants (Elasticsearch's defaults).
const K1: Score = 1.2;
const B: Score = 0.75;

thread_local! {
    /// Term-at-a-time accumulator (one score per document, all zero between queries) and the
    /// documents it touched.
    static SCRATCH: RefCell<(Vec<Score>, Vec<DocId>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// The best k (score, address) pairs seen; ties go to the lower address.
struct TopKHeap {
    k: usize,
    heap: BinaryHeap<Reverse<(OrdScore, Reverse<DocAddress>)>>,
}

impl TopKHeap {
    fn new(k: usize) -> Self {
        Self { k, heap: BinaryHeap::with_capacity(k + 1) }
    }

    #[inline]
    fn offer(&mut self, score: Score, addr: DocAddress) {
        // Fast rejection with a plain float compare (most candidates fall below the k-th best).
        if self.heap.len() == self.k && self.heap.peek().is_some_and(|Reverse((min, _))| score < min.0) {
            return;
        }
        let key = (OrdScore(score), Reverse(addr));
        if self.heap.len() < self.k {
            self.heap.push(Reverse(key));
        } else if self.heap.peek().is_some_and(|Reverse(min)| key > *min) {
            self.heap.pop();
            self.heap.push(Reverse(key));
        }
    }

    /// Best first.
    fn into_sorted(self) -> Vec<(Score, DocAddress)> {
        self.heap.into_sorted_vec().into_iter().map(|Reverse((s, Reverse(a)))| (s.0, a)).collect()
    }
}

/// f32 score with a total order.
#[derive(Debug, Clone, Copy, PartialEq)]
struct OrdScore(Score);
impl Eq for OrdScore {}
impl PartialOrd for OrdScore {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for OrdScore {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&o.0)
    }
}

impl Bm25Index {
    /// Exhaustive top k, term at a time: every posting of every query term adds its BM25 score into a
    /// per-thread accumulator, one per (document, field), the sum over terms as a BooleanQuery of
    /// TermQuery Should clauses gives; then the best k are picked from the touched documents. Field
    /// scores combine by sum (`best_tie` None: most_fields, or the one combined field) or as tantivy's
    /// DisjunctionMaxQuery does (`max + (sum - max) * tie`). Term scores are computed exactly as
    /// tantivy's `Bm25Weight` computes them (same statistics, same f32 operations).
    pub(super) fn term_at_a_time(
        &self,
        searcher: &Searcher,
        fields: &[Field],
        terms: &[String],
        k: usize,
        best_tie: Option<Score>,
    ) -> tantivy::Result<Vec<(Score, DocAddress)>> {
        let nf = fields.len();
        let segments = searcher.segment_readers();
        let n_docs = searcher.total_num_docs()?;
        // (field, term, per-segment term info, global doc freq)
        let mut lookups = Vec::with_capacity(fields.len() * terms.len());
        for (fi, &field) in fields.iter().enumerate() {
            let tf_cache = self.tf_cache(searcher, field)?;
            for t in terms {
                let term = Term::from_field_text(field, t);
                let mut infos = Vec::with_capacity(segments.len());
                let mut df = 0u64;
                for seg in segments {
                    let info = seg.inverted_index(field)?.get_term_info(&term)?;
                    df += info.as_ref().map_or(0, |i| i.doc_freq as u64);
                    infos.push(info);
                }
                if df > 0 {
                    let x = ((n_docs - df) as Score + 0.5) / (df as Score + 0.5);
                    let weight = (1.0 + x).ln() * (1.0 + K1);
                    lookups.push((fi, field, infos, weight, tf_cache.clone()));
                }
            }
        }
        let mut top = TopKHeap::new(k);
        let mut block_buf = [0.0 as Score; 128];
        SCRATCH.with(|scratch| -> tantivy::Result<()> {
            let (scores, touched) = &mut *scratch.borrow_mut();
            for (ord, seg) in segments.iter().enumerate() {
                if scores.len() < nf * seg.max_doc() as usize {
                    scores.resize(nf * seg.max_doc() as usize, 0.0);
                }
                for &(fi, field, ref infos, weight, ref tf_cache) in &lookups {
                    let Some(info) = &infos[ord] else { continue };
                    let norms = seg.get_fieldnorms_reader(field)?;
                    let mut postings = seg
                        .inverted_index(field)?
                        .read_block_postings_from_terminfo(info, IndexRecordOption::WithFreqs)?;
                    loop {
                        let docs = postings.docs();
                        if docs.is_empty() {
                            break;
                        }
                        // Two passes over the block (<= 128 postings): the scores first, in a loop
                        // the compiler vectorizes (the divisions dominate), then the scatter-add.
                        let freqs = &postings.freqs()[..docs.len()];
                        let block = &mut block_buf[..docs.len()];
                        for (b, &doc) in block.iter_mut().zip(docs) {
                            *b = tf_cache[norms.fieldnorm_id(doc) as usize];
                        }
                        for (b, &tf) in block.iter_mut().zip(freqs) {
                            let tf = tf as Score;
                            *b = weight * (tf / (tf + *b));
                        }
                        if nf == 1 {
                            for (&doc, &s) in docs.iter().zip(block.iter()) {
                                let acc = &mut scores[doc as usize];
                                if *acc == 0.0 {
                                    touched.push(doc);
                                }
                                *acc += s;
                            }
                        } else {
                            for (&doc, &s) in docs.iter().zip(block.iter()) {
                                let base = doc as usize * nf;
                                if scores[base..base + nf].iter().all(|&v| v == 0.0) {
                                    touched.push(doc);
                                }
                                scores[base + fi] += s;
                            }
                        }
                        postings.advance();
                    }
                }
                let alive = seg.alive_bitset();
                if nf == 1 {
                    for &doc in touched.iter() {
                        let acc = &mut scores[doc as usize];
                        if alive.is_none_or(|a| a.is_alive(doc)) {
                            top.offer(*acc, DocAddress::new(ord as u32, doc));
                        }
                        *acc = 0.0;
                    }
                    touched.clear();
                    continue;
                }
                for &doc in touched.iter() {
                    let per_field = &mut scores[doc as usize * nf..(doc as usize + 1) * nf];
                    if alive.is_none_or(|a| a.is_alive(doc)) {
                        let sum: Score = per_field.iter().sum();
                        let score = match best_tie {
                            None => sum,
                            Some(tie) => {
                                let max = per_field.iter().copied().fold(Score::MIN, Score::max);
                                max + (sum - max) * tie
                            }
                        };
                        top.offer(score, DocAddress::new(ord as u32, doc));
                    }
                    per_field.fill(0.0);
                }
                touched.clear();
            }
            Ok(())
        })?;
        Ok(top.into_sorted())
    }

    /// tantivy's BM25 length-normalisation table for `field`: K1 * (1 - B + B * len / avg_len) for
    /// each of the 256 quantized field lengths.
    fn tf_cache(&self, searcher: &Searcher, field: Field) -> tantivy::Result<Arc<[Score; 256]>> {
        let mut cache = self.tf_caches.lock().unwrap();
        if let Some((_, c)) = cache.iter().find(|(f, _)| *f == field) {
            return Ok(c.clone());
        }
        let avg = searcher.total_num_tokens(field)? as Score / searcher.total_num_docs()? as Score;
        let mut table = [0.0; 256];
        for (id, v) in table.iter_mut().enumerate() {
            *v = K1 * (1.0 - B + B * FieldNormReader::id_to_fieldnorm(id as u8) as Score / avg);
        }
        let table = Arc::new(table);
        cache.push((field, table.clone()));
        Ok(table)
    }
}
