//! Reasoning split out of chat answers: for chat templates whose models think in a `<think>…</think>` block
//! (Qwen3, QwQ, the DeepSeek-R1 distills), the block's text goes to `reasoning_content` (and `reasoning`, vLLM's
//! newer name) and the rest to `content`, as llama-server's `--reasoning-format deepseek` does. The block is the
//! answer's start when the prompt opens it (DeepSeek-R1's generation prompt ends in `<think>`), else one the
//! answer opens before any other text. The reasoning is trimmed, and so is the whitespace between the block and
//! the content; streamed and whole answers split alike, so the deltas add up to the whole answer's fields.

use serde_json::Value;
use tgi_engines::text::chat::ChatTemplate;
use tgi_engines::text::thinking::Thinking;
use tgi_engines::text::tokenizer::Tokenizer;

/// The text that opens a thinking block.
pub const THINK_START: &str = "<think>";
/// The text that closes it.
pub const THINK_END: &str = "</think>";

/// How answers' thinking is returned (`--reasoning-format`, llama-server's flag).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ReasoningFormat {
    /// Left in `content`, as the model wrote it.
    None,
    /// In `reasoning_content` and `reasoning`, apart from `content`.
    #[default]
    Deepseek,
}

/// The server's reasoning flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReasoningSettings {
    /// `--reasoning-format`.
    pub format: ReasoningFormat,
    /// `--reasoning-budget`: most thinking tokens per answer; `None`: no limit.
    pub budget: Option<usize>,
}

impl ReasoningSettings {
    /// The variables of a chat template that thinks (`thinks`): the request's `chat_template_kwargs`, with
    /// `enable_thinking` when the request does not set it, as llama-server passes it: false when the budget is 0,
    /// else true (templates written for llama.cpp close the block at once when it is not set).
    pub fn kwargs(&self, given: Option<&Value>, thinks: bool) -> Option<Value> {
        let mut kwargs = given.cloned();
        if thinks {
            let map = kwargs.get_or_insert_with(|| Value::Object(serde_json::Map::new()));
            if let Some(map) = map.as_object_mut() {
                map.entry("enable_thinking").or_insert(Value::Bool(self.budget != Some(0)));
            }
        }
        kwargs
    }
}

/// Whether `template` renders thinking blocks (its source names the closing tag).
pub fn thinks(template: &ChatTemplate) -> bool {
    template.source().contains(THINK_END)
}

/// The thinking blocks llama.cpp knows besides `<think>`: Gemma 4's thought channel, Command R7B's.
const OTHER_THINKING: [&str; 2] = ["<|channel>", "<|START_THINKING|>"];

/// Whether `template` gets `enable_thinking`: it thinks in `<think>` blocks, or reads the switch for another block
/// llama.cpp knows, as llama-server passes it to such templates (and not to others that read it, such as Apertus').
pub fn switches_thinking(template: &ChatTemplate) -> bool {
    let source = template.source();
    thinks(template) || (source.contains("enable_thinking") && OTHER_THINKING.iter().any(|m| source.contains(m)))
}

/// Whether the rendered `prompt` ends inside a thinking block (its last opening tag is not closed).
pub fn opens(prompt: &str) -> bool {
    prompt.rfind(THINK_START).is_some_and(|at| prompt.rfind(THINK_END).is_none_or(|end| end < at))
}

/// The engine's view of a request's thinking: where it starts, the `budget` of tokens (`None`: no limit) and the
/// closing tag's tokens, forced when the budget is spent.
pub fn thinking(prompt: &str, budget: Option<usize>, tokenizer: &Tokenizer) -> Thinking {
    Thinking {
        start: THINK_START.into(),
        end: THINK_END.into(),
        open: opens(prompt),
        budget,
        forced: end_tokens(tokenizer),
    }
}

/// The closing tag's tokens, without the space token an SPM tokenizer puts before text it starts (`▁<`), which
/// would be forced into the answer too.
fn end_tokens(tokenizer: &Tokenizer) -> Vec<u32> {
    let mut ids = tokenizer.encode(THINK_END, false, false).unwrap_or_default();
    let blank = |id: u32| tokenizer.token_to_piece(id).iter().all(u8::is_ascii_whitespace);
    while ids.len() > 1 && blank(ids[0]) {
        ids.remove(0);
    }
    ids
}

