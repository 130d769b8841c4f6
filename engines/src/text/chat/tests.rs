use super::*;
use serde_json::json;

fn render(source: &str, messages: &[Message], extra: serde_json::Value) -> Result<String, ChatTemplateError> {
    ChatTemplate::new(source, Some("<s>".into()), Some("</s>".into()))?.render(messages, true, &extra)
}

#[test]
fn trims_blocks_and_strips_leading_block_whitespace() {
    let source = "{{ bos_token }}{% for m in messages %}\n  {% if m.role == 'user' %}\n[{{ m.content }}]\n  {% endif %}\n{% endfor %}\n{% if add_generation_prompt %}>{% endif %}\n";
    let messages = [Message::new("user", "a"), Message::new("user", "b")];
    // Jinja2 drops the single trailing newline (keep_trailing_newline=False).
    assert_eq!(render(source, &messages, json!(null)).unwrap(), "<s>[a]\n[b]\n>");
}

#[test]
fn python_methods_loop_controls_and_namespace() {
    let source = "{% set ns = namespace(n=0) %}{% for m in messages %}{% if loop.index > 2 %}{% break %}{% endif %}\
                  {% set ns.n = ns.n + 1 %}{{ m.content.strip().upper() }}{% if m.content.startswith(' a') %}!{% endif %}\
                  {{ m.get('name', '-') }}{% for k, v in {'x': 1}.items() %}{{ k }}={{ v }}{% endfor %}{% endfor %}{{ ns.n }}";
    let messages = [Message::new("user", " a "), Message::new("user", "b"), Message::new("user", "c")];
    assert_eq!(render(source, &messages, json!({})).unwrap(), "A!-x=1B-x=12");
}

#[test]
fn raise_exception_carries_the_template_message() {
    let source = "{% macro check(m) %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% endmacro %}\
                  {% for m in messages %}{{ check(m) }}{% endfor %}";
    let err = render(source, &[Message::new("system", "x")], json!({})).unwrap_err();
    match &err {
        ChatTemplateError::Raised(message) => assert_eq!(message, "System role not supported"),
        other => panic!("expected Raised, got {other:?}"),
    }
    assert!(err.to_string().contains("System role not supported"), "{err}");
}

#[test]
fn compile_and_render_errors_are_told_apart() {
    let err = ChatTemplate::new("{% for %}", None, None).err().unwrap();
    assert!(matches!(err, ChatTemplateError::Compile(_)), "{err:?}");
    let err = render("{{ messages[0].content + 1 }}", &[Message::new("user", "x")], json!({})).unwrap_err();
    assert!(matches!(err, ChatTemplateError::Render(_)), "{err:?}");
}

#[test]
fn strftime_now_uses_the_fixed_time() {
    let now = chrono::NaiveDate::from_ymd_opt(2025, 3, 14).unwrap().and_hms_opt(10, 30, 0).unwrap();
    let template = ChatTemplate::new("{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%B %d, %Y') }}", None, None)
        .unwrap()
        .with_time(now);
    assert_eq!(template.render(&[], false, &json!({})).unwrap(), "14 Mar 2025|March 14, 2025");
    let live = ChatTemplate::new("{{ strftime_now('%Y') }}", None, None).unwrap().render(&[], false, &json!({}));
    assert_eq!(live.unwrap().len(), 4);
}

#[test]
fn context_has_tools_none_extra_and_special_tokens() {
    let source = "{{ tools is none }} {{ documents is defined }} {{ enable_thinking }} {{ bos_token }}{{ eos_token }}";
    assert_eq!(render(source, &[], json!({"enable_thinking": false})).unwrap(), "True True False <s></s>");
    assert_eq!(render(source, &[], json!({"tools": [], "eos_token": "E"})).unwrap(), "False True  <s>E");
    let none = ChatTemplate::new("{{ bos_token is defined }}", None, None).unwrap();
    assert_eq!(none.render(&[], false, &json!({})).unwrap(), "False");
}

#[test]
fn extra_must_be_an_object_without_reserved_names() {
    for extra in [json!([1]), json!({"messages": []}), json!({"add_generation_prompt": false})] {
        let err = render("x", &[], extra).unwrap_err();
        assert!(matches!(err, ChatTemplateError::Extra(_)), "{err:?}");
    }
}

#[test]
fn content_parts_reach_the_template_as_a_list() {
    let source = "{% for m in messages %}{% if m.content is string %}{{ m.content }}\
                  {% else %}{% for p in m.content %}({{ p.type }}:{{ p.text }}){% endfor %}{% endif %}{% endfor %}";
    let parts: Message =
        serde_json::from_value(json!({"role": "user", "content": [{"type": "text", "text": "hi"}]})).unwrap();
    assert_eq!(render(source, &[parts], json!({})).unwrap(), "(text:hi)");
}

#[test]
fn reasoning_is_also_shown_as_thinking_and_none_fields_are_absent() {
    let source = "{% for m in messages %}{{ m | tojson }}{% endfor %}";
    let message = Message { reasoning_content: Some("r".into()), ..Message::new("assistant", "a") };
    assert_eq!(
        render(source, &[message], json!({})).unwrap(),
        r#"{"thinking": "r", "role": "assistant", "content": "a", "reasoning_content": "r"}"#
    );
}

#[test]
fn generation_tags_render_their_body_with_their_whitespace_control() {
    assert_eq!(
        generation_blocks_as_if("a{%- generation -%}\n b {%+endgeneration%}"),
        "a{%- if true -%}\n b {%+ endif %}"
    );
    let source = "{% for m in messages %}\n{% generation %}\n[{{ m.content }}]\n{% endgeneration %}\n{% endfor %}";
    assert_eq!(render(source, &[Message::new("assistant", "x")], json!({})).unwrap(), "[x]\n");
}

#[test]
fn templates_can_be_shared_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<ChatTemplate>();
}

#[test]
fn tells_whether_the_template_reads_tools() {
    let with = ChatTemplate::new("{% if tools %}{{ tools | tojson }}{% endif %}<tool_call>", None, None).unwrap();
    assert!(with.takes_tools());
    assert!(with.source().contains("<tool_call>"));
    let without = ChatTemplate::new("{% for m in messages %}{{ m.content }}{% endfor %}", None, None).unwrap();
    assert!(!without.takes_tools());
}

#[test]
fn a_system_message_goes_into_the_next_one_where_the_template_has_no_system_role() {
    let gemma = "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}\
                 {% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}";
    let t = ChatTemplate::new(gemma, None, None).unwrap();
    let conversation = vec![Message::new("system", "Be terse."), Message::new("user", "Hi")];
    let adapted = t.with_roles_it_knows(conversation.clone());
    assert_eq!(t.render(&adapted, false, &json!({})).unwrap(), "<user>Be terse.\nHi");
    assert!(t.with_roles_it_knows(vec![Message::new("system", "alone")]).is_empty());
    // A template that renders system messages gets the conversation as it is.
    let plain =
        ChatTemplate::new("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}", None, None).unwrap();
    assert_eq!(plain.with_roles_it_knows(conversation.clone()), conversation);
    // One that ignores them has none either.
    let users = ChatTemplate::new("{% for m in messages if m.role == 'user' %}{{ m.content }}{% endfor %}", None, None);
    assert_eq!(users.unwrap().with_roles_it_knows(conversation), [Message::new("user", "Be terse.\nHi")]);
}
