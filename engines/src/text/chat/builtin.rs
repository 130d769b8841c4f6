//! llama.cpp's built-in chat templates by name (`--chat-template chatml`, as `llama-server --chat-template`
//! takes them), written as Jinja templates that render what llama.cpp's own formatting code renders for the
//! same conversation (checked against prompts recorded from llama.cpp by
//! tests/llamacpp/builtin_templates_reference.py). Roles a format has no markup for are left out, as there.

use super::{ChatTemplate, ChatTemplateError};
use crate::text::tokenizer::Tokenizer;

/// `{% for m in messages %}BODY{% endfor %}`, then `END` when the generation prompt is asked for.
macro_rules! each {
    ($body:expr, $end:expr) => {
        concat!("{% for m in messages %}", $body, "{% endfor %}{% if add_generation_prompt %}", $end, "{% endif %}")
    };
}

/// Llama 2's `[INST]` turns: `$sys` wraps system messages in `<<SYS>>`, `$bos` starts later turns with `<s>`,
/// `$strip` trims every message.
macro_rules! llama2 {
    ($sys:literal, $bos:literal, $strip:literal) => {
        concat!(
            "{% set ns = namespace(inside=true) %}{{ '[INST] ' }}{% for m in messages %}",
            "{% set c = m.content|trim if ",
            $strip,
            " else m.content %}{% if not ns.inside %}{% set ns.inside = true %}{{ '<s>[INST] ' if ",
            $bos,
            " else '[INST] ' }}{% endif %}{% if m.role == 'system' %}{{ '<<SYS>>\\n' ~ c ~ '\\n<</SYS>>\\n\\n' if ",
            $sys,
            " else c ~ '\\n' }}{% elif m.role == 'user' %}{{ c ~ ' [/INST]' }}{% else %}{{ c ~ '</s>' }}",
            "{% set ns.inside = false %}{% endif %}{% endfor %}"
        )
    };
}

/// Mistral v1/v3 `[INST]` turns: `$lead` before `[INST]` and `[/INST]`, `$trail` after `[INST]` and before an
/// answer, `$trim` trims answers.
macro_rules! mistral {
    ($lead:literal, $trail:literal, $trim:literal) => {
        concat!(
            "{% set ns = namespace(inside=false) %}{% for m in messages %}{% if not ns.inside %}{{ '",
            $lead,
            "[INST]",
            $trail,
            "' }}{% set ns.inside = true %}{% endif %}{% if m.role == 'system' %}{{ m.content ~ '\\n\\n' }}",
            "{% elif m.role == 'user' %}{{ m.content ~ '",
            $lead,
            "[/INST]' }}{% else %}{{ '",
            $trail,
            "' ~ (m.content|trim if ",
            $trim,
            " else m.content) ~ '</s>' }}{% set ns.inside = false %}{% endif %}{% endfor %}"
        )
    };
}

/// Mistral v7: `[SYSTEM_PROMPT]` and `[INST]` blocks, `$space` after each opening tag and before answers.
macro_rules! mistral_v7 {
    ($space:literal) => {
        concat!(
            "{% for m in messages %}{% if m.role == 'system' %}{{ '[SYSTEM_PROMPT]",
            $space,
            "' ~ m.content ~ '[/SYSTEM_PROMPT]' }}{% elif m.role == 'user' %}{{ '[INST]",
            $space,
            "' ~ m.content ~ '[/INST]' }}{% else %}{{ '",
            $space,
            "' ~ m.content ~ '</s>' }}{% endif %}{% endfor %}"
        )
    };
}

/// Granite 4: tool calls as assistant turns marked `<|tool_call|>`.
const GRANITE_4: &str = each!(
    "{% if m.role == 'assistant_tool_call' %}{{ '<|start_of_role|>assistant<|end_of_role|><|tool_call|>' }}\
     {% else %}{{ '<|start_of_role|>' ~ m.role ~ '<|end_of_role|>' }}{% endif %}{{ m.content ~ '<|end_of_text|>\\n' }}",
    "{{ '<|start_of_role|>assistant<|end_of_role|>' }}"
);

/// Bailing (Ling): `<role>ROLE</role>`, users as HUMAN; `$think` opens the answer with `<think>`.
macro_rules! bailing {
    ($think:literal) => {
        each!("{{ '<role>' ~ ('HUMAN' if m.role == 'user' else m.role|upper) ~ '</role>' ~ m.content }}", $think)
    };
}

