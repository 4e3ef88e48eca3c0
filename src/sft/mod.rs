//! Supervised fine-tuning of the decoder on Auto-RAG dialogues (`ragtime train autorag`).
//!
//! **The method** (Auto-RAG, Yu et al. 2024, Section 3.3): a synthesized dialogue is a sequence of turns
//! `(x_0, y_0), ..., (x_T, y_T)` where `x_0` is the question, `x_t` (t >= 1) the documents retrieved for the query
//! in `y_{t-1}`, and `y_t` the model's reasoning plus its next query, or the final answer. Training maximizes
//! the likelihood of the model's turns only (Eq. 3):
//!
//! ```text
//! L = - sum_t log p(y_t | x_0, y_0, ..., x_{t-1}, y_{t-1}, x_t)
//! ```
//!
//! implemented as the token-level negative log-likelihood over the tokens of every `y_t` (plus the end-of-turn
//! token, so the model learns to stop), the whole conversation in one causal pass, divided by the number of
//! such tokens in the update (the usual Hugging Face SFT normalization).
//!
//! **What is here**
//! - [`data`]: chat-template rendering (ChatML for SmolLM2/Qwen2, the template's default system prompt),
//!   the loss mask built segment by segment, a deterministic train/valid split by hash of the id,
//!   length-grouped batches with right padding (pads are never targets; causal attention keeps pads at the
//!   end from influencing real tokens, so no attention mask is needed).
//! - [`lora`]: LoRA adapters on any of q/k/v/o/gate/up/down (`W + (alpha/r) A B`, PEFT's initialization),
//!   merging, PEFT-named adapter tensors.
//! - [`optim`]: AdamW (PyTorch's formula, decay on matrices only), warm-up + cosine, global-norm clipping,
//!   gradient accumulation; its state is plain tensors so checkpoints restore it exactly.
//! - [`train`]: the loop, periodic validation loss, checkpoints every N updates written atomically, resume.
//! - [`export`]: the Hugging Face folder (safetensors + config.json + tokenizer files).
//!
//! **Deviations and choices**
//! - Bucketing, not packing: without a block-diagonal attention mask in the decoder, packed dialogues would
//!   attend to each other. Batches group dialogues of similar length instead ([`data::epoch_batches`]).
//! - Dialogues longer than `max_len` are cut at the end (counted and reported); one with no model token
//!   left is dropped.
//! - The LM head runs only on positions that predict a model token (the loss is the same; the prompt's
//!   documents, most of a dialogue, cost no `[t, vocab]` logits).
//! - Training is in f32 (no mixed precision). A GGUF base model is dequantized to f32 first, so fine-tuning
//!   a Q4 file trains (and exports) the dequantized weights.
//! - The paper fine-tunes Llama-3-8B-Instruct with full fine-tuning; its learning rate and batch size are not
//!   restated here (see `configs/autorag-train.toml`, marked where unverified).

pub mod data;
pub mod export;
pub mod lora;
pub mod optim;
pub mod train;

pub use data::{read_dialogues, render, Example};
pub use lora::LoraConfig;
pub use train::{train, SftConfig, SftData, Trained};
