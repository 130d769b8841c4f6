//! Text handling for generation: tokenization and streaming detokenization.

pub mod tokenizer;
