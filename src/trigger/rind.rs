//! `rind` — DRAGIN's RIND trigger (Su et al., 2024, "DRAGIN: Dynamic Retrieval Augmented Generation based on
//! the Real-time Information Needs of Large Language Models"), Section 3.1. Pair it with the `qfs` query former
//! (DRAGIN's QFS, Section 3.2).
//!
//! # Paper form (`variant = "paper"`, default)
//!
//! For a generated token `t_i`:
//! - `H_i = -Σ_v p_i(v) log p_i(v)`, the entropy of the distribution `t_i` was drawn from
//!   ([`TokenStep::entropy`]);
//! - `a_max(i) = max_{j > i} A_{j,i}`, the largest attention `t_i` *receives* from any later token, `A` the
//!   last-layer attention averaged over heads;
//! - `s_i ∈ {0, 1}`, 0 for stop words (content-word indicator);
//! - `S_RIND(t_i) = H_i · a_max(i) · s_i`; retrieval triggers at the first `t_i` with `S_RIND > θ`, and the
//!   output is truncated at `t_i` (the token is regenerated after retrieval).
//!
//! The paper scores tokens but tests `s_i` on words; like DRAGIN's code we score **words** built from sub-tokens
//! ([`crate::text::words`]): `H_w` = mean of its sub-tokens' entropies (the code's choice),
//! `a_max(w)` = max over its sub-tokens `i` of `a_max(i)`, `s_w` = [`is_content_word`]. `a_max(i)` ranges
//! over the later tokens `j` in the view (`i < j < tokens.len()`), i.e. those already decoded: a block's last
//! words have fewer witnesses (the last token none, `a_max = 0`). With `Lookahead::Sentence` the whole sentence
//! is available. Words overlapping the block (`end > new_from`) are judged; `at` = the word's first token,
//! `keep` = `at` (`truncate = "token"`) or the start of its sentence (`truncate = "sentence"`).
//!
//! # Code form (`variant = "code"`, `oneal2000/DRAGIN` `src/generate.py`, `AttnWeightRAG`)
//!
//! - attention: `a_i = mean_h max_{j ≥ i} A^h_{j,i}` (solver `"max"`: max over queries per head — the token's own
//!   row included — then mean over heads); a word's attention is the **sum** of its sub-tokens' `a_i`;
//! - entropy: mean over the word's sub-tokens (as the paper form);
//! - per-sentence normalisation (`modifier`): for the words of each sentence of the block,
//!   `value_w = a_w / Σ_{w' ∈ sentence} a_w' · H_w · |sentence|` (`|sentence|` in words); the first sentence
//!   with a `value > θ` triggers, at its first such word;
//! - no content-word factor in the score (`check_real_words` only filters the query words, see `qfs`);
//! - truncation at the start of the triggering sentence (`truncate` defaults to `"sentence"`), and the code
//!   judges a whole generated block (`lookahead` defaults to 64 tokens = `generate_max_length` on 2Wiki);
//! - after a retrieval the code regenerates and keeps the first sentence *unjudged* (`get_top_sentence`), then
//!   resumes judging blocks: `accept_after_retrieval = true` (default for the code form) makes
//!   [`Trigger::lookahead`] ask for one sentence after [`Trigger::on_retrieval`] and accept it. This relies on
//!   the loop calling `lookahead()` before every block, as the protocol in [`crate::trigger`] describes.
//!
//! Not reproduced from the code: it re-runs the model on the generated text alone (no prompt) to get the
//! attention, where we use the rows captured while decoding under the full prompt; and its truncation keeps
//! `sentences[:sid-1]`, dropping the sentence *before* the triggering one too (an off-by-one).
//!
//! Scores: the word's `S_RIND` (paper) or `value_w` (code), repeated over its sub-tokens.

use anyhow::Result;

use super::params::{Pacing, Params, Truncate};
use super::{Decision, GenView, Judgement, Lookahead, Trigger};
use crate::step::TokenStep;
use crate::text::words::{self, is_content_word, Word};

