//! JACCL hostfiles on the wire (`GetHostfile`): the mesh's hostfile as
//! the daemon serves it, and back, checking what a server could get wrong.

use meshd_domain::{LinkState, NodeId};
use meshd_mesh::Backend;
use meshd_mesh::hostfile::{Hostfile, HostfileHost, LinkNotUp};

use super::WireError;
use crate::wire;

impl From<&Hostfile> for wire::Hostfile {
    fn from(hostfile: &Hostfile) -> Self {
        wire::Hostfile {
            backend: match hostfile.backend {
                Backend::Jaccl => wire::HostfileBackend::Jaccl,
                Backend::JacclRing => wire::HostfileBackend::JacclRing,
            } as i32,
            hosts: hostfile
                .hosts
                .iter()
                .map(|h| wire::HostfileHost {
                    node: h.node.to_string(),
                    ssh: h.ssh.clone(),
                    ips: h.ips.clone(),
                    rdma: h
                        .rdma
                        .iter()
                        .map(|device| wire::HostfileCell {
                            device: device.clone(),
                        })
                        .collect(),
                })
                .collect(),
            warnings: hostfile.warnings.clone(),
            links_not_up: hostfile
                .links_not_up
                .iter()
                .map(|l| wire::HostfileLinkNotUp {
                    rank_a: wire_rank(l.ranks.0),
                    rank_b: wire_rank(l.ranks.1),
                    state: l.state.as_str().to_owned(),
                    fix: l.fix.clone().unwrap_or_default(),
                })
                .collect(),
        }
    }
}

/// A rank index on the wire; a hostfile has at most a few ranks.
fn wire_rank(rank: usize) -> u32 {
    u32::try_from(rank).unwrap_or(u32::MAX)
}

/// One pair over a link that is not up, checked against the hostfile's
/// `n` ranks: two different ranks in order, a state that is not `up`.
fn link_not_up(i: usize, w: wire::HostfileLinkNotUp, n: usize) -> Result<LinkNotUp, WireError> {
    let field = |name: &str| format!("links_not_up[{i}].{name}");
    let rank = |name: &str, rank: u32| {
        usize::try_from(rank)
            .ok()
            .filter(|&r| r < n)
            .ok_or_else(|| WireError::new(&field(name), format!("{rank} is not a rank of {n}")))
    };
    let ranks = (rank("rank_a", w.rank_a)?, rank("rank_b", w.rank_b)?);
    if ranks.0 >= ranks.1 {
        return Err(WireError::new(
            &field("rank_b"),
            format!("{} does not follow rank_a {}", ranks.1, ranks.0),
        ));
    }
    let state = w
        .state
        .parse::<LinkState>()
        .ok()
        .filter(|s| *s != LinkState::Up)
        .ok_or_else(|| {
            WireError::new(
                &field("state"),
                format!("{:?} is not down, degraded, flapping or unknown", w.state),
            )
        })?;
    Ok(LinkNotUp {
        ranks,
        state,
        fix: Some(w.fix).filter(|f| !f.is_empty()),
    })
}

impl TryFrom<wire::Hostfile> for Hostfile {
    type Error = WireError;

