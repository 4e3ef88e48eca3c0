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

/// The samples of one question (rejection sampling, [`SynthConfig::samples`] and [`SynthConfig::keep`]), taken in
/// order: a sample that passed every filter is kept unless its queries (SQuAD-normalised) are those of a
/// sample kept before (`duplicate_dialogue`: it would teach nothing new), until `keep` are kept.
///
/// The record is the first kept sample (or the last sample when none passed), with the tokens and seconds of
/// every sample, how many were tried, the indices of the kept ones when more than one, and why each other
/// sample was dropped, in order.
pub struct Samples {
    keep: usize,
    record: Option<Attempt>,
    dialogues: Vec<Dialogue>,
    kept_samples: Vec<usize>,
    kept_queries: HashSet<Vec<String>>,
    rejected: Vec<String>,
    tried: usize,
    tokens: usize,
    forward: usize,
    seconds: f64,
}

impl Samples {
    pub fn new(keep: usize) -> Self {
        Samples {
            keep: keep.max(1),
            record: None,
            dialogues: vec![],
            kept_samples: vec![],
            kept_queries: HashSet::new(),
            rejected: vec![],
            tried: 0,
            tokens: 0,
            forward: 0,
            seconds: 0.0,
        }
    }

    /// Takes the next sample (its attempt, and its dialogue when it passed); true once `keep` are kept.
    pub fn push(&mut self, a: Attempt, d: Option<Dialogue>) -> bool {
        self.tried += 1;
        self.tokens += a.generated_tokens;
        self.forward += a.forward_tokens;
        self.seconds += a.seconds;
        let first_kept = self.kept_samples.is_empty();
        match d {
            Some(d) if self.kept_queries.insert(crate::autorag::dialogue::query_key(&a.queries)) => {
                self.kept_samples.push(a.sample);
                self.dialogues.push(d);
                if first_kept {
                    // the first kept sample becomes the record; a last-sample record it replaces was rejected
                    if let Some(old) = self.record.replace(a) {
                        self.rejected.push(old.reason);
                    }
                }
            }
            // no sample kept yet (so no duplicate either): this one is the record until a later one is kept
            _ if first_kept => {
                if let Some(old) = self.record.replace(a) {
                    self.rejected.push(old.reason);
                }
            }
            d => self.rejected.push(if d.is_some() { "duplicate_dialogue".to_string() } else { a.reason }),
        }
        self.dialogues.len() >= self.keep
    }

    /// The attempt record and the kept dialogues (see the type's doc).
    pub fn finish(self) -> (Attempt, Vec<Dialogue>) {
        let mut a = self.record.expect("at least one sample");
        (a.generated_tokens, a.forward_tokens, a.seconds, a.samples) =
            (self.tokens, self.forward, self.seconds, self.tried);
        a.rejected = self.rejected;
        if self.kept_samples.len() > 1 {
            a.kept_samples = self.kept_samples;
        }
        (a, self.dialogues)
    }
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

    /// One question through Algorithm 1, sampled up to `cfg.samples` times (rejection sampling) until
    /// `cfg.keep` distinct samples passed (see [`Samples`]): the attempt record and the dialogues kept.
    /// `tgen` is the teacher's session, `qgen` the query model's.
    pub fn synthesize(
        &self,
        tgen: &mut ChatGen<'_>,
        qgen: &mut ChatGen<'_, Session<'_>>,
        ex: &Example,
    ) -> Result<(Attempt, Vec<Dialogue>)> {
        block_on(self.synthesize_with(tgen, qgen, ex))
    }