/// Which form of RIND.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    Paper,
    Code,
}

/// DRAGIN's real-time information-need detector.
#[derive(Debug, Clone)]
pub struct Rind {
    theta: f32,
    variant: Variant,
    /// Cut, block size, and (DRAGIN's code) the first sentence after a retrieval accepted without judging.
    pacing: Pacing,
    /// Retrieve with the question before generating (not DRAGIN's: off by default).
    initial: bool,
}

/// `a_max(i)`: the largest head-averaged attention token `i` receives from a later token of the view.
pub fn a_max(tokens: &[TokenStep], i: usize) -> f32 {
    let key = tokens[i].pos;
    tokens[i + 1..].iter().map(|t| t.attn_mean(key)).fold(0.0, f32::max)
}

/// DRAGIN code's per-token attention: for each head the max over queries `j >= i` (own row included), then
/// the mean over heads.
pub fn a_code(tokens: &[TokenStep], i: usize) -> f32 {
    let key = tokens[i].pos;
    let heads = tokens[i..].iter().map(|t| t.attn.len()).max().unwrap_or(0);
    if heads == 0 {
        return 0.0;
    }
    let mut sum = 0.0;
    for h in 0..heads {
        let m = tokens[i..]
            .iter()
            .map(|t| t.attn.get(h).and_then(|row| row.get(key)).copied().unwrap_or(0.0))
            .fold(0.0, f32::max);
        sum += m;
    }
    sum / heads as f32
}

fn mean_entropy(tokens: &[TokenStep], w: &Word) -> f32 {
    let n = w.tokens.len().max(1) as f32;
    tokens[w.tokens.clone()].iter().map(|t| t.entropy).sum::<f32>() / n
}

impl Rind {
    pub fn new(theta: f32, variant: Variant) -> Self {
        let (truncate, lookahead) = match variant {
            Variant::Paper => (Truncate::Token, Lookahead::Sentence { max_tokens: 64 }),
            Variant::Code => (Truncate::Sentence, Lookahead::Tokens(64)),
        };
        Rind { theta, variant, pacing: Pacing::new(truncate, lookahead, variant == Variant::Code), initial: false }
    }

    /// Config keys: `theta` (DRAGIN's `hallucination_threshold`, required), `variant` (`"paper"` | `"code"`),
    /// `truncate` (`"token"` | `"sentence"`, default by variant), `lookahead` (`"sentence"` or a token count,
    /// default by variant) and `max_sentence_tokens` (64), `accept_after_retrieval` (default by variant),
    /// `initial_retrieval` (retrieve with the question first, as FLARE and FL-RAG do; default false, as DRAGIN).
    pub fn from_config(config: &toml::Value) -> Result<Self> {
        let p = Params::new("rind", config)?;
        let theta = p.f32("theta", None)?;
        let variant = match p.choice("variant", &["paper", "code"])?.as_str() {
            "paper" => Variant::Paper,
            _ => Variant::Code,
        };
        let mut r = Rind::new(theta, variant);
        r.pacing = r.pacing.read(&p)?;
        r.initial = p.bool("initial_retrieval", false)?;
        p.finish()?;
        Ok(r)
    }

    /// Paper scores `S_RIND(w)` of the words overlapping the block.
    fn paper_scores(&self, tokens: &[TokenStep], ws: &[Word]) -> Vec<f32> {
        ws.iter()
            .map(|w| {
                let h = mean_entropy(tokens, w);
                let a = w.tokens.clone().map(|i| a_max(tokens, i)).fold(0.0, f32::max);
                let s = if is_content_word(&w.text) { 1.0 } else { 0.0 };
                h * a * s
            })
            .collect()
    }

