//! `tgi bench`: loads an LLM server (TGI- or OpenAI-compatible) with streaming requests and
//! measures TTFT, inter-token latency, TPOT and end-to-end latency per load level; prints a table,
//! writes JSON/CSV and draws charts. `tgi bench compare A.json B.json` sets two runs side by side.

pub mod compare;
pub mod plot;
pub mod report;
