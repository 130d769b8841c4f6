//! Real chat templates (tests/data/chat-templates, from llama.cpp) rendered by `ChatTemplate` and
//! compared with what Jinja2, set up as transformers sets it up, renders for the same inputs
//! (expected.json, written by make_expected.py there).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use tgi_engines::text::chat::{ChatTemplate, ChatTemplateError, Message};

#[derive(Deserialize)]
struct Expected {
    fixed_now: String,
    cases: BTreeMap<String, Case>,
    templates: Vec<TemplateResults>,
}

/// A conversation every template renders.
#[derive(Deserialize)]
struct Case {
    messages: Vec<Message>,
    add_generation_prompt: bool,
    extra: serde_json::Map<String, serde_json::Value>,
}

#[derive(Deserialize)]
struct TemplateResults {
    name: String,
    bos_token: Option<String>,
    eos_token: Option<String>,
    /// Context this template needs, merged over each case's `extra`.
    extra: serde_json::Map<String, serde_json::Value>,
    results: BTreeMap<String, Outcome>,
}

/// What Jinja2 made of one case: the text, or the error.
#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum Outcome {
    Expected(String),
    Error { kind: String, message: String },
}

/// The templates the task singles out: every case must match Jinja2 exactly.
const REPRESENTATIVE: [&str; 10] = [
    "meta-llama-Llama-3.1-8B-Instruct",
    "Qwen-Qwen2.5-7B-Instruct",
    "mistralai-Mistral-Nemo-Instruct-2407",
    "google-gemma-2-2b-it",
    "microsoft-Phi-3.5-mini-instruct",
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B",
    "HuggingFaceTB-SmolLM3-3B",
    "Qwen-Qwen3-0.6B",
    "openai-gpt-oss-120b",
    "ibm-granite-granite-3.3-2B-Instruct",
];

/// Where MiniJinja knowingly differs from Jinja2: `(template, case)` and why.
const KNOWN_DIFFERENCES: [(&str, &str, &str); 4] = [
    (
        "llama-cpp-deepseek-r1",
        "tools",
        "`tools | map(attribute='function') | tojson`: Jinja2's map yields a generator that json.dumps \
         rejects; MiniJinja's map yields a list, so the tools render",
    ),
    ("llama-cpp-deepseek-r1", "tool_call", "as for `tools`"),
    (
        "meetkai-functionary-medium-v3.1",
        "tools",
        "`\"...\"|safe + t | tojson`: in Jinja2, Markup + str HTML-escapes the str, so the tool JSON comes \
         out as `{&#34;name&#34;: ...`; MiniJinja concatenates plain strings and writes the JSON as is",
    ),
    ("meetkai-functionary-medium-v3.1", "tool_call", "as for `tools`"),
];

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/chat-templates")
}

fn load() -> Expected {
    let text = std::fs::read_to_string(data_dir().join("expected.json")).expect("expected.json");
    serde_json::from_str(&text).expect("expected.json parses")
}

impl Expected {
    fn template(&self, name: &str) -> &TemplateResults {
        self.templates.iter().find(|t| t.name == name).unwrap_or_else(|| panic!("no template {name}"))
    }

    /// The template compiled with its special tokens and the time make_expected.py fixed.
    fn compile(&self, t: &TemplateResults) -> ChatTemplate {
        let source = std::fs::read_to_string(data_dir().join(format!("{}.jinja", t.name))).unwrap();
        let now = chrono::NaiveDateTime::parse_from_str(&self.fixed_now, "%Y-%m-%dT%H:%M:%S").unwrap();
        ChatTemplate::new(&source, t.bos_token.clone(), t.eos_token.clone())
            .unwrap_or_else(|e| panic!("{}: {e}", t.name))
            .with_time(now)
    }

    /// Renders a case as make_expected.py does: the template's extra context wins over the case's.
    fn render(&self, template: &ChatTemplate, t: &TemplateResults, case: &str) -> Result<String, ChatTemplateError> {
        let case = &self.cases[case];
        let mut extra = case.extra.clone();
        extra.extend(t.extra.clone());
        template.render(&case.messages, case.add_generation_prompt, &serde_json::Value::Object(extra))
    }
}

