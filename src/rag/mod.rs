//! The dynamic-RAG decode loop: one loop for every controller. The [`Trigger`] says when to retrieve (judging
//! blocks of fresh tokens with their captured internals), the [`QueryFormer`] what to ask, the [`Retriever`]
//! where from. On a retrieval the loop keeps `tokens[..keep]`, rebuilds the prompt with the new documents and
//! rewinds the KV cache to the longest common token prefix of the old and the new sequence (the few-shot
//! exemplars at least), so only the changed tail is re-encoded; kept answer tokens are re-fed behind the new
//! prompt, which gives them fresh internals under the new context. A new question keeps only the exemplars
//! ([`batch::feed_prompt`]), so its outcome does not depend on the question answered before. A retrieval that
//! would repeat the question's previous one in place (the same `keep`, the same query) is not made: the block is
//! accepted instead ([`LoopConfig::loop_guard`]).

pub mod batch;

use anyhow::Result;

use crate::model::{Lm, Sampler, Session};
use crate::prompt::PromptBuilder;
use crate::query::QueryFormer;
use crate::retrieval::{Passage, Retriever};
use crate::step::TokenStep;
use crate::text::words::{ends_sentence, may_be_inside_a_word};
use crate::trigger::{Decision, GenView, Lookahead, Trigger};
pub use batch::{Batch, Decoder, Lane};

/// Loop settings (from the method config and the dataset).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct LoopConfig {
    /// Passages per retrieval.
    pub top_k: usize,
    /// Cap on retrievals per question (the initial one included).
    pub max_retrievals: usize,
    /// Answer length limit in tokens.
    pub max_new_tokens: usize,
    /// Truncate queries to their last N model tokens (DRAGIN: 64); 0 = no truncation.
    pub query_last_tokens: usize,
    /// Answer pattern; when the generation lacks it, it is appended and `suffix_tokens` more are generated.
    pub answer_pattern: String,
    pub suffix_tokens: usize,
    /// Re-run the model over the whole sequence before each judgement to get the internals, the way DRAGIN's
    /// code does (`output_attentions=True` on a second forward pass), instead of using the ones captured while
    /// decoding. Same decisions, more compute: kept only to measure what capturing saves
    /// (`scripts/bench-eval.sh`).
    #[serde(default)]
    pub recompute_internals: bool,
    /// The loop guard: a retrieval the trigger asks for at the same place (`keep`) with the same query as the
    /// question's previous retrieval is not made; the judged block is accepted instead (as at the cap), and
    /// counted in [`Outcome::loops_guarded`]. Such a retrieval would return the same passages and rebuild the same
    /// prompt and kept answer, so it cannot change the next token: under greedy decoding the model writes the
    /// same tokens again and the trigger fires again on them, in place, until `max_retrievals`. On by default
    /// (`[retrieval] loop_guard`); `false` gives the papers' literal loop. Left out of a run's `config.toml` when
    /// `false`, so that a run made before the guard existed (which ran without it) resumes only with it off.
    #[serde(default, skip_serializing_if = "is_false")]
    pub loop_guard: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl Default for LoopConfig {
    fn default() -> Self {
        LoopConfig {
            top_k: 3,
            max_retrievals: 10,
            max_new_tokens: 128,
            query_last_tokens: 64,
            answer_pattern: "So the answer is".into(),
            suffix_tokens: 20,
            recompute_internals: false,
            loop_guard: crate::config::DEFAULT_LOOP_GUARD,
        }
    }
}

/// One retrieval during a generation.
#[derive(Debug, Clone)]
pub struct Retrieval {
    /// Answer-token index before which the documents took effect.
    pub token_pos: usize,
    pub query: String,
    pub passages: Vec<Passage>,
}

