//! Text over plain strings and over decoder tokens: sentence splitting of prose ([`sentences`]), and words,
//! content words and sentence boundaries built from generated sub-tokens ([`words`]).

pub mod sentences;
pub mod words;
