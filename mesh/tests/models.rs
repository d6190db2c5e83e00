//! The built-in model table parses, is consistent, and bad model data is
//! rejected with a reason; the parser never panics.

use meshd_mesh::models::{ModelDataError, ModelTable, PortRdma};
use proptest::prelude::*;

const BUILTIN: &str = include_str!("../models.toml");

#[test]
fn builtin_table_has_the_meshed_macs_with_their_port_counts() {
    let table = ModelTable::builtin();
    let expect = [
        ("m3-ultra-studio", "Mac15,14", 6, 5),
        ("m4-max-studio", "Mac16,9", 4, 3),
        ("m4-pro-mini", "Mac16,11", 3, 3),
        ("m4-max-macbook-pro", "Mac16,6", 3, 3),
        ("m4-pro-macbook-pro", "Mac16,8", 3, 3),
        ("m5-max-macbook-pro", "Mac17,6", 3, 3),
    ];
    for (id, identifier, ports, usable) in expect {
        let model = table.by_id(id).expect(id);
        assert_eq!(model.ports.len(), ports, "{id}");
        assert_eq!(model.usable_port_count(), usable, "{id}");
        assert_eq!(
            table.by_identifier(identifier).map(|m| &m.id),
            Some(&model.id)
        );
    }
    assert_eq!(table.models().len(), expect.len());
}

#[test]
fn builtin_ports_are_named_like_networksetup_and_unreliable_ones_say_why() {
    for model in ModelTable::builtin().models() {
        for (i, port) in model.ports.iter().enumerate() {
            assert_eq!(port.name, format!("Thunderbolt {}", i + 1), "{}", model.id);
            if let PortRdma::Unreliable { reason } = &port.rdma {
                assert!(reason.contains("Ethernet"), "{}: {reason}", model.id);
            }
        }
    }
    let table = ModelTable::builtin();
    let studio = table.by_id("m4-max-studio").unwrap();
    let order: Vec<&str> = studio
        .ports_by_preference()
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(
        order,
        [
            "Thunderbolt 2",
            "Thunderbolt 3",
            "Thunderbolt 4",
            "Thunderbolt 1"
        ]
    );
}

#[test]
fn builtin_data_file_is_what_builtin_reads() {
    assert_eq!(ModelTable::from_toml(BUILTIN), Ok(ModelTable::builtin()));
}

#[test]
fn unknown_model_error_lists_the_known_ids() {
    let err = ModelTable::builtin().by_id("m9-studio").unwrap_err();
    let text = err.to_string();
    assert!(text.contains("\"m9-studio\""), "{text}");
    for id in ModelTable::builtin().ids() {
        assert!(text.contains(&id), "{text} lacks {id}");
    }
    assert_eq!(ModelTable::builtin().by_identifier("Mac99,1"), None);
}

fn invalid(text: &str) -> String {
    match ModelTable::from_toml(text) {
        Err(ModelDataError::Invalid { problem, .. }) => problem,
        other => panic!("expected invalid model data, got {other:?}"),
    }
}

#[test]
fn bad_model_data_is_rejected_with_the_reason() {
    let model = |id: &str, identifiers: &str, ports: &str| {
        format!(
            "[[model]]\nid = \"{id}\"\nname = \"X\"\nidentifiers = [{identifiers}]\nports = [{ports}]\n"
        )
    };
    let port = "{ name = \"Thunderbolt 1\" }";
    let twice = model("a", "\"Mac1,1\"", port) + &model("a", "\"Mac1,2\"", port);
    assert!(invalid(&twice).contains("\"a\" appears twice"));
    let shared = model("a", "\"Mac1,1\"", port) + &model("b", "\"Mac1,1\"", port);
    assert!(invalid(&shared).contains("\"Mac1,1\" already belongs"));
    assert!(invalid(&model("A b", "\"Mac1,1\"", port)).contains("lowercase"));
    assert!(invalid(&model("a", "", port)).contains("identifiers"));
    assert!(invalid(&model("a", "\"Mac1,1\"", "")).contains("no Thunderbolt ports"));
    let dup_port = format!("{port}, {port}");
    assert!(invalid(&model("a", "\"Mac1,1\"", &dup_port)).contains("appears twice"));
    let no_reason = "{ name = \"Thunderbolt 1\", unreliable = \" \" }";
    assert!(invalid(&model("a", "\"Mac1,1\"", no_reason)).contains("without a reason"));
    let unknown_key = model("a", "\"Mac1,1\"", port) + "colour = \"red\"\n";
    assert!(matches!(
        ModelTable::from_toml(&unknown_key),
        Err(ModelDataError::Syntax(e)) if e.contains("colour")
    ));
}

proptest! {
    #[test]
    fn model_data_parser_never_panics(text in ".*") {
        let _ = ModelTable::from_toml(&text);
    }

    #[test]
    fn mutated_model_data_never_panics(cut in 0..BUILTIN.len(), insert in ".{0,12}") {
        let mut text = BUILTIN.to_owned();
        let at = (0..=cut).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
        text.insert_str(at, &insert);
        let _ = ModelTable::from_toml(&text);
    }
}
