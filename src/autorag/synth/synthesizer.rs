//! Algorithm 1 on one question (see the [`super`] doc): the teacher's reasoning turns, candidate queries and
//! the sub-answer filter, the stop rule, and the checks that decide whether the dialogue is kept.

use std::collections::HashSet;

use anyhow::Result;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{Attempt, SynthConfig};
use crate::autorag::dialogue::{Dialogue, Turn};
use crate::autorag::filter::{self, SubAnswer};
use crate::autorag::infer::{line_end, ChatGen};
use crate::autorag::prompts::{self, AutoRagPrompts, Next};
use crate::autorag::stop::{self, StopDecision};
use crate::eval::metrics::normalize_answer;
use crate::model::tokenizer::Message;
use crate::model::{Sampler, Session};
use crate::qa::Example;
use crate::rag::batch::{block_on, common_prefix, Decoder};
use crate::retrieval::{Passage, Retriever};

/// Synthesizes dialogues with Algorithm 1.
pub struct Synthesizer<'a> {
    pub retriever: &'a dyn Retriever,
    pub prompts: &'a AutoRagPrompts,
    pub cfg: SynthConfig,
    /// Dataset name recorded in each dialogue.
    pub dataset: String,
}

/// FNV-1a of a question id: mixes the question into the seed.
fn id_hash(id: &str) -> u64 {
    id.bytes().fold(0xcbf29ce484222325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100000001b3))
}

fn clean_query(text: &str) -> String {
    let line = text.trim().lines().next().unwrap_or("").trim();
    let re = regex::Regex::new(r"(?i)^(?:(?:initial |refined )?query:)\s*").unwrap();
    re.replace(line, "").trim().trim_matches('"').trim().to_string()
}

/// Whether the reasoning says nothing beyond its label.
fn empty_reasoning(r: &str) -> bool {
    let re = regex::Regex::new(r"^(?:Analysis:|Intermediate Answer_\d+:)").unwrap();
    re.replace(r.trim(), "").trim().is_empty()
}

impl<'a> Synthesizer<'a> {
    fn messages(&self, turns: &[Turn]) -> Vec<Message> {
        prompts::dialogue_messages(Some(prompts::SYSTEM_PROMPT), &self.prompts.fewshot_messages(), turns)
    }

    /// The anchors of the teacher's and the query model's prompts (see [`ChatGen`]): the tokens every
    /// question's first prompt starts with, found as the common prefix of the prompts of two made-up questions.
    fn anchors<T: Decoder, Q: Decoder>(
        &self,
        tgen: &ChatGen<'_, T>,
        qgen: &ChatGen<'_, Q>,
    ) -> Result<(Vec<u32>, Vec<u32>)> {
        let common = |lm: &crate::model::Lm, a: &[Message], b: &[Message]| -> Result<Vec<u32>> {
            let enc = |m: &[Message]| lm.tokenizer.encode(&lm.tokenizer.apply_chat_template(m, true), true);
            let (a, b) = (enc(a)?, enc(b)?);
            Ok(a[..common_prefix(&a, &b)].to_vec())
        };
        let first = |q: &str| self.messages(&[Turn { input: prompts::question_input(q), output: String::new() }]);
        let rewrite =
            |q: &str| [Message::new("user", self.prompts.rewrite_prompt(q, q, self.cfg.rewrite == "fewshot"))];
        Ok((common(tgen.lm, &first("x"), &first("y"))?, common(qgen.lm, &rewrite("x"), &rewrite("y"))?))
    }

    /// Candidate queries for iteration t: the teacher's own, then sampled rewrites.
    async fn candidates<Q: Decoder>(
        &self,
        qgen: &mut ChatGen<'_, Q>,
        rng: &mut StdRng,
        ex: &Example,
        analysis: &str,
        own: Option<&str>,
    ) -> Result<Vec<String>> {
        let n = self.cfg.candidates.max(1);
        let mut out: Vec<String> = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        if let Some(q) = own.filter(|_| self.cfg.include_model_query) {
            let q = clean_query(q);
            if !q.is_empty() && seen.insert(normalize_answer(&q)) {
                out.push(q);
            }
        }
        let few = self.cfg.rewrite == "fewshot";
        let prompt = [Message::new("user", self.prompts.rewrite_prompt(ex.question.trim(), analysis, few))];
        let mut draws = 0;
        while out.len() < n && draws < 2 * n {
            draws += 1;
            let mut s = Sampler::new(self.cfg.query_temperature, self.cfg.query_top_p, rng.random::<u64>());
            let Some(text) = qgen.complete_async(&prompt, "", self.cfg.query_tokens, &mut s, &line_end).await? else {
                break;
            };
            let q = clean_query(&text);
            if !q.is_empty() && seen.insert(normalize_answer(&q)) {
                out.push(q);
            }
        }
        if out.is_empty() {
            out.push(ex.question.trim().to_string());
        }
        Ok(out)
    }

