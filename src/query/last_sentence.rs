//! `last-sentence` — FS-RAG / IRCoT's query: the last sentence of the kept text (`tokens[..keep]`), as IRCoT
//! retrieves with the latest chain-of-thought sentence. Sentences by [`crate::text::words::sentence_spans`];
//! blank trailing sentences are skipped; with no text yet the query is the question.

use anyhow::Result;

use super::QueryFormer;
use crate::text::words;
use crate::trigger::params::Params;
use crate::trigger::GenView;

/// The last kept sentence.
#[derive(Debug, Clone, Default)]
pub struct LastSentence;

impl LastSentence {
    /// No config keys.
    pub fn from_config(config: &toml::Value) -> Result<Self> {
        Params::new("last-sentence", config)?.finish()?;
        Ok(LastSentence)
    }
}

impl QueryFormer for LastSentence {
    fn name(&self) -> &str {
        "last-sentence"
    }
    fn form(&self, view: &GenView, _at: usize, keep: usize) -> anyhow::Result<String> {
        let kept = &view.tokens[..keep.min(view.tokens.len())];
        for s in words::token_sentences(kept).into_iter().rev() {
            let q = view.text(s.start, s.end);
            let q = q.split_whitespace().collect::<Vec<_>>().join(" ");
            if !q.is_empty() {
                return Ok(q);
            }
        }
        Ok(view.question.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step::TokenStep;

    #[test]
    fn last_non_blank_sentence_of_the_kept_text() {
        let texts = [" Paris", " is", " nice", ".", " It", " has", " a", " tower", ".", "\n", " Next"];
        let ts: Vec<TokenStep> =
            texts.iter().map(|t| TokenStep { text: t.to_string(), ..Default::default() }).collect();
        let v = GenView { question: "Q?", tokens: &ts, new_from: 4 };
        assert_eq!(LastSentence.form(&v, 9, 10).unwrap(), "It has a tower.");
        assert_eq!(LastSentence.form(&v, 3, 4).unwrap(), "Paris is nice.");
        assert_eq!(LastSentence.form(&v, 0, 0).unwrap(), "Q?");
    }
}
