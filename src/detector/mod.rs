//! Learned hallucination detector (MIND's MLP over hidden states), trained on [`crate::synth`] data.

pub mod metrics;
