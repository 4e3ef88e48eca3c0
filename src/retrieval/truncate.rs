//! Query truncation to the last N LLM tokens (DRAGIN truncates its queries to the last 64 tokens).
//!
//! The tokenizer lives elsewhere; callers pass a closure returning the byte offsets `(start, end)`
//! of each token of a string, in order (what `tokenizers::Encoding::get_offsets` gives).

/// The suffix of `query` that starts at its `n`-th token from the end. Returns `query` unchanged
/// when it has at most `n` tokens; an empty string when `n == 0`. Leading whitespace of the suffix is
/// trimmed. Offsets that are out of range or not on a character boundary are clamped/skipped
/// backwards to the nearest boundary.
pub fn truncate_to_last_tokens<'a, F>(query: &'a str, n: usize, tokenize: F) -> &'a str
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

#[cfg(test)]
mod tests {
    use super::*;

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
