//! What a request's `Cache-Control` header asks of the response cache, carried to where the engine
//! requests are submitted by a task-local scoped around the request's handler.

use std::future::Future;

use hyper::header::CACHE_CONTROL;
use hyper::HeaderMap;

/// Whether a request may be answered from the cache and whether its answer may be stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Directive {
    /// May be answered from the cache (not with `no-cache` or `no-store`).
    pub lookup: bool,
    /// Its answer may be stored (not with `no-store`).
    pub store: bool,
}

impl Default for Directive {
    fn default() -> Self {
        Directive { lookup: true, store: true }
    }
}

tokio::task_local! {
    /// The directive of the request the current task serves.
    static CURRENT: Directive;
}

impl Directive {
    /// The directive of `headers`' `Cache-Control`: `no-cache` computes a fresh answer (and stores
    /// it), `no-store` computes one and stores nothing; other directives are ignored.
    pub fn of(headers: &HeaderMap) -> Directive {
        let mut d = Directive::default();
        let values = headers.get_all(CACHE_CONTROL).iter().filter_map(|v| v.to_str().ok());
        for token in values.flat_map(|v| v.split(',')).map(str::trim) {
            if token.eq_ignore_ascii_case("no-cache") {
                d.lookup = false;
            } else if token.eq_ignore_ascii_case("no-store") {
                d = Directive { lookup: false, store: false };
            }
        }
        d
    }

    /// Runs `fut` with this directive as [`Directive::current`].
    pub async fn scope<F: Future>(self, fut: F) -> F::Output {
        CURRENT.scope(self, fut).await
    }

    /// The directive of the request the current task serves; the default outside one.
    pub fn current() -> Directive {
        CURRENT.try_with(|d| *d).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use hyper::header::HeaderValue;

    use super::*;

    #[test]
    fn cache_control_tokens() {
        let of = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(CACHE_CONTROL, HeaderValue::from_static(v));
            Directive::of(&h)
        };
        assert_eq!(Directive::of(&HeaderMap::new()), Directive::default());
        assert_eq!(of("no-cache"), Directive { lookup: false, store: true });
        assert_eq!(of("max-age=0, No-Cache"), Directive { lookup: false, store: true });
        assert_eq!(of("no-store"), Directive { lookup: false, store: false });
        assert_eq!(of("max-age=60"), Directive::default());
    }

    #[tokio::test]
    async fn current_follows_the_scope() {
        assert_eq!(Directive::current(), Directive::default());
        let d = Directive { lookup: false, store: true };
        assert_eq!(d.scope(async { Directive::current() }).await, d);
    }
}
