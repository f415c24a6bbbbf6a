//! URLs are stored without query string, fragment or credentials: they may carry card
//! tokens, session IDs and passwords.

/// Returns the URL without userinfo, query and fragment, and its host (for
/// `server.address`). Anything that is not `scheme://authority/...` is returned cut at the
/// first `?` or `#`, with no host.
pub fn sanitize_url(url: &str) -> (String, Option<String>) {
    let cut = url.find(['?', '#']).map_or(url, |i| &url[..i]);
    let Some(scheme_end) = cut.find("://") else {
        return (cut.to_string(), None);
    };
    let auth_start = scheme_end + 3;
    let auth_end = cut[auth_start..]
        .find('/')
        .map_or(cut.len(), |i| auth_start + i);
    let authority = &cut[auth_start..auth_end];
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(rest) = host_port.strip_prefix('[') {
        rest.split_once(']').map_or(rest, |(h, _)| h)
    } else {
        host_port.split(':').next().unwrap_or("")
    };
    let sanitized = format!("{}{}{}", &cut[..auth_start], host_port, &cut[auth_end..]);
    let host = (!host.is_empty()).then(|| host.to_ascii_lowercase());
    (sanitized, host)
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