    /// Code scores `value_w`, normalised within each sentence.
    fn code_scores(&self, tokens: &[TokenStep], ws: &[Word]) -> Vec<f32> {
        let sentences = words::token_sentences(tokens);
        let sent_of = |w: &Word| sentences.iter().position(|s| s.contains(&w.start())).unwrap_or(0);
        let a: Vec<f32> = ws.iter().map(|w| w.tokens.clone().map(|i| a_code(tokens, i)).sum()).collect();
        let mut out = vec![0.0; ws.len()];
        let mut k = 0;
        while k < ws.len() {
            let s = sent_of(&ws[k]);
            let mut e = k;
            while e < ws.len() && sent_of(&ws[e]) == s {
                e += 1;
            }
            let total: f32 = a[k..e].iter().sum();
            let n = (e - k) as f32;
            for m in k..e {
                out[m] = if total > 0.0 { a[m] / total * mean_entropy(tokens, &ws[m]) * n } else { 0.0 };
            }
            k = e;
        }
        out
    }
}

impl Trigger for Rind {
    fn name(&self) -> &str {
        "rind"
    }
    fn lookahead(&self) -> Lookahead {
        self.pacing.lookahead()
    }
    fn reset(&mut self) {
        self.pacing.reset();
    }
    fn before_generation(&mut self, _question: &str) -> bool {
        self.initial
    }
    fn on_retrieval(&mut self) {
        self.pacing.on_retrieval();
    }
    fn judge(&mut self, view: &GenView) -> anyhow::Result<Judgement> {
        let tokens = view.tokens;
        let block_len = tokens.len() - view.new_from;
        if self.pacing.take_accept() {
            return Ok(Judgement::new(Decision::Continue, vec![f32::NAN; block_len]));
        }
        let ws: Vec<Word> = words::words(tokens).into_iter().filter(|w| w.tokens.end > view.new_from).collect();
        let word_scores = match self.variant {
            Variant::Paper => self.paper_scores(tokens, &ws),
            Variant::Code => self.code_scores(tokens, &ws),
        };
        let mut scores = vec![f32::NAN; block_len];
        for (w, s) in ws.iter().zip(&word_scores) {
            for i in w.tokens.clone().filter(|&i| i >= view.new_from) {
                scores[i - view.new_from] = *s;
            }
        }
        let decision = match ws.iter().zip(&word_scores).find(|(_, s)| **s > self.theta) {
            Some((w, _)) => Decision::Retrieve { keep: self.pacing.truncate.keep(tokens, w.start()), at: w.start() },
            None => Decision::Continue,
        };
        Ok(Judgement::new(decision, scores))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: usize = 10; // sequence position of answer token 0

    /// Tokens with entropies, two heads, and attention set by `(from j, to i, head0, head1)` (answer indices).
    fn view_tokens(items: &[(&str, f32)], attn: &[(usize, usize, f32, f32)]) -> Vec<TokenStep> {
        let mut ts: Vec<TokenStep> = items
            .iter()
            .enumerate()
            .map(|(j, (t, h))| TokenStep {
                pos: BASE + j,
                text: t.to_string(),
                entropy: *h,
                prob: 0.5,
                attn: vec![vec![0.0; BASE + j + 1]; 2],
                ..Default::default()
            })
            .collect();
        for &(j, i, h0, h1) in attn {
            ts[j].attn[0][BASE + i] = h0;
            ts[j].attn[1][BASE + i] = h1;
        }
        ts
    }

    /// " Yes ." (kept, judged before) then the block " The Eiff|el was built ." (indices 2..8).
    fn example() -> Vec<TokenStep> {
        let items = [
            (" Yes", 0.2),
            (".", 0.1),
            (" The", 0.5),
            (" Eiff", 2.0),
            ("el", 1.0),
            (" was", 3.0),
            (" built", 1.2),
            (".", 0.1),
        ];
        let attn = [
            (3, 2, 0.2, 0.4),   // Eiff -> The
            (4, 2, 0.5, 0.0),   // el -> The
            (4, 3, 0.6, 0.2),   // el -> Eiff
            (5, 2, 0.05, 0.05), // was -> The
            (5, 4, 0.2, 0.2),   // was -> el
            (6, 3, 0.9, 0.5),   // built -> Eiff
            (6, 4, 0.3, 0.1),   // built -> el
            (6, 5, 0.8, 0.8),   // built -> was
            (7, 3, 0.2, 0.2),   // . -> Eiff
            (7, 5, 0.1, 0.1),   // . -> was
            (7, 6, 0.3, 0.1),   // . -> built
            (7, 7, 0.5, 0.3),   // . -> itself (diagonal)
        ];
        view_tokens(&items, &attn)
    }

    fn close(a: &[f32], b: &[f32]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-5 || (x.is_nan() && y.is_nan()))
    }

