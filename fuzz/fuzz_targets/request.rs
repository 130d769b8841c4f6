//! TGI, OpenAI and Anthropic request validation on arbitrary bodies: the first byte picks the route (`/`,
//! `/generate`, `/generate_stream`, `/tokenize`, `/v1/completions`, `/v1/chat/completions`,
//! `/chat_tokenize`, `/invocations`, `/v1/messages`, `/v1/messages/count_tokens`, `/v1/responses`), the rest
//! is the body, answered by the server's own handlers
//! with the default limits over the bundled model's tokenizer and a real chat template. No body may
//! get a 5xx other than the 503 of the engine that refuses what passed validation.
#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use clap::Parser;
use libfuzzer_sys::fuzz_target;
use tgi_commands::serve::{RequestChecker, Route, ServeArgs, ServeSettings};
use tgi_engines::text::chat::ChatTemplate;
use tgi_engines::text::tokenizer::Tokenizer;
use tgi_formats::GgufFile;

/// The routes, by the first byte of the input modulo their number.
const ROUTES: [Route; 11] = [
    Route::Compat,
    Route::Generate,
    Route::GenerateStream,
    Route::Tokenize,
    Route::Completions,
    Route::Chat,
    Route::ChatTokenize,
    Route::Invocations,
    Route::Messages,
    Route::CountTokens,
    Route::Responses,
];

/// The bundled model's context length.
const CONTEXT: usize = 512;

/// `tgi serve`'s flags, parsed as the binary parses them.
#[derive(Parser)]
struct Serve {
    #[command(flatten)]
    args: ServeArgs,
}

fn checker() -> &'static RequestChecker {
    static CHECKER: OnceLock<RequestChecker> = OnceLock::new();
    CHECKER.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let model = GgufFile::open(&root.join("models/stories260k/stories260k-f32.gguf")).expect("the bundled model");
        let tokenizer = Tokenizer::from_gguf(&model).expect("the bundled tokenizer");
        let source =
            std::fs::read_to_string(root.join("engines/tests/data/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja"))
                .expect("a chat template");
        let template = ChatTemplate::new(&source, Some("<s>".into()), Some("</s>".into())).expect("it compiles");
        let settings = ServeSettings::validate(Serve::parse_from(["serve"]).args, Vec::new()).expect("the defaults");
        RequestChecker::new(&settings, CONTEXT, tokenizer, Some(template)).expect("the default limits fit")
    })
}

// Loaded before the first input, so that loading does not count against `-timeout`.
fuzz_target!(init: { checker(); }, |data: &[u8]| {
    let Some((&which, body)) = data.split_first() else {
        return;
    };
    let route = ROUTES[which as usize % ROUTES.len()];
    let status = checker().status(route, body);
    assert!(status < 500 || status == 503, "{route:?} answered {status}");
});
