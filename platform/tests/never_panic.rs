//! No parser panics on any input: arbitrary text, text made of the
//! characters these formats are built from, every fixture mutated, and
//! arbitrary JSON shaped like `system_profiler`'s. The join over all of
//! them does not either.

use std::net::Ipv4Addr;
use std::sync::OnceLock;

use meshd_platform::ibv::{parse_ibv_devices, parse_ibv_devinfo};
use meshd_platform::linux::boot::{parse_boot_id, parse_btime};
use meshd_platform::linux::memory::{parse_meminfo, parse_pressure};
use meshd_platform::linux::pstore::parse_record;
use meshd_platform::linux::route::{no_route_answer, parse_ip_route_get};
use meshd_platform::macos::ifconfig::parse_ifconfig;
use meshd_platform::macos::memory::{MemoryOutputs, boot_identity, memory_facts};
use meshd_platform::macos::netstat::parse_netstat_interfaces;
use meshd_platform::macos::networksetup::{
    parse_all_services, parse_hardware_ports, parse_service_info, parse_service_order,
};
use meshd_platform::macos::panic_report::{
    newest_panic_report, parse_panic_report, parse_report_time,
};
use meshd_platform::macos::pmset::parse_pmset;
use meshd_platform::macos::rdma_ctl::parse_rdma_ctl_status;
use meshd_platform::macos::route::{parse_route_get, parse_route_get_fields};
use meshd_platform::macos::routing_table::{parse_destination, parse_routing_table};
use meshd_platform::macos::sw_vers::parse_sw_vers;
use meshd_platform::macos::sysctl::{
    parse_boottime, parse_hw_model, parse_pressure_level, parse_swap_usage, parse_sysctl_values,
    parse_uuid,
};
use meshd_platform::macos::system_profiler::{
    ThunderboltSpeed, parse_thunderbolt, parse_thunderbolt_json, parse_thunderbolt_text,
};
use meshd_platform::macos::vm_stat::parse_vm_stat;
use meshd_platform::macos::{MacosOutputs, PanicOutputs, join};
use meshd_platform::source::HostCommand;
use proptest::prelude::*;
use serde_json::Value;

const FIXTURE_DIRS: [&str; 3] = [
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/macos-captures"),
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/macos"),
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/linux"),
];

fn every_parser(text: &str) {
    let _ = parse_ibv_devices(text);
    let _ = parse_ibv_devinfo(text);
    let _ = parse_ifconfig(text);
    let _ = parse_all_services(text);
    let _ = parse_hardware_ports(text);
    let _ = parse_service_order(text);
    let _ = parse_rdma_ctl_status(text);
    let _ = parse_sw_vers(text);
    let _ = parse_hw_model(text);
    let _ = ThunderboltSpeed::parse(text);
    let _ = parse_thunderbolt(text);
    let _ = parse_thunderbolt_json(text);
    let _ = parse_thunderbolt_text(text);
    let _ = parse_netstat_interfaces(text);
    let _ = parse_vm_stat(text).wired_bytes();
    let values = parse_sysctl_values(text);
    for value in values.values() {
        let _ = parse_swap_usage(value);
        let _ = parse_boottime(value);
        let _ = parse_pressure_level(value);
        let _ = parse_uuid(value);
    }
    let mut blind = Vec::new();
    let _ = memory_facts(
        MemoryOutputs {
            sysctl: Some(text),
            vm_stat: Some(text),
            gpu_wired_limit: Some(text),
        },
        &mut blind,
    );
    let _ = boot_identity(Some(text), &mut blind);
    let _ = parse_pmset(text);
    let _ = parse_service_info(text);
    let _ = parse_panic_report("x.panic", text);
    let _ = parse_report_time(text);
    let _ = newest_panic_report(text.lines());
    let _ = parse_meminfo(text);
    let _ = parse_pressure(text);
    let _ = parse_btime(text);
    let _ = parse_boot_id(text);
    let _ = parse_record(text);
    route_parsers(text);
}

/// The route readers, and a lookup of addresses that hit the usual
/// routes (default, link-local, a /30, the top of the space).
fn route_parsers(text: &str) {
    let _ = parse_route_get(text).map(|lookup| lookup.egress().map(|e| e.gateway()));
    let _ = parse_route_get_fields(text).map(|route| route.map(|r| (r.matched(), r.lookup())));
    if let Ok(table) = parse_routing_table(text) {
        for address in [
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::new(10, 0, 0, 9),
            Ipv4Addr::new(169, 254, 87, 238),
            Ipv4Addr::new(192, 168, 200, 2),
            Ipv4Addr::BROADCAST,
        ] {
            let _ = table.lookup(address);
        }
    }
    for word in text.split_whitespace().take(64) {
        let _ = parse_destination(word, false);
        let _ = parse_destination(word, true);
    }
    let _ = parse_ip_route_get(text).map(|route| route.lookup());
    let _ = no_route_answer(text);
}

fn fixtures() -> &'static [String] {
    static TEXTS: OnceLock<Vec<String>> = OnceLock::new();
    TEXTS.get_or_init(|| {
        let mut texts: Vec<String> = FIXTURE_DIRS
            .iter()
            .flat_map(|dir| std::fs::read_dir(dir).expect("fixture directory"))
            .map(|entry| std::fs::read_to_string(entry.expect("entry").path()).expect("text"))
            .collect();
        texts.sort();
        texts
    })
}

/// The characters the formats are made of, so that random text often
/// forms keys, headings, stanzas and numbers.
const FORMAT_CHARS: &str = "[ \t\n:()\\[\\]{}\",.*<>=%/0-9a-fA-FxXGbps_-]{0,400}";