    #[test]
    fn paper_rind_product_by_hand() {
        let ts = example();
        // a_max (head mean, max over later tokens):
        //   The(2):  j3 (0.2+0.4)/2=0.3, j4 (0.5+0)/2=0.25, j5 0.05          -> 0.3
        //   Eiff(3): j4 0.4, j6 0.7, j7 0.2                                  -> 0.7
        //   el(4):   j5 0.2, j6 0.2                                          -> 0.2
        //   was(5):  j6 0.8, j7 0.1                                          -> 0.8
        //   built(6): j7 0.2                                                 -> 0.2
        //   .(7):    no later token                                          -> 0
        assert!((a_max(&ts, 2) - 0.3).abs() < 1e-6);
        assert!((a_max(&ts, 4) - 0.2).abs() < 1e-6);
        // words: The  Eiffel(3..5)  was  built  .
        //   H:    0.5 (2.0+1.0)/2=1.5 3.0 1.2   0.1
        //   a:    0.3 max(0.7,0.2)=0.7 0.8 0.2  0
        //   s:    0   1               0   1     0
        //   S:    0   1.05            0   0.24  0
        let mut r = Rind::new(1.0, Variant::Paper);
        let j = r.judge(&GenView { question: "q", tokens: &ts, new_from: 2 }).unwrap();
        assert!(close(&j.scores, &[0.0, 1.05, 1.05, 0.0, 0.24, 0.0]), "{:?}", j.scores);
        // 1.05 > 1.0 at "Eiffel": truncate at the word's first token
        assert_eq!(j.decision, Decision::Retrieve { keep: 3, at: 3 });
        // theta 1.2: Eiffel 1.05 is below; "was" would score 3.0*0.8 = 2.4 but s = 0 (stop word)
        let mut r = Rind::new(1.2, Variant::Paper);
        assert_eq!(r.judge(&GenView { question: "q", tokens: &ts, new_from: 2 }).unwrap().decision, Decision::Continue);
        // a_max only sees tokens decoded so far: with the view ending after "was" (index 5), Eiffel's witnesses
        // are el (0.4 to Eiff, 0.2 to el) and was (0, 0.2): a = 0.4, S = 1.5 * 0.4 = 0.6 <= 1.0, no trigger yet
        let mut r = Rind::new(1.0, Variant::Paper);
        let j = r.judge(&GenView { question: "q", tokens: &ts[..6], new_from: 2 }).unwrap();
        assert_eq!(j.decision, Decision::Continue);
        assert!(close(&j.scores, &[0.0, 0.6, 0.6, 0.0]), "{:?}", j.scores);
    }

