//! `radio` — RaDIO's token-importance query formulation (Zhu et al., AAAI 2025), used with the learned `mlp`
//! trigger.
//!
//! When retrieval triggers at token `t`, every content word `w_k` of the answer before the triggering word gets
//!
//! ```text
//! I(w_k) = σ(a_k) + σ(tfidf_k) + σ(cos_k) + k / N
//! ```
//!
//! - `a_k`: the last-layer attention the triggering token's row puts on the word's sub-tokens (mean over heads,
//!   summed over sub-tokens — the quantity QFS ranks by, [`super::qfs`]);
//! - `tfidf_k`: the word's term frequency in the answer so far times its inverse document frequency over the
//!   *contextual index* — the sentences of the question and of the answer so far, each one document:
//!   `tf = count / |answer words|`, `idf = ln((1 + D) / (1 + df)) + 1` (scikit-learn's smoothed IDF);
//! - `cos_k`: cosine between the word's GloVe vector and the mean GloVe vector of the question's content words
//!   (the "query words"); 0 for every word when GloVe is not installed or a vector is missing;
//! - `k / N`: the word's index among the `N` answer words (later words weigh more);
//! - `σ`: the logistic function applied to the z-score of the term across the candidate words
//!   (`σ((x - mean) / std)`, 0.5 when all candidates tie). The paper writes σ without saying what it is
//!   applied to; raw attention values (~1e-2) would all map to ~0.5 under a plain sigmoid and stop counting, so
//!   each term is standardised first. This is our reading, not the authors' code (their release has no query
//!   former of this kind).
//!
//! The top `top_n` words are joined in text order, after the question when `with_question` is set (as QFS).

use anyhow::Result;

use super::QueryFormer;
use crate::detector::mlp::sigmoid;
use crate::entities::glove::{cosine, Glove};
use crate::text::words::{self, is_content_word};
use crate::trigger::params::Params;
use crate::trigger::GenView;

/// Token-importance query former.
pub struct Radio {
    top_n: usize,
    with_question: bool,
    glove: Option<Glove>,
}

/// `σ((x - mean) / std)` over a candidate set; 0.5 everywhere when the values tie.
pub fn standardised_sigmoid(xs: &[f32]) -> Vec<f32> {
    if xs.is_empty() {
        return vec![];
    }
    let n = xs.len() as f32;
    let mean = xs.iter().sum::<f32>() / n;
    let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f32>() / n;
    let std = var.sqrt();
    xs.iter().map(|x| if std > 1e-12 { sigmoid((x - mean) / std) } else { 0.5 }).collect()
}

fn norm(w: &str) -> String {
    w.trim_matches(|c: char| !c.is_alphanumeric()).to_lowercase()
}

/// Sentences of `text` as sets of normalised words (the contextual index's documents).
fn sentence_docs(text: &str) -> Vec<Vec<String>> {
    text.split_inclusive(['.', '?', '!', '\n'])
        .map(|s| s.split_whitespace().map(norm).filter(|w| !w.is_empty()).collect::<Vec<_>>())
        .filter(|d| !d.is_empty())
        .collect()
}

impl Radio {
    pub fn new(top_n: usize, with_question: bool, glove: Option<Glove>) -> Self {
        Radio { top_n, with_question, glove }
    }

    /// Config keys: `top_n` (required), `with_question` (true), `glove` (true: use GloVe when installed).
    pub fn from_config(config: &toml::Value) -> Result<Self> {
        let p = Params::new("radio", config)?;
        let top_n = p.usize("top_n", None)?;
        let with_question = p.bool("with_question", true)?;
        let use_glove = p.bool("glove", true)?;
        if top_n == 0 {
            return Err(p.invalid("top_n", "must be positive"));
        }
        p.finish()?;
        let glove = if use_glove { Glove::load_default()? } else { None };
        Ok(Radio { top_n, with_question, glove })
    }

    /// Each candidate (word index, text) with its importance, for the trigger at `view.tokens[at]`.
    pub fn importance(&self, view: &GenView, at: usize) -> Vec<(usize, String, f32)> {
        let ws = words::words(view.tokens);
        let Some(wi) = words::word_of(&ws, at) else { return vec![] };
        let cands: Vec<usize> = (0..wi).filter(|&k| !ws[k].text.is_empty() && is_content_word(&ws[k].text)).collect();
        if cands.is_empty() {
            return vec![];
        }
        let n_words = ws.len().max(1) as f32;
        // attention of the triggering token over each word
        let row = &view.tokens[at];
        let attn: Vec<f32> =
            cands.iter().map(|&k| ws[k].tokens.clone().map(|i| row.attn_mean(view.tokens[i].pos)).sum()).collect();
        // tf-idf over the contextual index (question + answer-so-far sentences)
        let answer: String = view.tokens.iter().map(|t| t.text.as_str()).collect();
        let mut docs = sentence_docs(view.question);
        docs.extend(sentence_docs(&answer));
        let d = docs.len() as f32;
        let answer_words: Vec<String> = ws.iter().map(|w| norm(&w.text)).collect();
        let tfidf: Vec<f32> = cands
            .iter()
            .map(|&k| {
                let w = &answer_words[k];
                let tf = answer_words.iter().filter(|x| *x == w).count() as f32 / n_words;
                let df = docs.iter().filter(|doc| doc.contains(w)).count() as f32;
                tf * (((1.0 + d) / (1.0 + df)).ln() + 1.0)
            })
            .collect();
        // cosine to the question's content words
        let qvec: Option<Vec<f32>> = self.glove.as_ref().and_then(|g| {
            let qs: Vec<&[f32]> = view
                .question
                .split_whitespace()
                .map(norm)
                .filter(|w| is_content_word(w))
                .filter_map(|w| g.vector(&w))
                .collect();
            (!qs.is_empty())
                .then(|| (0..g.dim()).map(|j| qs.iter().map(|v| v[j]).sum::<f32>() / qs.len() as f32).collect())
        });
        let cos: Vec<f32> = cands
            .iter()
            .map(|&k| match (&self.glove, &qvec) {
                (Some(g), Some(q)) => g.vector(&norm(&ws[k].text)).map(|v| cosine(v, q)).unwrap_or(0.0),
                _ => 0.0,
            })
            .collect();
        let (sa, st, sc) = (standardised_sigmoid(&attn), standardised_sigmoid(&tfidf), standardised_sigmoid(&cos));
        cands
            .iter()
            .enumerate()
            .map(|(j, &k)| (k, ws[k].text.clone(), sa[j] + st[j] + sc[j] + k as f32 / n_words))
            .collect()
    }

