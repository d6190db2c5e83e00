//! Hand-written checks for the two kinds of network address the config holds
//! as text: peer gRPC addresses (`host:port`) and Alertmanager URLs.
//!
//! Peer addresses stay strings in the config (a DNS name is resolved late, at
//! connect time, so a renumbered management network needs no config change),
//! and are checked here so that every bad address in a file is reported at
//! once instead of serde stopping at the first.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// Longest DNS name (RFC 1035), without the optional trailing dot.
const DNS_NAME_MAX_LEN: usize = 253;
/// Longest DNS label (RFC 1035).
const DNS_LABEL_MAX_LEN: usize = 63;

/// The host part of an address: kept as written when it is a name, because
/// names are resolved only when connecting.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    Ip(IpAddr),
    /// A DNS name, lower-cased so that equal names compare equal.
    Name(String),
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            Host::Ip(IpAddr::V4(ip)) => write!(f, "{ip}"),
            Host::Name(name) => f.write_str(name),
        }
    }
}

/// A peer's management-network gRPC address. Its `Display` is the canonical
/// `host:port` form (IPv6 in brackets), ready to put after `http://`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PeerAddress {
    pub host: Host,
    pub port: u16,
}

impl fmt::Display for PeerAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// Why an address was refused. Each message says what was found; the caller
/// adds what is allowed, since that differs between peers and URLs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    #[error("it is empty")]
    Empty,
    #[error("it contains whitespace")]
    Whitespace,
    #[error("the port is missing")]
    MissingPort,
    #[error("the port {0:?} is not a number")]
    BadPort(String),
    #[error("port 0 cannot be connected to")]
    PortZero,
    #[error("port {0} is above 65535")]
    PortTooLarge(String),
    #[error("the host is empty")]
    EmptyHost,
    #[error("an IPv6 address must be written in brackets, like [fd00::2]:7420")]
    UnbracketedIpv6,
    #[error("the '[' of the IPv6 address is not closed by ']'")]
    UnclosedBracket,
    #[error("a ']' without a matching '['")]
    StrayBracket,
    #[error("unexpected {0:?} after the ']' of the IPv6 address")]
    AfterBracket(String),
    #[error("{0:?} is not a valid IPv6 address")]
    BadIpv6(String),
    #[error("{0:?} is not a valid IPv4 address")]
    BadIpv4(String),
    #[error("the host name contains {bad:?}; use letters, digits, '-' and '.'")]
    BadHostChar { bad: char },
    #[error("the host name has an empty label (two dots in a row, or a leading dot)")]
    EmptyLabel,
    #[error("the host name label {0:?} starts or ends with '-'")]
    HyphenLabel(String),
    #[error("the host name label {0:?} is longer than 63 characters")]
    LongLabel(String),
    #[error("the host name is longer than 253 characters")]
    LongName,
}

impl FromStr for PeerAddress {
    type Err = AddressError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (host, port) = parse_host_port(s)?;
        match port {
            Some(port) => Ok(PeerAddress { host, port }),
            None => Err(AddressError::MissingPort),
        }
    }
}

/// Splits `host[:port]`, where host is IPv4, `[IPv6]` or a DNS name. The
/// port is optional here because URLs may leave it out.
pub(super) fn parse_host_port(s: &str) -> Result<(Host, Option<u16>), AddressError> {
    if s.is_empty() {
        return Err(AddressError::Empty);
    }
    if s.chars().any(char::is_whitespace) {
        return Err(AddressError::Whitespace);
    }
    if let Some(rest) = s.strip_prefix('[') {
        let (inside, after) = rest.split_once(']').ok_or(AddressError::UnclosedBracket)?;
        let ip =
            Ipv6Addr::from_str(inside).map_err(|_| AddressError::BadIpv6(inside.to_owned()))?;
        let port = match after {
            "" => None,
            _ => match after.strip_prefix(':') {
                Some(port) => Some(parse_port(port)?),
                None => return Err(AddressError::AfterBracket(after.to_owned())),
            },
        };
        return Ok((Host::Ip(IpAddr::V6(ip)), port));
    }
    if s.contains(']') {
        return Err(AddressError::StrayBracket);
    }
    let (host, port) = match s.matches(':').count() {
        0 => (s, None),
        1 => match s.split_once(':') {
            Some((host, port)) => (host, Some(parse_port(port)?)),
            None => (s, None),
        },
        _ => return Err(AddressError::UnbracketedIpv6),
    };
    Ok((parse_host(host)?, port))
}

