//! The config in force: whether the last read of the file succeeded, and
//! when the one in force was read (Prometheus's own
//! `prometheus_config_last_reload_*` pair, for meshd).

use std::sync::Mutex;
use std::time::SystemTime;

use super::catalogue as c;
use super::exposition::{Exposition, flag};
use super::links::unix_seconds;
use super::lock;

#[derive(Debug)]
pub struct ConfigSeries {
    state: Mutex<State>,
}

#[derive(Debug, Clone, Copy)]
struct State {
    last_successful: bool,
    in_force_since: SystemTime,
}

impl ConfigSeries {
    /// The config a node starts with was read successfully at `at`.
    pub fn new(at: SystemTime) -> Self {
        Self {
            state: Mutex::new(State {
                last_successful: true,
                in_force_since: at,
            }),
        }
    }

    /// A new config read at `at` is now in force.
    pub fn reloaded(&self, at: SystemTime) {
        *lock(&self.state) = State {
            last_successful: true,
            in_force_since: at,
        };
    }

    /// A read of the file was refused; the config in force stays.
    pub fn refused(&self) {
        lock(&self.state).last_successful = false;
    }

    pub fn write(&self, out: &mut Exposition) {
        let state = *lock(&self.state);
        out.family(&c::CONFIG_LAST_RELOAD_SUCCESSFUL)
            .sample(&[], flag(state.last_successful));
        out.family(&c::CONFIG_LAST_RELOAD_SUCCESS_TIMESTAMP_SECONDS)
            .sample(&[], unix_seconds(state.in_force_since));
    }
}