/// A part of an answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    /// More of the thinking block's text.
    Reasoning(String),
    /// More of the answer proper.
    Content(String),
}

/// Where the reader stands.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    /// Nothing but whitespace and a start of the opening tag so far: both held back.
    Before,
    /// Inside the block; `started` once its first non-whitespace character came.
    Inside { started: bool },
    /// After the block (or without one); `started` once the content's first non-whitespace character came.
    After { started: bool },
}

/// One answer's reader, fed its text as it comes.
#[derive(Clone, Debug)]
pub struct Splitter {
    phase: Phase,
    /// Text not given out yet: what may still be the opening tag, or the reasoning's trailing whitespace and what
    /// may begin the closing tag.
    held: String,
}

impl Splitter {
    /// A reader of an answer whose prompt ends inside a thinking block (`open`) or not.
    pub fn new(open: bool) -> Self {
        let phase = if open { Phase::Inside { started: false } } else { Phase::Before };
        Splitter { phase, held: String::new() }
    }

    /// The parts of more text.
    pub fn feed(&mut self, text: &str) -> Vec<Part> {
        self.held.push_str(text);
        let mut out = Vec::new();
        loop {
            match self.phase {
                Phase::Before => {
                    let rest = self.held.trim_start();
                    if let Some(after) = rest.strip_prefix(THINK_START) {
                        self.held = after.to_string();
                        self.phase = Phase::Inside { started: false };
                    } else if rest.is_empty() || THINK_START.starts_with(rest) {
                        return out;
                    } else {
                        self.phase = Phase::After { started: true };
                    }
                }
                Phase::Inside { started } => {
                    if let Some(at) = self.held.find(THINK_END) {
                        let before = self.held[..at].trim_end();
                        push(&mut out, Part::Reasoning(skip_space(before, started).to_string()));
                        self.held.drain(..at + THINK_END.len());
                        self.phase = Phase::After { started: false };
                        continue;
                    }
                    // Keep back the trailing whitespace and what may begin the closing tag.
                    let keep = tag_start(&self.held, THINK_END);
                    let give = self.held[..keep].trim_end().len();
                    let text = skip_space(&self.held[..give], started).to_string();
                    let started = started || !text.is_empty();
                    push(&mut out, Part::Reasoning(text));
                    self.held.drain(..give);
                    if !started {
                        self.held = self.held.trim_start().to_string();
                    }
                    self.phase = Phase::Inside { started };
                    return out;
                }
                Phase::After { started } => {
                    let text = skip_space(&self.held, started).to_string();
                    self.phase = Phase::After { started: started || !text.is_empty() };
                    push(&mut out, Part::Content(text));
                    self.held.clear();
                    return out;
                }
            }
        }
    }

    /// The parts of what was held back, at the answer's end: an unclosed block's reasoning, or text that turned
    /// out not to open one.
    pub fn finish(&mut self) -> Vec<Part> {
        let held = std::mem::take(&mut self.held);
        let mut out = Vec::new();
        match self.phase {
            Phase::Before => push(&mut out, Part::Content(held)),
            Phase::Inside { started } => push(&mut out, Part::Reasoning(skip_space(held.trim_end(), started).into())),
            Phase::After { .. } => {}
        }
        out
    }
}

/// `text` without its leading whitespace unless its part `started` already.
fn skip_space(text: &str, started: bool) -> &str {
    if started {
        text
    } else {
        text.trim_start()
    }
}

/// Where a suffix of `text` that begins `tag` starts (`text.len()` when none does).
fn tag_start(text: &str, tag: &str) -> usize {
    (1..tag.len().min(text.len() + 1))
        .rev()
        .find(|&n| text.is_char_boundary(text.len() - n) && tag.starts_with(&text[text.len() - n..]))
        .map_or(text.len(), |n| text.len() - n)
}