    /// Checks what a peer could get wrong: the backend, node ids, ssh
    /// destinations, one cell per rank, a null diagonal, no empty names.
    fn try_from(w: wire::Hostfile) -> Result<Self, WireError> {
        let backend = match wire::HostfileBackend::try_from(w.backend) {
            Ok(wire::HostfileBackend::Jaccl) => Backend::Jaccl,
            Ok(wire::HostfileBackend::JacclRing) => Backend::JacclRing,
            Ok(wire::HostfileBackend::Unspecified) => {
                return Err(WireError::new("backend", "unspecified"));
            }
            Err(_) => {
                return Err(WireError::new(
                    "backend",
                    format!("unknown value {}", w.backend),
                ));
            }
        };
        let n = w.hosts.len();
        let hosts = w
            .hosts
            .into_iter()
            .enumerate()
            .map(|(i, h)| {
                let field = |name: &str| format!("hosts[{i}].{name}");
                let node = NodeId::new(h.node)
                    .map_err(|e| WireError::new(&field("node"), e.to_string()))?;
                if h.ssh.trim().is_empty() {
                    return Err(WireError::new(&field("ssh"), "empty"));
                }
                if h.rdma.len() != n {
                    return Err(WireError::new(
                        &field("rdma"),
                        format!("{} cells; needs one per host ({n})", h.rdma.len()),
                    ));
                }
                let rdma = h
                    .rdma
                    .into_iter()
                    .enumerate()
                    .map(|(j, cell)| match cell.device {
                        Some(d) if d.is_empty() => Err(WireError::new(
                            &field(&format!("rdma[{j}].device")),
                            "empty device name; leave it unset for no device",
                        )),
                        Some(_) if i == j => Err(WireError::new(
                            &field(&format!("rdma[{j}].device")),
                            "the diagonal has no device",
                        )),
                        device => Ok(device),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(HostfileHost {
                    node,
                    ssh: h.ssh,
                    ips: h.ips,
                    rdma,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let pairs = n * n.saturating_sub(1) / 2;
        if w.links_not_up.len() > pairs {
            return Err(WireError::new(
                "links_not_up",
                format!(
                    "{} entries; {n} ranks have {pairs} pairs",
                    w.links_not_up.len()
                ),
            ));
        }
        let links_not_up = w
            .links_not_up
            .into_iter()
            .enumerate()
            .map(|(i, l)| link_not_up(i, l, n))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Hostfile {
            backend,
            hosts,
            warnings: w.warnings,
            links_not_up,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three ranks in a full mesh, each rank's device named after its peer.
    fn three_ranks() -> Hostfile {
        let hosts = (0..3)
            .map(|i| HostfileHost {
                node: NodeId::new(format!("m{}", i + 1)).expect("id"),
                ssh: format!("m{}", i + 1),
                ips: if i == 0 {
                    vec!["192.168.1.10".to_owned()]
                } else {
                    Vec::new()
                },
                rdma: (0..3)
                    .map(|j| (i != j).then(|| format!("rdma_en{}", j + 10)))
                    .collect(),
            })
            .collect();
        Hostfile {
            backend: Backend::JacclRing,
            hosts,
            warnings: vec!["m1 <-> m2 negotiated 40 Gb/s".to_owned()],
            links_not_up: vec![LinkNotUp {
                ranks: (0, 2),
                state: LinkState::Flapping,
                fix: Some("reseat the cable".to_owned()),
            }],
        }
    }

    #[test]
    fn wire_round_trip_and_bad_wire_fields_are_named() {
        let hostfile = three_ranks();
        let w = wire::Hostfile::from(&hostfile);
        assert_eq!(w.backend, wire::HostfileBackend::JacclRing as i32);
        assert_eq!(Hostfile::try_from(w.clone()), Ok(hostfile));

        let broken = |edit: fn(&mut wire::Hostfile)| {
            let mut bad = w.clone();
            edit(&mut bad);
            Hostfile::try_from(bad).unwrap_err().to_string()
        };
        assert_eq!(broken(|h| h.backend = 0), "backend: unspecified");
        assert_eq!(broken(|h| h.backend = 9), "backend: unknown value 9");
        assert!(broken(|h| h.hosts[1].node = "a b".into()).starts_with("hosts[1].node: "));
        assert_eq!(broken(|h| h.hosts[2].ssh.clear()), "hosts[2].ssh: empty");
        assert_eq!(
            broken(|h| {
                h.hosts[0].rdma.pop();
            }),
            "hosts[0].rdma: 2 cells; needs one per host (3)"
        );
        assert_eq!(
            broken(|h| h.hosts[1].rdma[1].device = Some("rdma_en1".into())),
            "hosts[1].rdma[1].device: the diagonal has no device"
        );
        assert_eq!(
            broken(|h| h.hosts[1].rdma[0].device = Some(String::new())),
            "hosts[1].rdma[0].device: empty device name; leave it unset for no device"
        );
        assert_eq!(
            broken(|h| h.links_not_up[0].rank_b = 3),
            "links_not_up[0].rank_b: 3 is not a rank of 3"
        );
        assert_eq!(
            broken(|h| h.links_not_up[0].rank_a = 2),
            "links_not_up[0].rank_b: 2 does not follow rank_a 2"
        );
        assert_eq!(
            broken(|h| h.links_not_up[0].state = "up".into()),
            "links_not_up[0].state: \"up\" is not down, degraded, flapping or unknown"
        );
    }
}