    /// The `top_n` most important words, in text order.
    pub fn answer_words(&self, view: &GenView, at: usize) -> Vec<String> {
        let mut scored = self.importance(view, at);
        scored.sort_by(|a, b| b.2.total_cmp(&a.2));
        scored.truncate(self.top_n);
        scored.sort_by_key(|c| c.0);
        scored.into_iter().map(|c| c.1).collect()
    }
}

impl QueryFormer for Radio {
    fn name(&self) -> &str {
        "radio"
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

    fn steps(texts: &[&str]) -> Vec<TokenStep> {
        texts
            .iter()
            .enumerate()
            .map(|(j, t)| TokenStep {
                pos: 10 + j,
                text: t.to_string(),
                attn: vec![vec![0.0; 11 + j]],
                ..Default::default()
            })
            .collect()
    }

    #[test]
    fn standardised_sigmoid_by_hand() {
        // mean 2, std sqrt(2/3) = 0.8165: z = -1.2247, 0, 1.2247 -> 0.2271, 0.5, 0.7729
        let s = standardised_sigmoid(&[1.0, 2.0, 3.0]);
        assert!((s[0] - 0.22707).abs() < 1e-4 && (s[1] - 0.5).abs() < 1e-6 && (s[2] - 0.77293).abs() < 1e-4, "{s:?}");
        assert_eq!(standardised_sigmoid(&[0.3, 0.3]), vec![0.5, 0.5]);
    }

    #[test]
    fn importance_by_hand() {
        // answer: " Paris Paris lies on Seine rivers ." trigger at " rivers" (token 5)
        let mut ts = steps(&[" Paris", " Paris", " lies", " on", " Seine", " rivers", "."]);
        // attention of token 5's row: Paris#0 0.1, Paris#1 0.1, lies 0.0, Seine 0.4
        ts[5].attn[0][10] = 0.1;
        ts[5].attn[0][11] = 0.1;
        ts[5].attn[0][14] = 0.4;
        let v = GenView { question: "Where is Paris?", tokens: &ts, new_from: 0 };
        let r = Radio::new(2, false, None);
        let imp = r.importance(&v, 5);
        // candidates (content words before "rivers"): Paris(0), Paris(1), lies(2), Seine(4) — "on" is a stop word
        let idx: Vec<usize> = imp.iter().map(|c| c.0).collect();
        assert_eq!(idx, vec![0, 1, 2, 4]);
        // attention [0.1, 0.1, 0, 0.4]: mean 0.15, std = sqrt((0.0025*2 + 0.0225 + 0.0625)/4) = 0.15
        //   z = [-1/3, -1/3, -1, 5/3] -> σ = [0.41742, 0.41742, 0.26894, 0.84113]
        // tf-idf: N = 7 words (".", too); docs = {where is paris?} {paris paris lies on seine rivers .}: D = 2
        //   Paris: tf 2/7, df 2 -> idf ln(3/3)+1 = 1 -> 0.285714; lies, Seine: tf 1/7, df 1 -> idf ln(1.5)+1 =
        //   1.405465 -> 0.200781. Values [0.285714, 0.285714, 0.200781, 0.200781]: z = [1, 1, -1, -1]
        //   -> σ = [0.73106, 0.73106, 0.26894, 0.26894]
        // cosine: no GloVe -> all 0 -> 0.5 each
        // position k/N: [0, 1/7, 2/7, 4/7]
        let want = [
            0.41742 + 0.73106 + 0.5 + 0.0,
            0.41742 + 0.73106 + 0.5 + 1.0 / 7.0,
            0.26894 + 0.26894 + 0.5 + 2.0 / 7.0,
            0.84113 + 0.26894 + 0.5 + 4.0 / 7.0,
        ];
        for (c, w) in imp.iter().zip(want) {
            assert!((c.2 - w).abs() < 1e-4, "{} {} vs {w}", c.1, c.2);
        }
        // top 2: Seine (2.1815), Paris#1 (1.7914) -> text order
        assert_eq!(r.form(&v, 5, 5).unwrap(), "Paris Seine");
        assert_eq!(Radio::new(2, true, None).form(&v, 5, 5).unwrap(), "Where is Paris? Paris Seine");
        // nothing before the first word: the question
        assert_eq!(r.form(&v, 0, 0).unwrap(), "Where is Paris?");
    }
}
