//! Synthetic hallucination data (MIND's recipe): continue truncated Wikipedia articles, compare the generated
//! entity with the original one, and store labelled examples with the model's internal states.
//!
//! - [`hallucination`]: the synthesis pipeline (`ragtime synth hallucination`): truncate, continue, compare, label.
//! - [`store`]: the resumable Parquet dataset the synthesis loop writes and the detector trainer reads.

pub mod hallucination;
pub mod store;
