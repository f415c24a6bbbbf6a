//! URLs are stored without query string, fragment or credentials: they may carry card
//! tokens, session IDs and passwords.

use std::borrow::Cow;

/// Returns the URL without userinfo, query and fragment, and its host (for
/// `server.address`). Anything that is not `scheme://authority/...` is returned cut at the
/// first `?` or `#`, with no host.
pub fn sanitize_url(url: &str) -> (Cow<'_, str>, Option<String>) {
    let bytes = url.as_bytes();
    let end = memchr::memchr2(b'?', b'#', bytes).unwrap_or(bytes.len());
    let cut = &url[..end];
    // The common case, a clean URL, costs no formatting.
    if memchr::memchr(b'@', cut.as_bytes()).is_none() {
        if let Some(scheme_end) = scheme_end(cut) {
            let rest = &cut[scheme_end + 3..];
            let host_end = memchr::memchr(b'/', rest.as_bytes()).unwrap_or(rest.len());
            return (Cow::Borrowed(cut), host_of(&rest[..host_end]));
        }
    }
    let Some(scheme_end) = scheme_end(cut) else {
        return (Cow::Borrowed(cut), None);
    };
    let auth_start = scheme_end + 3;
    let auth_end = cut[auth_start..]
        .find('/')
        .map_or(cut.len(), |i| auth_start + i);
    let authority = &cut[auth_start..auth_end];
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let sanitized = format!("{}{}{}", &cut[..auth_start], host_port, &cut[auth_end..]);
    (Cow::Owned(sanitized), host_of(host_port))
}

/// Where the first `://` starts (as `str::find("://")`, without building a searcher).
fn scheme_end(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    memchr::memchr_iter(b':', b).find(|&i| b[i + 1..].starts_with(b"//"))
}

fn host_of(host_port: &str) -> Option<String> {
    let host = if let Some(rest) = host_port.strip_prefix('[') {
        rest.split_once(']').map_or(rest, |(h, _)| h)
    } else {
        host_port.split(':').next().unwrap_or("")
    };
    (!host.is_empty()).then(|| host.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_credentials_query_and_fragment() {
        let cases = [
            (
                "https://pay.example.com/v1/charges?card=4111#x",
                "https://pay.example.com/v1/charges",
                Some("pay.example.com"),
            ),
            (
                "https://user:pw@Api.Example.com:8443/items/42?token=abc",
                "https://Api.Example.com:8443/items/42",
                Some("api.example.com"),
            ),
            ("http://[::1]:8080/x", "http://[::1]:8080/x", Some("::1")),
            ("http://127.0.0.1", "http://127.0.0.1", Some("127.0.0.1")),
            ("/relative/path?q=1", "/relative/path", None),
        ];
        for (input, url, host) in cases {
            let (u, h) = sanitize_url(input);
            assert_eq!(u, url, "{input}");
            assert_eq!(h.as_deref(), host, "{input}");
        }
    }
}
