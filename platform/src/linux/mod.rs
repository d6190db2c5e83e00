//! Linux facts from sysfs (`/sys/class/infiniband`, `/sys/class/net`) and,
//! where it loads, the read-only verbs library.

use meshd_proto::facts::NodeFacts;

use crate::source::Source;

/// PLACEHOLDER until the collector lands: reports everything as unseen.
pub fn collect(source: &dyn Source) -> NodeFacts {
    let _ = source;
    NodeFacts {
        blind_spots: vec!["collector not written yet".to_owned()],
        ..NodeFacts::default()
    }
}
