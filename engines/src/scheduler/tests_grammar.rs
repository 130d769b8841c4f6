//! Constrained decoding in the scheduler on the bundled stories260k model: constrained and free sequences share
//! steps and each gives what it gives alone (greedy and seeded sampling, with n-gram speculation too), finished
//! outputs match their grammar, and every KV block comes back.

use std::sync::mpsc::Receiver;

use serde_json::json;

use super::tests::{check, events, model, request, settled, sink};
use super::*;
use crate::constraint::{Constraint, Grammar, GrammarCompiler, GrammarConfig, GrammarLimits};
use crate::model::LoadedModel;
use crate::sampling::{FinishReason, SamplingParams};
use crate::speculative::SpeculationConfig;

/// A grammar compiler over `m`'s vocabulary.
fn compiler(m: &LoadedModel) -> GrammarCompiler {
    GrammarCompiler::new(&m.tokenizer, m.model.config().vocab, &m.eos, &GrammarConfig::default()).unwrap()
}

/// `grammar` compiled by `c`.
fn constrain(c: &GrammarCompiler, grammar: &Grammar) -> Constraint {
    c.compile(&GrammarLimits::default().check(grammar.clone()).unwrap()).unwrap().0
}

/// The grammars the requests take in turn (`None`: unconstrained).
fn grammars() -> Vec<Option<Grammar>> {
    let person = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "pets": {"type": "array", "items": {"enum": ["cat", "dog", "bird"]}, "maxItems": 3}
        },
        "required": ["name", "age", "pets"],
        "additionalProperties": false
    });
    vec![
        Some(Grammar::JsonSchema(person)),
        None,
        Some(Grammar::Regex("(yes|no)(, [a-z]{1,8}){0,3}\\.".into())),
        Some(Grammar::JsonObject),
        None,
        Some(Grammar::Lark("start: \"The \" NAME \" is \" (\"big\" | \"small\") \".\"\nNAME: /[a-z]{2,6}/".into())),
        Some(Grammar::JsonSchema(json!({
            "type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 99}, "minItems": 1, "maxItems": 4
        }))),
        None,
    ]
}

/// Two requests per grammar, a greedy one and (with `sampling`) a seeded sampled one at temperature 1; else a
/// second greedy one on another prompt.
fn requests(m: &LoadedModel, sampling: bool) -> Vec<(Request, Option<Grammar>)> {
    let prompts = ["Once upon a time", "Lily and Tom went to the park. They saw", "The cat said", "One day"];
    let compiler = compiler(m);
    let mut out = Vec::new();
    for (i, g) in grammars().into_iter().enumerate() {
        for sampled in [false, true] {
            let ids = m.tokenizer.encode(prompts[(i + usize::from(sampled)) % prompts.len()], true, false).unwrap();
            let mut r = request(ids, 120);
            if sampled && sampling {
                r.params = SamplingParams { temperature: 1.0, seed: Some(i as u64), ..SamplingParams::greedy() };
            }
            r.constraint = g.as_ref().map(|g| constrain(&compiler, g));
            out.push((r, g.clone()));
        }
    }
    out
}

/// Checks a finished output against its grammar.
fn matches(grammar: &Grammar, text: &str) -> bool {
    match grammar {
        Grammar::JsonObject => serde_json::from_str::<serde_json::Value>(text).is_ok_and(|v| v.is_object()),
        Grammar::JsonSchema(schema) => {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(text) else { return false };
            match schema["type"].as_str() {
                Some("array") => v.as_array().is_some_and(|a| {
                    (1..=4).contains(&a.len()) && a.iter().all(|x| x.as_i64().is_some_and(|x| (0..=99).contains(&x)))
                }),
                _ => {
                    let pets = v["pets"].as_array().map_or(4, Vec::len);
                    v["name"].as_str().is_some_and(|n| n.chars().count() <= 12)
                        && v["age"].as_i64().is_some_and(|a| (0..=120).contains(&a))
                        && pets <= 3
                        && v.as_object().is_some_and(|o| o.len() == 3)
                }
            }
        }
        Grammar::Regex(re) => regex::Regex::new(&format!("^(?:{re})$")).unwrap().is_match(text),
        Grammar::Lark(_) => regex::Regex::new(r"^The [a-z]{2,6} is (big|small)\.$").unwrap().is_match(text),
    }
}

