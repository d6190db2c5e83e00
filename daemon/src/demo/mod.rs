//! `meshd demo`: a whole mesh of real meshd nodes in one process, on
//! loopback, with faults injected by proxies the demo owns.

pub mod command;
pub mod faults;
pub mod plan;
pub mod proxy;
