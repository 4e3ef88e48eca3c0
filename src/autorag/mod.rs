//! Auto-RAG (Yu et al., 2024): the LLM itself decides when and what to retrieve, after fine-tuning on
//! iterative-retrieval dialogues in which it plans, queries, reads retrieved documents, refines its query and
//! finally answers. The authors released neither the synthesis nor the training code; ragtime provides both.
//!
//! - [`dialogue`]: the multi-turn record one synthesized dialogue becomes (the paper's `x_t` / `y_t` turns),
//!   written as JSON lines (and Parquet) by `ragtime synth autorag` and read by `ragtime train autorag`.
//! - [`prompts`]: the paper's prompt files (few-shot reasoning, query rewriting, parametric knowledge) and the
//!   text layout of the turns ([`prompts::dialogue_messages`] renders a dialogue as chat messages: use it when
//!   training so the trained model sees what inference feeds it).
//! - [`filter`]: the sub-answer filter of Algorithm 1 and the "answer matches the gold" rule.
//! - [`stop`]: the stop rule (does a reasoning still express an information need?).
//! - [`synth`]: Algorithm 1 (dialogue synthesis) and the resumable dataset directory with yield statistics.
//! - [`infer`]: Algorithm 2 (answering with iterative retrieval, parametric pseudo-documents, forced answer), used
//!   by `ragtime eval --trigger autorag`.

pub mod dialogue;
pub mod filter;
pub mod infer;
pub mod prompts;
pub mod stop;
pub mod synth;