/// EXAONE 3 and 4: `[|role|]` turns, trimmed; `$tool` renders tool results too.
macro_rules! exaone {
    ($tool:literal) => {
        each!(
            concat!(
                "{% if m.role == 'system' %}{{ '[|system|]' ~ m.content|trim ~ '[|endofturn|]\\n' }}",
                "{% elif m.role == 'user' %}{{ '[|user|]' ~ m.content|trim ~ '\\n' }}",
                "{% elif m.role == 'assistant' %}{{ '[|assistant|]' ~ m.content|trim ~ '[|endofturn|]\\n' }}",
                "{% elif m.role == 'tool' and ",
                $tool,
                " %}{{ '[|tool|]' ~ m.content|trim ~ '[|endofturn|]\\n' }}{% endif %}"
            ),
            "{{ '[|assistant|]' }}"
        )
    };
}

/// Vicuna: `USER:`/`ASSISTANT:` lines; `$system` prefixes system messages (Orca's `SYSTEM: `, else nothing, and
/// a blank line after).
macro_rules! vicuna {
    ($system:literal) => {
        each!(
            concat!(
                "{% if m.role == 'system' %}{{ ",
                $system,
                " }}{% elif m.role == 'user' %}{{ 'USER: ' ~ m.content ~ '\\n' }}",
                "{% elif m.role == 'assistant' %}{{ 'ASSISTANT: ' ~ m.content ~ '</s>\\n' }}{% endif %}"
            ),
            "{{ 'ASSISTANT:' }}"
        )
    };
}

