//! JACCL hostfiles: built from cable maps for 2–8 ranks and both
//! backends, validated by the rules mlx.launch applies, accepted in MLX's
//! own examples, and converted to and from the wire.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use meshd_domain::facts::{Cable, CableEnd};
use meshd_domain::fixtures::{id, link_verdict};
use meshd_domain::{LinkEnd, LinkState, LinkVerdict, NodeId};
use meshd_mesh::Backend;
use meshd_mesh::hostfile::{
    Hostfile, HostfileError, LinkNotUp, LinksNotUp, build_hostfile, to_mlx_json,
    validate_mlx_hostfile,
};
use proptest::prelude::*;
use serde_json::{Value, json};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

fn fixture(name: &str) -> Value {
    let text = std::fs::read_to_string(format!("{FIXTURES}/{name}")).expect(name);
    serde_json::from_str(&text).expect(name)
}

fn ranks(n: usize) -> Vec<NodeId> {
    (1..=n).map(|i| id(&format!("m{i}"))).collect()
}

/// A cable between ranks i and j whose device on each side is named after
/// the peer's rank, so a misplaced cell is visible.
fn cable(ranks: &[NodeId], i: usize, j: usize) -> Cable {
    let end = |at: usize, to: usize| CableEnd {
        node: ranks[at].clone(),
        port: format!("Thunderbolt {}", to + 1),
        iface: format!("en{}", to + 10),
        rdma_device: format!("rdma_en{}", to + 10),
        address: None,
    };
    Cable {
        a: end(i, j),
        b: end(j, i),
        speed_bps: 80_000_000_000,
        discovered: true,
    }
}

fn full_mesh(ranks: &[NodeId]) -> Vec<Cable> {
    let n = ranks.len();
    (0..n)
        .flat_map(|i| (i + 1..n).map(move |j| (i, j)))
        .map(|(i, j)| cable(ranks, i, j))
        .collect()
}

fn ring(ranks: &[NodeId]) -> Vec<Cable> {
    let n = ranks.len();
    if n == 2 {
        return vec![cable(ranks, 0, 1)];
    }
    (0..n).map(|i| cable(ranks, i, (i + 1) % n)).collect()
}

const RANK0_IP: Option<Ipv4Addr> = Some(Ipv4Addr::new(192, 168, 1, 10));

/// The mesh's verdict on `cable`: `state`, with a fix when it is not up.
fn verdict(cable: &Cable, state: LinkState) -> LinkVerdict {
    let end = |e: &CableEnd| LinkEnd {
        iface: Some(e.iface.clone()),
        ..LinkEnd::node_only(e.node.clone())
    };
    link_verdict(end(&cable.a), end(&cable.b), state)
}

fn all_up(cables: &[Cable]) -> Vec<LinkVerdict> {
    cables.iter().map(|c| verdict(c, LinkState::Up)).collect()
}

/// A hostfile over healthy links, with ssh destinations defaulted to the
/// node ids.
fn build(ranks: &[NodeId], cables: &[Cable], backend: Backend) -> Result<Hostfile, HostfileError> {
    build_over(ranks, cables, &all_up(cables), backend, LinksNotUp::Refuse)
}

/// A hostfile over links in the states `links` give.
fn build_over(
    ranks: &[NodeId],
    cables: &[Cable],
    links: &[LinkVerdict],
    backend: Backend,
    links_not_up: LinksNotUp,
) -> Result<Hostfile, HostfileError> {
    let ssh = BTreeMap::new();
    build_hostfile(ranks, cables, links, backend, &ssh, RANK0_IP, links_not_up)
}

#[test]
fn mlx_documentation_hostfiles_are_valid() {
    assert_eq!(
        validate_mlx_hostfile(&fixture("hostfile_jaccl_4node.json")),
        Vec::<String>::new()
    );
    assert_eq!(
        validate_mlx_hostfile(&fixture("hostfile_ring_4node.json")),
        Vec::<String>::new()
    );
}

