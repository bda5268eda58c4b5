//! A small MaxMind DB writer (format 2.0,
//! <https://maxmind.github.io/MaxMind-DB/>) for the GeoIP tests: an IPv6
//! search tree with 24-bit records (IPv4 networks under `::/96`, where
//! readers look them up), one data record per country
//! (`{"country": {"iso_code": "SE"}}`, the shape of GeoLite2 Country), and
//! the metadata every reader checks. Enough to hand `serve --geoip` a real
//! file the `maxminddb` crate opens, with loopback networks in it.

use std::collections::BTreeMap;
use std::net::IpAddr;

/// One record of a tree node.
#[derive(Clone, Copy)]
enum Record {
    Empty,
    Node(usize),
    /// Offset in the data section.
    Data(usize),
}

/// The file's bytes, mapping each `(network, prefix length, ISO code)`.
/// IPv4 prefix lengths count IPv4 bits (`/32` is one address). Networks
/// must not nest.
pub fn country_database(networks: &[(IpAddr, u8, &str)]) -> Vec<u8> {
    let mut data = Vec::new();
    let mut offsets: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, _, code) in networks {
        offsets.entry(code).or_insert_with(|| {
            let at = data.len();
            map_header(&mut data, 1);
            string(&mut data, "country");
            map_header(&mut data, 1);
            string(&mut data, "iso_code");
            string(&mut data, code);
            at
        });
    }
    let mut nodes: Vec<[Record; 2]> = vec![[Record::Empty; 2]];
    for (ip, prefix, code) in networks {
        let (bits, length) = match ip {
            IpAddr::V4(v4) => (u128::from(u32::from(*v4)), 96 + u32::from(*prefix)),
            IpAddr::V6(v6) => (u128::from(*v6), u32::from(*prefix)),
        };
        let mut node = 0;
        for depth in 0..length {
            let bit = ((bits >> (127 - depth)) & 1) as usize;
            if depth + 1 == length {
                nodes[node][bit] = Record::Data(offsets[code]);
                break;
            }
            node = match nodes[node][bit] {
                Record::Node(next) => next,
                _ => {
                    nodes.push([Record::Empty; 2]);
                    let next = nodes.len() - 1;
                    nodes[node][bit] = Record::Node(next);
                    next
                }
            };
        }
    }
    let count = nodes.len();
    let mut out = Vec::new();
    for node in &nodes {
        for record in node {
            let value = match *record {
                Record::Empty => count,
                Record::Node(next) => next,
                Record::Data(offset) => count + 16 + offset,
            };
            out.extend_from_slice(&(value as u32).to_be_bytes()[1..]);
        }
    }
    out.extend_from_slice(&[0; 16]);
    out.extend_from_slice(&data);
    out.extend_from_slice(b"\xAB\xCD\xEFMaxMind.com");
    metadata(&mut out, count as u32);
    out
}

fn metadata(out: &mut Vec<u8>, node_count: u32) {
    map_header(out, 9);
    string(out, "binary_format_major_version");
    unsigned(out, 5, 2);
    string(out, "binary_format_minor_version");
    unsigned(out, 5, 0);
    string(out, "build_epoch");
    out.extend_from_slice(&[8, 2]); // uint64 (extended type 9), 8 bytes
    out.extend_from_slice(&1_795_000_000u64.to_be_bytes());
    string(out, "database_type");
    string(out, "linktrack-test-Country");
    string(out, "description");
    map_header(out, 1);
    string(out, "en");
    string(out, "linktrack test countries");
    string(out, "ip_version");
    unsigned(out, 5, 6);
    string(out, "languages");
    out.extend_from_slice(&[1, 4]); // array (extended type 11) of 1
    string(out, "en");
    string(out, "node_count");
    unsigned(out, 6, node_count);
    string(out, "record_size");
    unsigned(out, 5, 24);
}

/// A UTF-8 string (type 2) shorter than 29 bytes.
fn string(out: &mut Vec<u8>, text: &str) {
    assert!(text.len() < 29, "{text}: too long for this writer");
    out.push((2 << 5) | text.len() as u8);
    out.extend_from_slice(text.as_bytes());
}

/// A map (type 7) of `pairs` key/value pairs.
fn map_header(out: &mut Vec<u8>, pairs: u8) {
    out.push((7 << 5) | pairs);
}

/// A uint16 (type 5) or uint32 (type 6) in its fewest big-endian bytes.
fn unsigned(out: &mut Vec<u8>, kind: u8, value: u32) {
    let bytes = value.to_be_bytes();
    let skip = bytes.iter().take_while(|b| **b == 0).count();
    out.push((kind << 5) | (4 - skip) as u8);
    out.extend_from_slice(&bytes[skip..]);
}
