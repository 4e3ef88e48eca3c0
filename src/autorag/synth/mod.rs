//! Algorithm 1 of the paper: synthesizing iterative-retrieval dialogues, and the resumable dataset they go to.
//!
//! # Per question
//!
//! 1. The teacher (`--teacher`, default the model) writes R_0 and its own first query: the few-shot reasoning
//!    exemplars ([`super::prompts`]) then `Question: <q>`, greedy by default (`reasoning_temperature`).
//! 2. For t = 1..T: `candidates` queries are gathered: the teacher's own query first (`include_model_query`),
//!    then queries sampled from the query model (`--query-model`, default the teacher) with the few-shot
//!    (`rewrite = "fewshot"`, when the reasoning set has a rewriting file) or zero-shot rewriting prompt given
//!    the question and the latest reasoning, at `query_temperature` / `query_top_p`, each with its own seed
//!    drawn from the question's generator (seeded by `seed` and the question id, so a resumed run redoes a
//!    question identically). Duplicates are skipped (at most 2n draws). Each candidate retrieves `top_k`
//!    passages not shown before in this dialogue. The first candidate whose passages hold a sub-answer
//!    ([`super::filter`]) is kept, else a random one. The previous model turn becomes
//!    `R_{t-1} + (Initial|Refined) Query: q_t` (so y_t carries the *chosen* query, not necessarily the one the
//!    teacher wrote), the passages become x_t, and the teacher writes R_t.
//! 3. Stop ([`super::stop::decide`]): a `Final Answer:` in R_t's turn ends the dialogue with it; a reasoning with
//!    no information need (or no query) ends it with a forced answer (`R_t\n\nFinal Answer:` completed by the
//!    teacher); at t = T the answer is forced as well.
//! 4. Kept only when: the final answer matches the gold ([`super::filter::answer_matches`]), no query repeats
//!    an earlier one of the dialogue (SQuAD-normalised; the paper's quality filter, `drop_repeated_queries`),
//!    every query is a search ([`super::filter::malformed_query`], not in the paper, `drop_malformed_queries`),
//!    no reasoning is empty, and every prompt fit the model. Otherwise the attempt is recorded with the reason.
//!
//! Choices where the paper is unclear: the teacher's own query is one of the candidates (the paper samples
//! queries; keeping the model's own keeps dialogues coherent); R_0 may directly end in a final answer (a
//! zero-iteration dialogue, kept if correct); the random fallback is seeded per question.
//!
//! # Files
//!
//! [`synthesizer`] runs Algorithm 1 on one question; [`stats`] sums up the attempts; [`store`] is the resumable
//! dataset directory the attempts and dialogues go to; [`parquet`] writes and reads its dialogues.parquet.

pub mod merge;
pub mod parquet;
pub mod stats;
pub mod store;
pub mod synthesizer;

pub use parquet::{parquet_schema, read_parquet, write_parquet};
pub use stats::Stats;
pub use store::{read_dialogues, DialogueStore, ATTEMPTS_FILE, CONFIG_FILE, DIALOGUES_FILE, PARQUET_FILE, STATS_FILE};
pub use synthesizer::Synthesizer;

use serde::{Deserialize, Serialize};

use super::filter::SubAnswer;

/// Algorithm 1's settings (`[synth]` in configs/autorag.toml).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SynthConfig {
    /// T: iterations at most (the paper's inference default, 10).
    pub max_iter: usize,
    /// n: candidate queries per iteration (not given in the paper; 3 here).
    pub candidates: usize,
    /// Passages per candidate's retrieval (the authors' inference k = 2).
    pub top_k: usize,
    /// Sampling of rewritten queries (not given in the paper).
    pub query_temperature: f32,
    pub query_top_p: f32,
    /// Temperature of the reasoning turns (0: greedy).
    pub reasoning_temperature: f32,
    /// `fewshot` or `zeroshot` query-rewriting prompt.
    pub rewrite: String,
    /// The teacher's own query is the first candidate.
    pub include_model_query: bool,
    /// Drop dialogues whose queries repeat.
    pub drop_repeated_queries: bool,
    /// Drop dialogues with a query that is not a search ([`super::filter::malformed_query`]: a reply, or about
    /// nothing the question or the passages shown so far mention).
    pub drop_malformed_queries: bool,
    /// An answer containing the gold matches when it has at most this many words.
    pub max_answer_words: usize,
    /// A yes/no answer matches by its first word ("There is no information on X" is no "no"); false: by its
    /// first yes/no word anywhere, as the evaluation maps answers (how runs made before this setting matched;
    /// recorded only when true, so they resume with `--set synth.yes_no_first_word=false`).
    #[serde(skip_serializing_if = "is_false")]
    pub yes_no_first_word: bool,
    /// Token limits: one reasoning turn, one query, one forced answer.
    pub max_new_tokens: usize,
    pub query_tokens: usize,
    pub answer_tokens: usize,
    pub seed: u64,
    /// Reasoning exemplar set: `2wikimultihopqa` or `nq`.
    pub reasoning: String,
    /// Rejection sampling: up to this many samples of a question's dialogue, each with its own seed, keeping the
    /// first that passes every filter (1: one sample, the paper's setting). Reasoning turns differ between
    /// samples only with `reasoning_temperature` > 0; query rewrites always do (`query_temperature`).
    #[serde(skip_serializing_if = "is_one")]
    pub samples: usize,
    /// Distinct passing samples kept per question, at most (1: the first, the paper's one dialogue per
    /// question). More than one is rejection-sampling fine-tuning's choice (Yuan et al., 2023: every correct
    /// sample with distinct reasoning steps); here samples are distinct when their queries differ. Sampling
    /// stops once this many are kept or `samples` were tried.
    #[serde(skip_serializing_if = "is_one")]
    pub keep: usize,
}

