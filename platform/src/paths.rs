//! Where meshd's files live on each OS, named once for the daemon's
//! install and for the plans and advice that tell operators where to look.

/// The config on a Mac: `/usr/local/etc` exists for system software on
/// every Mac (unlike Homebrew's `/opt/homebrew/etc`, Apple silicon only and
/// owned by a package manager).
pub const MACOS_CONFIG: &str = "/usr/local/etc/meshd/meshd.toml";
/// The config on Linux.
pub const LINUX_CONFIG: &str = "/etc/meshd/meshd.toml";
