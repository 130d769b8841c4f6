//! The web chat page at `/`, end to end: served to browsers (and only to them) unless `--no-webui`, reachable
//! without the API key; and used in a real browser (Debian's chromium through Selenium and chromedriver,
//! tests/python/webui_browser.py), which outside CI is skipped when chromium or chromedriver is missing.

mod common;

use std::path::Path;

use common::server::Server;

/// What a browser's navigation asks for.
const BROWSER_ACCEPT: &str = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";

/// `GET url` with this `Accept` header: status, content type, Content-Security-Policy and body.
fn get_accepting(url: &str, accept: &str) -> (u16, Option<String>, Option<String>, String) {
    let r = ureq::get(url).set("Accept", accept).call().expect("GET");
    let header = |name: &str| r.header(name).map(str::to_owned);
    let (content_type, csp) = (header("content-type"), header("content-security-policy"));
    (r.status(), content_type, csp, r.into_string().unwrap())
}

#[test]
fn browsers_get_the_page_at_root_other_clients_the_health_check_and_no_webui_turns_it_off() {
    let server = Server::start(&["--api-key", "s3cret"]);
    let (status, content_type, csp, body) = get_accepting(&server.url("/"), BROWSER_ACCEPT);
    assert_eq!((status, content_type.as_deref()), (200, Some("text/html; charset=utf-8")), "no key needed");
    assert!(body.starts_with("<!doctype html>") && body.contains("<title>tgi chat</title>"), "{body}");
    let csp = csp.expect("a Content-Security-Policy");
    assert!(csp.starts_with("default-src 'none'; script-src 'sha256-") && csp.contains("connect-src 'self'"), "{csp}");
    assert_eq!(get_accepting(&server.url("/"), "*/*"), (200, None, None, String::new()), "the health check");
    drop(server);
    for (flags, env) in [(&["--no-webui"][..], &[][..]), (&[], &[("TGI_NO_WEBUI", "true")])] {
        let server = Server::start_with_env(flags, env);
        assert_eq!(get_accepting(&server.url("/"), BROWSER_ACCEPT), (200, None, None, String::new()), "{flags:?}");
    }
}

#[test]
fn the_page_chats_streams_stops_and_regenerates_in_a_real_browser() {
    let (chromium, chromedriver) = ("/usr/bin/chromium", "/usr/bin/chromedriver");
    if let Some(missing) = [chromium, chromedriver].into_iter().find(|p| !Path::new(p).exists()) {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI: {missing} is missing (apt-get install chromium chromium-driver)"
        );
        eprintln!("skipped: {missing} is missing (apt-get install chromium chromium-driver runs it)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let template = dir.path().join("zephyr.jinja");
    std::fs::write(&template, common::ZEPHYR).unwrap();
    let key = "s3cret";
    let server = Server::start(&["--chat-template", template.to_str().unwrap(), "--api-key", key]);
    let args = [key, chromium, chromedriver].map(std::ffi::OsStr::new);
    print!("{}", server.run_python("webui_browser.py", &args, "webui ok"));
}
