//! Which API the server speaks (`--api auto` probes `/info`, then `/v1/models`) and the model it serves (the first
//! `/v1/models` lists, for every API but TGI's, unless `--model-name` names it).

use anyhow::Result;
use hyper::Method;
use serde_json::Value;

use super::args::{ApiChoice, Endpoint as OpenAiEndpoint};
use super::client::api::Api;
use super::client::http::Endpoint;
use crate::error::InputError;

/// What probing found.
#[derive(Debug, Clone)]
pub struct Detected {
    /// The API to use.
    pub api: Api,
    /// The model the server names, when it does.
    pub model: Option<String>,
    /// Whether the server has TGI's routes (`/info`, `/tokenize`).
    pub tgi_routes: bool,
}

/// GET `path` and parse JSON; `Err` with a one-line reason.
async fn get_json(e: &Endpoint, path: &str) -> Result<Value, String> {
    match e.call(Method::GET, path, Vec::new()).await {
        Ok((200, body)) => serde_json::from_str(&body).map_err(|_| format!("GET {path}: not JSON")),
        Ok((status, _)) => Err(format!("GET {path}: HTTP {status}")),
        Err((_, m)) => Err(format!("GET {path}: {m}")),
    }
}

/// The TGI model id from `/info`.
async fn tgi_info(e: &Endpoint) -> Result<Option<String>, String> {
    let v = get_json(e, "/info").await?;
    if v.get("model_id").is_none() && v.get("version").is_none() {
        return Err("GET /info: not TGI's info".into());
    }
    Ok(v.get("model_id").and_then(Value::as_str).map(str::to_string))
}

/// The first model `/v1/models` lists.
async fn openai_models(e: &Endpoint) -> Result<Option<String>, String> {
    let v = get_json(e, "/v1/models").await?;
    let data = v.get("data").and_then(Value::as_array).ok_or("GET /v1/models: no \"data\" list")?;
    Ok(data.first().and_then(|m| m.get("id")).and_then(Value::as_str).map(str::to_string))
}

/// Settles the API: as asked, or by probing. `ignore_eos` needs the OpenAI API (TGI's has no such parameter).
pub async fn detect(
    e: &Endpoint,
    choice: ApiChoice,
    endpoint: OpenAiEndpoint,
    model_name: Option<&str>,
    ignore_eos: bool,
) -> Result<Detected> {
    let chat = endpoint == OpenAiEndpoint::Chat;
    let info = tgi_info(e).await;
    let tgi_routes = info.is_ok();
    let want_openai = match choice {
        ApiChoice::Tgi => {
            if chat {
                return Err(InputError(
                    "--endpoint chat is OpenAI's /v1/chat/completions; use --api openai (or auto) with it".into(),
                )
                .into());
            }
            if ignore_eos {
                return Err(InputError(
                    "--ignore-eos: TGI's API has no ignore_eos parameter; use --api openai (tgi serve, vLLM and \
                     llama.cpp accept it there) or leave --ignore-eos out"
                        .into(),
                )
                .into());
            }
            false
        }
        ApiChoice::Openai | ApiChoice::Anthropic | ApiChoice::Responses => true,
        // --endpoint chat and --ignore-eos exist only on the OpenAI side: asking for them settles it.
        ApiChoice::Auto => ignore_eos || chat || info.is_err(),
    };
    if !want_openai {
        return Ok(Detected { api: Api::Tgi, model: info.ok().flatten(), tgi_routes });
    }
    let listed = openai_models(e).await;
    let model = match (model_name, &listed) {
        (Some(m), _) => m.to_string(),
        (None, Ok(Some(m))) => m.clone(),
        (None, Ok(None)) => return Err(InputError("GET /v1/models lists no model; pass --model-name".into()).into()),
        (None, Err(why)) => {
            let tgi = info.as_ref().err().map_or(String::new(), |w| format!("{w}; "));
            anyhow::bail!(
                "cannot tell what the server speaks ({tgi}{why}); is it running, and is it a TGI- or \
                 OpenAI-compatible server? (--api and --model-name skip the probe)"
            );
        }
    };
    let api = match choice {
        ApiChoice::Anthropic => Api::Anthropic { model: model.clone() },
        ApiChoice::Responses => Api::Responses { model: model.clone() },
        _ => Api::OpenAi { model: model.clone(), chat },
    };
    Ok(Detected { api, model: Some(model), tgi_routes })
}
