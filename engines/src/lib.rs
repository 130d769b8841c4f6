//! The tgi engine: conversion plans, text handling (tokenizer, chat templates) and sampling;
//! models, KV cache and scheduler build on the same crate.

pub mod convert;
pub mod kernels;
pub mod sampling;
pub mod text;
