//! By which interface a host sends to an address, end to end: real
//! `ip -j route get` captures (tests/fixtures/linux/SOURCES.md) and the
//! macOS captures (tests/fixtures/macos/SOURCES.md) replayed from a bundle
//! directory through [`route_interfaces`], as the daemon will read them.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;

use meshd_domain::facts::OsKind;
use meshd_platform::linux::route::{no_route_answer, parse_ip_route_get};
use meshd_platform::macos::routing_table::route_interfaces_from_table;
use meshd_platform::route::{Lookup, NextHop, RouteError, route_interfaces};
use meshd_platform::source::{CaptureError, HostCommand, ReplaySource};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

fn fixture(path: &str) -> String {
    std::fs::read_to_string(Path::new(FIXTURES).join(path)).expect("fixture")
}

fn ip(text: &str) -> IpAddr {
    text.parse().expect("address")
}

/// (interface, next hop) of a route, or the reason there is none.
fn answer(result: &Result<Lookup, RouteError>) -> Result<(String, NextHop), String> {
    match result {
        Ok(Lookup::Route(egress)) => Ok((egress.interface.clone(), egress.next_hop)),
        Ok(Lookup::NoRoute { reason }) => Err(format!("no route: {reason}")),
        Err(error) => Err(error.to_string()),
    }
}

#[test]
fn linux_captures_name_the_cable_the_fallback_and_the_host_itself() {
    let read = |name: &str| {
        let route = parse_ip_route_get(&fixture(&format!("linux/{name}"))).expect(name);
        (
            route.dev.clone(),
            route.lookup().egress().map(|e| e.next_hop),
        )
    };
    assert_eq!(
        read("ip_j_route_get_direct_thunderbolt0_netns.json"),
        ("thunderbolt0".into(), Some(NextHop::Direct))
    );
    assert_eq!(
        read("ip_j_route_get_link-local_169.254_thunderbolt0_netns.json"),
        ("thunderbolt0".into(), Some(NextHop::Direct))
    );
    assert_eq!(
        read("ip_j_route_get_fallback-via-wlan0-gateway_netns.json"),
        ("wlan0".into(), Some(NextHop::Gateway(ip("192.168.1.1")))),
        "the cable's address gone, the peer is reached through the LAN's router"
    );
    assert_eq!(
        read("ip_j_route_get_local-address_lo_netns.json"),
        ("lo".into(), Some(NextHop::Local))
    );
    let direct = parse_ip_route_get(&fixture(
        "linux/ip_j_route_get_direct_thunderbolt0_netns.json",
    ))
    .expect("route");
    assert_eq!(direct.prefsrc, Some(ip("192.168.200.1")));
    // The table Tailscale uses, behind an `ip rule`: the kernel's answer
    // went through the rule, which a dump of the main table would miss.
    assert_eq!(
        read("ip_j_route_get_policy-table-52_tailscale0_netns.json"),
        ("tailscale0".into(), Some(NextHop::Direct))
    );
    let said = |name: &str| no_route_answer(&fixture(&format!("linux/{name}")));
    assert_eq!(
        said("ip_j_route_get_no-route_stderr_netns.txt").as_deref(),
        Some("Network is unreachable: no route matches")
    );
    assert_eq!(
        said("ip_j_route_get_unreachable-route_stderr_netns.txt").as_deref(),
        Some("No route to host: the matching route is of type unreachable")
    );
    assert_eq!(
        said("ip_j_route_get_prohibit-route_stderr_netns.txt").as_deref(),
        Some("Permission denied: the matching route is of type prohibit")
    );
    assert_eq!(
        said("ip_j_route_get_blackhole-route_stderr_netns.txt").as_deref(),
        Some("Invalid argument: the matching route is of type blackhole")
    );
}

/// A bundle directory holding `files` (name, text).
fn bundle(files: &[(String, String)]) -> (tempfile::TempDir, ReplaySource) {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).expect("write");
    }
    let source = ReplaySource::open(dir.path()).expect("open");
    (dir, source)
}

fn file(command: HostCommand, operand: &str, text: String) -> (String, String) {
    (command.file_name_for(Some(operand)), text)
}

