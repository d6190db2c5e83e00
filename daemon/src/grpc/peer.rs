//! `meshd.v1.Peer`: takes peer reports. The handler decodes, checks and
//! stores under a short lock; the aggregator reads the book on its own
//! cadence, so a flood of reports can never stall the verdicts.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Instant, SystemTime};

use meshd_proto::convert::reject_reason_to_wire;
use meshd_proto::domain::{NodeId, NodeIdentity, PeerReport, RejectReason};
use meshd_proto::limits;
use meshd_proto::wire;
use meshd_proto::wire::peer_server::Peer;
use tonic::{Request, Response, Status};

use crate::aggregator::SharedBook;
use crate::logging::{REPEAT_INTERVAL, Throttle};

/// Refusals are logged per reason and, for members, per sender: a sender
/// that is no member (or a message that names none) cannot mint keys.
type RefusalKey = (RejectReason, Option<NodeId>);

/// A refusal's detail as logged: it may quote what the sender wrote.
const LOGGED_DETAIL_BYTES: usize = 300;

#[derive(Debug, Clone)]
pub struct PeerService {
    identity: Arc<NodeIdentity>,
    book: SharedBook,
    refusals: Arc<Mutex<Throttle<RefusalKey>>>,
}

impl PeerService {
    pub fn new(identity: NodeIdentity, book: SharedBook) -> Self {
        Self {
            identity: Arc::new(identity),
            book,
            refusals: Arc::new(Mutex::new(Throttle::new(REPEAT_INTERVAL))),
        }
    }

    /// A refused report, at most one line per reason (and member) per
    /// [`REPEAT_INTERVAL`], with the count of those not written.
    fn log_refusal(&self, reason: RejectReason, sender: Option<&NodeId>, detail: &str) {
        let member = match reason {
            RejectReason::UnknownNode | RejectReason::Malformed => None,
            _ => sender.cloned(),
        };
        let admitted = self
            .refusals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .admit((reason, member), Instant::now());
        if let Some(suppressed) = admitted {
            let detail = limits::clip(detail.to_owned(), LOGGED_DETAIL_BYTES);
            let sender = sender.map_or("?", NodeId::as_str);
            tracing::warn!(%reason, sender, suppressed, "peer report refused: {detail}");
        }
    }

    fn ack(&self, verdict: Result<(), (RejectReason, String)>) -> wire::ReportAck {
        let receiver = Some((*self.identity).clone().into());
        match verdict {
            Ok(()) => wire::ReportAck {
                receiver,
                accepted: true,
                reject_reason: wire::RejectReason::Unspecified as i32,
                detail: String::new(),
            },
            Err((reason, detail)) => wire::ReportAck {
                receiver,
                accepted: false,
                reject_reason: reject_reason_to_wire(reason),
                detail,
            },
        }
    }
}