/// What the loop produced for one question.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub text: String,
    pub tokens: Vec<TokenStep>,
    /// Trigger score per answer token (`None` where the trigger gave none).
    pub scores: Vec<Option<f32>>,
    pub retrievals: Vec<Retrieval>,
    /// Tokens the model generated (kept or discarded).
    pub generated_tokens: usize,
    /// Tokens pushed through the model for this question (prompt re-encodings included; the few-shot exemplars'
    /// own pass, made once per session, not), the same in any lane, first in a run or after a resume.
    pub forward_tokens: usize,
    /// Tokens pushed through the extra passes of [`LoopConfig::recompute_internals`].
    pub recompute_tokens: usize,
    /// Retrievals the trigger asked for that [`LoopConfig::loop_guard`] did not make (each would have repeated
    /// the one before it in place).
    pub loops_guarded: usize,
}

/// Strings after which the model has left the answer (it starts another exemplar).
fn left_answer(text: &str) -> bool {
    text.contains("\nQuestion:") || text.contains("\n\n")
}

/// Answers one question.
pub struct RagLoop<'a> {
    pub lm: &'a Lm,
    pub prompt: &'a PromptBuilder,
    pub retriever: Option<&'a dyn Retriever>,
    pub cfg: LoopConfig,
}

impl<'a> RagLoop<'a> {
    /// The tokens of the few-shot exemplars that every prompt starts with, which a session keeps from one question
    /// to the next ([`batch::feed_prompt`]'s anchor). The exemplars' last token is left out: it may merge with
    /// the text that follows it in a prompt. A prompt that does not start with the anchor is encoded whole.
    fn anchor(&self) -> Result<Vec<u32>> {
        let mut ids = self.lm.tokenizer.encode(self.prompt.shared_prefix(), true)?;
        ids.pop();
        Ok(ids)
    }

    async fn rebuild<D: Decoder>(
        &self,
        s: &mut D,
        anchor: &[u32],
        new_question: bool,
        question: &str,
        docs: &[Passage],
        kept: &[u32],
    ) -> Result<batch::Fed> {
        let mut ids = self.lm.tokenizer.encode(&self.prompt.build(question, docs, ""), true)?;
        let prompt_len = ids.len();
        ids.extend_from_slice(kept);
        // re-feed at least the prompt's last token: its logits are what the first answer token was drawn from
        // (its entropy) or what the next step samples from
        batch::feed_prompt(s, anchor, new_question, &ids, prompt_len.saturating_sub(1), prompt_len).await
    }

    /// A second forward pass over the whole sequence in a fresh session, returning the answer tokens with the
    /// internals that pass computed (DRAGIN's way of getting attention; see [`LoopConfig::recompute_internals`]).
    fn recompute<D: Decoder>(&self, s: &D, tokens: Vec<TokenStep>) -> Result<Vec<TokenStep>> {
        let Some(first) = tokens.first() else { return Ok(tokens) };
        let prompt_len = first.pos;
        let mut fresh = self.lm.session();
        // the session may hold one more id than prompt + tokens: a stop token that was fed but not kept
        let ids = s.ids();
        let end = (prompt_len + tokens.len()).min(ids.len());
        let steps = fresh.feed(&ids[..end], prompt_len)?;
        anyhow::ensure!(steps.len() == tokens.len(), "recompute: {} steps for {} tokens", steps.len(), tokens.len());
        Ok(steps)
    }

    fn retrieve(&self, query: &str) -> Result<Vec<Passage>> {
        let Some(r) = self.retriever else { return Ok(vec![]) };
        let q = if self.cfg.query_last_tokens > 0 {
            crate::retrieval::truncate::truncate_to_last_tokens(query, self.cfg.query_last_tokens, |s| {
                self.lm.tokenizer.encode_with_offsets(s).map(|(_, o)| o).unwrap_or_default()
            })
        } else {
            query
        };
        r.search(q, self.cfg.top_k)
    }

    /// Answers `question` in a fresh session.
    pub fn answer(&self, question: &str, trigger: &mut dyn Trigger, qf: &dyn QueryFormer) -> Result<Outcome> {
        let mut s = self.lm.session();
        self.answer_in(&mut s, question, trigger, qf)
    }

