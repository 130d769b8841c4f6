//! The response cache's key: everything that decides a request's engine events, encoded exactly.
//! Only deterministic requests have one: every candidate greedy (temperature 0) or seeded, and no
//! grammar (a compiled grammar is not comparable); embeddings are not kept.

use tgi_engines::sampling::SamplingParams;
use tgi_engines::scheduler::Request;

/// The exact encoding of the model and of every candidate's engine request (prompt tokens,
/// sampling parameters, token budget, stop strings, flags and the API key's cache salt); the
/// request id, which changes nothing, is left out.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key(Box<[u8]>);

/// Appends fields to a key in a self-delimiting form.
#[derive(Default)]
struct Encoder(Vec<u8>);

impl Encoder {
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    fn f32(&mut self, v: f32) {
        self.0.extend_from_slice(&v.to_bits().to_le_bytes());
    }

    fn opt_f32(&mut self, v: Option<f32>) {
        self.flag(v.is_some());
        self.f32(v.unwrap_or(0.0));
    }

    fn opt_u64(&mut self, v: Option<u64>) {
        self.flag(v.is_some());
        self.u64(v.unwrap_or(0));
    }

    fn flag(&mut self, v: bool) {
        self.0.push(u8::from(v));
    }

    fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.0.extend_from_slice(b);
    }
}

impl Key {
    /// The key of `requests` (one HTTP request's candidates) for `model`, when they are deterministic.
    pub fn of(model: &str, requests: &[Request]) -> Option<Key> {
        let mut e = Encoder::default();
        e.bytes(model.as_bytes());
        e.u64(requests.len() as u64);
        for r in requests {
            let Request {
                prompt_ids,
                params,
                max_new_tokens,
                stop,
                constraint,
                ignore_eos,
                prompt_logprobs,
                cache_salt,
                request_id: _,
                thinking,
                pooling,
                lora,
            } = r;
            if constraint.is_some() || pooling.is_some() || !deterministic(params) {
                return None;
            }
            e.u64(prompt_ids.len() as u64);
            prompt_ids.iter().for_each(|&t| e.0.extend_from_slice(&t.to_le_bytes()));
            sampling(&mut e, params);
            e.u64(*max_new_tokens as u64);
            e.u64(stop.len() as u64);
            stop.iter().for_each(|s| e.bytes(s.as_bytes()));
            e.flag(*ignore_eos);
            e.flag(*prompt_logprobs);
            e.u64(*cache_salt);
            // The adapter loaded under a name, not the name: reloading other weights under it is another key.
            e.opt_u64(lora.as_ref().map(|u| u.adapter.id()));
            e.f32(lora.as_ref().map_or(1.0, |u| u.scale));
            e.flag(thinking.is_some());
            if let Some(t) = thinking {
                e.bytes(t.start.as_bytes());
                e.bytes(t.end.as_bytes());
                e.flag(t.open);
                e.opt_u64(t.budget.map(|b| b as u64));
                e.u64(t.forced.len() as u64);
                t.forced.iter().for_each(|&id| e.0.extend_from_slice(&id.to_le_bytes()));
            }
        }
        Some(Key(e.0.into_boxed_slice()))
    }

    /// The key's length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }
}

/// Whether sampling with `p` always draws the same tokens: greedy, or seeded.
fn deterministic(p: &SamplingParams) -> bool {
    p.temperature == 0.0 || p.seed.is_some()
}

/// Every sampling parameter (destructured, so that a new one cannot be forgotten here).
fn sampling(e: &mut Encoder, p: &SamplingParams) {
    let SamplingParams {
        temperature,
        top_k,
        top_p,
        min_p,
        typical_p,
        repetition_penalty,
        frequency_penalty,
        presence_penalty,
        seed,
        logprobs,
        top_logprobs,
    } = p;
    e.f32(*temperature);
    e.opt_u64(top_k.map(|k| k as u64));
    for v in [top_p, min_p, typical_p, repetition_penalty] {
        e.opt_f32(*v);
    }
    e.f32(*frequency_penalty);
    e.f32(*presence_penalty);
    e.opt_u64(*seed);
    e.flag(*logprobs);
    e.u64(*top_logprobs as u64);
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A greedy request for `prompt`.
    pub(crate) fn request(prompt: &[u32]) -> Request {
        Request {
            prompt_ids: prompt.to_vec(),
            params: SamplingParams::greedy(),
            max_new_tokens: 8,
            stop: Vec::new(),
            constraint: None,
            ignore_eos: false,
            prompt_logprobs: false,
            cache_salt: 0,
            request_id: "a".into(),
            thinking: None,
            pooling: None,
            lora: None,
        }
    }

    #[test]
    fn only_deterministic_requests_have_keys() {
        let greedy = request(&[1, 2]);
        assert!(Key::of("m", std::slice::from_ref(&greedy)).is_some());
        let mut sampled = greedy.clone();
        sampled.params.temperature = 0.7;
        assert_eq!(Key::of("m", &[sampled.clone()]), None, "unseeded sampling is never cached");
        assert_eq!(Key::of("m", &[greedy.clone(), sampled.clone()]), None, "every candidate counts");
        sampled.params.seed = Some(3);
        assert!(Key::of("m", &[sampled]).is_some(), "seeded sampling is");
    }

    #[test]
    fn every_parameter_and_the_salt_are_in_the_key() {
        let base = request(&[1, 2]);
        let key = |r: &Request| Key::of("m", std::slice::from_ref(r)).unwrap();
        let other_id = Request { request_id: "b".into(), ..base.clone() };
        assert_eq!(key(&base), key(&other_id), "the request id changes nothing");
        let variants = [
            Request { prompt_ids: vec![1, 3], ..base.clone() },
            Request { max_new_tokens: 9, ..base.clone() },
            Request { stop: vec!["x".into()], ..base.clone() },
            Request { ignore_eos: true, ..base.clone() },
            Request { prompt_logprobs: true, ..base.clone() },
            Request { cache_salt: 42, ..base.clone() },
            Request { params: SamplingParams { top_k: Some(2), ..base.params.clone() }, ..base.clone() },
            Request { params: SamplingParams { repetition_penalty: Some(1.1), ..base.params.clone() }, ..base.clone() },
            Request { params: SamplingParams { top_logprobs: 2, ..base.params.clone() }, ..base.clone() },
        ];
        for v in &variants {
            assert_ne!(key(&base), key(v), "{v:?}");
        }
        let one = std::slice::from_ref(&base);
        assert_ne!(Key::of("m", one), Key::of("n", one), "the model is in the key");
        assert_ne!(Key::of("m", one), Key::of("m", &[base.clone(), base.clone()]), "so is the candidate count");
    }
}
