//! Per-port facts, check results and discovered cables: what a node reports
//! of each Thunderbolt/RDMA port (an RDMA port's reader may be unknown, never
//! an error) and the cables between the mesh's ports.

use super::facts::MAX_SERVICE_NAME_CHARS;
use super::{
    Result, WireError, bounded, check_status, check_status_wire, each, ipv4_method,
    ipv4_method_wire, node_id, non_empty, optional_node_id, rdma_port_state, rdma_port_state_wire,
    required,
};
use crate::wire;
use meshd_domain::facts::{
    Cable, CableEnd, CheckResult, Gid, Ipv4Cidr, PeerFact, PortFact, RdmaPortFact, RdmaReader,
};

/// The reader of an RDMA port: unspecified (an older sender) and numbers
/// this build does not know (a newer one) are an unknown reader, not an
/// error.
fn rdma_reader(raw: i32) -> Option<RdmaReader> {
    match wire::RdmaReader::try_from(raw) {
        Ok(wire::RdmaReader::Verbs) => Some(RdmaReader::Verbs),
        Ok(wire::RdmaReader::Sysfs) => Some(RdmaReader::Sysfs),
        Ok(wire::RdmaReader::IbvDevinfo) => Some(RdmaReader::IbvDevinfo),
        Ok(wire::RdmaReader::Unspecified) | Err(_) => None,
    }
}

fn rdma_reader_wire(reader: Option<RdmaReader>) -> i32 {
    let wire = match reader {
        Some(RdmaReader::Verbs) => wire::RdmaReader::Verbs,
        Some(RdmaReader::Sysfs) => wire::RdmaReader::Sysfs,
        Some(RdmaReader::IbvDevinfo) => wire::RdmaReader::IbvDevinfo,
        None => wire::RdmaReader::Unspecified,
    };
    wire as i32
}

impl From<PortFact> for wire::PortFact {
    fn from(p: PortFact) -> Self {
        let ipv4_read = p.ipv4.is_some();
        let peer = p.peer.unwrap_or_default();
        Self {
            name: p.name,
            receptacle: p.receptacle,
            iface: p.iface,
            rdma_device: p.rdma_device,
            rdma_node_guid: p.rdma_node_guid,
            linked: p.linked,
            negotiated_speed_bps: p.negotiated_speed_bps,
            peer_domain_uuid: peer.domain_uuid,
            peer_model: peer.model,
            usable_for_rdma: p.usable_for_rdma,
            domain_uuid: p.domain_uuid,
            max_speed_bps: p.max_speed_bps,
            peer_name: peer.name,
            peer_rdma_service: peer.rdma_service,
            other_device: p.other_device.unwrap_or_default(),
            ipv4: p
                .ipv4
                .unwrap_or_default()
                .iter()
                .map(ToString::to_string)
                .collect(),
            ipv4_read,
            iface_up: p.iface_up,
            rdma: p.rdma.map(|r| wire::RdmaPortFact {
                port: r.port,
                state: rdma_port_state_wire(r.state),
                active_speed_bps: r.active_speed_bps,
                gids: r
                    .gids
                    .into_iter()
                    .map(|g| wire::Gid {
                        index: g.index,
                        address: g.address.to_string(),
                    })
                    .collect(),
                link_layer: r.link_layer,
                active_mtu: r.active_mtu,
                max_mtu: r.max_mtu,
                reader: rdma_reader_wire(r.reader),
            }),
            ipv4_method: p.ipv4_method.map(ipv4_method_wire),
            service: p.service,
        }
    }
}

