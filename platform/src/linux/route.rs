//! `ip -j route get ADDRESS`: the kernel's route lookup for one address
//! (`RTM_GETROUTE`), as iproute2 prints it in JSON:
//!
//! ```text
//! [{"dst":"192.168.200.2","gateway":"192.168.1.1","dev":"wlan0","prefsrc":"192.168.1.23","flags":[],"uid":0,"cache":[]}]
//! ```
//!
//! Chosen over reading the tables (`ip -j route show table all`) because
//! the kernel's answer already went through the policy rules: Tailscale
//! puts its routes in table 52 behind an `ip rule`, VRFs and source
//! routing do the same, and a table dump would mean redoing rule order,
//! `suppress_prefixlength`, metrics and multipath here, where a mistake is
//! a wrong verdict. It costs one `ip` run per peer address; a mesh has a
//! handful.
//!
//! With no route at all, `ip` prints nothing, exits 2 and says
//! `RTNETLINK answers: Network is unreachable` on standard error.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde_json::Value;

use crate::route::{Egress, Lookup, NextHop, RouteError, within};
use crate::source::{CaptureError, HostCommand, Source};

/// One route is under 300 bytes; this is room for any build's extra keys.
pub const MAX_ROUTE_GET_BYTES: usize = 64 * 1024;

/// The kernel's answers that mean nothing carries packets there, as `ip`
/// words them after `RTNETLINK answers: ` (each captured: linux/SOURCES.md),
/// with what they mean. `ip` is asked about a well-formed address only, so
/// `EINVAL` is the blackhole route's and no malformed request's.
const NO_ROUTE_ANSWERS: &[(&str, &str)] = &[
    ("Network is unreachable", "no route matches"),
    (
        "No route to host",
        "the matching route is of type unreachable",
    ),
    (
        "Permission denied",
        "the matching route is of type prohibit",
    ),
    (
        "Invalid argument",
        "the matching route is of type blackhole",
    ),
];

/// One `ip -j route get` answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpRoute {
    /// The route type; `unicast` where `ip` prints none.
    pub kind: String,
    /// The address asked about, as printed.
    pub dst: String,
    pub gateway: Option<IpAddr>,
    pub dev: String,
    pub prefsrc: Option<IpAddr>,
    /// `linkdown`, `onlink`, …
    pub flags: Vec<String>,
}