    /// Runs Algorithm 1 on one question: `tgen` is the teacher's session, `qgen` the query model's.
    /// One question through Algorithm 1, sampled up to `cfg.samples` times (rejection sampling): the first
    /// sample kept, else the last one, with the tokens and seconds of all of them and why each earlier one was
    /// dropped.
    pub fn synthesize(
        &self,
        tgen: &mut ChatGen<'_>,
        qgen: &mut ChatGen<'_, Session<'_>>,
        ex: &Example,
    ) -> Result<(Attempt, Option<Dialogue>)> {
        block_on(self.synthesize_with(tgen, qgen, ex))
    }

    /// [`Synthesizer::synthesize`] on any decoders: on the lanes of a batch, the attempt and dialogue of a
    /// session of their own. Each sample starts a new job on both generators (keeping only their anchors).
    pub async fn synthesize_with<T: Decoder, Q: Decoder>(
        &self,
        tgen: &mut ChatGen<'_, T>,
        qgen: &mut ChatGen<'_, Q>,
        ex: &Example,
    ) -> Result<(Attempt, Option<Dialogue>)> {
        if tgen.anchor().is_none() || qgen.anchor().is_none() {
            let (t, q) = self.anchors(tgen, qgen)?;
            tgen.set_anchor(t);
            qgen.set_anchor(q);
        }
        let (mut tokens, mut seconds, mut rejected) = (0, 0.0, Vec::new());
        let samples = self.cfg.samples.max(1);
        for k in 0..samples {
            tgen.begin_job();
            qgen.begin_job();
            let (mut a, d) = self.sample(tgen, qgen, ex, k).await?;
            tokens += a.generated_tokens;
            seconds += a.seconds;
            if a.kept || k + 1 == samples {
                (a.generated_tokens, a.seconds, a.sample, a.samples) = (tokens, seconds, k, k + 1);
                a.rejected = rejected;
                return Ok((a, d));
            }
            rejected.push(a.reason);
        }
        unreachable!("samples >= 1")
    }