/// How the Rust rendering of a case differs from Jinja2's, if it does.
fn mismatch(got: Result<String, ChatTemplateError>, want: &Outcome) -> Option<String> {
    match (want, got) {
        (Outcome::Expected(want), Ok(got)) if *want == got => None,
        (Outcome::Expected(want), Ok(got)) => {
            Some(format!("output differs:\n--- jinja2\n{want}\n--- minijinja\n{got}"))
        }
        (Outcome::Expected(_), Err(e)) => Some(format!("minijinja failed where jinja2 rendered: {e}")),
        // raise_exception raises Jinja2's TemplateError itself; other failures are subclasses.
        (Outcome::Error { kind, message }, Err(ChatTemplateError::Raised(got))) if kind == "TemplateError" => {
            (*message != got).then(|| format!("raised {got:?}, jinja2 raised {message:?}"))
        }
        (Outcome::Error { kind, message }, Err(e)) if kind == "TemplateError" => {
            Some(format!("jinja2 raised {message:?}, minijinja failed otherwise: {e}"))
        }
        (Outcome::Error { .. }, Err(_)) => None,
        (Outcome::Error { kind, message }, Ok(_)) => {
            Some(format!("minijinja rendered where jinja2 failed: {kind}: {message}"))
        }
    }
}

#[test]
fn every_chat_template_matches_jinja2_or_is_a_known_difference() {
    let expected = load();
    let mut differing = BTreeSet::new();
    let mut report = String::new();
    for t in &expected.templates {
        let template = expected.compile(t);
        for (case, want) in &t.results {
            if let Some(why) = mismatch(expected.render(&template, t, case), want) {
                differing.insert((t.name.clone(), case.clone()));
                report.push_str(&format!("\n=== {} / {case}: {why}\n", t.name));
            }
        }
    }
    let known: BTreeSet<_> = KNOWN_DIFFERENCES.iter().map(|(t, c, _)| (t.to_string(), c.to_string())).collect();
    let unexpected: Vec<_> = differing.difference(&known).collect();
    let fixed: Vec<_> = known.difference(&differing).collect();
    assert!(unexpected.is_empty(), "unexpected differences {unexpected:?}:{report}");
    assert!(fixed.is_empty(), "known differences that no longer differ: {fixed:?}");
}

#[test]
fn representative_chat_templates_match_jinja2_exactly() {
    let expected = load();
    for name in REPRESENTATIVE {
        let t = expected.template(name);
        let template = expected.compile(t);
        assert_eq!(t.results.len(), expected.cases.len(), "{name}");
        for (case, want) in &t.results {
            assert_eq!(mismatch(expected.render(&template, t, case), want), None, "{name} / {case}");
        }
    }
}

#[test]
fn every_chat_template_renders_a_simple_conversation() {
    let expected = load();
    let on_disk: BTreeSet<String> = std::fs::read_dir(data_dir())
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().to_str()?.strip_suffix(".jinja").map(str::to_string))
        .collect();
    let listed: BTreeSet<String> = expected.templates.iter().map(|t| t.name.clone()).collect();
    assert_eq!(on_disk, listed, "expected.json is stale: run make_expected.py");
    for t in &expected.templates {
        let template = expected.compile(t);
        let text = match expected.render(&template, t, "basic") {
            // Templates that reject a system message render the conversation without it.
            Err(ChatTemplateError::Raised(_)) => expected.render(&template, t, "no_system"),
            other => other,
        }
        .unwrap_or_else(|e| panic!("{}: {e}", t.name));
        assert!(text.contains("What is 2+2?"), "{}: {text}", t.name);
    }
}

#[test]
fn chat_template_raise_exception_reports_the_template_text() {
    let expected = load();
    let t = expected.template("google-gemma-2-2b-it");
    let err = expected.render(&expected.compile(t), t, "basic").unwrap_err();
    assert!(matches!(&err, ChatTemplateError::Raised(m) if m == "System role not supported"), "{err:?}");
    assert!(err.to_string().contains("System role not supported"), "{err}");
}

#[test]
#[ignore = "prints each case where Jinja2 fails beside ChatTemplate's error; run with --ignored --nocapture"]
fn chat_template_failures_side_by_side() {
    let expected = load();
    for t in &expected.templates {
        let template = expected.compile(t);
        for (case, want) in &t.results {
            if let Outcome::Error { kind, message } = want {
                let got = expected.render(&template, t, case).err();
                println!("{} / {case}\n  jinja2: {kind}: {message}\n  rust:   {got:?}", t.name);
            }
        }
    }
}