/// Every built-in template: (llama.cpp's name, Jinja source).
const BUILTIN: [(&str, &str); 54] = [
    (
        "chatml",
        each!("{{ '<|im_start|>' ~ m.role ~ '\\n' ~ m.content ~ '<|im_end|>\\n' }}", "{{ '<|im_start|>assistant\\n' }}"),
    ),
    ("llama2", llama2!("false", "false", "false")),
    ("llama2-sys", llama2!("true", "false", "false")),
    ("llama2-sys-bos", llama2!("true", "true", "false")),
    ("llama2-sys-strip", llama2!("true", "false", "true")),
    ("mistral-v1", mistral!(" ", " ", "false")),
    ("mistral-v3", mistral!("", " ", "true")),
    ("mistral-v3-tekken", mistral!("", "", "false")),
    ("mistral-v7", mistral_v7!(" ")),
    ("mistral-v7-tekken", mistral_v7!("")),
    ("phi3", each!("{{ '<|' ~ m.role ~ '|>\\n' ~ m.content ~ '<|end|>\\n' }}", "{{ '<|assistant|>\\n' }}")),
    (
        "phi4",
        each!("{{ '<|im_start|>' ~ m.role ~ '<|im_sep|>' ~ m.content ~ '<|im_end|>' }}", "{{ '<|im_start|>assistant<|im_sep|>' }}"),
    ),
    ("falcon3", each!("{{ '<|' ~ m.role ~ '|>\\n' ~ m.content ~ '\\n' }}", "{{ '<|assistant|>\\n' }}")),
    ("zephyr", each!("{{ '<|' ~ m.role ~ '|>\\n' ~ m.content ~ '<|endoftext|>\\n' }}", "{{ '<|assistant|>\\n' }}")),
    (
        "monarch",
        each!("{{ ('' if loop.first else '<s>') ~ m.role ~ '\\n' ~ m.content ~ '</s>\\n' }}", "{{ '<s>assistant\\n' }}"),
    ),
    (
        "gemma",
        concat!(
            "{% set ns = namespace(system='') %}{% for m in messages %}{% if m.role == 'system' %}",
            "{% set ns.system = ns.system ~ m.content|trim %}{% else %}",
            "{% set role = 'model' if m.role == 'assistant' else m.role %}{{ '<start_of_turn>' ~ role ~ '\\n' }}",
            "{% if ns.system and role != 'model' %}{{ ns.system ~ '\\n\\n' }}{% set ns.system = '' %}{% endif %}",
            "{{ m.content|trim ~ '<end_of_turn>\\n' }}{% endif %}{% endfor %}",
            "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
        ),
    ),
    (
        "orion",
        concat!(
            "{% set ns = namespace(system='') %}{% for m in messages %}{% if m.role == 'system' %}",
            "{% set ns.system = ns.system ~ m.content %}{% elif m.role == 'user' %}{{ 'Human: ' }}",
            "{% if ns.system %}{{ ns.system ~ '\\n\\n' }}{% set ns.system = '' %}{% endif %}",
            "{{ m.content ~ '\\n\\nAssistant: </s>' }}{% else %}{{ m.content ~ '</s>' }}{% endif %}{% endfor %}"
        ),
    ),
    (
        "openchat",
        each!(
            "{% if m.role == 'system' %}{{ m.content ~ '<|end_of_turn|>' }}{% else %}\
             {{ 'GPT4 Correct ' ~ m.role[:1]|upper ~ m.role[1:] ~ ': ' ~ m.content ~ '<|end_of_turn|>' }}{% endif %}",
            "{{ 'GPT4 Correct Assistant:' }}"
        ),
    ),
    ("vicuna", vicuna!("m.content ~ '\\n\\n'")),
    ("vicuna-orca", vicuna!("'SYSTEM: ' ~ m.content ~ '\\n'")),
    (
        "deepseek",
        each!(
            "{% if m.role == 'system' %}{{ m.content }}{% elif m.role == 'user' %}{{ '### Instruction:\\n' ~ m.content ~ '\\n' }}\
             {% elif m.role == 'assistant' %}{{ '### Response:\\n' ~ m.content ~ '\\n<|EOT|>\\n' }}{% endif %}",
            "{{ '### Response:\\n' }}"
        ),
    ),
    (
        "deepseek2",
        each!(
            "{% if m.role == 'system' %}{{ m.content ~ '\\n\\n' }}{% elif m.role == 'user' %}{{ 'User: ' ~ m.content ~ '\\n\\n' }}\
             {% elif m.role == 'assistant' %}{{ 'Assistant: ' ~ m.content ~ '<｜end▁of▁sentence｜>' }}{% endif %}",
            "{{ 'Assistant:' }}"
        ),
    ),
    (
        "deepseek3",
        each!(
            "{% if m.role == 'system' %}{{ m.content ~ '\\n\\n' }}{% elif m.role == 'user' %}{{ '<｜User｜>' ~ m.content }}\
             {% elif m.role == 'assistant' %}{{ '<｜Assistant｜>' ~ m.content ~ '<｜end▁of▁sentence｜>' }}{% endif %}",
            "{{ '<｜Assistant｜>' }}"
        ),
    ),
    ("deepseek-ocr", "{% for m in messages %}{{ m.content }}{% endfor %}"),
    (
        "command-r",
        each!(
            "{% set token = {'system': 'SYSTEM', 'user': 'USER', 'assistant': 'CHATBOT'}[m.role] %}{% if token %}\
             {{ '<|START_OF_TURN_TOKEN|><|' ~ token ~ '_TOKEN|>' ~ m.content|trim ~ '<|END_OF_TURN_TOKEN|>' }}{% endif %}",
            "{{ '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' }}"
        ),
    ),
    (
        "llama3",
        each!(
            "{{ '<|start_header_id|>' ~ m.role ~ '<|end_header_id|>\\n\\n' ~ m.content|trim ~ '<|eot_id|>' }}",
            "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
        ),
    ),
    (
        "chatglm3",
        concat!("{{ '[gMASK]sop' }}", each!("{{ '<|' ~ m.role ~ '|>\\n ' ~ m.content }}", "{{ '<|assistant|>' }}")),
    ),
    (
        "chatglm4",
        concat!("{{ '[gMASK]<sop>' }}", each!("{{ '<|' ~ m.role ~ '|>\\n' ~ m.content }}", "{{ '<|assistant|>\\n' }}")),
    ),
    ("glmedge", each!("{{ '<|' ~ m.role ~ '|>\\n' ~ m.content }}", "{{ '<|assistant|>' }}")),
    (
        "minicpm",
        "{% for m in messages %}{% if m.role == 'user' %}{{ '<用户>' ~ m.content|trim ~ '<AI>' }}{% else %}\
         {{ m.content|trim }}{% endif %}{% endfor %}",
    ),
    ("exaone3", exaone!("false")),
    ("exaone4", exaone!("true")),
    (
        "exaone-moe",
        each!(
            "{% if m.role in ['system', 'user', 'assistant', 'tool'] %}\
             {{ '<|' ~ m.role ~ '|>\\n' ~ m.content|trim ~ '<|endofturn|>\\n' }}{% endif %}",
            "{{ '<|assistant|>\\n' }}"
        ),
    ),
    (
        "rwkv-world",
        "{% for m in messages %}{% if m.role == 'system' %}{{ 'System: ' ~ m.content|trim ~ '\\n\\n' }}\
         {% elif m.role == 'user' %}{{ 'User: ' ~ m.content|trim ~ '\\n\\n' }}{% if loop.last %}{{ 'Assistant:' }}{% endif %}\
         {% elif m.role == 'assistant' %}{{ 'Assistant: ' ~ m.content|trim ~ '\\n\\n' }}{% endif %}{% endfor %}",
    ),
    (
        "granite",
        each!(
            "{{ '<|start_of_role|>' ~ m.role ~ '<|end_of_role|>' }}{% if m.role == 'assistant_tool_call' %}\
             {{ '<|tool_call|>' }}{% endif %}{{ m.content ~ '<|end_of_text|>\\n' }}",
            "{{ '<|start_of_role|>assistant<|end_of_role|>' }}"
        ),
    ),
    ("granite-4.0", GRANITE_4),
    ("granite-4.1", GRANITE_4),
    (
        "gigachat",
        concat!(
            "{% set system = messages and messages[0].role == 'system' %}{{ '<s>' }}",
            "{% if system %}{{ messages[0].content ~ '<|message_sep|>' }}{% endif %}",
            "{% for m in messages[1 if system else 0:] %}{% if m.role == 'user' %}",
            "{{ 'user<|role_sep|>' ~ m.content ~ '<|message_sep|>available functions<|role_sep|>[]<|message_sep|>' }}",
            "{% elif m.role == 'assistant' %}{{ 'assistant<|role_sep|>' ~ m.content ~ '<|message_sep|>' }}{% endif %}",
            "{% endfor %}{% if add_generation_prompt %}{{ 'assistant<|role_sep|>' }}{% endif %}"
        ),
    ),
    (
        "megrez",
        each!(
            "{{ '<|role_start|>' ~ m.role ~ '<|role_end|>' ~ m.content ~ '<|turn_end|>' }}",
            "{{ '<|role_start|>assistant<|role_end|>' }}"
        ),
    ),
    (
        "yandex",
        each!(
            "{% if m.role == 'user' %}{{ ' Пользователь: ' ~ m.content ~ '\\n\\n' }}\
             {% elif m.role == 'assistant' %}{{ ' Ассистент: ' ~ m.content ~ '\\n\\n' }}{% endif %}",
            "{{ ' Ассистент:[SEP]' }}"
        ),
    ),
    ("bailing", bailing!("{{ '<role>ASSISTANT</role>' }}")),
    ("bailing-think", bailing!("{{ '<role>ASSISTANT</role><think>' }}")),
    (
        "bailing2",
        concat!(
            "{% if not (messages and messages[0].role == 'system') %}",
            "{{ '<role>SYSTEM</role>detailed thinking off<|role_end|>' }}{% endif %}",
            each!(
                "{{ '<role>' ~ ('HUMAN' if m.role == 'user' else m.role|upper) ~ '</role>' ~ m.content ~ '<|role_end|>' }}",
                "{{ '<role>ASSISTANT</role>' }}"
            )
        ),
    ),
    (
        "llama4",
        each!(
            "{{ '<|header_start|>' ~ m.role ~ '<|header_end|>\\n\\n' ~ m.content|trim ~ '<|eot|>' }}",
            "{{ '<|header_start|>assistant<|header_end|>\\n\\n' }}"
        ),
    ),
    (
        "smolvlm",
        concat!(
            "{{ '<|im_start|>' }}",
            each!(
                "{% if m.role == 'system' %}{{ m.content ~ '\\n\\n' }}{% elif m.role == 'user' %}\
                 {{ 'User: ' ~ m.content ~ '<end_of_utterance>\\n' }}{% else %}\
                 {{ 'Assistant: ' ~ m.content ~ '<end_of_utterance>\\n' }}{% endif %}",
                "{{ 'Assistant:' }}"
            )
        ),
    ),
    (
        "hunyuan-moe",
        "{% for m in messages %}{% if m.role == 'system' %}{{ '<|startoftext|>' ~ m.content ~ '<|extra_4|>' }}\
         {% elif m.role == 'assistant' %}{{ m.content ~ '<|eos|>' }}{% else %}\
         {{ '<|startoftext|>' ~ m.content ~ '<|extra_0|>' }}{% endif %}{% endfor %}",
    ),
    (
        "gpt-oss",
        each!(
            "{{ '<|start|>' ~ m.role ~ '<|message|>' ~ m.content ~ ('<|return|>' if m.role == 'assistant' else '<|end|>') }}",
            "{{ '<|start|>assistant' }}"
        ),
    ),
    (
        "hunyuan-dense",
        "{% for m in messages %}{% if loop.first and m.role == 'system' %}{{ m.content ~ '<｜hy_place▁holder▁no▁3｜>' }}\
         {% endif %}{% if m.role == 'assistant' %}{{ '<｜hy_Assistant｜>' ~ m.content ~ '<｜hy_place▁holder▁no▁2｜>' }}\
         {% elif m.role == 'user' %}{{ '<｜hy_User｜>' ~ m.content ~ '<｜hy_Assistant｜>' }}{% endif %}{% endfor %}",
    ),
    (
        "hunyuan-vl",
        "{{ '<｜hy_begin▁of▁sentence｜>' }}{% for m in messages %}{% if loop.first and m.role == 'system' %}\
         {{ m.content ~ '<｜hy_place▁holder▁no▁3｜>' }}{% elif m.role == 'user' %}{{ m.content ~ '<｜hy_User｜>' }}\
         {% elif m.role == 'assistant' %}{{ m.content ~ '<｜hy_Assistant｜>' }}{% endif %}{% endfor %}",
    ),
    (
        "kimi-k2",
        each!(
            "{% set open = {'system': '<|im_system|>system', 'user': '<|im_user|>user', \
             'assistant': '<|im_assistant|>assistant', 'tool': '<|im_system|>tool'}[m.role] %}\
             {% if open %}{{ open ~ '<|im_middle|>' }}{% endif %}{{ m.content ~ '<|im_end|>' }}",
            "{{ '<|im_assistant|>assistant<|im_middle|>' }}"
        ),
    ),
    (
        "seed_oss",
        each!(
            "{{ '<seed:bos>' ~ m.role ~ '\\n' ~ (m.content|trim if m.role == 'assistant' else m.content) ~ '<seed:eos>' }}",
            "{{ '<seed:bos>assistant\\n' }}"
        ),
    ),
    (
        "grok-2",
        each!(
            "{% if m.role == 'system' %}{{ 'System: ' ~ m.content|trim ~ '<|separator|>\\n\\n' }}\
             {% elif m.role == 'user' %}{{ 'Human: ' ~ m.content|trim ~ '<|separator|>\\n\\n' }}\
             {% elif m.role == 'assistant' %}{{ 'Assistant: ' ~ m.content ~ '<|separator|>\\n\\n' }}{% endif %}",
            "{{ 'Assistant:' }}"
        ),
    ),
    (
        "pangu-embedded",
        each!(
            "{% if loop.first and m.role != 'system' %}{{ '[unused9]系统：[unused10]' }}{% endif %}\
             {% set label = {'system': '系统', 'user': '用户', 'assistant': '助手', 'tool': '工具', 'function': '方法'}[m.role] %}\
             {% if label %}{{ '[unused9]' ~ label ~ '：' ~ m.content ~ '[unused10]' }}{% endif %}",
            "{{ '[unused9]助手：' }}"
        ),
    ),
    (
        "solar-open",
        each!("{{ '<|begin|>' ~ m.role ~ '<|content|>' ~ m.content ~ '<|end|>' }}", "{{ '<|begin|>assistant' }}"),
    ),
];

