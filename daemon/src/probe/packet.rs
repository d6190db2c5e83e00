//! The probe datagram: a 32-byte big-endian header, the echoes it carries
//! (16 bytes each), then zero padding up to the probe's size (so small and
//! MTU-sized probes share one format).
//!
//! ```text
//!  0..4   magic "MSHP"
//!  4      version (1)
//!  5      kind: 1 request, 2 reply
//!  6      class: 0 small, 1 MTU-sized
//!  7      flags: bit 0 the sender reads echoes; bits 1..=3 how many echoes
//!         follow the header; bits 4..=7 reserved (0, ignored on receive)
//!  8..16  sequence number
//! 16..24  responder receive time, ns on the responder's monotonic clock
//! 24..32  responder send time, ns on the same clock (both 0 in a request)
//! 32..    the echoes, each:
//!           0      class of the request it answers
//!           1..4   reserved (0)
//!           4..8   how long that request waited at the responder, ns
//!           8..16  sequence number of that request
//! ```
//!
//! An echo is a reply that rides in the responder's own probe of the same
//! class instead of a datagram of its own, which halves the datagrams of a
//! cable that both ends probe at the same rate. A node attaches echoes only
//! for a peer whose datagrams say it reads them (flag bit 0); to any other
//! peer, and for a request it cannot pair with a probe of its own of the
//! same class and at least its size, it sends plain replies. Nodes from
//! before echoes ignore the flags and the bytes after the header, so a mesh
//! halfway through an upgrade keeps measuring.
//!
//! The responder times are only ever subtracted from each other, so the
//! clocks of the two nodes never need to agree.

use std::time::Duration;

use meshd_model::linkstats::ProbeClass;

pub const MAGIC: [u8; 4] = *b"MSHP";
pub const VERSION: u8 = 1;
pub const HEADER_LEN: usize = 32;
pub const ECHO_LEN: usize = 16;
/// Echoes one datagram carries at most: a peer probing at the same rate
/// leaves one or two requests between two ticks.
pub const MAX_ECHOES: usize = 4;
/// Largest UDP payload over IPv4 (65535 − 20 IP − 8 UDP).
pub const MAX_DATAGRAM_LEN: usize = 65_507;

const READS_ECHOES: u8 = 1;
const ECHO_COUNT_SHIFT: u32 = 1;
const ECHO_COUNT_MASK: u8 = 0b111;

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
    pub fn host_delay(&self) -> Duration {
        Duration::from_nanos(self.send_ns.saturating_sub(self.recv_ns))
    }

    /// What a reply answers, as an echo would say it.
    pub fn answer(&self) -> Option<Echo> {
        (self.kind == Kind::Reply).then(|| Echo {
            class: self.class,
            seq: self.seq,
            held: self.host_delay(),
        })
    }
}

/// One request answered inside another datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Echo {
    pub class: ProbeClass,
    pub seq: u64,
    /// How long the request waited at the responder: taken out of the
    /// round trip. Sent in whole nanoseconds up to about 4.3 s, far past
    /// any probe timeout.
    pub held: Duration,
}

/// A decoded datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram<'a> {
    pub header: Header,
    /// The sender takes echoes of its requests.
    pub reads_echoes: bool,
    /// `ECHO_LEN` bytes per echo, each already checked by [`decode`].
    echoes: &'a [u8],
}

impl Datagram<'_> {
    /// Every request this datagram answers: a reply's own, then the echoes.
    pub fn answers(&self) -> impl Iterator<Item = Echo> + '_ {
        let echoes = self.echoes.chunks_exact(ECHO_LEN).filter_map(|e| {
            let (&[class, ..], rest) = e.split_first_chunk::<4>()?;
            let (held, seq) = rest.split_first_chunk::<4>()?;
            Some(Echo {
                class: class_from_wire(class)?,
                seq: u64::from_be_bytes(<[u8; 8]>::try_from(seq).ok()?),
                held: Duration::from_nanos(u64::from(u32::from_be_bytes(*held))),
            })
        });
        self.header.answer().into_iter().chain(echoes)
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
    #[error("probe size {len} is outside {min}..={max} bytes")]
    BadLength { len: usize, min: usize, max: usize },
    #[error("{count} echoes are more than the {MAX_ECHOES} a datagram carries")]
    TooManyEchoes { count: usize },
    #[error("a datagram of {len} bytes cannot hold the {count} echoes it announces")]
    EchoesCutShort { count: usize, len: usize },
}

/// The smallest datagram that holds `echoes` echoes.
pub const fn min_len(echoes: usize) -> usize {
    HEADER_LEN + echoes * ECHO_LEN
}

