//! An Alertmanager as the config names it: a URL alone
//! (`"http://am.mgmt:9093"`), or a table with the URL, the CA that signs
//! its certificate, and its credentials, which are read from files and
//! never written in the config or the URL:
//!
//! ```toml
//! [alerting]
//! alertmanagers = [
//!   "http://127.0.0.1:9093",
//!   { url = "https://am.mgmt:9093", ca_file = "/etc/meshd/am-ca.pem",
//!     basic_auth = { username = "meshd", password_file = "/etc/meshd/am.password" } },
//! ]
//! ```
//!
//! The URL is parsed with the `url` crate ([`parse_url`]): http or https, a
//! host, no user or password in it (credentials in a URL end up in logs and
//! metric labels), no query or fragment.

use std::fmt;
use std::path::PathBuf;

use serde::Deserialize;
use serde::de::{self, MapAccess, Visitor};

/// One configured Alertmanager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertmanagerConfig {
    pub url: String,
    /// PEM certificates that may sign an https Alertmanager's certificate;
    /// the system's trust roots when absent.
    pub ca_file: Option<PathBuf>,
    pub basic_auth: Option<BasicAuth>,
    /// A file holding the bearer token sent as `Authorization: Bearer`.
    pub bearer_token_file: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BasicAuth {
    pub username: String,
    /// A file holding the password (a trailing newline is not part of it).
    pub password_file: PathBuf,
}

/// The table form, with serde's own unknown-key and type errors.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    url: String,
    #[serde(default)]
    ca_file: Option<PathBuf>,
    #[serde(default)]
    basic_auth: Option<BasicAuth>,
    #[serde(default)]
    bearer_token_file: Option<PathBuf>,
}

impl AlertmanagerConfig {
    /// An Alertmanager reached without credentials or a CA of its own.
    pub fn url(url: impl Into<String>) -> Self {
        AlertmanagerConfig {
            url: url.into(),
            ca_file: None,
            basic_auth: None,
            bearer_token_file: None,
        }
    }
}

impl<'de> Deserialize<'de> for AlertmanagerConfig {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Either;
        impl<'de> Visitor<'de> for Either {
            type Value = AlertmanagerConfig;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an Alertmanager URL or a table with `url`")
            }

            fn visit_str<E: de::Error>(self, url: &str) -> Result<Self::Value, E> {
                Ok(AlertmanagerConfig::url(url))
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                let t = Table::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(AlertmanagerConfig {
                    url: t.url,
                    ca_file: t.ca_file,
                    basic_auth: t.basic_auth,
                    bearer_token_file: t.bearer_token_file,
                })
            }
        }
        deserializer.deserialize_any(Either)
    }
}

/// Where alerts are posted, from a checked URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertmanagerUrl {
    pub tls: bool,
    /// The host as a TLS server name and `Host` header: a DNS name, or an
    /// IP address (IPv6 without brackets).
    pub host: String,
    pub port: u16,
    /// `/api/v2/alerts` under the URL's path.
    pub path: String,
}

impl AlertmanagerUrl {
    /// `host:port` (`[::1]:9093`): what logs and the metric label show,
    /// and what is dialled.
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The same Alertmanager however the URL was spelled, for duplicates.
    pub fn normal_form(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}{}", self.authority(), self.path)
    }
}

/// Why an Alertmanager URL was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("{0}")]
    Syntax(String),
    #[error("its scheme is {0:?}; use http:// or https://")]
    Scheme(String),
    #[error("it has no host")]
    NoHost,
    #[error("port 0 cannot be reached")]
    PortZero,
    #[error(
        "it carries a user name or password, which would be logged and exported; \
         use basic_auth = {{ username, password_file }} or bearer_token_file"
    )]
    Credentials,
    #[error("it has a query or a fragment; give the Alertmanager's base URL")]
    Query,
    #[error("it is not ASCII; write an international host name in its xn-- form")]
    NotAscii,
}

/// Parses and checks an Alertmanager base URL.
pub fn parse_url(text: &str) -> Result<AlertmanagerUrl, UrlError> {
    // What is logged and dialled is what was written: no silent IDNA
    // mapping of a look-alike host.
    if !text.is_ascii() {
        return Err(UrlError::NotAscii);
    }
    let url = url::Url::parse(text).map_err(|e| UrlError::Syntax(e.to_string()))?;
    let tls = match url.scheme() {
        "http" => false,
        "https" => true,
        other => return Err(UrlError::Scheme(other.to_owned())),
    };
    if !url.username().is_empty() || url.password().is_some() {
        return Err(UrlError::Credentials);
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(UrlError::Query);
    }
    let host = match url.host() {
        Some(url::Host::Domain(name)) if !name.is_empty() => name.to_owned(),
        Some(url::Host::Ipv4(ip)) => ip.to_string(),
        Some(url::Host::Ipv6(ip)) => ip.to_string(),
        _ => return Err(UrlError::NoHost),
    };
    let port = url.port_or_known_default().ok_or(UrlError::NoHost)?;
    if port == 0 {
        return Err(UrlError::PortZero);
    }
    let prefix = url.path().trim_end_matches('/');
    Ok(AlertmanagerUrl {
        tls,
        host,
        port,
        path: format!("{prefix}/api/v2/alerts"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_give_host_port_and_the_alerts_path() {
        let u = parse_url("http://am.local:9093").expect("url");
        assert_eq!(
            (u.tls, u.authority(), u.path.as_str()),
            (false, "am.local:9093".to_owned(), "/api/v2/alerts")
        );
        let u = parse_url("https://10.0.0.5/alertmanager/").expect("url");
        assert_eq!(
            (u.tls, u.authority(), u.path.as_str()),
            (
                true,
                "10.0.0.5:443".to_owned(),
                "/alertmanager/api/v2/alerts"
            )
        );
        let u = parse_url("http://[::1]:9093").expect("url");
        assert_eq!(
            (u.host.as_str(), u.authority()),
            ("::1", "[::1]:9093".to_owned())
        );
        assert_eq!(
            parse_url("HTTP://Am.Example:9093/")
                .expect("url")
                .normal_form(),
            "http://am.example:9093/api/v2/alerts"
        );
    }

    #[test]
    fn bad_urls_are_refused_with_the_reason() {
        assert_eq!(
            parse_url("ftp://am"),
            Err(UrlError::Scheme("ftp".to_owned()))
        );
        assert!(matches!(
            parse_url("127.0.0.1:9093"),
            Err(UrlError::Scheme(_) | UrlError::Syntax(_))
        ));
        assert!(matches!(
            parse_url("http://"),
            Err(UrlError::Syntax(_) | UrlError::NoHost)
        ));
        assert_eq!(parse_url("http://am:0"), Err(UrlError::PortZero));
        assert_eq!(
            parse_url("https://meshd:s3cret@am:9093"),
            Err(UrlError::Credentials)
        );
        assert_eq!(
            parse_url("https://token@am:9093"),
            Err(UrlError::Credentials)
        );
        assert_eq!(parse_url("http://am:9093/?x=1"), Err(UrlError::Query));
        assert_eq!(parse_url("http://\u{1F600}"), Err(UrlError::NotAscii));
    }
}
