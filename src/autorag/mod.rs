//! Auto-RAG (Yu et al., 2024): the LLM itself decides when and what to retrieve, after fine-tuning on
//! iterative-retrieval dialogues in which it plans, queries, reads retrieved documents, refines its query and
//! finally answers. The authors released neither the synthesis nor the training code; ragtime provides both.
//!
//! - [`dialogue`]: the multi-turn record one synthesized dialogue becomes (the paper's `x_t` / `y_t` turns),
//!   written as JSON lines (and Parquet) by `ragtime synth autorag` and read by `ragtime train autorag`.

pub mod dialogue;