    /// [`Synthesizer::synthesize`] on any decoders: on the lanes of a batch, the attempt and dialogues of a
    /// session of their own. Each sample starts a new job on both generators (keeping only their anchors).
    pub async fn synthesize_with<T: Decoder, Q: Decoder>(
        &self,
        tgen: &mut ChatGen<'_, T>,
        qgen: &mut ChatGen<'_, Q>,
        ex: &Example,
    ) -> Result<(Attempt, Vec<Dialogue>)> {
        if tgen.anchor().is_none() || qgen.anchor().is_none() {
            let (t, q) = self.anchors(tgen, qgen)?;
            tgen.set_anchor(t);
            qgen.set_anchor(q);
        }
        let mut samples = Samples::new(self.cfg.keep);
        for k in 0..self.cfg.samples.max(1) {
            tgen.begin_job();
            qgen.begin_job();
            let (a, d) = self.sample(tgen, qgen, ex, k).await?;
            if samples.push(a, d) {
                break;
            }
        }
        Ok(samples.finish())
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
        let fwd0 = tgen.forward_tokens() + qgen.forward_tokens();
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
        let correct = !final_answer.is_empty()
            && filter::answer_matches(&final_answer, &ex.answers, cfg.max_answer_words, cfg.yes_no_first_word);
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
            forward_tokens: tgen.forward_tokens() + qgen.forward_tokens() - fwd0,
            sample: k,
            samples: k + 1,
            rejected: vec![],
            kept_samples: vec![],
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
    use crate::autorag::synth::fixtures::{attempt, dialogue};

    /// Sample `k` of question "1": passing (with `queries`) or a wrong answer.
    fn sample(k: usize, pass: bool, queries: &[&str]) -> (Attempt, Option<Dialogue>) {
        let mut a = attempt("1", pass, queries.len(), vec![None; queries.len()]);
        (a.sample, a.samples, a.generated_tokens, a.forward_tokens, a.seconds) = (k, k + 1, 10 + k, 100 * k, 1.0);
        a.queries = queries.iter().map(|q| q.to_string()).collect();
        (a.clone(), pass.then(|| dialogue("1")))
    }

    #[test]
    fn rejection_sampling_keeps_distinct_passing_samples() {
        // keep 1 (the default): the first passing sample is the record, the earlier ones rejected
        let mut s = Samples::new(1);
        assert!(!s.push(sample(0, false, &["a"]).0, None));
        assert!(s.push(sample(1, true, &["b"]).0, Some(dialogue("1"))));
        let (a, d) = s.finish();
        assert_eq!((a.kept, a.sample, a.samples, d.len()), (true, 1, 2, 1));
        assert_eq!((a.rejected, a.kept_samples, a.generated_tokens), (vec!["wrong_answer".to_string()], vec![], 21));
        // none passes: the last sample is the record, the others rejected
        let mut s = Samples::new(1);
        for k in 0..3 {
            let (a, d) = sample(k, false, &["a"]);
            assert!(!s.push(a, d));
        }
        let (a, d) = s.finish();
        assert_eq!((a.kept, a.sample, a.samples, a.rejected.len(), d.len()), (false, 2, 3, 2, 0));
        assert_eq!(a.dialogue_count(), 0);
        // keep 2 of up to 5: sample 0 wrong, 1 kept, 2 passes with 1's queries (duplicate, by normalised text),
        // 3 wrong, 4 kept with other queries: stop there
        let mut s = Samples::new(2);
        let pushes = [
            sample(0, false, &["x"]),
            sample(1, true, &["Who is X?"]),
            sample(2, true, &["who is x"]),
            sample(3, false, &["y"]),
            sample(4, true, &["X's birthplace"]),
        ];
        let done: Vec<bool> = pushes.into_iter().map(|(a, d)| s.push(a, d)).collect();
        assert_eq!(done, [false, false, false, false, true]);
        let (a, d) = s.finish();
        assert_eq!((a.kept, a.sample, a.samples, d.len()), (true, 1, 5, 2));
        assert_eq!(a.queries, ["Who is X?"], "the record is the first kept sample");
        assert_eq!(a.kept_samples, [1, 4]);
        assert_eq!(a.rejected, ["wrong_answer", "duplicate_dialogue", "wrong_answer"]);
        assert_eq!(a.generated_tokens, 10 + 11 + 12 + 13 + 14);
        assert_eq!(a.forward_tokens, 100 * (1 + 2 + 3 + 4), "every sample's forward tokens");
        assert_eq!(a.dialogue_count(), 2);
        // keep 2 but only one passes: one dialogue, no kept_samples list
        let mut s = Samples::new(2);
        s.push(sample(0, true, &["q"]).0, Some(dialogue("1")));
        s.push(sample(1, false, &["r"]).0, None);
        let (a, d) = s.finish();
        assert_eq!((a.sample, a.samples, d.len(), a.kept_samples.len()), (0, 2, 1, 0));
        assert_eq!(a.rejected, ["wrong_answer"]);
    }

    #[test]
    fn query_cleaning() {
        assert_eq!(clean_query(" Query: \"Karl Freund\"\nmore"), "Karl Freund");
        assert_eq!(clean_query("Refined Query: X y"), "X y");
        assert_eq!(clean_query("\n"), "");
        assert!(empty_reasoning("Intermediate Answer_2: "));
        assert!(!empty_reasoning("Analysis: need X"));
    }
}