    /// Answers `question` reusing `s`, the session of the previous question: the cache is rewound to the few-shot
    /// exemplars, so they are encoded once per run, not once per question. Results equal
    /// [`answer`](Self::answer)'s bit for bit: the exemplars are always encoded as a forward pass of their own
    /// ([`batch::feed_prompt`]), so the kept keys and values are what a fresh session computes.
    pub fn answer_in(
        &self,
        s: &mut Session<'_>,
        question: &str,
        trigger: &mut dyn Trigger,
        qf: &dyn QueryFormer,
    ) -> Result<Outcome> {
        batch::block_on(self.answer_with(s, question, trigger, qf))
    }

    /// Answers `questions` on the lanes of `batch`, one question per lane at a time: lane k judges with
    /// `triggers[k]` (a trigger keeps per-question state, so lanes never share one) and keeps it for the next
    /// question it takes. `done(i, outcome)` takes the outcome of `questions`' i-th (from 0) as each one finishes,
    /// in the order they finish ([`batch::InOrder`] puts them back in input order). Each outcome equals
    /// [`answer_in`](Self::answer_in)'s.
    pub fn answer_on_lanes<'q>(
        &self,
        batch: &Batch<'_>,
        triggers: Vec<Box<dyn Trigger>>,
        qf: &dyn QueryFormer,
        questions: impl IntoIterator<Item = &'q str>,
        mut done: impl FnMut(usize, Result<Outcome>) -> Result<()>,
    ) -> Result<()> {
        let slots = triggers.into_iter().enumerate().map(|(k, t)| (batch.lane(k), t)).collect();
        batch.run_slots(
            1,
            slots,
            questions.into_iter().enumerate(),
            |(mut lane, mut trigger), (i, question)| {
                Box::pin(async move {
                    let o = self.answer_with(&mut lane, question, trigger.as_mut(), qf).await;
                    ((lane, trigger), (i, o))
                })
            },
            |(i, o)| done(i, o),
        )
    }

    /// [`answer_in`](Self::answer_in) on any [`Decoder`]: a [`Session`], or a [`Lane`] of a [`Batch`] that
    /// answers several questions at once (each lane's outcome equals the one-session outcome).
    pub async fn answer_with<D: Decoder>(
        &self,
        s: &mut D,
        question: &str,
        trigger: &mut dyn Trigger,
        qf: &dyn QueryFormer,
    ) -> Result<Outcome> {
        let mut out = Outcome::default();
        let mut sampler = Sampler::greedy();
        let forward0 = s.forward_tokens();
        trigger.reset();
        let mut docs: Vec<Passage> = Vec::new();
        if trigger.before_generation(question) && self.retriever.is_some() {
            let q = qf.initial(question);
            docs = self.retrieve(&q)?;
            out.retrievals.push(Retrieval { token_pos: 0, query: q, passages: docs.clone() });
        }
        let anchor = self.anchor()?;
        // The exemplars (the anchor) are encoded once per session, by whichever question finds them missing; that
        // pass is not counted (`Fed::anchor_pass`).
        let fed = self.rebuild(s, &anchor, true, question, &docs, &[]).await?;
        let mut anchor_passes = fed.anchor_pass;
        let mut tokens = fed.steps;
        let mut scores: Vec<Option<f32>> = Vec::new();
        let mut stopped = false;
        // a token decoded past the answer's last period to see whether it was a decimal point: the next block's first
        let mut peeked = 0;
        while !stopped && tokens.len() < self.cfg.max_new_tokens {
            // generate one block
            let new_from = tokens.len() - std::mem::take(&mut peeked);
            let (max_block, sentence) = match trigger.lookahead() {
                Lookahead::Sentence { max_tokens } => (max_tokens, true),
                Lookahead::Tokens(n) => (n, false),
            };
            let mut texts: Vec<String> = tokens.iter().map(|t| t.text.clone()).collect();
            while tokens.len() - new_from < max_block.max(1) && tokens.len() < self.cfg.max_new_tokens {
                let step = s.step(&mut sampler).await?;
                out.generated_tokens += 1;
                if self.lm.tokenizer.is_stop(step.id) {
                    stopped = true;
                    break;
                }
                texts.push(step.text.clone());
                tokens.push(step);
                let text: String = texts[new_from..].concat();
                if left_answer(&text) {
                    stopped = true;
                    break;
                }
                if sentence && ends_sentence(&texts, texts.len() - 1) {
                    break;
                }
            }
            if tokens.len() == new_from {
                break;
            }
            if self.cfg.recompute_internals {
                tokens = self.recompute(s, tokens)?;
                out.recompute_tokens += s.len();
            }
            let view = GenView { question, tokens: &tokens, new_from };
            let j = trigger.judge(&view)?;
            scores.extend(j.scores.iter().map(|&x| (!x.is_nan()).then_some(x)));
            scores.resize(tokens.len(), None);
            if let Decision::Retrieve { keep, at } = j.decision {
                if self.retriever.is_some() && out.retrievals.len() < self.cfg.max_retrievals {
                    let q = qf.form(&view, at.min(tokens.len() - 1), keep)?;
                    // the same kept answer and the same query (so the same passages) as the previous retrieval:
                    // retrieving would rebuild exactly the context the model just wrote this block under
                    let in_place = out.retrievals.last().is_some_and(|r| r.token_pos == keep && r.query == q);
                    if self.cfg.loop_guard && in_place {
                        // accept the block, as at the cap
                        out.loops_guarded += 1;
                    } else {
                        trigger.on_retrieval();
                        docs = self.retrieve(&q)?;
                        out.retrievals.push(Retrieval { token_pos: keep, query: q, passages: docs.clone() });
                        let kept: Vec<u32> = tokens[..keep.min(tokens.len())].iter().map(|t| t.id).collect();
                        scores.truncate(kept.len());
                        let fed = self.rebuild(s, &anchor, false, question, &docs, &kept).await?;
                        anchor_passes += fed.anchor_pass;
                        tokens = fed.steps;
                        stopped = false;
                        continue;
                    }
                }
            }
            let text: String = tokens.iter().map(|t| t.text.as_str()).collect();
            let last = texts.len() - 1;
            if text.contains(&self.cfg.answer_pattern) && ends_sentence(&texts, last) {
                // the answer sentence is done, unless its period may be inside a word (`$10.` of `$10.5
                // million`, `uc.` of `uc.160+`): then the next token decides, by the same sentence rule; one that
                // continues the word is kept (and judged with the next block), any other ends the answer (dropped,
                // as a stop token)
                if !may_be_inside_a_word(&texts, last) || tokens.len() >= self.cfg.max_new_tokens {
                    break;
                }
                let step = s.step(&mut sampler).await?;
                out.generated_tokens += 1;
                texts.push(step.text.clone());
                if self.lm.tokenizer.is_stop(step.id) || ends_sentence(&texts, last) {
                    break;
                }
                tokens.push(step);
                peeked = 1;
            }
        }
        let mut text: String = tokens.iter().map(|t| t.text.as_str()).collect();
        if crate::prompt::needs_answer_suffix_with(&text, &self.cfg.answer_pattern) && self.cfg.suffix_tokens > 0 {
            // as DRAGIN's evaluation: append the pattern and let the model finish the answer
            let suffix = format!(" {}", self.cfg.answer_pattern);
            let ids = self.lm.tokenizer.encode(&suffix, false)?;
            let start = tokens.len();
            let mut all: Vec<u32> = tokens.iter().map(|t| t.id).collect();
            all.extend(&ids);
            let fed = self.rebuild(s, &anchor, false, question, &docs, &all).await?;
            anchor_passes += fed.anchor_pass;
            tokens = fed.steps;
            for _ in 0..self.cfg.suffix_tokens {
                let step = s.step(&mut sampler).await?;
                out.generated_tokens += 1;
                if self.lm.tokenizer.is_stop(step.id) {
                    break;
                }
                tokens.push(step);
                let t: String = tokens[start..].iter().map(|t| t.text.as_str()).collect();
                if t.contains('\n') || t.trim_end().ends_with('.') {
                    break;
                }
            }
            text = tokens.iter().map(|t| t.text.as_str()).collect();
        }
        scores.resize(tokens.len(), None);
        out.text = text;
        out.tokens = tokens;
        out.scores = scores;
        out.forward_tokens = s.forward_tokens() - forward0 - anchor_passes;
        Ok(out)
    }
}
