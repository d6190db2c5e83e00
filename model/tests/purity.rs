//! The model stays free of I/O by construction: its clippy.toml forbids
//! clock, file, socket and process calls, and this test keeps runtimes and
//! I/O crates out of its dependencies.

/// What the model may depend on: the protocol's domain types, the
/// platform's pure mesh checks, and a duration formatter.
const ALLOWED: &[&str] = &["humantime", "meshd-platform", "meshd-proto"];

#[test]
fn the_model_depends_on_no_runtime_and_no_io_crate() {
    let manifest = include_str!("../Cargo.toml");
    let mut in_dependencies = false;
    let mut found = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_dependencies = line == "[dependencies]";
            continue;
        }
        if in_dependencies
            && let Some((name, _)) = line.split_once(['.', ' ', '='])
            && !name.is_empty()
            && !name.starts_with('#')
        {
            found.push(name.to_owned());
        }
    }
    assert!(
        !found.is_empty(),
        "no [dependencies] read from the manifest"
    );
    for name in &found {
        assert!(
            ALLOWED.contains(&name.as_str()),
            "the model must not depend on {name}: decisions take time and data as arguments"
        );
    }
}
