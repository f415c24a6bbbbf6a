//! Passwords kept out of what is shown: a Valkey URL's, wherever it appears (an
//! endpoint's display form, an error message quoting a value, `phpinfo()`).

/// Masks the password of `scheme://user:password@host` and of `?pass=`/`?password=`.
pub fn mask_password(url: &str) -> String {
    let mut out = url.to_string();
    if let Some(scheme_end) = out.find("://") {
        let auth_start = scheme_end + 3;
        // Up to the first '/' only: a '?' or '#' in a password (refused by the parsers, but
        // still shown in their error) must not end the part that is masked.
        let auth_end = out[auth_start..]
            .find('/')
            .map_or(out.len(), |i| auth_start + i);
        if let Some(at) = out[auth_start..auth_end].rfind('@') {
            let userinfo = &out[auth_start..auth_start + at];
            let masked = match userinfo.find(':') {
                Some(colon) => format!("{}:***", &userinfo[..colon]),
                None => "***".to_string(),
            };
            out.replace_range(auth_start..auth_start + at, &masked);
        }
    }
    if let Some(q) = out.find('?') {
        let (head, query) = out.split_at(q + 1);
        let masked: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((k, _)) if k == "pass" || k == "password" => format!("{k}=***"),
                _ => pair.to_string(),
            })
            .collect();
        out = format!("{head}{}", masked.join("&"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_passwords_everywhere() {
        assert_eq!(
            mask_password("redis://127.0.0.1:6379"),
            "redis://127.0.0.1:6379"
        );
        assert_eq!(
            mask_password("redis://app:s3cr@t@10.0.0.1:6379/0"),
            "redis://app:***@10.0.0.1:6379/0"
        );
        assert_eq!(mask_password("redis://:pw@host"), "redis://:***@host");
        assert_eq!(mask_password("redis://tokenonly@host"), "redis://***@host");
        assert_eq!(
            mask_password("unix:///run/valkey.sock?db=1&pass=pw&user=u"),
            "unix:///run/valkey.sock?db=1&pass=***&user=u"
        );
    }
}
