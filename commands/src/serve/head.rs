//! The limits on a request's head and the checks made on it before routing: exactly one valid `Host`
//! (RFC 9112 §3.2), the length of the request target, and a JSON `Content-Type` on POST routes.
//!
//! The `Content-Type` rule is what keeps a web page from making cross-site generation requests: a
//! browser sends `text/plain`, form and multipart bodies, and bodies without a `Content-Type` (a
//! `fetch` of a `Blob` or `ArrayBuffer`), without a CORS preflight, but never `application/json`. So
//! a missing `Content-Type` is refused too (415), as TGI's own router does.

use hyper::header::{CONTENT_TYPE, HOST};
use hyper::http::uri::Authority;
use hyper::{HeaderMap, Uri, Version};

use super::error::ApiError;

/// Longest request target accepted; longer ones get 414.
pub const MAX_URI_BYTES: usize = 8 << 10;

/// Largest header section hyper reads, start line included; larger ones get 431 (written by hyper,
/// given its JSON body by [`super::parse_errors`]).
pub const MAX_HEAD_BYTES: usize = 64 << 10;

/// Most header fields hyper reads; more get 431 (as [`MAX_HEAD_BYTES`]).
pub const MAX_HEADERS: usize = 100;

/// Checks the `Host` header: exactly one for HTTP/1.1, at most one for HTTP/1.0, and a valid
/// `host[:port]` either way.
pub fn host(version: Version, headers: &HeaderMap) -> Result<(), ApiError> {
    let mut values = headers.get_all(HOST).iter();
    match (values.next(), values.next()) {
        (None, _) if version == Version::HTTP_10 => Ok(()),
        (None, _) => Err(ApiError::BadRequest("an HTTP/1.1 request needs a `Host` header".into())),
        (Some(_), Some(_)) => Err(ApiError::BadRequest("more than one `Host` header".into())),
        (Some(v), None) => match Authority::try_from(v.as_bytes()) {
            Ok(a) if !a.as_str().contains('@') => Ok(()),
            _ => Err(ApiError::BadRequest("the `Host` header is not a valid host[:port]".into())),
        },
    }
}

/// Checks the request target against [`MAX_URI_BYTES`].
pub fn uri(uri: &Uri) -> Result<(), ApiError> {
    let len = uri.authority().map_or(0, |a| a.as_str().len()) + uri.path_and_query().map_or(0, |p| p.as_str().len());
    if len > MAX_URI_BYTES {
        return Err(ApiError::UriTooLong(MAX_URI_BYTES));
    }
    Ok(())
}

/// Checks that a POST body is declared as JSON: one `Content-Type` of `application/json` or
/// `application/*+json`, parameters (`charset=utf-8`) allowed.
pub fn json_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let mut values = headers.get_all(CONTENT_TYPE).iter();
    let value = match (values.next(), values.next()) {
        (None, _) => return Err(ApiError::UnsupportedMediaType("no `Content-Type`".into())),
        (Some(_), Some(_)) => return Err(ApiError::UnsupportedMediaType("several `Content-Type` headers".into())),
        (Some(v), None) => v,
    };
    let text = String::from_utf8_lossy(value.as_bytes());
    let essence = text.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    let json = match essence.split_once('/') {
        Some(("application", sub)) => sub == "json" || (sub.len() > 5 && sub.ends_with("+json")),
        _ => false,
    };
    if json {
        Ok(())
    } else {
        Err(ApiError::UnsupportedMediaType(format!("`{}`", text.chars().take(100).collect::<String>())))
    }
}

#[cfg(test)]
mod tests {
    use hyper::header::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn host_exactly_once_on_http_1_1() {
        let v11 = Version::HTTP_11;
        assert!(host(v11, &headers(&[("host", "example.com:3000")])).is_ok());
        assert!(host(v11, &headers(&[("host", "[::1]:3000")])).is_ok());
        assert!(host(Version::HTTP_10, &headers(&[])).is_ok());
        for bad in [vec![], vec![("host", "a"), ("host", "a")], vec![("host", "")], vec![("host", "u@h")]] {
            assert!(matches!(host(v11, &headers(&bad)), Err(ApiError::BadRequest(_))), "{bad:?}");
        }
        assert!(host(Version::HTTP_10, &headers(&[("host", "a"), ("host", "b")])).is_err());
    }

    #[test]
    fn uri_length_is_capped() {
        assert!(uri(&Uri::from_static("/generate?x=1")).is_ok());
        let long: Uri = format!("/info?q={}", "a".repeat(MAX_URI_BYTES)).parse().unwrap();
        assert!(matches!(uri(&long), Err(ApiError::UriTooLong(MAX_URI_BYTES))));
    }

    #[test]
    fn only_json_content_types_pass() {
        for ok in ["application/json", "application/json; charset=utf-8", "Application/JSON", "application/vnd.x+json"]
        {
            assert!(json_content_type(&headers(&[("content-type", ok)])).is_ok(), "{ok}");
        }
        for bad in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/+json",
            "text/json",
            "",
        ] {
            let e = json_content_type(&headers(&[("content-type", bad)])).unwrap_err();
            assert!(matches!(e, ApiError::UnsupportedMediaType(_)), "{bad}");
        }
        assert!(json_content_type(&headers(&[])).is_err());
        let two = headers(&[("content-type", "application/json"), ("content-type", "application/json")]);
        assert!(json_content_type(&two).is_err());
    }
}