fn is_one(n: &usize) -> bool {
    *n == 1
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn one() -> usize {
    1
}

impl Default for SynthConfig {
    fn default() -> Self {
        SynthConfig {
            max_iter: 10,
            candidates: 3,
            top_k: 2,
            query_temperature: 0.8,
            query_top_p: 0.95,
            reasoning_temperature: 0.0,
            rewrite: "fewshot".into(),
            include_model_query: true,
            drop_repeated_queries: true,
            drop_malformed_queries: true,
            max_answer_words: 10,
            yes_no_first_word: true,
            max_new_tokens: 200,
            query_tokens: 32,
            answer_tokens: 32,
            seed: 0,
            reasoning: "2wikimultihopqa".into(),
            samples: 1,
            keep: 1,
        }
    }
}

/// One tried question (a line of attempts.jsonl).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    pub id: String,
    pub kept: bool,
    /// `kept`, or why not (the first that applies): `context_full`, `no_answer`, `wrong_answer`,
    /// `empty_reasoning`, `malformed_query`, `repeated_query`; with rejection sampling also
    /// `duplicate_dialogue` (it passed, but its queries are those of a sample kept before).
    pub reason: String,
    /// Queries issued (the chosen candidate of each iteration).
    pub iterations: usize,
    pub queries: Vec<String>,
    /// For each iteration, why the chosen candidate's passages hold a sub-answer (`null`: none did, a random
    /// candidate was taken).
    pub sub_answers: Vec<Option<SubAnswer>>,
    /// The answer was forced (not written by the teacher on its own).
    pub forced_answer: bool,
    pub final_answer: String,
    /// The final answer matches the gold (whether or not a quality filter dropped the dialogue).
    #[serde(default)]
    pub answer_correct: bool,
    /// Tokens generated and seconds spent on the question, over all its samples.
    pub generated_tokens: usize,
    pub seconds: f64,
    /// Tokens the model ran forward for the question, over all its samples: prompts (without the cached
    /// prefixes it kept) and generated tokens, of the teacher and the query model (0 in runs that predate it).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub forward_tokens: usize,
    /// Which sample this attempt is (0-based; rejection sampling, [`SynthConfig::samples`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sample: usize,
    /// Samples tried for the question.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub samples: usize,
    /// Why each sample of the question other than the recorded one and the kept ones was dropped (its
    /// `reason`), in order: with rejection sampling the record is the first kept sample (or the last), and
    /// these are the rest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rejected: Vec<String>,
    /// The samples whose dialogues were kept, when more than one was ([`SynthConfig::keep`]); otherwise empty
    /// and the kept sample is `sample`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept_samples: Vec<usize>,
}

impl Attempt {
    /// The samples whose dialogues were kept, in order (none when the question was not kept).
    pub fn kept_sample_indices(&self) -> Vec<usize> {
        match (self.kept, self.kept_samples.is_empty()) {
            (false, _) => vec![],
            (true, true) => vec![self.sample],
            (true, false) => self.kept_samples.clone(),
        }
    }

    /// How many dialogues the question gave (its lines in dialogues.jsonl).
    pub fn dialogue_count(&self) -> usize {
        self.kept_sample_indices().len()
    }
}

#[cfg(test)]
pub(crate) mod fixtures {
    //! Records for the tests of the synthesis modules.

    use super::Attempt;
    use crate::autorag::dialogue::{Dialogue, Turn};
    use crate::autorag::filter::SubAnswer;

    pub(crate) fn dialogue(id: &str) -> Dialogue {
        Dialogue {
            id: id.into(),
            dataset: "hotpotqa".into(),
            question: "Q?".into(),
            answers: vec!["A".into(), "a2".into()],
            turns: vec![
                Turn { input: "Question: Q?".into(), output: "Analysis: x\n\nInitial Query: q".into() },
                Turn {
                    input: "Retrieved Document_1: d".into(),
                    output: "Intermediate Answer_1: A.\n\nFinal Answer: A".into(),
                },
            ],
            iterations: 1,
            final_answer: "A".into(),
        }
    }

    pub(crate) fn attempt(id: &str, kept: bool, iters: usize, subs: Vec<Option<SubAnswer>>) -> Attempt {
        Attempt {
            id: id.into(),
            kept,
            reason: if kept { "kept".into() } else { "wrong_answer".into() },
            iterations: iters,
            queries: vec!["q".into(); iters],
            sub_answers: subs,
            forced_answer: !kept,
            final_answer: "A".into(),
            answer_correct: kept || id == "4",
            generated_tokens: 10,
            seconds: 2.0,
            forward_tokens: 0,
            sample: 0,
            samples: 1,
            rejected: vec![],
            kept_samples: vec![],
        }
    }
}
