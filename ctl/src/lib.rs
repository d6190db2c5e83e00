//! meshctl's command line, shared with `meshd install`, which renders it
//! into shell completions and man pages. The commands themselves live in
//! the binary (`src/main.rs`).

pub mod cli;
