//! Synthetic hallucination data (MIND's recipe): continue truncated Wikipedia articles, compare the generated
//! entity with the original one, and store labelled examples with the model's internal states.
//!
//! - [`hallucination`]: the synthesis pipeline (`ragtime synth hallucination`): truncate, continue, compare, label.
//! - [`qa_labels`]: the second label source (`ragtime synth qa-labels`): closed-book answers to training questions,
//!   each sentence labelled by whether the answer was wrong.
//!
//! The labelled examples go to [`crate::labels`], the store the detector trainer reads.

pub mod hallucination;
pub mod qa_labels;