/// `edits` applied to `text`: at each position (taken modulo the length
/// and moved back to a character boundary) cut up to `cut` bytes and insert
/// a snippet.
fn mutated(text: &str, edits: &[(usize, usize, String)]) -> String {
    let mut text = text.to_owned();
    for (at, cut, insert) in edits {
        let mut start = at % (text.len() + 1);
        while !text.is_char_boundary(start) {
            start -= 1;
        }
        let mut end = (start + cut).min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        text.replace_range(start..end, insert);
    }
    text
}

fn edits() -> impl Strategy<Value = Vec<(usize, usize, String)>> {
    prop::collection::vec(
        (
            any::<usize>(),
            0usize..12,
            prop_oneof![
                Just(String::new()),
                Just("\n".to_owned()),
                Just("\t".to_owned()),
                Just("...".to_owned()),
                Just(":".to_owned()),
                Just("GID[".to_owned()),
                Just("]: ".to_owned()),
                "[ \t\n:(){}\\[\\]\",.*0-9a-zA-Z_\u{e9}\u{2c7}-]{0,8}",
            ],
        ),
        0..10,
    )
}

/// JSON values built from `system_profiler`'s own keys and value shapes.
fn profiler_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        Just(Value::from(64087)),
        prop_oneof![
            Just("80 Gb/s"),
            Just("Up to 120 Gb/s"),
            Just("Up to 40 Gb/s x1"),
            Just("receptacle_connected"),
            Just("3"),
            Just("-1"),
            Just("99999999999999999999"),
            Just(""),
        ]
        .prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
    ];
    let key = prop_oneof![
        Just("_items"),
        Just("_name"),
        Just("receptacle_1_tag"),
        Just("receptacle_id_key"),
        Just("current_speed_key"),
        Just("receptacle_status_key"),
        Just("domain_uuid_key"),
        Just("device_name_key"),
        Just("services_title"),
        Just("protocol_id_key"),
        Just("SPThunderboltDataType"),
    ]
    .prop_map(str::to_owned);
    leaf.prop_recursive(6, 64, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(key.clone(), inner, 0..6)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_text(text in any::<String>()) {
        every_parser(&text);
    }

    #[test]
    fn text_made_of_format_characters(text in FORMAT_CHARS) {
        every_parser(&text);
    }

    #[test]
    fn mutated_fixtures(index in any::<prop::sample::Index>(), edits in edits()) {
        let texts = fixtures();
        every_parser(&mutated(&texts[index.index(texts.len())], &edits));
    }

    #[test]
    fn route_destinations_and_rows(
        rows in prop::collection::vec(
            (
                "(default|[0-9]{1,3}(\\.[0-9]{1,3}){0,4}(/[0-9]{1,2})?)",
                "(link#[0-9]{1,3}|[0-9]{1,3}(\\.[0-9]{1,3}){3}|utun[0-9]|[0-9a-f:]{1,17})",
                "[UGHSCcLWIirRBbm0-9]{0,8}",
                "(en[0-9]|lo0|utun[0-9]|bridge0)",
            ),
            0..12,
        ),
        address in any::<u32>(),
    ) {
        let mut text = "Destination        Gateway            Flags           Netif Expire\n".to_owned();
        for (destination, gateway, flags, netif) in &rows {
            text.push_str(&format!("{destination} {gateway} {flags} {netif}\n"));
        }
        if let Ok(table) = parse_routing_table(&text) {
            let _ = table.lookup(Ipv4Addr::from(address));
        }
    }

    #[test]
    fn route_get_shaped_json(
        kind in "(unicast|local|blackhole|unreachable|x)?",
        dst in "[0-9a-f.:]{0,16}",
        gateway in proptest::option::of("[0-9a-f.:%]{0,16}"),
        dev in "[a-z0-9/ ]{0,18}",
    ) {
        let mut route = serde_json::json!({ "dst": dst, "dev": dev, "flags": [] });
        if !kind.is_empty() {
            route["type"] = Value::from(kind);
        }
        if let Some(gateway) = gateway {
            route["gateway"] = Value::from(gateway);
        }
        let text = Value::Array(vec![route]).to_string();
        let _ = parse_ip_route_get(&text).map(|r| r.lookup());
    }

    #[test]
    fn profiler_shaped_json(buses in prop::collection::vec(profiler_json(), 0..6)) {
        let text = serde_json::json!({ "SPThunderboltDataType": buses }).to_string();
        let _ = parse_thunderbolt_json(&text).expect("valid JSON with the list parses");
    }

    #[test]
    fn the_join_over_arbitrary_outputs(
        texts in prop::collection::vec(
            (any::<prop::sample::Index>(), edits()),
            HostCommand::MACOS.len(),
        ),
    ) {
        let fixtures = fixtures();
        let pick = |(index, edits): &(prop::sample::Index, Vec<(usize, usize, String)>)| {
            mutated(&fixtures[index.index(fixtures.len())], edits)
        };
        let outputs = HostCommand::MACOS.iter().zip(&texts).fold(
            MacosOutputs::default(),
            |outputs, (&command, picked)| outputs.with(command, Ok(pick(picked))),
        );
        // Every Thunderbolt service the hardware ports may name, and a
        // panic report made of the same texts.
        let outputs = (1..=6).fold(outputs, |outputs, n| {
            outputs.with_service_info(&format!("Thunderbolt {n}"), Ok(pick(&texts[n % texts.len()])))
        });
        let outputs = outputs.with_panics(PanicOutputs::Newest {
            file: "panic-full-2026-01-01-000000.0002.panic".to_owned(),
            head: Ok(pick(&texts[0])),
        });
        let _ = join(&outputs);
    }
}
