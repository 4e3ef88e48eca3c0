pub mod words;
