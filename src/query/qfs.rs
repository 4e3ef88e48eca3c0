//! `qfs` — DRAGIN's Query Formulation based on Self-attention (Su et al., 2024, Section 3.2), also ETC's query.
//!
//! Paper: when retrieval triggers at token `t_i`, take the last-layer attention of `t_i` over the preceding
//! context (averaged over heads), keep the `n` tokens with the highest attention, drop stop words, and join
//! them **in text order** as the query.
//!
//! Here:
//! - the attention row is that of `tokens[at]` (`attention_from = "token"`, default, the paper's `t_i`) or the
//!   mean of the rows of the triggering word's sub-tokens (`attention_from = "word"`, what DRAGIN's
//!   `keep_real_words` does for each hit word);
//! - candidates are the **answer words before the triggering word** (text the model could see when it produced
//!   `t_i`), scored by the attention mass the row puts on their sub-tokens' positions (sum over sub-tokens);
//! - with `content_words_only = true` (default; DRAGIN's `check_real_words`) only content words compete
//!   ([`crate::text::words::is_content_word`]); the top `top_n` (DRAGIN's `retrieve_keep_top_k`) are kept and
//!   put back in text order;
//! - the question: the loop gives its text but not its token positions, so its words cannot be ranked.
//!   DRAGIN's code ranks words of the whole input (`question + text`), so the question's words usually make
//!   the query. We **prepend the whole question** (`with_question = true`, default) to the ranked answer
//!   words; `with_question = false` gives the answer words alone. With no answer word before the trigger the
//!   query is the question either way.
//!
//! Not reproduced from DRAGIN's code: `keep_real_words` sorts the pairs in *ascending* attention before taking
//! the first `top_k` (so it keeps the least attended words) and zips word indices with token-position
//! attentions; we keep the most attended, as the paper says.

use anyhow::Result;

use super::QueryFormer;
use crate::text::words::{self, is_content_word};
use crate::trigger::params::Params;
use crate::trigger::GenView;

/// Attention-ranked query words.
#[derive(Debug, Clone)]
pub struct Qfs {
    top_n: usize,
    with_question: bool,
    content_words_only: bool,
    word_rows: bool,
}

impl Qfs {
    pub fn new(top_n: usize, with_question: bool) -> Self {
        Qfs { top_n, with_question, content_words_only: true, word_rows: false }
    }

    /// Config keys: `top_n` (required), `with_question` (true), `content_words_only` (true),
    /// `attention_from` (`"token"` | `"word"`).
    pub fn from_config(config: &toml::Value) -> Result<Self> {
        let p = Params::new("qfs", config)?;
        let top_n = p.usize("top_n", None)?;
        let with_question = p.bool("with_question", true)?;
        let content_words_only = p.bool("content_words_only", true)?;
        let word_rows = p.choice("attention_from", &["token", "word"])? == "word";
        if top_n == 0 {
            return Err(p.invalid("top_n", "must be positive"));
        }
        p.finish()?;
        Ok(Qfs { top_n, with_question, content_words_only, word_rows })
    }

    /// The ranked answer words, in text order.
    pub fn answer_words(&self, view: &GenView, at: usize) -> Vec<String> {
        let ws = words::words(view.tokens);
        let Some(wi) = words::word_of(&ws, at) else { return Vec::new() };
        let rows: Vec<usize> = if self.word_rows { ws[wi].tokens.clone().collect() } else { vec![at] };
        let attn = |key: usize| rows.iter().map(|&r| view.tokens[r].attn_mean(key)).sum::<f32>() / rows.len() as f32;
        let mut cands: Vec<(usize, f32)> = ws[..wi]
            .iter()
            .enumerate()
            .filter(|(_, w)| !w.text.is_empty() && (!self.content_words_only || is_content_word(&w.text)))
            .map(|(k, w)| (k, w.tokens.clone().map(|i| attn(view.tokens[i].pos)).sum::<f32>()))
            .collect();
        // highest attention first; ties keep text order (stable sort)
        cands.sort_by(|a, b| b.1.total_cmp(&a.1));
        cands.truncate(self.top_n);
        cands.sort_by_key(|c| c.0);
        cands.into_iter().map(|(k, _)| ws[k].text.clone()).collect()
    }
}

