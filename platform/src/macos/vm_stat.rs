//! `vm_stat`: the Mach virtual memory statistics, in pages.
//!
//! ```text
//! Mach Virtual Memory Statistics: (page size of 16384 bytes)
//! Pages free:                              130912.
//! Pages wired down:                        127718.
//! "Translation faults":                5220385534.
//! ```
//!
//! The page size is the header's (16384 on Apple silicon, 4096 on Intel);
//! without it no count can be turned into bytes.

use std::collections::BTreeMap;

/// The counts `vm_stat` printed, by their label without quotes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VmStat {
    /// From the header; `None` when it is missing or unreadable.
    pub page_size: Option<u64>,
    pub pages: BTreeMap<String, u64>,
}

impl VmStat {
    /// `label`'s count in bytes; `None` when the label or the page size is
    /// missing, or the product does not fit.
    pub fn bytes(&self, label: &str) -> Option<u64> {
        self.pages.get(label)?.checked_mul(self.page_size?)
    }

    /// Memory that cannot be paged out: "Pages wired down".
    pub fn wired_bytes(&self) -> Option<u64> {
        self.bytes("Pages wired down")
    }
}

pub fn parse_vm_stat(text: &str) -> VmStat {
    let mut stat = VmStat::default();
    for line in text.lines() {
        if let Some(rest) = line.split_once("(page size of ").map(|(_, r)| r) {
            stat.page_size = rest
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .filter(|size| *size > 0);
            continue;
        }
        let Some((label, value)) = line.rsplit_once(':') else {
            continue;
        };
        let value = value.trim().trim_end_matches('.');
        if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(count) = value.parse() {
            stat.pages
                .insert(label.trim().trim_matches('"').to_owned(), count);
        }
    }
    stat
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_the_page_size_give_bytes() {
        let stat = parse_vm_stat(
            "Mach Virtual Memory Statistics: (page size of 4096 bytes)\n\
             Pages wired down:                        715958.\n\
             \"Translation faults\":                  11477162.\n\
             Pages free: lots.\n",
        );
        assert_eq!(stat.page_size, Some(4096));
        assert_eq!(stat.wired_bytes(), Some(715_958 * 4096));
        assert_eq!(stat.pages.get("Translation faults"), Some(&11_477_162));
        assert!(!stat.pages.contains_key("Pages free"));
    }

    #[test]
    fn without_a_page_size_there_are_no_bytes() {
        let stat = parse_vm_stat("Pages wired down: 10.\n");
        assert_eq!(stat.pages.get("Pages wired down"), Some(&10));
        assert_eq!(stat.wired_bytes(), None);
        let huge = parse_vm_stat(&format!(
            "(page size of 16384 bytes)\nPages wired down: {}.\n",
            u64::MAX
        ));
        assert_eq!(huge.wired_bytes(), None, "overflow is unknown, not a wrap");
        assert_eq!(parse_vm_stat("(page size of 0 bytes)\n").page_size, None);
    }
}
