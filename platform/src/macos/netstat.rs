//! `netstat -ibn` (also `-ib`, `-i`, `-I IF -b`): each interface's
//! cumulative packet counters, from its `<Link#N>` row. Rows for the
//! interface's addresses repeat the same counters (with `-` for errors) and
//! are skipped.
//!
//! macOS prints no broadcast or multicast counter here (nor anywhere else a
//! tool shows without reading `if_data` from C), so the bridge storm
//! watcher uses a bridge's input packets: XNU's bridge hands every
//! broadcast and multicast frame a member receives up through the bridge
//! interface (counted on it), on every pass round a loop, besides the little
//! unicast addressed to the bridge itself. A member's own input counts the
//! job's unicast traffic too, so members get no storm counter on macOS.
//!
//! Columns are found by the header (`Name Mtu Network Address Ipkts Ierrs
//! [Ibytes] Opkts Oerrs [Obytes] Coll [Drop]`) and read from the right end
//! of a row, because the Address column is empty for interfaces without a
//! link-layer address (`utun0`, `lo0`). A name ending in `*` is down.

/// One interface's counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceCounters {
    /// Without the `*` that marks a down interface.
    pub name: String,
    /// The name carried the `*`: the interface is not UP.
    pub down: bool,
    pub input_packets: u64,
    /// `None` where the output has no such column (no `-b`).
    pub input_bytes: Option<u64>,
    pub output_packets: u64,
    pub output_bytes: Option<u64>,
}

/// Why `netstat` output could not be read at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetstatError {
    #[error("no header line with Name, Address, Ipkts and Opkts")]
    NoHeader,
}

/// Every interface with a readable `<Link#N>` row, in output order; rows
/// that cannot be read are left out and named in `problems`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NetstatInterfaces {
    pub interfaces: Vec<InterfaceCounters>,
    pub problems: Vec<String>,
}

impl NetstatInterfaces {
    pub fn get(&self, name: &str) -> Option<&InterfaceCounters> {
        self.interfaces.iter().find(|i| i.name == name)
    }
}

/// The value columns after `Address`, by name.
struct Columns {
    names: Vec<String>,
}

impl Columns {
    fn from_header(line: &str) -> Option<Columns> {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.first() != Some(&"Name") {
            return None;
        }
        let address = words.iter().position(|w| *w == "Address")?;
        let names: Vec<String> = words[address + 1..]
            .iter()
            .map(|w| (*w).to_owned())
            .collect();
        let columns = Columns { names };
        (columns.index("Ipkts").is_some() && columns.index("Opkts").is_some()).then_some(columns)
    }

    fn index(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }
}

pub fn parse_netstat_interfaces(text: &str) -> Result<NetstatInterfaces, NetstatError> {
    let mut lines = text.lines();
    let columns = lines
        .by_ref()
        .find_map(Columns::from_header)
        .ok_or(NetstatError::NoHeader)?;
    let mut parsed = NetstatInterfaces::default();
    for line in lines {
        let words: Vec<&str> = line.split_whitespace().collect();
        // Name, Mtu, Network (`<Link#N>`), optional Address, then values.
        if words
            .get(2)
            .is_none_or(|network| !network.starts_with("<Link#"))
        {
            continue;
        }
        match link_row(&words, &columns) {
            Some(counters) => {
                if parsed.get(&counters.name).is_none() {
                    parsed.interfaces.push(counters);
                }
            }
            None => parsed
                .problems
                .push(format!("unreadable interface row: {:?}", line.trim())),
        }
    }
    Ok(parsed)
}

fn link_row(words: &[&str], columns: &Columns) -> Option<InterfaceCounters> {
    let count = columns.names.len();
    // At least Name, Mtu and Network before the values.
    if words.len() < count + 3 || words.len() > count + 4 {
        return None;
    }
    let values = &words[words.len() - count..];
    let value = |name: &str| -> Option<Option<u64>> {
        match columns.index(name) {
            Some(i) => values[i].parse().ok().map(Some),
            None => Some(None),
        }
    };
    let (name, down) = match words[0].strip_suffix('*') {
        Some(name) => (name, true),
        None => (words[0], false),
    };
    if name.is_empty() {
        return None;
    }
    Some(InterfaceCounters {
        name: name.to_owned(),
        down,
        input_packets: value("Ipkts")??,
        input_bytes: value("Ibytes")?,
        output_packets: value("Opkts")??,
        output_bytes: value("Obytes")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "Name       Mtu   Network       Address            Ipkts Ierrs     Ibytes    Opkts Oerrs     Obytes  Coll\n";

    #[test]
    fn link_rows_with_and_without_an_address_and_address_rows_skipped() {
        let text = format!(
            "{HEADER}\
             lo0        16384 <Link#1>                         62273     0   14830358    62273     0   14830358     0\n\
             lo0        16384 127           127.0.0.1          62273     -   14830358    62273     -   14830358     -\n\
             gif0*      1280  <Link#2>                             0     0          0        0     0          0     0\n\
             bridge0    1500  <Link#12>   36:25:8c:fe:6b:80        5     0     555555        5     0     555555     0\n"
        );
        let parsed = parse_netstat_interfaces(&text).expect("header");
        let names: Vec<(&str, bool)> = parsed
            .interfaces
            .iter()
            .map(|i| (i.name.as_str(), i.down))
            .collect();
        assert_eq!(names, [("lo0", false), ("gif0", true), ("bridge0", false)]);
        let bridge = parsed.get("bridge0").expect("bridge0");
        assert_eq!(
            (
                bridge.input_packets,
                bridge.input_bytes,
                bridge.output_packets
            ),
            (5, Some(555_555), 5)
        );
        assert!(parsed.problems.is_empty());
    }

    #[test]
    fn without_bytes_columns_and_with_a_drop_column() {
        let text = "Name  Mtu   Network       Address            Ipkts Ierrs    Opkts Oerrs  Coll Drop\n\
                    en0   1500  <Link#4>    d4:9a:20:0d:e6:ec        7     0        9     0     0   0\n";
        let en0 = parse_netstat_interfaces(text).expect("header").interfaces[0].clone();
        assert_eq!(
            (en0.input_packets, en0.input_bytes, en0.output_packets),
            (7, None, 9)
        );
    }

    #[test]
    fn unreadable_rows_are_named_and_no_header_is_an_error() {
        let text = format!(
            "{HEADER}en0 1500 <Link#4> x 1 2\nen1 1500 <Link#5> aa 9 0 9 9 0 9 0 extra words\n"
        );
        let parsed = parse_netstat_interfaces(&text).expect("header");
        assert!(parsed.interfaces.is_empty());
        assert_eq!(parsed.problems.len(), 2);
        assert_eq!(
            parse_netstat_interfaces("netstat: sysctl: Operation not permitted\n"),
            Err(NetstatError::NoHeader)
        );
        assert_eq!(parse_netstat_interfaces(""), Err(NetstatError::NoHeader));
    }
}
