//! Text handling around the model: tokenization, streaming detokenization, chat templates, a completion's
//! output text and end, and a reasoning model's thinking block.

pub mod chat;
pub mod completion;
pub mod thinking;
pub mod tokenizer;
