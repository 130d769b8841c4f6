//! Grammars on arbitrary input: the first byte picks a JSON schema, a regular expression or a Lark grammar
//! (modulo 3), the rest is its text. Each goes through the bounds (`GrammarLimits::check`); one within them is
//! compiled over the bundled model's vocabulary on a thread with the stack the bounds call for (as the server's
//! compile threads have), then stepped. Nothing may panic or overflow a stack, and the first tokens of a grammar
//! that was admitted never fail: admission stepped them.
#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use tgi_engines::constraint::{Constraint, Grammar, GrammarCompiler, GrammarConfig};
use tgi_engines::text::tokenizer::Tokenizer;

/// Tokens stepped at admission (the compiler's probe), stepped again here.
const ADMITTED_STEPS: usize = 4;
/// Tokens stepped afterwards, the highest allowed id each time.
const MORE_STEPS: usize = 12;

/// The configuration the server runs with by default.
fn config() -> GrammarConfig {
    GrammarConfig::default()
}

/// The bundled vocabulary and a compiler over it, loaded once.
fn compiler() -> &'static (Tokenizer, GrammarCompiler) {
    static COMPILER: OnceLock<(Tokenizer, GrammarCompiler)> = OnceLock::new();
    COMPILER.get_or_init(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/stories260k/hf/tokenizer.json");
        let tok = Tokenizer::from_tokenizer_json(&path).expect("the bundled tokenizer.json");
        let c = GrammarCompiler::new(&tok, tok.vocab_size(), tok.eos_ids(), &config()).expect("a compiler");
        (tok, c)
    })
}

/// Steps `constraint` through the highest allowed ids; errors end the walk (they are the grammar's, later on).
fn wander(constraint: &Constraint, vocab: u32) {
    for _ in 0..MORE_STEPS {
        if constraint.is_finished() {
            return;
        }
        let Ok(mask) = constraint.mask() else { return };
        let Some(token) = (0..vocab).rev().find(|&t| mask.allows(t)) else { return };
        if constraint.commit(token).is_err() {
            return;
        }
    }
}

// Loaded before the first input, so that loading does not count against `-timeout`.
fuzz_target!(init: { compiler(); }, |data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else { return };
    let Ok(text) = std::str::from_utf8(rest) else { return };
    let grammar = match which % 3 {
        0 => match serde_json::from_str::<Value>(text) {
            Ok(schema) => Grammar::JsonSchema(schema),
            Err(_) => return,
        },
        1 => Grammar::Regex(text.to_string()),
        _ => Grammar::Lark(text.to_string()),
    };
    let limits = config().limits;
    let Ok(checked) = limits.check(grammar) else { return };
    let compile = move || {
        let (tok, c) = compiler();
        let Ok((constraint, _)) = c.compile(&checked) else { return };
        constraint.probe(ADMITTED_STEPS).expect("the steps admission took succeed again");
        wander(&constraint, tok.vocab_size() as u32);
    };
    let thread = std::thread::Builder::new().stack_size(limits.stack_bytes()).spawn(compile).expect("a thread");
    if let Err(panic) = thread.join() {
        std::panic::resume_unwind(panic);
    }
});
