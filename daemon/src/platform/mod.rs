//! OS facts: commands and files are read by the watchers, then handed as
//! text to the plain parser functions here, which never panic on any input
//! and are tested against real outputs (`../shared/fixtures/macos/`).

pub mod bridge_linux;
