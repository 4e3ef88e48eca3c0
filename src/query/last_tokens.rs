//! `last-tokens` — FL-RAG's query: the last `n` generated tokens of the kept text (`tokens[keep-n..keep]`),
//! as DRAGIN's paper describes its FL-RAG baseline. Before any text exists (or when it is blank) the query is
//! the question.

use anyhow::Result;

use super::QueryFormer;
use crate::trigger::params::Params;
use crate::trigger::GenView;

/// The last `n` kept tokens.
#[derive(Debug, Clone)]
pub struct LastTokens {
    n: usize,
}

impl LastTokens {
    pub fn new(n: usize) -> Self {
        LastTokens { n: n.max(1) }
    }

    /// Config keys: `n` (required; the trigger's `n`).
    pub fn from_config(config: &toml::Value) -> Result<Self> {
        let p = Params::new("last-tokens", config)?;
        let n = p.usize("n", None)?;
        if n == 0 {
            return Err(p.invalid("n", "must be positive"));
        }
        p.finish()?;
        Ok(LastTokens::new(n))
    }
}

impl QueryFormer for LastTokens {
    fn name(&self) -> &str {
        "last-tokens"
    }
    fn form(&self, view: &GenView, _at: usize, keep: usize) -> anyhow::Result<String> {
        let keep = keep.min(view.tokens.len());
        let q = view.text(keep.saturating_sub(self.n), keep);
        let q = q.split_whitespace().collect::<Vec<_>>().join(" ");
        Ok(if q.is_empty() { view.question.to_string() } else { q })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step::TokenStep;

    #[test]
    fn last_n_kept_tokens() {
        let texts = [" The", " Eiff", "el", " Tower", "\n", " is", " tall"];
        let ts: Vec<TokenStep> =
            texts.iter().map(|t| TokenStep { text: t.to_string(), ..Default::default() }).collect();
        let v = GenView { question: "Q?", tokens: &ts, new_from: 3 };
        // keep = 6: the 4 tokens before it are "el", " Tower", "\n", " is" -> "el Tower is"
        assert_eq!(LastTokens::new(4).form(&v, 5, 6).unwrap(), "el Tower is");
        assert_eq!(LastTokens::new(40).form(&v, 6, 7).unwrap(), "The Eiffel Tower is tall");
        assert_eq!(LastTokens::new(4).form(&v, 0, 0).unwrap(), "Q?");
    }
}
