//! Algorithm 2 of the paper: Auto-RAG answering a question by talking to the retriever, and [`ChatGen`], the
//! chat-turn generator synthesis shares.
//!
//! Per question (as the authors' `autorag.py`, with its defaults T = 10, T_PK = 5, k = 2):
//!
//! 1. The dialogue starts with the system prompt, the few-shot exemplar turns when `fewshot` is on (the base
//!    model, the paper's "w/o training" row; see [`super::prompts`]) and `Question: <q>`.
//! 2. The model writes a turn (greedy, at most `max_new_tokens`, cut where the query or final-answer line ends,
//!    [`super::prompts::turn_end`]). With a `Final Answer:` the answer is the rest of that line and the loop
//!    stops. With a query (`... Query:`), up to `top_k` passages not shown before in this dialogue are retrieved
//!    and fed back as `Retrieved Document_t: ...`. A turn with neither re-uses the previous query (the question
//!    at first), as the authors' code does.
//! 3. After T retrievals the model writes one more turn. While it still ends with a query and fewer than T_PK
//!    pseudo-documents were made, the model writes a parametric pseudo-document for that query
//!    (`parametric_knowledge.txt`, in a separate session, one line) and it is fed as the next document.
//! 4. If no final answer came, the answer is forced: the last turn is extended with `\n\nFinal Answer:` and the
//!    model completes that line. (The authors' code returns an empty answer there.)
//!
//! A prompt that would not fit the model's positions ends the dialogue as in step 4 (or with an empty answer
//! when even that does not fit); [`InferOutcome::context_full`] records it.

use std::collections::HashSet;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::dialogue::Turn;
use super::prompts::{self, AutoRagPrompts};
use crate::model::tokenizer::Message;
use crate::model::{Lm, Sampler, Session};
use crate::rag::batch::{block_on, common_prefix, feed_prompt, Decoder};
use crate::retrieval::{Passage, Retriever};

/// Largest position the engine accepts (RoPE table: the model's limit, at most 32768).
fn max_positions(lm: &Lm) -> usize {
    lm.config.max_position_embeddings.min(32768)
}

/// Generates chat turns on one decoder (a [`Session`], or a lane of a [`crate::rag::batch::Batch`]), re-using
/// the cached prefix of the previous prompt (the system prompt and few-shot exemplars are encoded once; a
/// dialogue's next turn feeds only the new messages).
///
/// With an anchor ([`ChatGen::anchor`]), the first prompt after [`ChatGen::begin_job`] keeps only the anchor of
/// what the decoder cached ([`feed_prompt`]): a question's numbers then do not depend on which questions the
/// decoder answered before, so answering on the lanes of a batch gives what answering one by one gives.
pub struct ChatGen<'l, D: Decoder = Session<'l>> {
    pub lm: &'l Lm,
    pub decoder: D,
    anchor: Option<Vec<u32>>,
    new_job: bool,
    /// Tokens generated (all calls).
    pub generated: usize,
    /// Tokens of the anchor's own passes (see [`ChatGen::forward_tokens`]).
    anchor_passes: usize,
    /// Generated tokens with the entropy of the distribution each was drawn from (all calls), for traces.
    pub trace: Vec<(String, f32)>,
}

impl<'l> ChatGen<'l, Session<'l>> {
    pub fn new(lm: &'l Lm) -> Self {
        ChatGen::on(lm, lm.session())
    }

    /// [`ChatGen::complete_async`] on a session, which never waits.
    pub fn complete(
        &mut self,
        messages: &[Message],
        prefix: &str,
        max_new: usize,
        sampler: &mut Sampler,
        end: &dyn Fn(&str) -> Option<usize>,
    ) -> Result<Option<String>> {
        block_on(self.complete_async(messages, prefix, max_new, sampler, end))
    }
}

impl<'l, D: Decoder> ChatGen<'l, D> {
    pub fn on(lm: &'l Lm, decoder: D) -> Self {
        ChatGen { lm, decoder, anchor: None, new_job: false, generated: 0, anchor_passes: 0, trace: Vec::new() }
    }

    /// The tokens every job's first prompt starts with, if set.
    pub fn anchor(&self) -> Option<&[u32]> {
        self.anchor.as_deref()
    }

