//! macOS's network configuration (services, the Thunderbolt Bridge's
//! enabled state) changing under meshd: the bridge and facts watchers read
//! again at once instead of an interval later.

use std::path::Path;

/// macOS keeps its network configuration (services, the Thunderbolt
/// Bridge's enabled state) in this directory's preferences.plist.
const NETWORK_PREFERENCES: &str = "/Library/Preferences/SystemConfiguration";

/// Sends on `changed` whenever macOS's network configuration changes (the
/// facts watch re-reads on it too); `None`, logged, where it cannot watch.
pub fn watch_network_config(
    changed: tokio::sync::mpsc::Sender<()>,
) -> Option<notify::RecommendedWatcher> {
    use notify::Watcher;
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok_and(|e| !e.kind.is_access()) {
            // Full means a sample is already due: this one adds nothing.
            let _ = changed.try_send(());
        }
    });
    let mut watcher = match watcher {
        Ok(watcher) => watcher,
        Err(err) => {
            tracing::warn!(
                "cannot watch the network configuration, bridges and facts are read on their intervals only: {err}"
            );
            return None;
        }
    };
    match watcher.watch(
        Path::new(NETWORK_PREFERENCES),
        notify::RecursiveMode::NonRecursive,
    ) {
        Ok(()) => Some(watcher),
        Err(err) => {
            tracing::warn!(
                "cannot watch {NETWORK_PREFERENCES}, bridges and facts are read on their intervals only: {err}"
            );
            None
        }
    }
}