fn parse_port(port: &str) -> Result<u16, AddressError> {
    if port.is_empty() {
        return Err(AddressError::MissingPort);
    }
    if !port.chars().all(|c| c.is_ascii_digit()) {
        return Err(AddressError::BadPort(port.to_owned()));
    }
    // Digits only, so the only way to fail is overflow: report it as too large
    // rather than as "not a number".
    match port.parse::<u64>() {
        Ok(0) => Err(AddressError::PortZero),
        Ok(n) => u16::try_from(n).map_err(|_| AddressError::PortTooLarge(port.to_owned())),
        Err(_) => Err(AddressError::PortTooLarge(port.to_owned())),
    }
}

fn parse_host(host: &str) -> Result<Host, AddressError> {
    if host.is_empty() {
        return Err(AddressError::EmptyHost);
    }
    // "10.0.0.256" would pass as a DNS name made of digit labels; anything that
    // looks like an IPv4 address must be one, or it is surely a typo.
    if host.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Ipv4Addr::from_str(host)
            .map(|ip| Host::Ip(IpAddr::V4(ip)))
            .map_err(|_| AddressError::BadIpv4(host.to_owned()));
    }
    if let Some(bad) = host
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.')))
    {
        return Err(AddressError::BadHostChar { bad });
    }
    let name = host.strip_suffix('.').unwrap_or(host);
    if name.len() > DNS_NAME_MAX_LEN {
        return Err(AddressError::LongName);
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err(AddressError::EmptyLabel);
        }
        if label.len() > DNS_LABEL_MAX_LEN {
            return Err(AddressError::LongLabel(label.to_owned()));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(AddressError::HyphenLabel(label.to_owned()));
        }
    }
    Ok(Host::Name(host.to_ascii_lowercase()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(s: &str) -> Result<PeerAddress, AddressError> {
        s.parse()
    }

    #[test]
    fn accepts_ipv4_ipv6_and_names() {
        let a = peer("10.0.0.2:7420").unwrap();
        assert_eq!(a.host, Host::Ip("10.0.0.2".parse().unwrap()));
        assert_eq!(a.port, 7420);
        assert_eq!(
            peer("[fd00::2]:7420").unwrap().to_string(),
            "[fd00::2]:7420"
        );
        assert_eq!(
            peer("Studio-2.local:7420").unwrap().host,
            Host::Name("studio-2.local".into())
        );
        assert!(peer("studio-2.local.:1").is_ok());
    }

    #[test]
    fn refuses_malformed_peer_addresses() {
        use AddressError::*;
        let cases: &[(&str, AddressError)] = &[
            ("", Empty),
            ("10.0.0.2", MissingPort),
            ("10.0.0.2:", MissingPort),
            ("10.0.0.2:0", PortZero),
            ("10.0.0.2:99999", PortTooLarge("99999".into())),
            (
                "10.0.0.2:99999999999999999999999",
                PortTooLarge("99999999999999999999999".into()),
            ),
            ("10.0.0.2:http", BadPort("http".into())),
            ("10.0.0.2:+80", BadPort("+80".into())),
            (":7420", EmptyHost),
            ("fd00::2:7420", UnbracketedIpv6),
            ("[fd00::2:7420", UnclosedBracket),
            ("fd00::2]:7420", StrayBracket),
            ("[fd00::2]7420", AfterBracket("7420".into())),
            ("[fd00::2]", MissingPort),
            ("[10.0.0.2]:7420", BadIpv6("10.0.0.2".into())),
            ("10.0.0.256:7420", BadIpv4("10.0.0.256".into())),
            ("studio_2:7420", BadHostChar { bad: '_' }),
            ("studio 2:7420", Whitespace),
            ("a..b:7420", EmptyLabel),
            ("-a:7420", HyphenLabel("-a".into())),
            (&format!("{}:1", "a".repeat(64)), LongLabel("a".repeat(64))),
            (&format!("{}a:1", "a.".repeat(130)), LongName),
        ];
        for (input, want) in cases {
            assert_eq!(peer(input).as_ref(), Err(want), "{input:?}");
        }
    }
}
