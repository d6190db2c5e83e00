//! `GetHistory`: this node's incidents from its store, or (`mesh`) every
//! member's, asked over the mesh listener as a node asks (mutual TLS) and
//! merged on this node's clock: each peer's times are moved by the clock
//! offset this node measured to it.

use std::sync::Arc;
use std::time::Duration;

use meshd_domain::history::{HistoryQuery, Incident};
use meshd_domain::{ClockOffset, NodeId};
use meshd_proto::convert::{History, HistoryAnswer};
use meshd_proto::limits::MAX_INCIDENTS_PER_REPLY;
use meshd_proto::wire;
use meshd_proto::wire::mesh_client::MeshClient;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tonic::Status;

use crate::config::Config;
use crate::history::{HistoryHandle, QueryError};
use crate::state::MeshState;
use crate::transport::streams::{Route, channel};
use crate::transport::tls::MeshTls;

/// How long one peer gets to answer a mesh-wide history, connecting
/// included; the peers are asked at once, so this bounds the whole call.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(3);

/// What a mesh-wide history needs besides this node's store.
#[derive(Debug, Clone)]
pub struct MeshReach {
    pub configs: watch::Receiver<Arc<Config>>,
    pub tls: Option<MeshTls>,
}

/// Answers `query` from this node's history, and its peers' with `mesh`.
pub async fn answer(
    own: &HistoryHandle,
    state: &MeshState,
    reach: Option<&MeshReach>,
    query: HistoryQuery,
) -> Result<History, Status> {
    let limit = effective_limit(query.limit);
    let this = state.current().node.id.clone();
    if !query.mesh {
        let incidents = own.query(query).await.map_err(status_of)?;
        return Ok(History {
            incidents,
            answers: Vec::new(),
        });
    }
    let Some(reach) = reach else {
        return Err(Status::failed_precondition(
            "this node cannot ask its peers (no mesh listener)",
        ));
    };
    let peer_query = HistoryQuery {
        mesh: false,
        ..query.clone()
    };
    let offsets = state.published.borrow().clock_offsets.clone();
    let config = reach.configs.borrow().clone();
    let mut asked = JoinSet::new();
    for peer in &config.peers {
        let route = Route {
            peer: peer.id.clone(),
            path: "management".to_owned(),
            address: peer.address.clone(),
        };
        let tls = reach.tls.clone();
        let request = wire::GetHistoryRequest::from(peer_query.clone());
        asked.spawn(async move {
            let reply = tokio::time::timeout(PEER_TIMEOUT, ask_peer(&route, tls.as_ref(), request))
                .await
                .unwrap_or_else(|_| Err(format!("did not answer within {PEER_TIMEOUT:?}")));
            (route.peer, reply)
        });
    }
    let mut answers = Vec::new();
    let mut incidents = Vec::new();
    match own.query(peer_query).await {
        Ok(found) => {
            answers.push(HistoryAnswer {
                node: this.clone(),
                error: None,
                clock_offset_ns: 0,
                incidents: found.len(),
            });
            incidents.extend(found);
        }
        Err(error) => answers.push(HistoryAnswer {
            node: this.clone(),
            error: Some(error.to_string()),
            clock_offset_ns: 0,
            incidents: 0,
        }),
    }
    let mut peers = Vec::new();
    while let Some(joined) = asked.join_next().await {
        if let Ok(answered) = joined {
            peers.push(answered);
        }
    }
    peers.sort_by(|a, b| a.0.cmp(&b.0));
    for (peer, reply) in peers {
        let offset_ns = offset_to(&offsets, &peer);
        match reply {
            Ok(found) => {
                answers.push(HistoryAnswer {
                    node: peer,
                    error: None,
                    clock_offset_ns: offset_ns,
                    incidents: found.len(),
                });
                incidents.extend(found.into_iter().map(|i| i.shifted(offset_ns)));
            }
            Err(error) => answers.push(HistoryAnswer {
                node: peer,
                error: Some(error),
                clock_offset_ns: offset_ns,
                incidents: 0,
            }),
        }
    }
    Ok(History {
        incidents: newest_first(incidents, limit),
        answers,
    })
}