/// Adds a non-empty part.
fn push(out: &mut Vec<Part>, part: Part) {
    let empty = match &part {
        Part::Reasoning(t) | Part::Content(t) => t.is_empty(),
    };
    if !empty {
        out.push(part);
    }
}

/// A whole answer's reasoning (`None` when it has none) and content.
pub fn split(open: bool, text: &str) -> (Option<String>, String) {
    let mut s = Splitter::new(open);
    let mut parts = s.feed(text);
    parts.extend(s.finish());
    let (mut reasoning, mut content) = (String::new(), String::new());
    for p in parts {
        match p {
            Part::Reasoning(t) => reasoning.push_str(&t),
            Part::Content(t) => content.push_str(&t),
        }
    }
    ((!reasoning.is_empty()).then_some(reasoning), content)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `text` fed in pieces of `n` characters, the parts joined per kind.
    fn streamed(open: bool, text: &str, n: usize) -> (Option<String>, String) {
        let chars: Vec<char> = text.chars().collect();
        let mut s = Splitter::new(open);
        let mut parts: Vec<Part> = chars.chunks(n).flat_map(|c| s.feed(&c.iter().collect::<String>())).collect();
        parts.extend(s.finish());
        let (mut r, mut c) = (String::new(), String::new());
        for p in parts {
            match p {
                Part::Reasoning(t) => r.push_str(&t),
                Part::Content(t) => c.push_str(&t),
            }
        }
        ((!r.is_empty()).then_some(r), c)
    }

    #[test]
    fn blocks_split_from_the_answer() {
        let cases: &[(bool, &str, Option<&str>, &str)] = &[
            (false, "<think>\nLet me see.\n</think>\n\nIt is 4.", Some("Let me see."), "It is 4."),
            (false, "  <think>a</think>b", Some("a"), "b"),
            (true, "\nHmm, 2+2.\n</think>\n\n4", Some("Hmm, 2+2."), "4"),
            (true, "cut short </th", Some("cut short </th"), ""),
            (true, "</think>\n\nAnswer", None, "Answer"),
            (false, "No block at all.", None, "No block at all."),
            (false, "  <thin", None, "  <thin"),
            (false, " Say <think> later", None, " Say <think> later"),
            (false, "<think></think>x<think>y</think>", None, "x<think>y</think>"),
            (true, "a < b </thinker> c</think> d ", Some("a < b </thinker> c"), "d "),
            (true, "é\u{3000}</think>\u{3000}ü", Some("é"), "ü"),
        ];
        for &(open, text, reasoning, content) in cases {
            let whole = split(open, text);
            assert_eq!((whole.0.as_deref(), whole.1.as_str()), (reasoning, content), "{text:?}");
            for n in 1..=4 {
                assert_eq!(streamed(open, text, n), whole, "{text:?} in pieces of {n}");
            }
        }
    }

    #[test]
    fn enable_thinking_follows_the_budget_unless_the_request_sets_it() {
        let on = ReasoningSettings::default();
        let off = ReasoningSettings { budget: Some(0), ..on };
        assert_eq!(on.kwargs(None, true), Some(serde_json::json!({"enable_thinking": true})));
        assert_eq!(off.kwargs(None, true), Some(serde_json::json!({"enable_thinking": false})));
        let given = serde_json::json!({"enable_thinking": true, "x": 1});
        assert_eq!(off.kwargs(Some(&given), true), Some(given.clone()));
        assert_eq!(off.kwargs(None, false), None);
        assert_eq!(on.kwargs(Some(&given), false), Some(given));
    }

    #[test]
    fn prompts_that_open_a_block() {
        assert!(opens("<|Assistant|><think>\n"));
        assert!(!opens("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
        assert!(!opens("<|im_start|>assistant\n"));
        assert!(opens("<think>old</think> user <think>"));
    }

    #[test]
    fn suffixes_that_begin_a_tag() {
        assert_eq!(tag_start("abc</th", THINK_END), 3);
        assert_eq!(tag_start("abc<", THINK_END), 3);
        assert_eq!(tag_start("abc", THINK_END), 3);
        assert_eq!(tag_start("é", THINK_END), 2);
    }
}