#[test]
fn jaccl_hostfiles_for_2_to_8_ranks_are_valid_and_place_every_device() {
    for n in 2..=8 {
        let ranks = ranks(n);
        let hostfile = build(&ranks, &full_mesh(&ranks), Backend::Jaccl).unwrap();
        assert!(hostfile.warnings.is_empty(), "{:?}", hostfile.warnings);
        for (i, host) in hostfile.hosts.iter().enumerate() {
            assert_eq!(host.ssh, format!("m{}", i + 1));
            assert_eq!(host.ips.is_empty(), i != 0);
            for (j, cell) in host.rdma.iter().enumerate() {
                let expected = (i != j).then(|| format!("rdma_en{}", j + 10));
                assert_eq!(cell, &expected, "{n} ranks, [{i}][{j}]");
            }
        }
        let json = to_mlx_json(&hostfile);
        assert_eq!(json["backend"], "jaccl");
        assert_eq!(
            validate_mlx_hostfile(&json),
            Vec::<String>::new(),
            "{n} ranks"
        );
        // The list form (backend from the command line) is valid too.
        assert_eq!(validate_mlx_hostfile(&json["hosts"]), Vec::<String>::new());
    }
}

#[test]
fn ring_hostfiles_for_2_to_8_ranks_name_only_neighbours() {
    for n in 2..=8 {
        let ranks = ranks(n);
        // Extra cables exist, but a ring hostfile uses only the neighbours.
        let hostfile = build(&ranks, &full_mesh(&ranks), Backend::JacclRing).unwrap();
        for (i, host) in hostfile.hosts.iter().enumerate() {
            let named: Vec<usize> = (0..n).filter(|&j| host.rdma[j].is_some()).collect();
            let mut neighbours = vec![(i + n - 1) % n, (i + 1) % n];
            neighbours.sort();
            neighbours.dedup();
            assert_eq!(named, neighbours, "{n} ranks, rank {i}");
        }
        let json = to_mlx_json(&hostfile);
        assert_eq!(json["backend"], "jaccl-ring");
        assert_eq!(
            validate_mlx_hostfile(&json),
            Vec::<String>::new(),
            "{n} ranks"
        );
        let only_ring = build(&ranks, &ring(&ranks), Backend::JacclRing);
        assert_eq!(only_ring.map(|h| h.hosts), Ok(hostfile.hosts));
        if n > 3 {
            let mut as_mesh = json.clone();
            as_mesh["backend"] = json!("jaccl");
            assert!(
                !validate_mlx_hostfile(&as_mesh).is_empty(),
                "a ring is no full mesh"
            );
        }
    }
}

#[test]
fn missing_pairs_are_named() {
    let ranks = ranks(4);
    let mut cables = full_mesh(&ranks);
    cables.retain(|c| !(c.a.node == ranks[1] && c.b.node == ranks[3]));
    cables
        .iter_mut()
        .find(|c| c.a.node == ranks[0] && c.b.node == ranks[2])
        .unwrap()
        .b
        .rdma_device
        .clear();
    let err = build(&ranks, &cables, Backend::Jaccl).unwrap_err();
    assert_eq!(
        err,
        HostfileError::MissingLinks {
            backend: Backend::Jaccl,
            missing: vec![
                "rank 0 (m1) ↔ rank 2 (m3): cable m1/Thunderbolt 3 ↔ m3/Thunderbolt 1 has no RDMA device at m3".to_owned(),
                "rank 1 (m2) ↔ rank 3 (m4): no cable".to_owned(),
            ],
        }
    );
    // The ring m1 m2 m3 m4 needs neither m2–m4 nor m1–m3.
    let ring_ok = build(&ranks, &cables, Backend::JacclRing);
    assert!(ring_ok.is_ok(), "{ring_ok:?}");
}