/// The names `--chat-template` accepts, in llama.cpp's order.
pub const BUILTIN_NAMES: [&str; 54] = {
    let mut names = [""; 54];
    let mut i = 0;
    while i < BUILTIN.len() {
        names[i] = BUILTIN[i].0;
        i += 1;
    }
    names
};

/// The Jinja source of llama.cpp's built-in template `name`, if it is one.
pub fn builtin(name: &str) -> Option<&'static str> {
    BUILTIN.iter().find(|(n, _)| *n == name).map(|(_, source)| *source)
}

/// Chat markers that name the built-in template a vocabulary was trained with, for a model that ships no template.
const BY_MARKER: [(&str, &str); 3] =
    [("<start_of_turn>", "gemma"), ("<|start_header_id|>", "llama3"), ("<|im_start|>", "chatml")];

/// The built-in template whose chat marker is one of `tokenizer`'s tokens (Gemma's `<start_of_turn>`, Llama 3's
/// `<|start_header_id|>`, ChatML's `<|im_start|>`), for a model that ships no template of its own.
pub fn marked_by(tokenizer: &Tokenizer) -> Option<&'static str> {
    let single = |marker: &str| tokenizer.encode(marker, false, true).is_ok_and(|ids| ids.len() == 1);
    BY_MARKER.iter().find(|(marker, _)| single(marker)).map(|&(_, name)| name)
}

