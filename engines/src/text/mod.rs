//! Text handling around the model: tokenization, streaming detokenization, chat templates, and a completion's
//! output text and end.

pub mod chat;
pub mod completion;
pub mod tokenizer;