impl IpRoute {
    /// Where packets go by this route. The kernels captured answer an
    /// `unreachable`, `prohibit` or `blackhole` route with an error
    /// ([`no_route_answer`]); a route printed with such a type means the
    /// same.
    pub fn lookup(&self) -> Lookup {
        match self.kind.as_str() {
            "unreachable" | "blackhole" | "prohibit" => Lookup::NoRoute {
                reason: format!("the matching route is of type {}", self.kind),
            },
            kind => Lookup::Route(Egress {
                interface: self.dev.clone(),
                next_hop: match self.gateway {
                    Some(gateway) => NextHop::Gateway(gateway),
                    None if kind == "local" => NextHop::Local,
                    None => NextHop::Direct,
                },
                matched: None,
            }),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IpRouteGetError {
    #[error("{bytes} bytes, over the {MAX_ROUTE_GET_BYTES}-byte cap: refused unread")]
    TooLarge { bytes: usize },
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error("not a list of routes")]
    NotAList,
    #[error("{0} routes where the kernel answers with one")]
    NotOneRoute(usize),
    #[error("the route has no {0:?}")]
    Missing(&'static str),
    #[error("{key}: {value} is not {expected}")]
    BadValue {
        key: &'static str,
        value: String,
        expected: &'static str,
    },
}

pub fn parse_ip_route_get(text: &str) -> Result<IpRoute, IpRouteGetError> {
    within(text, MAX_ROUTE_GET_BYTES).map_err(|bytes| IpRouteGetError::TooLarge { bytes })?;
    let value: Value =
        serde_json::from_str(text).map_err(|e| IpRouteGetError::NotJson(e.to_string()))?;
    let routes = value.as_array().ok_or(IpRouteGetError::NotAList)?;
    let [route] = routes.as_slice() else {
        return Err(IpRouteGetError::NotOneRoute(routes.len()));
    };
    let text_field = |key: &'static str| -> Result<Option<&str>, IpRouteGetError> {
        match route.get(key) {
            None => Ok(None),
            Some(Value::String(text)) => Ok(Some(text)),
            Some(other) => Err(IpRouteGetError::BadValue {
                key,
                value: other.to_string(),
                expected: "a string",
            }),
        }
    };
    let address = |key: &'static str| -> Result<Option<IpAddr>, IpRouteGetError> {
        text_field(key)?
            .map(|text| {
                text.parse().map_err(|_| IpRouteGetError::BadValue {
                    key,
                    value: format!("{text:?}"),
                    expected: "an IP address",
                })
            })
            .transpose()
    };
    let dev = text_field("dev")?.ok_or(IpRouteGetError::Missing("dev"))?;
    if dev.is_empty() || dev.len() > 15 || dev.contains(['/', ' ']) {
        // IFNAMSIZ is 16 with the NUL; names hold no slash or space.
        return Err(IpRouteGetError::BadValue {
            key: "dev",
            value: format!("{dev:?}"),
            expected: "an interface name",
        });
    }
    let flags = match route.get("flags") {
        None => Vec::new(),
        Some(Value::Array(flags)) => flags
            .iter()
            .map(|flag| {
                flag.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| IpRouteGetError::BadValue {
                        key: "flags",
                        value: flag.to_string(),
                        expected: "a string",
                    })
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(IpRouteGetError::BadValue {
                key: "flags",
                value: other.to_string(),
                expected: "a list",
            });
        }
    };
    Ok(IpRoute {
        kind: text_field("type")?.unwrap_or("unicast").to_owned(),
        dst: text_field("dst")?
            .ok_or(IpRouteGetError::Missing("dst"))?
            .to_owned(),
        gateway: address("gateway")?,
        dev: dev.to_owned(),
        prefsrc: address("prefsrc")?,
        flags,
    })
}

/// The kernel's answer and what it means, when `stderr` (or a recorded
/// failure quoting it) says nothing carries packets to the address.
pub fn no_route_answer(stderr: &str) -> Option<String> {
    NO_ROUTE_ANSWERS
        .iter()
        .find(|(answer, _)| stderr.contains(&format!("RTNETLINK answers: {answer}")))
        .map(|(answer, meaning)| format!("{answer}: {meaning}"))
}

/// Each of `addresses` with the kernel's answer, one `ip -j route get`
/// each.
pub fn route_interfaces(
    source: &dyn Source,
    addresses: &[IpAddr],
) -> BTreeMap<IpAddr, Result<Lookup, RouteError>> {
    addresses
        .iter()
        .map(|&address| (address, route_interface(source, address)))
        .collect()
}

fn route_interface(source: &dyn Source, address: IpAddr) -> Result<Lookup, RouteError> {
    let command = HostCommand::IpRouteGet;
    let operand = address.to_string();
    let line = command.line_for(Some(&operand));
    let text = match source.capture_for(command, &operand) {
        Ok(text) => text,
        Err(error) => {
            // Live, the stderr is at hand; replayed, only the recorded
            // message that quotes it.
            let said = match &error {
                CaptureError::Failed { stderr, .. } => stderr.as_str(),
                CaptureError::Run(message) => message.as_str(),
                CaptureError::NotCaptured { .. } => "",
            };
            return match no_route_answer(said) {
                Some(reason) => Ok(Lookup::NoRoute { reason }),
                None => Err(error.into()),
            };
        }
    };
    let route = parse_ip_route_get(&text).map_err(|e| RouteError::Unreadable {
        command: line.clone(),
        detail: e.to_string(),
    })?;
    if route.dst.parse::<IpAddr>().ok() != Some(address) {
        return Err(RouteError::OtherAddress {
            command: line,
            answered: route.dst,
        });
    }
    Ok(route.lookup())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbled_answers_are_named() {
        let cases: &[(&str, &str)] = &[
            ("", "not JSON: EOF while parsing a value at line 1 column 0"),
            ("{}", "not a list of routes"),
            ("[]", "0 routes where the kernel answers with one"),
            ("[{\"dst\":\"10.0.0.1\"}]", "the route has no \"dev\""),
            (
                "[{\"dst\":\"10.0.0.1\",\"dev\":\"eth0\",\"gateway\":\"router\"}]",
                "gateway: \"router\" is not an IP address",
            ),
            (
                "[{\"dst\":\"10.0.0.1\",\"dev\":7}]",
                "dev: 7 is not a string",
            ),
            (
                "[{\"dst\":\"10.0.0.1\",\"dev\":\"a/b\"}]",
                "dev: \"a/b\" is not an interface name",
            ),
        ];
        for (text, expected) in cases {
            let error = parse_ip_route_get(text).expect_err(text);
            assert_eq!(error.to_string(), *expected, "{text}");
        }
    }

    #[test]
    fn unreachable_types_carry_nothing() {
        let route = parse_ip_route_get(
            "[{\"type\":\"blackhole\",\"dst\":\"10.0.0.1\",\"dev\":\"lo\",\"flags\":[]}]",
        )
        .expect("route");
        assert_eq!(
            route.lookup(),
            Lookup::NoRoute {
                reason: "the matching route is of type blackhole".into()
            }
        );
    }

    #[test]
    fn huge_input_is_refused() {
        let text = format!("[{}]", " ".repeat(MAX_ROUTE_GET_BYTES));
        assert!(matches!(
            parse_ip_route_get(&text),
            Err(IpRouteGetError::TooLarge { .. })
        ));
    }
}