/// Writes `header`, `echoes` and zero padding into `buf[..total_len]` and
/// returns that slice. `total_len` must hold the header and echoes and fit
/// `buf` (and a UDP datagram). Every datagram says this node reads echoes.
pub fn encode<'a>(
    header: &Header,
    echoes: &[Echo],
    total_len: usize,
    buf: &'a mut [u8],
) -> Result<&'a [u8], PacketError> {
    if echoes.len() > MAX_ECHOES {
        return Err(PacketError::TooManyEchoes {
            count: echoes.len(),
        });
    }
    let min = min_len(echoes.len());
    let max = buf.len().min(MAX_DATAGRAM_LEN);
    let bad_length = PacketError::BadLength {
        len: total_len,
        min,
        max,
    };
    if !(min..=max).contains(&total_len) {
        return Err(bad_length);
    }
    let out = buf.get_mut(..total_len).ok_or(bad_length)?;
    let (head, rest) = out
        .split_first_chunk_mut::<HEADER_LEN>()
        .ok_or(bad_length)?;
    let count = u8::try_from(echoes.len()).map_err(|_| bad_length)?;
    head[0..4].copy_from_slice(&MAGIC);
    head[4] = VERSION;
    head[5] = header.kind.to_wire();
    head[6] = class_to_wire(header.class);
    head[7] = READS_ECHOES | (count << ECHO_COUNT_SHIFT);
    head[8..16].copy_from_slice(&header.seq.to_be_bytes());
    head[16..24].copy_from_slice(&header.recv_ns.to_be_bytes());
    head[24..32].copy_from_slice(&header.send_ns.to_be_bytes());
    // A reply reuses the request's buffer; never echo back what a sender
    // put after the header.
    rest.fill(0);
    for (slot, echo) in rest.chunks_exact_mut(ECHO_LEN).zip(echoes) {
        let held = u32::try_from(echo.held.as_nanos()).unwrap_or(u32::MAX);
        slot[0] = class_to_wire(echo.class);
        slot[4..8].copy_from_slice(&held.to_be_bytes());
        slot[8..16].copy_from_slice(&echo.seq.to_be_bytes());
    }
    Ok(out)
}

