//! Text handling around the model: chat templates.

pub mod chat;
