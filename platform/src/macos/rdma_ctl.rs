//! `rdma_ctl status`: whether RDMA over Thunderbolt is enabled (it is
//! switched on from recoveryOS).

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RdmaCtlStatus {
    Enabled,
    Disabled,
    /// Anything else, trimmed, kept as evidence.
    Unknown(String),
}

/// A single lowercase word and a newline; exo compares case-blind, so
/// this does too.
pub fn parse_rdma_ctl_status(text: &str) -> RdmaCtlStatus {
    let word = text.trim();
    if word.eq_ignore_ascii_case("enabled") {
        RdmaCtlStatus::Enabled
    } else if word.eq_ignore_ascii_case("disabled") {
        RdmaCtlStatus::Disabled
    } else {
        RdmaCtlStatus::Unknown(word.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_and_anything_else() {
        assert_eq!(parse_rdma_ctl_status("disabled\n"), RdmaCtlStatus::Disabled);
        assert_eq!(parse_rdma_ctl_status(" Enabled "), RdmaCtlStatus::Enabled);
        assert_eq!(
            parse_rdma_ctl_status("rdma_ctl: command not supported\n"),
            RdmaCtlStatus::Unknown("rdma_ctl: command not supported".into())
        );
        assert_eq!(
            parse_rdma_ctl_status("enabled\nenabled\n"),
            RdmaCtlStatus::Unknown("enabled\nenabled".into())
        );
    }
}
