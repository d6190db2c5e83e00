//! `meshd.v1.Peer`: takes peer reports. The handler decodes, checks and
//! stores under a short lock; the aggregator reads the book on its own
//! cadence, so a flood of reports can never stall the verdicts.

use std::sync::{Arc, PoisonError};
use std::time::SystemTime;

use meshd_proto::convert::reject_reason_to_wire;
use meshd_proto::domain::{NodeIdentity, PeerReport, RejectReason};
use meshd_proto::wire;
use meshd_proto::wire::peer_server::Peer;
use tonic::{Request, Response, Status};

use crate::aggregator::SharedBook;

#[derive(Debug, Clone)]
pub struct PeerService {
    identity: Arc<NodeIdentity>,
    book: SharedBook,
}

impl PeerService {
    pub fn new(identity: NodeIdentity, book: SharedBook) -> Self {
        Self {
            identity: Arc::new(identity),
            book,
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
        let verdict = match PeerReport::try_from(request.into_inner()) {
            Err(err) => {
                book.count_malformed();
                tracing::debug!("malformed peer report: {err}");
                Err((RejectReason::Malformed, err.to_string()))
            }
            Ok(report) => {
                let sender = report.sender.id.clone();
                book.accept(report, now).map_err(|reason| {
                    tracing::debug!(%sender, %reason, "peer report refused");
                    (reason, format!("report from {sender} refused"))
                })
            }
        };
        drop(book);
        Ok(Response::new(self.ack(verdict)))
    }
}