#[test]
fn linux_bundles_answer_per_address_and_a_recorded_no_route_is_no_route() {
    let unreachable = CaptureError::Failed {
        command: HostCommand::IpRouteGet.line_for(Some("10.0.0.9")),
        status: "exit status: 2".into(),
        stderr: fixture("linux/ip_j_route_get_no-route_stderr_netns.txt"),
    };
    let (_dir, source) = bundle(&[
        file(
            HostCommand::IpRouteGet,
            "192.168.200.2",
            fixture("linux/ip_j_route_get_fallback-via-wlan0-gateway_netns.json"),
        ),
        // How a recorder keeps a failed command: its message.
        (
            format!(
                "{}.error",
                HostCommand::IpRouteGet.file_name_for(Some("10.0.0.9"))
            ),
            unreachable.to_string(),
        ),
        // An answer about another address is not taken for this one.
        file(
            HostCommand::IpRouteGet,
            "169.254.1.1",
            fixture("linux/ip_j_route_get_link-local_169.254_thunderbolt0_netns.json"),
        ),
    ]);
    let addresses = [
        ip("192.168.200.2"),
        ip("10.0.0.9"),
        ip("169.254.1.1"),
        ip("192.168.200.6"),
    ];
    let found = route_interfaces(&source, OsKind::Linux, &addresses);
    assert_eq!(
        answer(&found[&addresses[0]]),
        Ok(("wlan0".into(), NextHop::Gateway(ip("192.168.1.1"))))
    );
    assert_eq!(
        answer(&found[&addresses[1]]),
        Err("no route: Network is unreachable: no route matches".into())
    );
    assert_eq!(
        answer(&found[&addresses[2]]),
        Err(
            "ip -j route get 169.254.1.1: answered for 169.254.87.238, not for the address \
             asked"
                .into()
        )
    );
    assert_eq!(
        answer(&found[&addresses[3]]),
        Err("ip -j route get 192.168.200.6: not in the bundle \
             (no ip_j_route_get_192.168.200.6.json)"
            .into())
    );
}

#[test]
fn macos_bundles_answer_per_address_with_route_get() {
    let (_dir, source) = bundle(&[
        file(
            HostCommand::RouteGet,
            "1.1.1.1",
            fixture("macos/route_n_get_1.1.1.1_cloned-host-route-via-en0_trimmed.txt"),
        ),
        // `route` prints nothing when no route matches.
        file(HostCommand::RouteGet, "10.0.0.9", String::new()),
        file(
            HostCommand::RouteGet,
            "8.8.8.8",
            fixture("macos/route_n_get_1.1.1.1_cloned-host-route-via-en0_trimmed.txt"),
        ),
        file(
            HostCommand::RouteGet,
            "192.168.7.7",
            fixture("macos/route_n_get_not-in-table_stderr.txt"),
        ),
    ]);
    let addresses = [
        ip("1.1.1.1"),
        ip("10.0.0.9"),
        ip("8.8.8.8"),
        ip("192.168.7.7"),
        ip("fe80::1"),
    ];
    let found = route_interfaces(&source, OsKind::Macos, &addresses);
    assert_eq!(
        answer(&found[&addresses[0]]),
        Ok(("en0".into(), NextHop::Gateway(ip("192.168.0.1"))))
    );
    assert!(
        answer(&found[&addresses[1]])
            .expect_err("no route")
            .starts_with("no route: route printed nothing")
    );
    assert_eq!(
        answer(&found[&addresses[2]]),
        Err("route -n get 8.8.8.8: answered for 1.1.1.1, not for the address asked".into())
    );
    assert_eq!(
        answer(&found[&addresses[3]]),
        Err("no route: not in table".into())
    );
    assert_eq!(
        answer(&found[&addresses[4]]),
        Err("fe80::1: an IPv6 address; route -n get reads IPv4 routes only".into())
    );
}

#[test]
fn one_table_answers_every_peer() {
    let (_dir, source) = bundle(&[(
        HostCommand::RoutingTable.file_name().to_owned(),
        fixture("macos/netstat_nr_f_inet_Refs-Use_after-OpenVPN-def1_utun3.txt"),
    )]);
    let addresses = [ip("10.0.0.9"), ip("169.254.3.4"), ip("::1")];
    let found = route_interfaces_from_table(&source, &addresses).expect("table");
    let answers: BTreeMap<IpAddr, Result<(String, NextHop), String>> = found
        .iter()
        .map(|(address, result)| (*address, answer(result)))
        .collect();
    assert_eq!(
        answers[&addresses[0]],
        Ok(("utun3".into(), NextHop::Gateway(ip("192.168.255.5"))))
    );
    assert_eq!(answers[&addresses[1]], Ok(("en0".into(), NextHop::Direct)));
    assert_eq!(
        answers[&addresses[2]],
        Err("::1: an IPv6 address; netstat -r -n -f inet reads IPv4 routes only".into())
    );
    let (_empty, nothing) = bundle(&[]);
    assert_eq!(
        route_interfaces_from_table(&nothing, &addresses)
            .expect_err("no table")
            .to_string(),
        "netstat -r -n -f inet: not in the bundle (no netstat_rn_f_inet.txt)"
    );
}

#[test]
fn an_unrecognised_os_is_asked_nothing() {
    let (_dir, source) = bundle(&[]);
    let found = route_interfaces(&source, OsKind::Other, &[ip("10.0.0.1")]);
    assert_eq!(
        answer(&found[&ip("10.0.0.1")]),
        Err("10.0.0.1: no route reader: OS not recognised (neither macOS nor Linux)".into())
    );
}
