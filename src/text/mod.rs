pub mod words;
pub mod sentences;