    pub fn set_anchor(&mut self, anchor: Vec<u32>) {
        self.anchor = Some(anchor);
    }

    /// The next prompt starts a new job (a question): of the cache it keeps only the anchor.
    pub fn begin_job(&mut self) {
        self.new_job = true;
    }

    /// Tokens the model has run forward on this decoder (prefill + decode), less the anchor's own passes: the
    /// anchor is encoded once per decoder, by whichever job finds it missing, so leaving it out makes a job's
    /// count the same whether it ran first, after a resume, or on any lane of a batch (as the RAG loop counts).
    pub fn forward_tokens(&self) -> usize {
        self.decoder.forward_tokens() - self.anchor_passes
    }

    /// Renders `messages` with the chat template, opens an assistant turn, appends `prefix` (text the turn
    /// starts with), and generates until a stop token, `max_new` tokens, or `end(text)` returns the length to
    /// keep. Returns the generated text (without `prefix`), or `None` when the prompt plus `max_new` does not fit
    /// the model's positions (nothing is run then).
    pub async fn complete_async(
        &mut self,
        messages: &[Message],
        prefix: &str,
        max_new: usize,
        sampler: &mut Sampler,
        end: &dyn Fn(&str) -> Option<usize>,
    ) -> Result<Option<String>> {
        let lm = self.lm;
        let mut prompt = lm.tokenizer.apply_chat_template(messages, true);
        prompt.push_str(prefix);
        let ids = lm.tokenizer.encode(&prompt, true)?;
        if ids.len() + max_new > max_positions(lm) {
            return Ok(None);
        }
        // at least the last prompt token is fed, for the distribution of the first new one
        let anchor = self.anchor.as_deref().unwrap_or(&[]);
        let fed = feed_prompt(&mut self.decoder, anchor, self.new_job, &ids, ids.len() - 1, ids.len()).await?;
        self.anchor_passes += fed.anchor_pass;
        self.new_job = false;
        let mut text = String::new();
        for _ in 0..max_new {
            let s = self.decoder.step(sampler).await?;
            self.generated += 1;
            if lm.tokenizer.is_stop(s.id) {
                break;
            }
            self.trace.push((s.text.clone(), s.entropy));
            text.push_str(&s.text);
            if let Some(e) = end(&text) {
                text.truncate(e);
                break;
            }
        }
        Ok(Some(text))
    }
}

/// End of a one-line answer or pseudo-document: the first newline after some text.
pub fn line_end(text: &str) -> Option<usize> {
    let lead = text.len() - text.trim_start().len();
    text[lead..].find('\n').map(|i| lead + i)
}

/// Algorithm 2's settings (`[autorag]` in configs/autorag.toml).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InferConfig {
    /// T: retrievals before the parametric phase (authors' code: 10).
    pub max_iter: usize,
    /// T_PK: parametric pseudo-documents at most (authors' code: `elicit_max_iter` 5).
    pub max_pk: usize,
    /// k: new passages per retrieval (authors' code: `max_passages` 2).
    pub top_k: usize,
    /// Token limit of one model turn (authors' code: 200).
    pub max_new_tokens: usize,
    /// Token limit of a pseudo-document (authors' code: 200, one line).
    pub pseudo_doc_tokens: usize,
    /// Token limit of a forced final answer.
    pub answer_tokens: usize,
    /// Put the reasoning exemplars before the question (the base model, "w/o training").
    pub fewshot: bool,
    /// Reasoning exemplar set: `2wikimultihopqa` or `nq`.
    pub reasoning: String,
}

impl Default for InferConfig {
    fn default() -> Self {
        InferConfig {
            max_iter: 10,
            max_pk: 5,
            top_k: 2,
            max_new_tokens: 200,
            pseudo_doc_tokens: 200,
            answer_tokens: 32,
            fewshot: true,
            reasoning: "2wikimultihopqa".into(),
        }
    }
}

/// One retrieval (or pseudo-document) of a dialogue.
#[derive(Debug, Clone)]
pub struct InferRetrieval {
    /// Tokens the model had generated for this question when it happened.
    pub token_pos: usize,
    pub query: String,
    /// The passages shown (new ones only); for a pseudo-document, one passage with id `parametric-N`.
    pub passages: Vec<Passage>,
    pub pseudo: bool,
}

