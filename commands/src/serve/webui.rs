//! The web chat page at `/`: one static HTML file with its CSS and JavaScript inline, embedded in the
//! binary, served to browsers (requests whose `Accept` names `text/html`) unless `--no-webui`. It chats
//! over `/v1/chat/completions` like any client, so it needs no route of its own. Its
//! Content-Security-Policy allows the page's own inline script and style (by hash) and requests to
//! this server, and nothing else: no external loads, no injected scripts or handlers.

use std::sync::OnceLock;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use hyper::header::{HeaderValue, ACCEPT, CACHE_CONTROL, CONTENT_SECURITY_POLICY, VARY};
use hyper::{HeaderMap, StatusCode};
use sha2::{Digest, Sha256};

use super::body::{self, HttpResponse};

/// The page.
pub const PAGE: &str = include_str!("webui.html");

/// Whether a request asks for HTML: its `Accept` header lists `text/html` (browsers' navigations do;
/// `*/*`, curl's, does not count), with a non-zero quality.
pub fn asked(headers: &HeaderMap) -> bool {
    headers.get_all(ACCEPT).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).any(|range| {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("");
        let zero = parts.any(|p| {
            p.split_once('=').is_some_and(|(k, q)| k.trim().eq_ignore_ascii_case("q") && q.trim().parse() == Ok(0.0))
        });
        media.eq_ignore_ascii_case("text/html") && !zero
    })
}

/// The page, with its Content-Security-Policy.
pub fn page() -> HttpResponse {
    let mut r = body::response(StatusCode::OK, "text/html; charset=utf-8", PAGE);
    let h = r.headers_mut();
    h.insert(CONTENT_SECURITY_POLICY, policy().clone());
    h.insert(VARY, HeaderValue::from_static("accept"));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    h.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    r
}

/// The page's Content-Security-Policy: its inline script and style by their SHA-256, requests to this
/// server only, a data: URL for the (empty) icon, and no frames, forms, plugins or base URL.
fn policy() -> &'static HeaderValue {
    static POLICY: OnceLock<HeaderValue> = OnceLock::new();
    POLICY.get_or_init(|| {
        let script = hash(inline(PAGE, "script"));
        let style = hash(inline(PAGE, "style"));
        let csp = format!(
            "default-src 'none'; script-src {script}; style-src {style}; connect-src 'self'; img-src data:; \
             base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
        );
        HeaderValue::from_str(&csp).expect("a policy is ASCII")
    })
}

/// The text of the page's one `<tag>` element (written without attributes).
fn inline<'a>(page: &'a str, tag: &str) -> &'a str {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    let start = page.find(&open).expect("the page has the element") + open.len();
    let len = page[start..].find(&close).expect("the element is closed");
    &page[start..start + len]
}

/// A CSP source for inline text with this content.
fn hash(text: &str) -> String {
    format!("'sha256-{}'", BASE64.encode(Sha256::digest(text.as_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(ACCEPT, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn browsers_ask_for_html_and_other_clients_do_not() {
        let chromium = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,*/*;q=0.8";
        assert!(asked(&accept(chromium)));
        assert!(asked(&accept("TEXT/HTML; q=0.5")));
        for other in ["*/*", "application/json", "text/*", "text/html;q=0", "text/htmlx"] {
            assert!(!asked(&accept(other)), "{other}");
        }
        assert!(!asked(&HeaderMap::new()));
    }

    #[test]
    fn the_page_is_self_contained_and_its_policy_names_its_inline_code() {
        assert_eq!(PAGE.matches("<script").count(), 1, "one inline script");
        assert_eq!(PAGE.matches("<style").count(), 1, "one inline style sheet");
        for external in ["http://", "https://", "src=", "@import", "url("] {
            assert!(!PAGE.contains(external), "the page loads nothing from elsewhere: {external}");
        }
        // Inline handlers and style attributes would need 'unsafe-inline'; markup is built with textContent.
        assert!(!regex::Regex::new(r#"\son[a-z]+\s*="#).unwrap().is_match(PAGE), "no inline event handlers");
        assert!(!PAGE.contains(" style=") && !PAGE.contains("innerHTML"));
        let csp = policy().to_str().unwrap();
        assert!(csp.starts_with("default-src 'none'; script-src 'sha256-"), "{csp}");
        assert!(csp.contains(&hash(inline(PAGE, "script"))) && csp.contains(&hash(inline(PAGE, "style"))));
        assert_eq!(hash("a"), "'sha256-ypeBEsobvcr6wjGzmiPcTaeG7/gUfE5yuYB3ha/uSLs='");
        let r = page();
        assert_eq!(r.headers()["content-type"], "text/html; charset=utf-8");
        assert_eq!(r.headers()["vary"], "accept");
    }
}
