//! The probe datagram: a 32-byte big-endian header, then zero padding up to
//! the probe's size (so small and MTU-sized probes share one format).
//!
//! ```text
//!  0..4   magic "MSHP"
//!  4      version (1)
//!  5      kind: 1 request, 2 reply
//!  6      class: 0 small, 1 MTU-sized
//!  7      flags (0; reserved, ignored on receive)
//!  8..16  sequence number
//! 16..24  responder receive time, ns on the responder's monotonic clock
//! 24..32  responder send time, ns on the same clock
//! ```
//!
//! The two responder times are only ever subtracted from each other, so the
//! clocks of the two nodes never need to agree.

use meshd_model::linkstats::ProbeClass;

pub const MAGIC: [u8; 4] = *b"MSHP";
pub const VERSION: u8 = 1;
pub const HEADER_LEN: usize = 32;
/// Largest UDP payload over IPv4 (65535 − 20 IP − 8 UDP).
pub const MAX_DATAGRAM_LEN: usize = 65_507;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Request,
    Reply,
}

impl Kind {
    fn to_wire(self) -> u8 {
        match self {
            Kind::Request => 1,
            Kind::Reply => 2,
        }
    }

    fn from_wire(b: u8) -> Option<Self> {
        match b {
            1 => Some(Kind::Request),
            2 => Some(Kind::Reply),
            _ => None,
        }
    }
}

fn class_to_wire(class: ProbeClass) -> u8 {
    match class {
        ProbeClass::Small => 0,
        ProbeClass::Mtu => 1,
    }
}

fn class_from_wire(b: u8) -> Option<ProbeClass> {
    match b {
        0 => Some(ProbeClass::Small),
        1 => Some(ProbeClass::Mtu),
        _ => None,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub class: ProbeClass,
    pub seq: u64,
    /// Responder's receive time in ns (0 in requests).
    pub recv_ns: u64,
    /// Responder's send time in ns (0 in requests).
    pub send_ns: u64,
}

impl Header {
    pub fn request(class: ProbeClass, seq: u64) -> Self {
        Self {
            kind: Kind::Request,
            class,
            seq,
            recv_ns: 0,
            send_ns: 0,
        }
    }

    /// The responder's own delay; zero if its clock stepped back.
    pub fn host_delay(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.send_ns.saturating_sub(self.recv_ns))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    #[error("datagram of {len} bytes is shorter than the {HEADER_LEN}-byte probe header")]
    TooShort { len: usize },
    #[error("not a meshd probe (bad magic)")]
    BadMagic,
    #[error("probe version {0} is not supported (want {VERSION})")]
    UnsupportedVersion(u8),
    #[error("unknown probe kind {0}")]
    UnknownKind(u8),
    #[error("unknown probe class {0}")]
    UnknownClass(u8),
    #[error("probe size {len} is outside {HEADER_LEN}..={max} bytes")]
    BadLength { len: usize, max: usize },
}

/// Writes `header` and zero padding into `buf[..total_len]` and returns that
/// slice. `total_len` must be at least [`HEADER_LEN`] and fit `buf` (and a
/// UDP datagram).
pub fn encode<'a>(
    header: &Header,
    total_len: usize,
    buf: &'a mut [u8],
) -> Result<&'a [u8], PacketError> {
    let max = buf.len().min(MAX_DATAGRAM_LEN);
    if !(HEADER_LEN..=max).contains(&total_len) {
        return Err(PacketError::BadLength {
            len: total_len,
            max,
        });
    }
    let bad_length = PacketError::BadLength {
        len: total_len,
        max,
    };
    let out = buf.get_mut(..total_len).ok_or(bad_length)?;
    let (head, padding) = out
        .split_first_chunk_mut::<HEADER_LEN>()
        .ok_or(bad_length)?;
    head[0..4].copy_from_slice(&MAGIC);
    head[4] = VERSION;
    head[5] = header.kind.to_wire();
    head[6] = class_to_wire(header.class);
    head[7] = 0;
    head[8..16].copy_from_slice(&header.seq.to_be_bytes());
    head[16..24].copy_from_slice(&header.recv_ns.to_be_bytes());
    head[24..32].copy_from_slice(&header.send_ns.to_be_bytes());
    // A reply reuses the request's buffer; never echo back what a sender
    // put after the header.
    padding.fill(0);
    Ok(out)
}

/// Overwrites the send time of an encoded datagram, so the responder can
/// take it after the padding is written, just before the send. Does nothing
/// to a datagram shorter than the header.
pub fn stamp_send_time(datagram: &mut [u8], send_ns: u64) {
    if let Some(field) = datagram.get_mut(24..HEADER_LEN) {
        field.copy_from_slice(&send_ns.to_be_bytes());
    }
}

