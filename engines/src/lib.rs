//! The tgi engine: conversion plans, text handling (tokenizer, chat templates) and sampling;
//! models, KV cache and scheduler build on the same crate.

pub mod awq;
pub mod constraint;
pub mod convert;
pub mod device;
pub mod generate;
pub mod imatrix;
pub mod kernels;
pub mod kld;
pub mod kv;
pub mod lora;
pub mod model;
pub mod perplexity;
pub mod pooling;
pub mod sampling;
pub mod scheduler;
pub mod speculative;
pub mod text;