#[test]
fn input_errors_are_named() {
    let ranks = ranks(3);
    let cables = full_mesh(&ranks);
    let none = BTreeMap::new();
    assert_eq!(
        build(&[], &cables, Backend::Jaccl),
        Err(HostfileError::NoRanks)
    );
    let twice = [ranks[0].clone(), ranks[1].clone(), ranks[0].clone()];
    assert_eq!(
        build(&twice, &cables, Backend::Jaccl),
        Err(HostfileError::DuplicateRank(ranks[0].clone()))
    );
    let err = build_hostfile(
        &ranks,
        &cables,
        &all_up(&cables),
        Backend::Jaccl,
        &none,
        None,
        LinksNotUp::Refuse,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "rank 0 (m1) needs an IP address every rank can reach; pass its management address"
    );
    let nine = self::ranks(9);
    assert_eq!(
        build(&nine, &full_mesh(&nine), Backend::Jaccl),
        Err(HostfileError::TooManyRanks { ranks: 9 })
    );
}

#[test]
fn ssh_names_and_warnings_come_through() {
    let ranks = ranks(2);
    let mut cables = full_mesh(&ranks);
    cables[0].speed_bps = 40_000_000_000;
    cables[0].discovered = false;
    let ssh = BTreeMap::from([(ranks[1].clone(), "admin@studio-2.local".to_owned())]);
    let hostfile = build_hostfile(
        &ranks,
        &cables,
        &all_up(&cables),
        Backend::Jaccl,
        &ssh,
        RANK0_IP,
        LinksNotUp::Refuse,
    )
    .unwrap();
    assert_eq!(hostfile.hosts[1].ssh, "admin@studio-2.local");
    assert_eq!(hostfile.hosts[0].ips, ["192.168.1.10"]);
    assert_eq!(
        hostfile.warnings,
        [
            "m1/Thunderbolt 2 ↔ m2/Thunderbolt 1 negotiated 40 Gb/s",
            "m1/Thunderbolt 2 ↔ m2/Thunderbolt 1 is known only from config, not seen by discovery",
        ]
    );
}

/// The demo's complaint: after a cut, the hostfile was byte-identical to
/// the healthy one. A pair over a link that is not up is refused, named
/// with the link's state and fix; allowed, it is built and marked.
#[test]
fn a_pair_over_a_link_that_is_not_up_is_refused_or_marked() {
    let ranks = ranks(4);
    let cables = full_mesh(&ranks);
    let mut links = all_up(&cables);
    // m1-m2 cut, m2-m4 degraded, m3-m4 not judged at all.
    links[0] = verdict(&cables[0], LinkState::Down);
    links[4] = verdict(&cables[4], LinkState::Degraded);
    links.remove(5);
    let err = build_over(&ranks, &cables, &links, Backend::Jaccl, LinksNotUp::Refuse).unwrap_err();
    assert_eq!(
        err.to_string(),
        "a job launched from this hostfile would hang or crawl: \
         rank 0 (m1) ↔ rank 1 (m2): link down (reseat the cable); \
         rank 1 (m2) ↔ rank 3 (m4): link degraded (reseat the cable); \
         rank 2 (m3) ↔ rank 3 (m4): link not judged yet; \
         fix them, or build it anyway (meshctl hostfile --allow-degraded; GetHostfile allow_links_not_up)"
    );

    let allowed =
        build_over(&ranks, &cables, &links, Backend::Jaccl, LinksNotUp::Allow).expect("allowed");
    assert_eq!(
        allowed.links_not_up,
        [
            LinkNotUp {
                ranks: (0, 1),
                state: LinkState::Down,
                fix: Some("reseat the cable".to_owned()),
            },
            LinkNotUp {
                ranks: (1, 3),
                state: LinkState::Degraded,
                fix: Some("reseat the cable".to_owned()),
            },
            LinkNotUp {
                ranks: (2, 3),
                state: LinkState::Unknown,
                fix: None,
            },
        ]
    );
    let json = to_mlx_json(&allowed);
    assert_eq!(validate_mlx_hostfile(&json), Vec::<String>::new());
    assert_eq!(
        json["meshd"]["links_not_up"][0],
        json!({"ranks": [0, 1], "nodes": ["m1", "m2"], "state": "down", "fix": "reseat the cable"})
    );
    assert_eq!(json["meshd"]["links_not_up"][2]["state"], "unknown");

    // A ring over m1 m3 m2 m4 uses none of the three; it is built unmarked.
    let ring_ranks = [
        ranks[0].clone(),
        ranks[2].clone(),
        ranks[1].clone(),
        ranks[3].clone(),
    ];
    let mut ring_links = all_up(&cables);
    ring_links[0] = verdict(&cables[0], LinkState::Down);
    ring_links[5] = verdict(&cables[5], LinkState::Flapping);
    let ring = build_over(
        &ring_ranks,
        &cables,
        &ring_links,
        Backend::JacclRing,
        LinksNotUp::Refuse,
    )
    .expect("the ring avoids the bad links");
    assert!(ring.links_not_up.is_empty());
    assert!(to_mlx_json(&ring).get("meshd").is_none());
}