impl ChatTemplate {
    /// llama.cpp's built-in template `name` for a model with `tokenizer`, if it is one. llama.cpp tokenizes what
    /// these render with the model's special tokens, and chat prompts are tokenized here without them (a model's
    /// own template writes its BOS): so the BOS goes first where the tokenizer adds one to plain text.
    pub fn builtin(name: &str, tokenizer: &Tokenizer) -> Option<Result<ChatTemplate, ChatTemplateError>> {
        let source = builtin(name)?;
        let source = if tokenizer.add_bos() { format!("{{{{ bos_token }}}}{source}") } else { source.to_string() };
        Some(ChatTemplate::with_tokens_of(&source, tokenizer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::chat::{ChatTemplate, Message};

    /// Prompts llama.cpp renders for each built-in name (tests/llamacpp/builtin_templates_reference.py).
    const REFERENCE: &str = include_str!("../../../tests/data/llamacpp-builtin-templates.json");

    #[test]
    fn every_builtin_renders_what_llama_cpp_renders() {
        let reference: serde_json::Value = serde_json::from_str(REFERENCE).unwrap();
        let prompts = reference["prompts"].as_object().unwrap();
        let names: Vec<&str> = prompts.keys().map(String::as_str).collect();
        assert_eq!(BUILTIN_NAMES.to_vec(), names, "llama.cpp's names, in its order");
        let conversations: Vec<Vec<Message>> = reference["conversations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                c.as_array()
                    .unwrap()
                    .iter()
                    .map(|m| Message::new(m[0].as_str().unwrap(), m[1].as_str().unwrap()))
                    .collect()
            })
            .collect();
        let mut failures = Vec::new();
        for (name, want) in prompts {
            let template =
                ChatTemplate::new(builtin(name).unwrap(), None, None).unwrap_or_else(|e| panic!("{name}: {e}"));
            for (i, messages) in conversations.iter().enumerate() {
                for (add, want) in want[i].as_array().unwrap().iter().enumerate() {
                    let got = template.render(messages, add == 1, &serde_json::Value::Null).unwrap();
                    if Some(got.as_str()) != want.as_str() {
                        failures.push(format!("{name} #{i} add={add}:\n  got  {got:?}\n  want {want}"));
                    }
                }
            }
        }
        assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
        assert_eq!(builtin("nope"), None);
    }

    #[test]
    fn the_bos_goes_first_where_the_tokenizer_adds_one() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/stories260k/hf/tokenizer.json");
        let tokenizer = Tokenizer::from_tokenizer_json(std::path::Path::new(path)).unwrap();
        assert!(tokenizer.add_bos());
        let template = ChatTemplate::builtin("chatml", &tokenizer).unwrap().unwrap();
        let text = template.render(&[Message::new("user", "Hi")], true, &serde_json::Value::Null).unwrap();
        assert_eq!(text, "<s><|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
        assert!(ChatTemplate::builtin("nope", &tokenizer).is_none());
        // Its vocabulary has no chat markers.
        assert_eq!(marked_by(&tokenizer), None);
    }

    #[test]
    fn chat_markers_name_the_builtin_template() {
        let open = |vocab: &str| {
            let path = format!("{}/tests/data/tokenizers/ggml-vocab-{vocab}.gguf", env!("CARGO_MANIFEST_DIR"));
            Tokenizer::from_gguf(&tgi_formats::GgufFile::open(std::path::Path::new(&path)).unwrap()).unwrap()
        };
        assert_eq!(marked_by(&open("llama-bpe")), Some("llama3"));
        assert_eq!(marked_by(&open("qwen2")), Some("chatml"));
        assert_eq!(marked_by(&open("gpt-2")), None);
        assert!(BY_MARKER.iter().all(|(_, name)| builtin(name).is_some()));
    }
}
