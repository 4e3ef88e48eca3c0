//! Sentence encoders for dense retrieval: a BERT-family model ([`bert`]) read from a sentence-transformers folder
//! ([`sentence`]), run on burn like the decoder (`--device cpu` on the flex backend, `cuda[:N]` on burn's CUDA
//! backend). burn rather than candle-transformers' BERT: the project's device selection, weight loading and the
//! CPU engine's column-split matrix kernel ([`crate::model::engine::kernels::flex_linear`]) are shared with the
//! decoder, and CUDA comes with the same code.
//!
//! ```text
//! let enc = SentenceEncoder::load(Path::new("checkpoints/all-MiniLM-L6-v2"), DeviceKind::Cpu, None)?;
//! let v = enc.encode(&["Who wrote Hamlet?"], TextKind::Query, 32)?;   // [[f32; 384]], unit length
//! ```

pub mod bert;
pub mod sentence;

pub use sentence::{Pooling, Prefixes, SentenceEncoder, TextKind};
