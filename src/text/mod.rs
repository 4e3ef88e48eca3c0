//! Text utilities shared by controllers: words from sub-tokens, content words, sentence boundaries.

pub mod words;