/// A limit of 0 is the most a reply holds.
fn effective_limit(limit: usize) -> usize {
    if limit == 0 {
        MAX_INCIDENTS_PER_REPLY
    } else {
        limit.min(MAX_INCIDENTS_PER_REPLY)
    }
}

/// Merged incidents, newest start first, at most `limit`.
pub fn newest_first(mut incidents: Vec<Incident>, limit: usize) -> Vec<Incident> {
    incidents.sort_by(|a, b| {
        b.started_at
            .cmp(&a.started_at)
            .then_with(|| a.observer.cmp(&b.observer))
            .then(b.id.cmp(&a.id))
    });
    incidents.truncate(limit);
    incidents
}

/// The peer's clock minus this node's; 0 when not measured, or when the
/// offset is within its own uncertainty (half the round trip of the sample
/// it came from): on clocks that agree, a sample taken through busy queues
/// would otherwise move a peer's times by its noise.
fn offset_to(offsets: &[ClockOffset], peer: &NodeId) -> i64 {
    offsets
        .iter()
        .find(|o| &o.peer == peer)
        .filter(|o| u128::from(o.offset_ns.unsigned_abs()) > o.rtt.as_nanos() / 2)
        .map_or(0, |o| o.offset_ns)
}

async fn ask_peer(
    route: &Route,
    tls: Option<&MeshTls>,
    request: wire::GetHistoryRequest,
) -> Result<Vec<Incident>, String> {
    let channel = channel(route, tls).await?;
    let reply = MeshClient::new(channel)
        .get_history(request)
        .await
        .map_err(|s| format!("{}: {}", s.code(), s.message()))?;
    let history = History::try_from(reply.into_inner())
        .map_err(|e| format!("sent a malformed history: {e}"))?;
    Ok(history
        .incidents
        .into_iter()
        .filter(|i| i.observer == route.peer)
        .collect())
}

fn status_of(error: QueryError) -> Status {
    match error {
        QueryError::Off => Status::failed_precondition(error.to_string()),
        QueryError::Busy => Status::unavailable(error.to_string()),
        QueryError::Store(_) => Status::internal(error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use meshd_domain::fixtures::{id, wall};

    use super::*;

    fn incident(observer: &str, id_: u64, start: u64) -> Incident {
        Incident {
            id: id_,
            observer: id(observer),
            started_at: wall(start),
            ended_at: Some(wall(start + 1)),
            entries: vec![],
            entries_left_out: 0,
            open_problems: vec![],
        }
    }

    #[test]
    fn merged_incidents_are_newest_first_and_limited() {
        let merged = newest_first(
            vec![
                incident("a", 1, 10),
                incident("b", 7, 30),
                incident("c", 2, 20),
            ],
            2,
        );
        let order: Vec<(String, u64)> = merged
            .iter()
            .map(|i| (i.observer.to_string(), i.id))
            .collect();
        assert_eq!(order, [("b".to_owned(), 7), ("c".to_owned(), 2)]);
        assert_eq!(effective_limit(0), MAX_INCIDENTS_PER_REPLY);
        assert_eq!(effective_limit(5), 5);
    }

    #[test]
    fn a_peer_clock_ahead_is_moved_back_onto_ours() {
        let offsets = [ClockOffset {
            peer: id("b"),
            offset_ns: 2_000_000_000,
            rtt: Duration::from_micros(50),
        }];
        let offset = offset_to(&offsets, &id("b"));
        assert_eq!(offset_to(&offsets, &id("c")), 0);
        let noise = [ClockOffset {
            peer: id("b"),
            offset_ns: 300_000_000,
            rtt: Duration::from_millis(800),
        }];
        assert_eq!(
            offset_to(&noise, &id("b")),
            0,
            "within half its round trip, an offset is no offset"
        );
        let shifted = incident("b", 1, 12).shifted(offset);
        assert_eq!(shifted.started_at, wall(10));
        assert_eq!(shifted.ended_at, Some(wall(11)));
    }
}
