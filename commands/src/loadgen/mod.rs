//! Load generation shared by `tgi bench` and `tgi tune`: the load's flags, streaming HTTP clients, closed- and
//! open-loop load levels, synthetic and file workloads, the per-request records and their summaries, the
//! in-process `tgi serve` child, and a whole measured run ([`run::measure`]).

pub mod args;
pub mod arrivals;
pub mod client;
pub mod load;
pub mod report;
pub mod run;
pub mod scrape;
pub mod spawn;
pub mod summary;
pub mod table;
pub mod target;
pub mod workload;

#[cfg(test)]
mod tests;
