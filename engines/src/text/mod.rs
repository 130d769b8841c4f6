//! Text handling around the model: tokenization, streaming detokenization and chat templates.

pub mod chat;
pub mod tokenizer;
