//! The subcommands of the `tgi` binary: one module per command, each an `Args` struct
//! (clap) and a `run` function.

pub mod bench;
pub mod cli;
pub mod duration;
pub mod error;
pub mod generate;
pub mod habits;
pub mod imatrix;
pub mod kl_base;
pub mod loadgen;
pub mod model_args;
pub mod output;
pub mod perplexity;
pub mod plot;
pub mod profile;
pub mod quantize;
pub mod serve;
pub mod tune;

pub use cli::{Cli, Command};
pub use error::{exit_code, InputError};
