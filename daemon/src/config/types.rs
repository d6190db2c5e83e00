//! Every value of the wrong type or shape in a config file, not just the
//! first: serde stops at the first error, so each section, and each entry
//! of `[[peers]]` and `[[links]]`, is read on its own from the spanned
//! document, and each error keeps its place in the file.

use serde::de::DeserializeOwned;
use toml::Spanned;
use toml::de::{DeTable, DeValue, ValueDeserializer};

use super::{
    AlertingConfig, HistoryConfig, LinkConfig, ListenConfig, NodeSection, PeerConfig,
    PlatformConfig, ProbeConfig, ReportConfig, Thresholds, TlsConfig, WatchConfig,
};

/// The errors of reading each part of `source` into its type, in file
/// order. Empty when the file is not TOML at all (the caller reports that)
/// or every part reads.
pub(super) fn errors(source: &str) -> Vec<toml::de::Error> {
    let Ok(root) = DeTable::parse(source) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for (key, value) in root.get_ref() {
        let name: &str = key.get_ref();
        let result = match name {
            "node" => read::<NodeSection>(value),
            "listen" => read::<ListenConfig>(value),
            "peers" => each::<PeerConfig>(value),
            "links" => each::<LinkConfig>(value),
            "probe" => read::<ProbeConfig>(value),
            "report" => read::<ReportConfig>(value),
            "thresholds" => read::<Thresholds>(value),
            "alerting" => read::<AlertingConfig>(value),
            "watch" => read::<WatchConfig>(value),
            "platform" => read::<PlatformConfig>(value),
            "tls" => read::<TlsConfig>(value),
            "history" => read::<HistoryConfig>(value),
            // The whole file's own error names the unknown key and the
            // ones allowed; whatever else is wrong is listed here.
            _ => Vec::new(),
        };
        found.extend(result);
    }
    found.sort_by_key(|e| e.span().map_or(usize::MAX, |s| s.start));
    found
}

fn read<T: DeserializeOwned>(value: &Spanned<DeValue<'_>>) -> Vec<toml::de::Error> {
    T::deserialize(ValueDeserializer::from(value.clone()))
        .err()
        .into_iter()
        .collect()
}

/// An array of tables, entry by entry, so that a bad entry does not hide
/// the next one.
fn each<T: DeserializeOwned>(value: &Spanned<DeValue<'_>>) -> Vec<toml::de::Error> {
    match value.get_ref() {
        DeValue::Array(entries) => entries.iter().flat_map(read::<T>).collect(),
        _ => read::<Vec<T>>(value),
    }
}