#[test]
fn validation_names_what_mlx_launch_would_reject() {
    let good = fixture("hostfile_jaccl_4node.json");
    let cases: Vec<(Value, &str)> = vec![
        (
            {
                let mut v = good.clone();
                v[0]["ips"] = json!([]);
                v
            },
            "hosts[0].ips: rank 0 needs an IP",
        ),
        (
            {
                let mut v = good.clone();
                v[1]["rdma"][1] = json!("rdma_en9");
                v
            },
            "hosts[1].rdma[1]: the diagonal must be null",
        ),
        (
            {
                let mut v = good.clone();
                v[2]["rdma"] = json!([null, null]);
                v
            },
            "hosts[2].rdma: 2 cells; needs one per rank (4)",
        ),
        (
            {
                let mut v = good.clone();
                v[3]["rdma"][0] = json!(7);
                v
            },
            "hosts[3].rdma[0]: 7 is not null",
        ),
        (
            {
                let mut v = good.clone();
                v[3]["ssh"] = json!("");
                v
            },
            "hosts[3].ssh:",
        ),
        (
            {
                let mut v = good.clone();
                v[0]["ips"] = json!(["not-an-ip"]);
                v
            },
            "hosts[0].ips[0]: \"not-an-ip\" is not an IP address",
        ),
        (
            {
                let mut v = good.clone();
                v[0]["rdma"][2] = Value::Null;
                v
            },
            "hosts[0].rdma[2] and hosts[2].rdma[0]",
        ),
        (json!({"backend": "jaccl", "hosts": good.clone()}), ""),
        (
            json!({"backend": "nccl", "hosts": good.clone()}),
            "backend: \"nccl\" is not one of",
        ),
        (json!({"hosts": 3}), "hosts: missing or not a list"),
        (json!("m1"), "a hostfile is a JSON list"),
        (json!([]), "hosts: empty"),
        (
            {
                let mut v = fixture("hostfile_ring_4node.json");
                v[2]["ips"] = json!([]);
                v
            },
            "hosts[2].ips: the ring backend needs an IP for every host",
        ),
    ];
    for (value, expected) in cases {
        let problems = validate_mlx_hostfile(&value);
        if expected.is_empty() {
            assert_eq!(problems, Vec::<String>::new(), "{value}");
        } else {
            assert!(
                problems.iter().any(|p| p.starts_with(expected)),
                "{expected:?} not in {problems:?}"
            );
        }
    }
}

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        ".{0,8}".prop_map(Value::from),
        Just(json!("rdma_en2")),
        Just(json!("10.0.0.1")),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            prop::collection::btree_map(
                prop_oneof![
                    Just("ssh".to_owned()),
                    Just("ips".to_owned()),
                    Just("rdma".to_owned()),
                    Just("hosts".to_owned()),
                    Just("backend".to_owned()),
                    Just("envs".to_owned()),
                    ".{0,4}"
                ],
                inner,
                0..5
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn validation_never_panics_on_any_json(value in any_json()) {
        let _ = validate_mlx_hostfile(&value);
    }

    #[test]
    fn validation_never_panics_on_mutated_fixtures(
        which in 0..2usize, host in 0..4usize, key in prop_oneof![Just("ssh"), Just("ips"), Just("rdma")], replacement in any_json()
    ) {
        let name = ["hostfile_jaccl_4node.json", "hostfile_ring_4node.json"][which];
        let mut value = fixture(name);
        value[host][key] = replacement;
        let _ = validate_mlx_hostfile(&value);
    }
}
