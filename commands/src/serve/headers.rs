//! TGI's per-request headers: compute type, characters, and where the time went.

use hyper::header::HeaderValue;
use hyper::HeaderMap;

use super::metrics::RequestTimings;

/// The headers every generation response starts with (streams get only these).
pub fn start(h: &mut HeaderMap, compute_type: &str, characters: usize) {
    if let Ok(v) = HeaderValue::from_str(compute_type) {
        h.insert("x-compute-type", v);
    }
    h.insert("x-compute-characters", characters.into());
}

/// The timing headers of a finished request, as TGI writes them (milliseconds, except
/// `x-compute-time` in seconds).
pub fn timings(h: &mut HeaderMap, t: &RequestTimings, prompt_tokens: usize, generated_tokens: usize) {
    let ms = |d: std::time::Duration| HeaderValue::from(d.as_millis() as u64);
    h.insert("x-compute-time", HeaderValue::from_str(&t.total.as_secs_f64().to_string()).expect("a number"));
    h.insert("x-total-time", ms(t.total));
    h.insert("x-validation-time", ms(t.validation));
    h.insert("x-queue-time", ms(t.queue));
    h.insert("x-inference-time", ms(t.inference));
    h.insert("x-time-per-token", ms(t.per_token));
    h.insert("x-prompt-tokens", prompt_tokens.into());
    h.insert("x-generated-tokens", generated_tokens.into());
}
