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
//! - [`config`]: the hyper-parameters. [`plan`]: the train/valid split and every update's micro-batches and
//!   learning rate. [`loss`]: the masked NLL.
//! - [`train`](mod@train): the loop, periodic validation loss, resume; [`checkpoint`]: checkpoints every N updates,
//!   written atomically.
//! - [`export`]: the Hugging Face folder (safetensors + config.json + tokenizer files).
//! - [`gradient_checkpointing`]: the backward pass with one checkpoint per decoder layer (an option).
//!
//! **Deviations and choices**
//! - Bucketing, not packing: without a block-diagonal attention mask in the decoder, packed dialogues would
//!   attend to each other. Batches group dialogues of similar length instead ([`data::epoch_batches`]).
//! - Dialogues longer than `max_len` are cut at the end (counted and reported); one with no model token
//!   left is dropped.
//! - The LM head runs only on positions that predict a model token (the loss is the same; the prompt's
//!   documents, most of a dialogue, cost no `[t, vocab]` logits).
//! - Parameters, gradients and the optimizer are f32; the passes compute in f32 or, with `dtype = bf16`, in bf16
//!   on a cast copy (mixed precision, [`train::train`]). A GGUF base model is dequantized to f32 first, so fine-tuning
//!   a Q4 file trains (and exports) the dequantized weights.
//! - The paper fine-tunes Llama-3-8B-Instruct with full fine-tuning; its learning rate and batch size are not
//!   restated here (see `configs/autorag-train.toml`, marked where unverified).

pub mod checkpoint;
pub mod config;
pub mod data;
pub mod export;
pub mod gradient_checkpointing;
pub mod lora;
pub mod loss;
pub mod optim;
pub mod plan;
pub mod train;

pub use config::SftConfig;
pub use data::{distinct_dialogues, first_dialogues, read_dialogues, render, Example};
pub use lora::LoraConfig;
pub use plan::SftData;
pub use train::{train, Trained};

#[cfg(test)]
pub(crate) mod fixtures {
    //! A tiny model, toy dialogues and small settings for the tests of the training modules.

    use super::{LoraConfig, SftConfig, SftData};
    use crate::autorag::dialogue::{Dialogue, Turn};
    use crate::model::{random_weights, Arch, MemoryWeights, ModelConfig, Tokenizer};
    use burn::backend::{Autodiff, Flex};

    pub(crate) type AB = Autodiff<Flex>;

    pub(crate) fn tok() -> Option<Tokenizer> {
        Some(Tokenizer::from_file(&crate::testing::require("models/smollm2-135m-instruct/tokenizer.json")?).unwrap())
    }

    /// Toy dialogues with a learnable pattern: the model must echo a query built from the question.
    pub(crate) fn toy_dialogues(n: usize) -> Vec<Dialogue> {
        let colors = ["red", "blue", "green", "black", "white", "pink"];
        (0..n)
            .map(|i| {
                let c = colors[i % colors.len()];
                Dialogue {
                    id: format!("toy{i}"),
                    dataset: "toy".into(),
                    question: format!("What is the {c} thing number {i}?"),
                    answers: vec![format!("{c} {i}")],
                    turns: vec![
                        Turn {
                            input: format!("What is the {c} thing number {i}?"),
                            output: format!("Retrieval Query: {c} thing {i}"),
                        },
                        Turn {
                            input: format!("Retrieved Document_1: The {c} thing {i} is a ball."),
                            output: "Final Answer: a ball".into(),
                        },
                    ],
                    iterations: 1,
                    final_answer: "a ball".into(),
                }
            })
            .collect()
    }

    pub(crate) fn setup() -> Option<(ModelConfig, MemoryWeights, SftData)> {
        let mcfg = ModelConfig::tiny(Arch::Llama, 49152);
        let w = MemoryWeights(random_weights(&mcfg, 11).into_iter().collect());
        let data = SftData::prepare(&toy_dialogues(24), &tok()?, 128, 0.2).unwrap();
        Some((mcfg, w, data))
    }

    pub(crate) fn small_cfg(lora: bool) -> SftConfig {
        SftConfig {
            epochs: 2,
            lr: if lora { 5e-3 } else { 2e-3 },
            batch_size: 2,
            grad_accum: 2,
            max_len: 128,
            eval_every: 0,
            save_every: 0,
            log_every: 1,
            valid_fraction: 0.2,
            warmup_ratio: 0.1,
            lora: lora.then(|| LoraConfig {
                rank: 4,
                alpha: 8.0,
                targets: vec!["q_proj".into(), "v_proj".into(), "up_proj".into()],
            }),
            ..Default::default()
        }
    }
}