impl TryFrom<wire::PortFact> for PortFact {
    type Error = WireError;
    fn try_from(p: wire::PortFact) -> Result<Self> {
        // A peer is known by its domain UUID, or, for a Mac whose report
        // has none, by its model or name; the other fields describe it.
        let has_peer =
            !p.peer_domain_uuid.is_empty() || !p.peer_model.is_empty() || !p.peer_name.is_empty();
        let peer = has_peer.then_some(PeerFact {
            domain_uuid: p.peer_domain_uuid,
            model: p.peer_model,
            name: p.peer_name,
            rdma_service: p.peer_rdma_service,
        });
        let ipv4: Vec<Ipv4Cidr> = p
            .ipv4
            .iter()
            .enumerate()
            .map(|(i, text)| {
                text.parse::<Ipv4Cidr>()
                    .map_err(|e| WireError::new(&format!("ipv4[{i}]"), e.to_string()))
            })
            .collect::<Result<_>>()?;
        // Older peers send addresses without `ipv4_read`: a listed address
        // is knowledge, an empty list is not.
        let ipv4_read = p.ipv4_read || !ipv4.is_empty();
        let rdma = p
            .rdma
            .map(|r| -> Result<RdmaPortFact> {
                let gids = each("gids", r.gids, |g| {
                    let address = g.address.parse().map_err(|_| {
                        WireError::new("address", format!("{:?} is not an IPv6 address", g.address))
                    })?;
                    Ok(Gid {
                        index: g.index,
                        address,
                    })
                })?;
                Ok(RdmaPortFact {
                    port: r.port,
                    state: rdma_port_state("state", r.state)?,
                    active_speed_bps: r.active_speed_bps,
                    gids,
                    link_layer: r.link_layer,
                    active_mtu: r.active_mtu,
                    max_mtu: r.max_mtu,
                    reader: rdma_reader(r.reader),
                })
            })
            .transpose()
            .map_err(|e| e.within("rdma"))?;
        Ok(Self {
            name: p.name,
            receptacle: p.receptacle,
            domain_uuid: p.domain_uuid,
            iface: p.iface,
            rdma_device: p.rdma_device,
            rdma_node_guid: p.rdma_node_guid,
            linked: p.linked,
            negotiated_speed_bps: p.negotiated_speed_bps,
            max_speed_bps: p.max_speed_bps,
            peer,
            other_device: non_empty(p.other_device),
            usable_for_rdma: p.usable_for_rdma,
            ipv4: ipv4_read.then_some(ipv4),
            iface_up: p.iface_up,
            rdma,
            ipv4_method: p
                .ipv4_method
                .map(|raw| ipv4_method("ipv4_method", raw))
                .transpose()?,
            service: bounded("service", p.service, MAX_SERVICE_NAME_CHARS)?,
        })
    }
}

impl From<CheckResult> for wire::CheckResult {
    fn from(c: CheckResult) -> Self {
        Self {
            name: c.name,
            status: check_status_wire(c.status),
            evidence: c.evidence,
            fix: c.fix,
            node: c.node.map(|n| n.to_string()).unwrap_or_default(),
        }
    }
}

impl TryFrom<wire::CheckResult> for CheckResult {
    type Error = WireError;
    fn try_from(c: wire::CheckResult) -> Result<Self> {
        if c.name.is_empty() {
            return Err(WireError::new("name", "empty"));
        }
        Ok(Self {
            name: c.name,
            node: optional_node_id("node", c.node)?,
            status: check_status("status", c.status)?,
            evidence: c.evidence,
            fix: c.fix,
        })
    }
}

impl From<CableEnd> for wire::CableEnd {
    fn from(e: CableEnd) -> Self {
        Self {
            node: e.node.to_string(),
            port: e.port,
            iface: e.iface,
            rdma_device: e.rdma_device,
            address: e.address.map(|a| a.to_string()).unwrap_or_default(),
        }
    }
}

impl TryFrom<wire::CableEnd> for CableEnd {
    type Error = WireError;
    fn try_from(e: wire::CableEnd) -> Result<Self> {
        let address = non_empty(e.address)
            .map(|a| {
                a.parse()
                    .map_err(|_| WireError::new("address", format!("{a:?} is not an IPv4 address")))
            })
            .transpose()?;
        Ok(Self {
            node: node_id("node", e.node)?,
            port: e.port,
            iface: e.iface,
            rdma_device: e.rdma_device,
            address,
        })
    }
}

impl From<Cable> for wire::Cable {
    fn from(c: Cable) -> Self {
        Self {
            a: Some(c.a.into()),
            b: Some(c.b.into()),
            speed_bps: c.speed_bps,
            discovered: c.discovered,
        }
    }
}

impl TryFrom<wire::Cable> for Cable {
    type Error = WireError;
    fn try_from(c: wire::Cable) -> Result<Self> {
        Ok(Self {
            a: CableEnd::try_from(required("a", c.a)?).map_err(|e| e.within("a"))?,
            b: CableEnd::try_from(required("b", c.b)?).map_err(|e| e.within("b"))?,
            speed_bps: c.speed_bps,
            discovered: c.discovered,
        })
    }
}