/// What answering one question produced.
#[derive(Debug, Clone, Default)]
pub struct InferOutcome {
    pub answer: String,
    /// The dialogue in x_t / y_t form (x_0 = the question).
    pub turns: Vec<Turn>,
    pub retrievals: Vec<InferRetrieval>,
    /// The answer was forced after the loop (no `Final Answer:` written by the model).
    pub forced: bool,
    /// A prompt did not fit the model's positions.
    pub context_full: bool,
    pub generated_tokens: usize,
    pub forward_tokens: usize,
}

impl InferOutcome {
    /// The dialogue as text (`role: content` blocks), for `raw_output` in run directories.
    pub fn transcript(&self) -> String {
        let mut s = String::new();
        for t in &self.turns {
            s.push_str(&format!("[user] {}\n[assistant] {}\n", t.input, t.output));
        }
        s
    }
}

/// Answers questions with Algorithm 2.
pub struct AutoRag<'a> {
    pub lm: &'a Lm,
    pub retriever: &'a dyn Retriever,
    pub prompts: &'a AutoRagPrompts,
    pub cfg: InferConfig,
}

impl<'a> AutoRag<'a> {
    fn messages(&self, prefix: &[Message], turns: &[Turn]) -> Vec<Message> {
        prompts::dialogue_messages(Some(prompts::SYSTEM_PROMPT), prefix, turns)
    }

    /// The anchors of the dialogue's and the pseudo-document's prompts: the tokens every question's first prompt
    /// starts with (the system prompt and exemplars; the parametric prompt's opening), found as the common
    /// prefix of the prompts of two made-up questions.
    fn anchors(&self) -> Result<(Vec<u32>, Vec<u32>)> {
        let tok = &self.lm.tokenizer;
        let prefix = if self.cfg.fewshot { self.prompts.fewshot_messages() } else { vec![] };
        let encode = |m: &[Message]| tok.encode(&tok.apply_chat_template(m, true), true);
        let first = |q: &str| {
            encode(&self.messages(&prefix, &[Turn { input: prompts::question_input(q), output: String::new() }]))
        };
        let pseudo = |q: &str| encode(&[Message::new("user", self.prompts.parametric_prompt(q, q))]);
        let (a, b) = (first("x")?, first("y")?);
        let (c, d) = (pseudo("x")?, pseudo("y")?);
        Ok((a[..common_prefix(&a, &b)].to_vec(), c[..common_prefix(&c, &d)].to_vec()))
    }

    /// Answers `question`: `main` carries the dialogue (reuse it across questions: the exemplar prefix stays
    /// cached), `aux` the pseudo-document prompts.
    pub fn answer(&self, main: &mut ChatGen<'_>, aux: &mut ChatGen<'_>, question: &str) -> Result<InferOutcome> {
        block_on(self.answer_with(main, aux, question))
    }

