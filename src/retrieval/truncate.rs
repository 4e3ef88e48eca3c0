//! Query truncation to the last N LLM tokens (DRAGIN truncates its queries to the last 64 tokens).
//!
//! DRAGIN tokenizes with `truncation_side = "left"` and decodes the kept ids back to text; here the
//! original text is cut at the first kept token's offset instead, which gives the same words without a
//! decode round trip (a byte-level BPE decode can differ only in whitespace clean-up).
//!
//! The tokenizer lives elsewhere; callers pass a closure returning the byte offsets `(start, end)`
//! of each token of a string, in order (what `tokenizers::Encoding::get_offsets` gives).

use std::collections::HashSet;

use anyhow::Result;

use super::{Passage, Retriever};

/// The suffix of `query` that starts at its `n`-th token from the end. Returns `query` unchanged
/// when it has at most `n` tokens; an empty string when `n == 0`. Leading whitespace of the suffix is
/// trimmed. Offsets that are out of range or not on a character boundary are clamped/skipped
/// backwards to the nearest boundary.
pub fn truncate_to_last_tokens<F>(query: &str, n: usize, tokenize: F) -> &str
where
    F: FnOnce(&str) -> Vec<(usize, usize)>,
{
    if n == 0 {
        return "";
    }
    let offsets = tokenize(query);
    if offsets.len() <= n {
        return query;
    }
    let mut start = offsets[offsets.len() - n].0.min(query.len());
    while !query.is_char_boundary(start) {
        start -= 1;
    }
    query[start..].trim_start()
}

/// A [`Retriever`] whose queries are cut to their last `n` tokens before they reach `inner`.
pub struct LastTokens<R, F> {
    pub inner: R,
    pub n: usize,
    /// Token byte offsets of a string, in order.
    pub tokenize: F,
}

impl<R, F> LastTokens<R, F>
where
    F: Fn(&str) -> Vec<(usize, usize)>,
{
    pub fn new(inner: R, n: usize, tokenize: F) -> Self {
        Self { inner, n, tokenize }
    }

    /// The query `inner` sees.
    pub fn truncate<'a>(&self, query: &'a str) -> &'a str {
        truncate_to_last_tokens(query, self.n, &self.tokenize)
    }
}

impl<R, F> Retriever for LastTokens<R, F>
where
    R: Retriever,
    F: Fn(&str) -> Vec<(usize, usize)> + Send + Sync,
{
    fn search(&self, query: &str, k: usize) -> Result<Vec<Passage>> {
        self.inner.search(self.truncate(query), k)
    }

    fn search_excluding(&self, query: &str, k: usize, exclude: &HashSet<String>) -> Result<Vec<Passage>> {
        self.inner.search_excluding(self.truncate(query), k, exclude)
    }

    fn search_batch(&self, queries: &[String], k: usize) -> Result<Vec<Vec<Passage>>> {
        let cut: Vec<String> = queries.iter().map(|q| self.truncate(q).to_string()).collect();
        self.inner.search_batch(&cut, k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Records the queries it is asked.
    #[derive(Default)]
    struct Echo(Mutex<Vec<String>>);
    impl Retriever for Echo {
        fn search(&self, query: &str, _k: usize) -> Result<Vec<Passage>> {
            self.0.lock().unwrap().push(query.to_string());
            Ok(vec![])
        }
    }

    #[test]
    fn wrapper_truncates_every_path() {
        let r = LastTokens::new(Echo::default(), 2, ws);
        r.search("one two three", 1).unwrap();
        r.search_excluding("a b c d", 1, &HashSet::new()).unwrap();
        r.search_batch(&["x y".to_string(), "p q r".to_string()], 1).unwrap();
        assert_eq!(*r.inner.0.lock().unwrap(), vec!["two three", "c d", "x y", "q r"]);
    }

    /// Whitespace "tokenizer" giving byte offsets, standing in for an LLM tokenizer.
    fn ws(s: &str) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let mut start = None;
        for (i, c) in s.char_indices().chain(std::iter::once((s.len(), ' '))) {
            match (c.is_whitespace(), start) {
                (false, None) => start = Some(i),
                (true, Some(b)) => {
                    out.push((b, i));
                    start = None;
                }
                _ => {}
            }
        }
        out
    }

    #[test]
    fn keeps_the_last_n_tokens() {
        assert_eq!(truncate_to_last_tokens("who wrote the  novel Émile", 2, ws), "novel Émile");
        assert_eq!(truncate_to_last_tokens("a b", 5, ws), "a b");
        assert_eq!(truncate_to_last_tokens("a b", 0, ws), "");
        // A token offset inside a multi-byte character falls back to the character's start.
        assert_eq!(truncate_to_last_tokens("xÉy", 1, |_| vec![(0, 1), (2, 4)]), "Éy");
    }
}