impl QueryFormer for Qfs {
    fn name(&self) -> &str {
        "qfs"
    }
    fn form(&self, view: &GenView, at: usize, _keep: usize) -> anyhow::Result<String> {
        let picked = self.answer_words(view, at).join(" ");
        Ok(super::with_question(view.question, picked, self.with_question))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step::TokenStep;

    /// Answer at positions 40.., one head for simplicity except the triggering word (two heads).
    fn example() -> Vec<TokenStep> {
        let texts = [" The", " Eiff", "el", " Tower", " was", " built", " by", " Gust", "ave", " in", " Rome"];
        let mut ts: Vec<TokenStep> = texts
            .iter()
            .enumerate()
            .map(|(j, t)| TokenStep {
                pos: 40 + j,
                text: t.to_string(),
                attn: vec![vec![0.0; 41 + j]; 2],
                ..Default::default()
            })
            .collect();
        // triggering word "Rome" = token 10. Its row (heads 0, 1) over earlier answer positions:
        let row = |k: usize| 40 + k;
        for (k, h0, h1) in [
            (0, 0.30, 0.30), // The      0.30 (stop word)
            (1, 0.10, 0.02), // Eiff     0.06 \ Eiffel = 0.06 + 0.04 = 0.10
            (2, 0.04, 0.04), // el       0.04 /
            (3, 0.04, 0.12), // Tower    0.08
            (4, 0.20, 0.20), // was      0.20 (stop word)
            (5, 0.02, 0.02), // built    0.02
            (7, 0.10, 0.30), // Gust     0.20 \ Gustave = 0.25
            (8, 0.05, 0.05), // ave      0.05 /
            (9, 0.50, 0.50), // in       0.50 (stop word)
        ] {
            ts[10].attn[0][row(k)] = h0;
            ts[10].attn[1][row(k)] = h1;
        }
        ts
    }

    #[test]
    fn top_n_content_words_by_attention_in_text_order() {
        let ts = example();
        let v = GenView { question: "Who built it?", tokens: &ts, new_from: 0 };
        // content words before "Rome": Eiffel 0.10, Tower 0.08, built 0.02, Gustave 0.25
        // top 2: Gustave (0.25), Eiffel (0.10) -> in text order
        let q = Qfs::new(2, false);
        assert_eq!(q.answer_words(&v, 10), vec!["Eiffel", "Gustave"]);
        assert_eq!(q.form(&v, 10, 10).unwrap(), "Eiffel Gustave");
        assert_eq!(Qfs::new(3, true).form(&v, 10, 10).unwrap(), "Who built it? Eiffel Tower Gustave");
        // without the content filter the stop words "in" (0.50) and "The" (0.30) win
        let q = Qfs { top_n: 2, with_question: false, content_words_only: false, word_rows: false };
        assert_eq!(q.form(&v, 10, 10).unwrap(), "The in");
        // trigger at the first word: nothing to rank, the question
        assert_eq!(Qfs::new(2, false).form(&v, 0, 0).unwrap(), "Who built it?");
    }

    #[test]
    fn word_rows_average_the_sub_tokens() {
        let mut ts = example();
        // trigger on "Gustave" (tokens 7, 8): rows of 7 and 8 over Eiffel (1, 2) and Tower (3)
        ts[7].attn[0][41] = 0.2; // Gust -> Eiff: head mean 0.1
        ts[8].attn[0][43] = 0.6; // ave -> Tower: head mean 0.3
        ts[8].attn[1][43] = 0.6;
        let v = GenView { question: "Q", tokens: &ts, new_from: 0 };
        // token row (7 only): Eiffel 0.1, Tower 0, built 0 -> top 1 = Eiffel
        assert_eq!(Qfs::new(1, false).form(&v, 7, 7).unwrap(), "Eiffel");
        // word rows (mean of 7 and 8): Eiffel 0.05, Tower 0.3 -> top 1 = Tower
        let q = Qfs { top_n: 1, with_question: false, content_words_only: true, word_rows: true };
        assert_eq!(q.form(&v, 7, 7).unwrap(), "Tower");
    }
}