    /// [`AutoRag::answer`] on any decoders: on the lanes of a batch, one pair per lane, the same outcome as on
    /// sessions of their own.
    pub async fn answer_with<M: Decoder, X: Decoder>(
        &self,
        main: &mut ChatGen<'_, M>,
        aux: &mut ChatGen<'_, X>,
        question: &str,
    ) -> Result<InferOutcome> {
        if main.anchor().is_none() || aux.anchor().is_none() {
            let (m, a) = self.anchors()?;
            main.set_anchor(m);
            aux.set_anchor(a);
        }
        main.begin_job();
        aux.begin_job();
        let cfg = &self.cfg;
        let prefix = if cfg.fewshot { self.prompts.fewshot_messages() } else { vec![] };
        let (gen0, fwd0) = (main.generated + aux.generated, main.forward_tokens() + aux.forward_tokens());
        let mut out = InferOutcome {
            turns: vec![Turn { input: prompts::question_input(question), output: String::new() }],
            ..Default::default()
        };
        let mut greedy = Sampler::greedy();
        let mut shown: HashSet<String> = HashSet::new();
        let mut last_query = question.trim().to_string();
        let mut answer: Option<String> = None;
        let mut iter = 0usize;
        let mut last = prompts::ParsedTurn::default();

        // retrieval phase
        loop {
            let Some(p) = self.turn(main, &prefix, &mut out, &mut greedy).await? else { break };
            last = p;
            if let Some(a) = &last.answer {
                answer = Some(a.clone());
                break;
            }
            if iter >= cfg.max_iter {
                break;
            }
            if let Some(q) = &last.query {
                last_query = q.clone();
            }
            iter += 1;
            let docs = self.retriever.search_excluding(&last_query, cfg.top_k, &shown)?;
            shown.extend(docs.iter().map(|p| p.id.clone()));
            out.retrievals.push(InferRetrieval {
                token_pos: main.generated + aux.generated - gen0,
                query: last_query.clone(),
                passages: docs.clone(),
                pseudo: false,
            });
            out.turns.push(Turn { input: prompts::documents_input(iter, &docs), output: String::new() });
        }

        // parametric phase
        let mut pk = 0;
        while answer.is_none() && !out.context_full && pk < cfg.max_pk {
            let Some(q) = last.query.clone() else { break };
            let p = [Message::new("user", self.prompts.parametric_prompt(question.trim(), &q))];
            let Some(doc) = aux.complete_async(&p, "", cfg.pseudo_doc_tokens, &mut greedy, &line_end).await? else {
                break;
            };
            let doc = doc.trim().to_string();
            pk += 1;
            iter += 1;
            out.retrievals.push(InferRetrieval {
                token_pos: main.generated + aux.generated - gen0,
                query: q,
                passages: vec![Passage {
                    id: format!("parametric-{pk}"),
                    title: String::new(),
                    text: doc.clone(),
                    score: 0.0,
                }],
                pseudo: true,
            });
            out.turns.push(Turn { input: prompts::pseudo_document_input(iter, &doc), output: String::new() });
            let Some(p) = self.turn(main, &prefix, &mut out, &mut greedy).await? else { break };
            last = p;
            if let Some(a) = &last.answer {
                answer = Some(a.clone());
            }
        }

        // forced answer
        if answer.is_none() {
            out.forced = true;
            let last_turn = out.turns.last().cloned().unwrap();
            let mut turns = out.turns.clone();
            turns.last_mut().unwrap().output = String::new();
            let msgs = self.messages(&prefix, &turns);
            let open = if last_turn.output.is_empty() {
                "Final Answer:".to_string()
            } else {
                format!("{}\n\nFinal Answer:", last_turn.output)
            };
            let a = main.complete_async(&msgs, &open, cfg.answer_tokens, &mut greedy, &line_end).await?;
            match a {
                Some(a) => {
                    let a = a.trim().trim_end_matches('.').trim().to_string();
                    out.turns.last_mut().unwrap().output = format!("{open} {a}");
                    answer = Some(a);
                }
                None => out.context_full = true,
            }
        }
        out.answer = answer.unwrap_or_default();
        out.generated_tokens = main.generated + aux.generated - gen0;
        out.forward_tokens = main.forward_tokens() + aux.forward_tokens() - fwd0;
        Ok(out)
    }

    /// One model turn on the current dialogue, parsed; `None` when the context is full.
    async fn turn<D: Decoder>(
        &self,
        main: &mut ChatGen<'_, D>,
        prefix: &[Message],
        out: &mut InferOutcome,
        greedy: &mut Sampler,
    ) -> Result<Option<prompts::ParsedTurn>> {
        let msgs = self.messages(prefix, &out.turns);
        let Some(text) = main.complete_async(&msgs, "", self.cfg.max_new_tokens, greedy, &prompts::turn_end).await?
        else {
            out.context_full = true;
            return Ok(None);
        };
        let text = text.trim().to_string();
        let p = prompts::parse_turn(&text);
        out.turns.last_mut().unwrap().output = text;
        Ok(Some(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_end_skips_leading_newlines() {
        assert_eq!(line_end("\n Paris.\nmore"), Some(8));
        assert_eq!(line_end("Paris"), None);
        assert_eq!(line_end("  \n\n"), None);
    }
}