#[tonic::async_trait]
impl Peer for PeerService {
    async fn report(
        &self,
        request: Request<wire::PeerReport>,
    ) -> Result<Response<wire::ReportAck>, Status> {
        let now = SystemTime::now();
        let mut book = self.book.lock().unwrap_or_else(PoisonError::into_inner);
        let (verdict, sender) = match PeerReport::try_from(request.into_inner()) {
            Err(err) => {
                book.count_malformed();
                (Err((RejectReason::Malformed, err.to_string())), None)
            }
            Ok(report) => {
                let sender = report.sender.id.clone();
                let foreign = report.foreign_alarm().map(|(i, alarm)| {
                    format!(
                        "alarms[{i}].node: {} is not the sender {sender}; a node reports only its own alarms",
                        alarm.node
                    )
                });
                let verdict = book.accept(report, now).map_err(|reason| {
                    let detail = match (reason, foreign) {
                        (RejectReason::ForeignAlarm, Some(detail)) => detail,
                        _ => format!("report from {sender} refused"),
                    };
                    (reason, detail)
                });
                (verdict, Some(sender))
            }
        };
        drop(book);
        if let Err((reason, detail)) = &verdict {
            self.log_refusal(*reason, sender.as_ref(), detail);
        }
        Ok(Response::new(self.ack(verdict)))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Mutex;
    use std::time::Duration;

    use meshd_model::intake::ReportBook;
    use meshd_proto::domain::{Alarm, AlarmKind, Incarnation, NodeId, NodeLoad, Severity};

    use super::*;

    fn id(name: &str) -> NodeId {
        NodeId::new(name).expect("id")
    }

    fn identity(name: &str) -> NodeIdentity {
        NodeIdentity {
            id: id(name),
            incarnation: Incarnation(1),
            version: "test".into(),
            hostname: name.into(),
        }
    }

    fn report_from(
        sender: &str,
        sequence: u64,
        kind: AlarmKind,
        alarm_about: &str,
    ) -> wire::PeerReport {
        let now = SystemTime::now();
        PeerReport {
            sender: identity(sender),
            sequence,
            sent_at: now,
            links: vec![],
            alarms: vec![Alarm {
                kind,
                severity: Severity::Critical,
                node: id(alarm_about),
                subject: "bridge0".into(),
                summary: "bridge loop".into(),
                evidence: vec![],
                fix: Some("rm -rf /".into()),
                since: now,
                updated: now,
            }],
            hears: vec![],
            load: NodeLoad::default(),
            facts: None,
        }
        .into()
    }

    fn service() -> (PeerService, SharedBook) {
        let members: BTreeSet<NodeId> = ["a", "b", "c"].into_iter().map(id).collect();
        let book = Arc::new(Mutex::new(ReportBook::new(
            id("a"),
            members,
            Duration::from_secs(5),
        )));
        (PeerService::new(identity("a"), book.clone()), book)
    }

    /// A report from b carrying an alarm about c is refused whole, with the
    /// field named and the refusal counted; b's real report goes through.
    #[tokio::test]
    async fn an_alarm_about_another_node_is_refused_by_name_and_counted() {
        let (service, book) = service();
        let ack = service
            .report(Request::new(report_from(
                "b",
                1,
                AlarmKind::BridgeLoop,
                "c",
            )))
            .await
            .expect("answered")
            .into_inner();
        assert!(!ack.accepted);
        assert_eq!(ack.reject_reason, wire::RejectReason::ForeignAlarm as i32);
        assert!(
            ack.detail
                .starts_with("alarms[0].node: c is not the sender b"),
            "{}",
            ack.detail
        );
        {
            let book = book.lock().expect("book");
            assert_eq!(book.rejected().get(&RejectReason::ForeignAlarm), Some(&1));
            assert!(
                book.latest().is_empty(),
                "nothing of the forged report is kept"
            );
        }
        let ack = service
            .report(Request::new(report_from(
                "b",
                2,
                AlarmKind::BridgeLoop,
                "b",
            )))
            .await
            .expect("answered")
            .into_inner();
        assert!(ack.accepted, "{}", ack.detail);
        assert_eq!(book.lock().expect("book").latest().len(), 1);
    }

    /// A reboot or kernel panic is raised by the peers of the node that
    /// rebooted: b may report one about c.
    #[tokio::test]
    async fn a_reboot_seen_by_a_peer_is_no_foreign_alarm() {
        let (service, book) = service();
        for (sequence, kind) in [(1, AlarmKind::NodeRebooted), (2, AlarmKind::KernelPanic)] {
            let ack = service
                .report(Request::new(report_from("b", sequence, kind, "c")))
                .await
                .expect("answered")
                .into_inner();
            assert!(ack.accepted, "{kind}: {}", ack.detail);
        }
        assert_eq!(
            book.lock()
                .expect("book")
                .rejected()
                .get(&RejectReason::ForeignAlarm),
            None
        );
    }
}
