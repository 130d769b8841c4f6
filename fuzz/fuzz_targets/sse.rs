//! `tgi bench`'s server-sent-events reader on an arbitrary response body, fed in arbitrary chunks,
//! and every event it yields read as a TGI, OpenAI, Anthropic and Responses stream event. The first byte seeds the
//! chunk sizes; the events must not depend on them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tgi_commands::loadgen::client::api::Api;
use tgi_commands::loadgen::client::sse::SseParser;

/// Every event of `body` fed in chunks of the sizes `seed` generates (all at once for 0).
fn events(body: &[u8], seed: u8) -> Vec<String> {
    let mut parser = SseParser::default();
    let mut out = Vec::new();
    let mut rest = body;
    let mut state = u32::from(seed);
    while !rest.is_empty() {
        let n = match seed {
            0 => rest.len(),
            _ => {
                state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                1 + (state >> 16) as usize % 17
            }
        };
        let (chunk, tail) = rest.split_at(n.min(rest.len()));
        out.extend(parser.feed(chunk));
        rest = tail;
    }
    out.extend(parser.finish());
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&seed, body)) = data.split_first() else {
        return;
    };
    let chunked = events(body, seed);
    assert_eq!(chunked, events(body, 0), "events depend on how the body was chunked");
    let apis = [
        Api::Tgi,
        Api::OpenAi { model: "m".into(), chat: false },
        Api::OpenAi { model: "m".into(), chat: true },
        Api::Anthropic { model: "m".into() },
        Api::Responses { model: "m".into() },
    ];
    for data in &chunked {
        for api in &apis {
            let _ = api.event(data);
        }
    }
});