    #[test]
    fn code_rind_normalised_per_sentence_by_hand() {
        let ts = example();
        // a_i = mean over heads of (max over j >= i):
        //   The(2):  h0 max(0.2,0.5,0.05)=0.5, h1 max(0.4,0,0.05)=0.4         -> 0.45
        //   Eiff(3): h0 max(0.6,0.9,0.2)=0.9,  h1 max(0.2,0.5,0.2)=0.5         -> 0.7
        //   el(4):   h0 max(0.2,0.3)=0.3,      h1 max(0.2,0.1)=0.2             -> 0.25
        //   was(5):  0.8, 0.8                                                  -> 0.8
        //   built(6): 0.3, 0.1                                                 -> 0.2
        //   .(7):    own row 0.5, 0.3                                          -> 0.4
        assert!((a_code(&ts, 2) - 0.45).abs() < 1e-6);
        assert!((a_code(&ts, 7) - 0.4).abs() < 1e-6);
        // word a (sum of sub-tokens): The 0.45, Eiffel 0.7+0.25=0.95, was 0.8, built 0.2, . 0.4; total 2.8
        // value = a / 2.8 * H * 5 words:
        //   The   0.45/2.8*0.5*5 = 0.4017857
        //   Eiffel 0.95/2.8*1.5*5 = 2.5446429
        //   was   0.8/2.8*3.0*5  = 4.2857143
        //   built 0.2/2.8*1.2*5  = 0.4285714
        //   .     0.4/2.8*0.1*5  = 0.0714286
        let mut r = Rind::new(2.0, Variant::Code);
        let j = r.judge(&GenView { question: "q", tokens: &ts, new_from: 2 }).unwrap();
        let e = [0.4017857, 2.544_643, 2.544_643, 4.285_714, 0.4285714, 0.0714286];
        assert!(close(&j.scores, &e), "{:?}", j.scores);
        // first value > 2.0 is Eiffel (index 3); the code truncates at its sentence start (index 2)
        assert_eq!(j.decision, Decision::Retrieve { keep: 2, at: 3 });
        // theta 3.0: the stop word "was" (4.29) triggers, the code has no content-word factor
        let mut r = Rind::new(3.0, Variant::Code);
        assert_eq!(
            r.judge(&GenView { question: "q", tokens: &ts, new_from: 2 }).unwrap().decision,
            Decision::Retrieve { keep: 2, at: 5 }
        );
    }

    #[test]
    fn code_form_accepts_the_first_sentence_after_a_retrieval() {
        let ts = example();
        let mut r = Rind::new(2.0, Variant::Code);
        assert_eq!(r.lookahead(), Lookahead::Tokens(64));
        r.on_retrieval();
        // one sentence, accepted unjudged (it would trigger: Eiffel 2.54 > 2.0), then back to 64-token blocks
        assert_eq!(r.lookahead(), Lookahead::Sentence { max_tokens: 64 });
        let j = r.judge(&GenView { question: "q", tokens: &ts, new_from: 2 }).unwrap();
        assert_eq!(j.decision, Decision::Continue);
        assert!(j.scores.iter().all(|s| s.is_nan()));
        assert_eq!(r.lookahead(), Lookahead::Tokens(64));
        assert_eq!(
            r.judge(&GenView { question: "q", tokens: &ts, new_from: 2 }).unwrap().decision,
            Decision::Retrieve { keep: 2, at: 3 }
        );
        // the paper form keeps judging
        let mut r = Rind::new(1.0, Variant::Paper);
        r.on_retrieval();
        assert_eq!(
            r.judge(&GenView { question: "q", tokens: &ts, new_from: 2 }).unwrap().decision,
            Decision::Retrieve { keep: 3, at: 3 }
        );
    }

    #[test]
    fn config_reads_variant_and_overrides() {
        let r = Rind::from_config(&toml::from_str("theta = 1.2\nvariant = \"code\"\ntruncate = \"token\"").unwrap())
            .unwrap();
        assert_eq!(
            (r.variant, r.pacing.truncate, r.pacing.lookahead),
            (Variant::Code, Truncate::Token, Lookahead::Tokens(64))
        );
        assert!(r.pacing.accept_after_retrieval);
        let e = Rind::from_config(&toml::from_str("variant = \"paper\"").unwrap()).unwrap_err().to_string();
        assert!(e.contains("config key 'theta': missing (it has no default)"), "{e}");
    }
}