/// Parses the header of any datagram; never panics.
pub fn decode(datagram: &[u8]) -> Result<Header, PacketError> {
    let Some(head) = datagram.first_chunk::<HEADER_LEN>() else {
        return Err(PacketError::TooShort {
            len: datagram.len(),
        });
    };
    let (magic, rest) = head.split_at(4);
    if magic != MAGIC {
        return Err(PacketError::BadMagic);
    }
    let &[version, kind, class, _flags, ref tail @ ..] = rest else {
        return Err(PacketError::TooShort {
            len: datagram.len(),
        });
    };
    if version != VERSION {
        return Err(PacketError::UnsupportedVersion(version));
    }
    let kind = Kind::from_wire(kind).ok_or(PacketError::UnknownKind(kind))?;
    let class = class_from_wire(class).ok_or(PacketError::UnknownClass(class))?;
    let word = |i: usize| {
        tail.get(i * 8..i * 8 + 8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map_or(0, u64::from_be_bytes)
    };
    Ok(Header {
        kind,
        class,
        seq: word(0),
        recv_ns: word(1),
        send_ns: word(2),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Header {
        Header {
            kind: Kind::Reply,
            class: ProbeClass::Mtu,
            seq: 0x0102_0304_0506_0708,
            recv_ns: 1_000,
            send_ns: 1_750,
        }
    }

    #[test]
    fn round_trips_and_pads_with_zeros() {
        let mut buf = [0xAAu8; 2048];
        let out = encode(&sample(), 1472, &mut buf).expect("encodes");
        assert_eq!(out.len(), 1472);
        assert!(out[HEADER_LEN..].iter().all(|b| *b == 0));
        assert_eq!(decode(out), Ok(sample()));
        assert_eq!(sample().host_delay(), std::time::Duration::from_nanos(750));
        stamp_send_time(&mut buf[..1472], 9_000);
        let restamped = decode(&buf).expect("decodes");
        assert_eq!(restamped.send_ns, 9_000);
        assert_eq!(restamped.recv_ns, 1_000);
        stamp_send_time(&mut [0u8; 3], 1);
    }

    #[test]
    fn layout_is_big_endian_as_documented() {
        let mut buf = [0u8; 64];
        let out = encode(&Header::request(ProbeClass::Small, 258), 64, &mut buf).expect("encodes");
        assert_eq!(&out[..8], b"MSHP\x01\x01\x00\x00");
        assert_eq!(&out[8..16], &[0, 0, 0, 0, 0, 0, 1, 2]);
        assert_eq!(&out[16..32], &[0u8; 16]);
        assert_eq!(out.len(), 64);
    }

    #[test]
    fn encode_rejects_bad_lengths() {
        let mut buf = [0u8; 100];
        assert!(matches!(
            encode(&sample(), 31, &mut buf),
            Err(PacketError::BadLength { len: 31, .. })
        ));
        assert!(encode(&sample(), 101, &mut buf).is_err());
        assert!(encode(&sample(), 32, &mut buf).is_ok());
        let mut big = vec![0u8; 70_000];
        assert!(encode(&sample(), MAX_DATAGRAM_LEN + 1, &mut big).is_err());
    }

    #[test]
    fn decode_rejects_what_it_must() {
        let mut buf = [0u8; 64];
        let good = encode(&sample(), 64, &mut buf).expect("encodes").to_vec();
        assert_eq!(decode(&good[..31]), Err(PacketError::TooShort { len: 31 }));
        assert_eq!(decode(&[]), Err(PacketError::TooShort { len: 0 }));
        let mut bad = good.clone();
        bad[0] = b'X';
        assert_eq!(decode(&bad), Err(PacketError::BadMagic));
        let mut bad = good.clone();
        bad[4] = 2;
        assert_eq!(decode(&bad), Err(PacketError::UnsupportedVersion(2)));
        let mut bad = good.clone();
        bad[5] = 3;
        assert_eq!(decode(&bad), Err(PacketError::UnknownKind(3)));
        let mut bad = good.clone();
        bad[6] = 9;
        assert_eq!(decode(&bad), Err(PacketError::UnknownClass(9)));
        // Reserved flags are ignored so a later version may use them.
        let mut flagged = good.clone();
        flagged[7] = 0xFF;
        assert_eq!(decode(&flagged), Ok(sample()));
        // Exactly a header, no padding, is valid.
        assert_eq!(decode(&good[..HEADER_LEN]), Ok(sample()));
    }

    #[test]
    fn decode_never_panics_on_garbage() {
        // xorshift: deterministic, no dependency.
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut accepted = 0;
        for round in 0..20_000 {
            let len = usize::try_from(next() % 80).unwrap_or(0);
            let mut bytes: Vec<u8> = (0..len).map(|_| next().to_le_bytes()[0]).collect();
            // Half the inputs get a valid prefix so the later checks run too.
            if round % 2 == 0 && len >= 5 {
                bytes[..4].copy_from_slice(&MAGIC);
                bytes[4] = VERSION;
            }
            if decode(&bytes).is_ok() {
                accepted += 1;
            }
        }
        assert!(accepted > 0, "valid prefixes should sometimes decode");
    }
}
