//! `flare-masked` — FLARE's masked query (Jiang et al., 2023, Section 3.2.2): the look-ahead sentence with
//! every token of probability `< β` removed ("masked out", so an uncertain wrong fact does not steer
//! retrieval). The sentence is the one holding the triggering token `at` (for the `flare` trigger: the
//! draft). `β = 0.4` by default. A masked token leaves a space (so `in` + ` 18` + `89` gives `in 89`, not
//! `in89`). If everything is masked the query is the question; `with_question = true`
//! prepends the question (not in the paper; off by default).

use anyhow::Result;

use super::QueryFormer;
use crate::text::words;
use crate::trigger::params::Params;
use crate::trigger::GenView;

/// The look-ahead sentence without its low-probability tokens.
#[derive(Debug, Clone)]
pub struct FlareMasked {
    beta: f32,
    with_question: bool,
}

impl FlareMasked {
    pub fn new(beta: f32, with_question: bool) -> Self {
        FlareMasked { beta, with_question }
    }

    /// Config keys: `beta` (default 0.4), `with_question` (default false).
    pub fn from_config(config: &toml::Value) -> Result<Self> {
        let p = Params::new("flare-masked", config)?;
        let beta = p.f32("beta", Some(0.4))?;
        let with_question = p.bool("with_question", false)?;
        p.finish()?;
        Ok(FlareMasked::new(beta, with_question))
    }
}

impl QueryFormer for FlareMasked {
    fn name(&self) -> &str {
        "flare-masked"
    }
    fn form(&self, view: &GenView, at: usize, _keep: usize) -> anyhow::Result<String> {
        if view.tokens.is_empty() {
            return Ok(view.question.to_string());
        }
        let at = at.min(view.tokens.len() - 1);
        let span = words::sentence_of(view.tokens, at);
        // a masked token leaves a space, so its neighbours do not glue together ("in" + "89")
        let kept: String =
            view.tokens[span].iter().map(|t| if t.prob >= self.beta { t.text.as_str() } else { " " }).collect();
        let masked = kept.split_whitespace().collect::<Vec<_>>().join(" ");
        Ok(super::with_question(view.question, masked, self.with_question))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step::TokenStep;

    #[test]
    fn masks_tokens_below_beta_in_the_draft_sentence() {
        // kept " The tower is tall." then the draft " It opened in 18|89 in Rome ."
        let items = [
            (" The", 0.9),
            (" tower", 0.9),
            (" is", 0.9),
            (" tall", 0.1),
            (".", 0.9),
            (" It", 0.95),
            (" opened", 0.9),
            (" in", 0.85),
            (" 18", 0.3),
            ("89", 0.5),
            (" in", 0.9),
            (" Rome", 0.2),
            (".", 0.99),
        ];
        let ts: Vec<TokenStep> =
            items.iter().map(|(t, p)| TokenStep { text: t.to_string(), prob: *p, ..Default::default() }).collect();
        let v = GenView { question: "When did it open?", tokens: &ts, new_from: 5 };
        // beta 0.4 removes " 18" (0.3) and " Rome" (0.2); "89" (0.5) stays; the kept sentence is untouched
        assert_eq!(FlareMasked::new(0.4, false).form(&v, 8, 5).unwrap(), "It opened in 89 in .");
        assert_eq!(FlareMasked::new(0.4, true).form(&v, 8, 5).unwrap(), "When did it open? It opened in 89 in .");
        // beta 0.96 masks everything but the final "." (0.99)
        assert_eq!(FlareMasked::new(0.96, false).form(&v, 8, 5).unwrap(), ".");
        assert_eq!(FlareMasked::new(1.0, false).form(&v, 8, 5).unwrap(), "When did it open?");
    }
}