    /// Sample `k` of a question: its own seed (sample 0's is that of a run without rejection sampling).
    async fn sample<T: Decoder, Q: Decoder>(
        &self,
        tgen: &mut ChatGen<'_, T>,
        qgen: &mut ChatGen<'_, Q>,
        ex: &Example,
        k: usize,
    ) -> Result<(Attempt, Option<Dialogue>)> {
        let t0 = std::time::Instant::now();
        let gen0 = tgen.generated + qgen.generated;
        let cfg = &self.cfg;
        // sample k > 0: the seed mixed with k by SplitMix64's increment, so samples never share a stream
        let mix = (k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut rng = StdRng::seed_from_u64(cfg.seed ^ id_hash(&ex.id) ^ mix);
        let mut reasoner = Sampler::new(cfg.reasoning_temperature, 1.0, rng.random::<u64>());
        let mut turns = vec![Turn { input: prompts::question_input(&ex.question), output: String::new() }];
        let mut queries: Vec<String> = Vec::new();
        let mut subs: Vec<Option<SubAnswer>> = Vec::new();
        let mut shown: HashSet<String> = HashSet::new();
        // the content words of the question and of the passages shown so far, and whether a chosen query was not a
        // search
        let mut known = filter::content_words(&ex.question);
        let mut malformed = false;
        let mut context_full = false;
        let mut empty = false;
        let mut forced = false;
        let mut answer: Option<String> = None;

        // R_0
        let msgs = self.messages(&turns);
        let mut parsed =
            match tgen.complete_async(&msgs, "", cfg.max_new_tokens, &mut reasoner, &prompts::turn_end).await? {
                Some(t) => prompts::parse_turn(&t),
                None => {
                    context_full = true;
                    prompts::ParsedTurn::default()
                }
            };
        let mut t = 0usize;
        if !context_full {
            loop {
                if empty_reasoning(&parsed.reasoning) {
                    empty = true;
                }
                let decision = if t == 0 {
                    // R_0 plans: continue unless it answered outright
                    match &parsed.answer {
                        Some(a) => StopDecision::Answer(a.clone()),
                        None => StopDecision::Continue,
                    }
                } else {
                    stop::decide(&parsed.reasoning, parsed.query.as_deref(), parsed.answer.as_deref())
                };
                let r = parsed.reasoning.clone();
                match decision {
                    StopDecision::Answer(a) => {
                        turns.last_mut().unwrap().output = prompts::model_output(t, &r, Next::Answer(&a));
                        answer = Some(a);
                        break;
                    }
                    StopDecision::Continue if t < cfg.max_iter => {}
                    _ => {
                        // no information need, or T reached: force the answer
                        forced = true;
                        let open = prompts::model_output(t, &r, Next::Answer("")).trim_end().to_string();
                        let msgs = self.messages(&turns); // ends with x_t: y_t is not set yet
                        match tgen.complete_async(&msgs, &open, cfg.answer_tokens, &mut reasoner, &line_end).await? {
                            Some(a) => {
                                let a = a.trim().trim_end_matches('.').trim().to_string();
                                turns.last_mut().unwrap().output = prompts::model_output(t, &r, Next::Answer(&a));
                                answer = Some(a);
                            }
                            None => context_full = true,
                        }
                        break;
                    }
                }
                // iteration t + 1: candidates, sub-answer filter, documents, R_{t+1}
                let cands = self.candidates(qgen, &mut rng, ex, &r, parsed.query.as_deref()).await?;
                let docs: Vec<Vec<Passage>> = cands
                    .iter()
                    .map(|q| self.retriever.search_excluding(q, cfg.top_k, &shown))
                    .collect::<Result<_>>()?;
                // a malformed candidate is taken only when every candidate is
                let allowed = filter::well_formed(&cands, &known);
                let (pick, sub) = match filter::first_with_sub_answer(ex, &docs, &allowed) {
                    Some((i, s)) => (i, Some(s)),
                    None => (allowed[rng.random_range(0..allowed.len())], None),
                };
                let q = cands[pick].clone();
                malformed |= filter::malformed_query(&q, &known);
                turns.last_mut().unwrap().output = prompts::model_output(t, &r, Next::Query(&q));
                shown.extend(docs[pick].iter().map(|p| p.id.clone()));
                for p in &docs[pick] {
                    known.extend(filter::content_words(&p.title));
                    known.extend(filter::content_words(&p.text));
                }
                queries.push(q);
                subs.push(sub);
                t += 1;
                turns.push(Turn { input: prompts::documents_input(t, &docs[pick]), output: String::new() });
                let msgs = self.messages(&turns);
                match tgen.complete_async(&msgs, "", cfg.max_new_tokens, &mut reasoner, &prompts::turn_end).await? {
                    Some(text) => parsed = prompts::parse_turn(&text),
                    None => {
                        context_full = true;
                        break;
                    }
                }
            }
        }
        let final_answer = answer.clone().unwrap_or_default();
        let repeated = {
            let mut seen = HashSet::new();
            !queries.iter().all(|q| seen.insert(normalize_answer(q)))
        };
        let correct =
            !final_answer.is_empty() && filter::answer_matches(&final_answer, &ex.answers, cfg.max_answer_words);
        // correctness first, then the quality filters, so stats tell correct-but-filtered dialogues apart
        let reason = if context_full {
            "context_full"
        } else if final_answer.is_empty() {
            "no_answer"
        } else if !correct {
            "wrong_answer"
        } else if empty {
            "empty_reasoning"
        } else if cfg.drop_malformed_queries && malformed {
            "malformed_query"
        } else if cfg.drop_repeated_queries && repeated {
            "repeated_query"
        } else {
            "kept"
        };
        let kept = reason == "kept";
        let attempt = Attempt {
            id: ex.id.clone(),
            kept,
            reason: reason.to_string(),
            iterations: queries.len(),
            queries,
            sub_answers: subs,
            forced_answer: forced,
            final_answer: final_answer.clone(),
            answer_correct: correct,
            generated_tokens: tgen.generated + qgen.generated - gen0,
            seconds: t0.elapsed().as_secs_f64(),
            sample: k,
            samples: k + 1,
            rejected: vec![],
        };
        let dialogue = kept.then(|| Dialogue {
            id: ex.id.clone(),
            dataset: self.dataset.clone(),
            question: ex.question.clone(),
            answers: ex.answers.clone(),
            iterations: attempt.iterations,
            turns,
            final_answer,
        });
        Ok((attempt, dialogue))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_cleaning() {
        assert_eq!(clean_query(" Query: \"Karl Freund\"\nmore"), "Karl Freund");
        assert_eq!(clean_query("Refined Query: X y"), "X y");
        assert_eq!(clean_query("\n"), "");
        assert!(empty_reasoning("Intermediate Answer_2: "));
        assert!(!empty_reasoning("Analysis: need X"));
    }
}