/// Parses a datagram, its echoes included; never panics.
pub fn decode(datagram: &[u8]) -> Result<Datagram<'_>, PacketError> {
    let len = datagram.len();
    let Some((head, rest)) = datagram.split_first_chunk::<HEADER_LEN>() else {
        return Err(PacketError::TooShort { len });
    };
    let (magic, fields) = head.split_at(4);
    if magic != MAGIC {
        return Err(PacketError::BadMagic);
    }
    let &[version, kind, class, flags, ref tail @ ..] = fields else {
        return Err(PacketError::TooShort { len });
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
    let count = usize::from((flags >> ECHO_COUNT_SHIFT) & ECHO_COUNT_MASK);
    if count > MAX_ECHOES {
        return Err(PacketError::TooManyEchoes { count });
    }
    let echoes = rest
        .get(..count * ECHO_LEN)
        .ok_or(PacketError::EchoesCutShort { count, len })?;
    if let Some(&bad) = echoes
        .chunks_exact(ECHO_LEN)
        .filter_map(<[u8]>::first)
        .find(|c| class_from_wire(**c).is_none())
    {
        return Err(PacketError::UnknownClass(bad));
    }
    Ok(Datagram {
        header: Header {
            kind,
            class,
            seq: word(0),
            recv_ns: word(1),
            send_ns: word(2),
        },
        reads_echoes: flags & READS_ECHOES != 0,
        echoes,
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

    fn echoes() -> [Echo; 2] {
        [
            Echo {
                class: ProbeClass::Small,
                seq: 7,
                held: Duration::from_micros(1_500),
            },
            Echo {
                class: ProbeClass::Mtu,
                seq: u64::MAX,
                held: Duration::ZERO,
            },
        ]
    }

    #[test]
    fn round_trips_and_pads_with_zeros() {
        let mut buf = [0xAAu8; 2048];
        let out = encode(&sample(), &[], 1472, &mut buf).expect("encodes");
        assert_eq!(out.len(), 1472);
        assert!(out[HEADER_LEN..].iter().all(|b| *b == 0));
        let decoded = decode(out).expect("decodes");
        assert_eq!(decoded.header, sample());
        assert!(decoded.reads_echoes);
        assert_eq!(sample().host_delay(), Duration::from_nanos(750));
        let answers: Vec<Echo> = decoded.answers().collect();
        assert_eq!(
            answers,
            [Echo {
                class: ProbeClass::Mtu,
                seq: sample().seq,
                held: Duration::from_nanos(750),
            }]
        );
    }

    #[test]
    fn a_request_carries_its_echoes_and_answers_them_only() {
        let mut buf = [0xAAu8; 128];
        let request = Header::request(ProbeClass::Small, 3);
        let out = encode(&request, &echoes(), 64, &mut buf).expect("encodes");
        assert_eq!(out.len(), 64);
        assert!(out[min_len(2)..].iter().all(|b| *b == 0));
        let decoded = decode(out).expect("decodes");
        assert_eq!(decoded.header, request);
        assert_eq!(decoded.answers().collect::<Vec<_>>(), echoes());
        // Held times past the field's range are sent as its largest value.
        let long = Echo {
            held: Duration::from_secs(10),
            ..echoes()[0]
        };
        let out = encode(&request, &[long], 64, &mut buf).expect("encodes");
        let held: Vec<Duration> = decode(out)
            .expect("decodes")
            .answers()
            .map(|e| e.held)
            .collect();
        assert_eq!(held, [Duration::from_nanos(u64::from(u32::MAX))]);
    }

    #[test]
    fn layout_is_big_endian_as_documented() {
        let mut buf = [0u8; 64];
        let out =
            encode(&Header::request(ProbeClass::Small, 258), &[], 64, &mut buf).expect("encodes");
        assert_eq!(&out[..8], b"MSHP\x01\x01\x00\x01");
        assert_eq!(&out[8..16], &[0, 0, 0, 0, 0, 0, 1, 2]);
        assert_eq!(&out[16..32], &[0u8; 16]);
        assert_eq!(out.len(), 64);
        let out = encode(
            &Header::request(ProbeClass::Mtu, 1),
            &echoes(),
            64,
            &mut buf,
        )
        .expect("encodes");
        assert_eq!(out[7], 0b101, "reads echoes, two of them");
        assert_eq!(
            &out[32..48],
            &[0, 0, 0, 0, 0, 0x16, 0xE3, 0x60, 0, 0, 0, 0, 0, 0, 0, 7]
        );
        assert_eq!(&out[48..52], &[1, 0, 0, 0]);
        assert_eq!(&out[56..64], &[0xFF; 8]);
    }

    #[test]
    fn encode_rejects_bad_lengths() {
        let mut buf = [0u8; 100];
        assert!(matches!(
            encode(&sample(), &[], 31, &mut buf),
            Err(PacketError::BadLength { len: 31, .. })
        ));
        assert!(encode(&sample(), &[], 101, &mut buf).is_err());
        assert!(encode(&sample(), &[], 32, &mut buf).is_ok());
        assert!(matches!(
            encode(&sample(), &echoes(), 63, &mut buf),
            Err(PacketError::BadLength { min: 64, .. })
        ));
        let five = [echoes()[0]; 5];
        assert_eq!(
            encode(&sample(), &five, 100, &mut buf),
            Err(PacketError::TooManyEchoes { count: 5 })
        );
        let mut big = vec![0u8; 70_000];
        assert!(encode(&sample(), &[], MAX_DATAGRAM_LEN + 1, &mut big).is_err());
    }

    #[test]
    fn decode_rejects_what_it_must() {
        let mut buf = [0u8; 64];
        let good = encode(&sample(), &[], 64, &mut buf)
            .expect("encodes")
            .to_vec();
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
        flagged[7] = 0xF1;
        assert_eq!(decode(&flagged).map(|d| d.header), Ok(sample()));
        // Exactly a header, no padding, is valid.
        assert_eq!(decode(&good[..HEADER_LEN]).map(|d| d.header), Ok(sample()));
        // A datagram from before echoes: no flags at all.
        let mut old = good.clone();
        old[7] = 0;
        let old = decode(&old).expect("decodes");
        assert!(!old.reads_echoes);
        assert_eq!(old.answers().count(), 1);

        let with_echoes = encode(
            &Header::request(ProbeClass::Small, 1),
            &echoes(),
            64,
            &mut buf,
        )
        .expect("encodes")
        .to_vec();
        assert_eq!(
            decode(&with_echoes[..63]),
            Err(PacketError::EchoesCutShort { count: 2, len: 63 })
        );
        let mut bad = with_echoes.clone();
        bad[48] = 7;
        assert_eq!(decode(&bad), Err(PacketError::UnknownClass(7)));
        let mut bad = with_echoes;
        bad[7] = 1 | (6 << 1);
        assert_eq!(decode(&bad), Err(PacketError::TooManyEchoes { count: 6 }));
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
        let (mut accepted, mut echoed) = (0, 0);
        for round in 0..20_000 {
            let len = usize::try_from(next() % 120).unwrap_or(0);
            let mut bytes: Vec<u8> = (0..len).map(|_| next().to_le_bytes()[0]).collect();
            // Half the inputs get a valid prefix so the later checks run too.
            if round % 2 == 0 && len >= 8 {
                bytes[..4].copy_from_slice(&MAGIC);
                bytes[4] = VERSION;
                bytes[5] = 1;
                bytes[6] = 0;
            }
            if let Ok(datagram) = decode(&bytes) {
                accepted += 1;
                echoed += datagram
                    .answers()
                    .filter(|e| e.seq != datagram.header.seq)
                    .count();
            }
        }
        assert!(accepted > 0, "valid prefixes should sometimes decode");
        assert!(echoed > 0, "random echoes should sometimes decode");
    }
}
