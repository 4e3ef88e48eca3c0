//! Sentence encoders for dense retrieval: a BERT-family model ([`bert`]) read from a sentence-transformers folder
//! ([`sentence`]), run on burn like the decoder (`--device cpu` on the flex backend, `cuda[:N]` on burn's CUDA
//! backend). burn rather than candle-transformers' BERT: the project's device selection and weight loading are
//! shared with the decoder, and CUDA comes with the same code. On the CPU the burn model's weights run on the
//! encoder's own engine ([`bert_cpu`]: plain f32 buffers through the decoder's CPU kernels), held to the burn
//! model by its tests.
//!
//! ```text
//! let enc = SentenceEncoder::load(Path::new("checkpoints/all-MiniLM-L6-v2"), DeviceKind::Cpu, None)?;
//! let v = enc.encode(&["Who wrote Hamlet?"], TextKind::Query, 32)?;   // [[f32; 384]], unit length
//! ```

pub mod bert;
pub mod bert_cpu;
pub mod sentence;

pub use sentence::{Pooling, Prefixes, SentenceEncoder, TextKind};