/// Runs the requests together through a scheduler with `cfg` (sampled ones only without speculation, which
/// keeps their distribution but not their draws); each must equal itself alone, and those that
/// ended by end-of-sequence must match their grammar. Returns how many did (a tiny story model at temperature 1
/// may fill a free string or an object's keys until the token limit) and the stats once idle.
fn run(cfg: SchedulerConfig) -> (usize, Stats) {
    let m = model();
    let reqs = requests(&m, cfg.speculation.is_none());
    let h = Scheduler::start(m.clone(), cfg).unwrap();
    let rxs: Vec<Receiver<Event>> = reqs
        .iter()
        .map(|(r, _)| {
            let (s, rx) = sink(None);
            h.submit(r.clone(), s).unwrap();
            rx
        })
        .collect();
    let mut ended = 0;
    for (i, ((r, g), rx)) in reqs.iter().zip(&rxs).enumerate() {
        let got = events(rx);
        check(&m, r, &got, &format!("request {i}"));
        let Some(Event::Finished(f)) = got.last() else { unreachable!() };
        if let Some(g) = g.as_ref().filter(|_| f.reason == FinishReason::EosToken) {
            assert!(matches(g, &f.text), "request {i}: {:?} does not match {g:?}", f.text);
            ended += 1;
        }
    }
    let stats = settled(&h);
    assert_eq!(stats.kv_blocks_used, 0);
    (ended, stats)
}

#[test]
fn constrained_and_free_sequences_share_steps_and_match_alone() {
    let (ended, stats) = run(SchedulerConfig::default());
    assert!(ended >= 6, "most constrained outputs ended by their grammar: {ended}");
    assert!(stats.step_batch_size.sum >= 8.0 * stats.step_batch_size.count as f64, "steps were shared: {stats:?}");
    assert!(stats.grammar_mask_seconds.count > 100, "masks computed beside the forward pass are timed");
}

#[test]
fn speculation_under_a_grammar_keeps_outputs_identical() {
    let spec = SpeculationConfig { adaptive: false, ..SpeculationConfig::default() };
    let (_, stats) = run(SchedulerConfig { speculation: Some(spec), ..SchedulerConfig::default() });
    assert!(stats.speculative_accepted_tokens > 0, "drafts within the grammar were verified: {stats:?}");
}

#[test]
fn a_finished_grammar_ends_the_output_even_when_eos_is_ignored() {
    let m = model();
    let h = Scheduler::start(m.clone(), SchedulerConfig::default()).unwrap();
    let mut r = request(m.tokenizer.encode("Once upon a time", true, false).unwrap(), 50);
    r.ignore_eos = true;
    r.constraint = Some(constrain(&compiler(&m), &Grammar::Regex("yes|no".into())));
    let (s, rx) = sink(None);
    h.submit(r, s).unwrap();
    let got = events(&rx);
    let Some(Event::Finished(f)) = got.last() else { panic!("{got:?}") };
    assert!(matches!(f.text.as_str(), "yes" | "no"), "{:?}", f.text);
    assert_eq!(f.reason, FinishReason::EosToken, "the grammar's end is final even with ignore_eos");
    let last = got.iter().rev().find_map(|e| if let Event::Token(t) = e { Some(t.id) } else { None });
    assert!(last.is_some_and(|t| m.eos.contains(&t)), "the answer, then EOS: {got:?}");
}

#[test]
fn penalties_that_overflow_every_allowed_logit_keep_the_output_in_the_grammar() {
    let m = model();
    let h = Scheduler::start(m.clone(), SchedulerConfig::default()).unwrap();
    // "é" is two byte tokens here, rare ones (negative logits) and in the prompt: the penalty takes them to −∞.
    let grammar = Grammar::Regex("éé".into());
    for temperature in [0.0, 1.0] {
        let mut r = request(m.tokenizer.encode("Café, é é", true, false).unwrap(), 20);
        r.params = SamplingParams { temperature, repetition_penalty: Some(3e38), seed: Some(1), ..r.params };
        r.constraint = Some(constrain(&compiler(&m), &grammar));
        let (s, rx) = sink(None);
        h.submit(r, s).unwrap();
        let got = events(&rx);
        let Some(Event::Finished(f)) = got.last() else { panic!("{got:?}") };
        assert!(matches(&grammar, &f.text), "temperature {temperature}: {:?}", f.text);
    }
}
