//! Cabling plans for 2–8 nodes of every model and of mixed models, each
//! checked by an independent checker; refusals name the reason.

use std::collections::BTreeSet;

use meshd_domain::facts::{HardwarePort, Ipv4Cidr};
use meshd_mesh::Backend;
use meshd_mesh::models::{Model, ModelTable};
use meshd_mesh::plan::{
    CablingPlan, DEFAULT_LINK_RANGE, PlanRefusal, SetupStep, default_names, plan, plan_in_range,
};

/// Everything wrong with `plan` for `models` (one per node): ports used
/// at most once and only ports the model has, every required pair cabled
/// exactly once, subnets disjoint /30s inside the range, addresses inside
/// their /30, distinct, and neither network nor broadcast.
fn plan_problems(plan: &CablingPlan, models: &[&Model]) -> Vec<String> {
    let mut problems = Vec::new();
    let n = models.len();
    let names: Vec<String> = (1..=n).map(|i| format!("node{i}")).collect();
    let index = |name: &str| names.iter().position(|x| x == name);
    let mut ports_used = BTreeSet::new();
    let mut pairs = Vec::new();
    let mut addresses = BTreeSet::new();
    for (k, cable) in plan.cables.iter().enumerate() {
        for end in [&cable.a, &cable.b] {
            let Some(i) = index(&end.node) else {
                problems.push(format!("cable {k}: unknown node {}", end.node));
                continue;
            };
            if models[i].port(&end.port).is_none() {
                problems.push(format!("cable {k}: {} has no {}", end.node, end.port));
            }
            if !ports_used.insert((end.node.clone(), end.port.clone())) {
                problems.push(format!("{}/{} used twice", end.node, end.port));
            }
            if !cable.subnet.contains(end.address) || cable.subnet.prefix != 30 {
                problems.push(format!(
                    "cable {k}: {} outside {}",
                    end.address, cable.subnet
                ));
            }
            let host = u32::from(end.address) & 3;
            if host == 0 || host == 3 {
                problems.push(format!(
                    "cable {k}: {} is network or broadcast",
                    end.address
                ));
            }
            if !addresses.insert(end.address) {
                problems.push(format!("address {} used twice", end.address));
            }
            if !plan.address_range.contains(end.address) {
                problems.push(format!("{} outside {}", end.address, plan.address_range));
            }
        }
        let pair = {
            let (x, y) = (cable.a.node.clone(), cable.b.node.clone());
            if x < y { (x, y) } else { (y, x) }
        };
        if pair.0 == pair.1 {
            problems.push(format!("cable {k} joins {} to itself", pair.0));
        }
        pairs.push(pair);
    }
    for (i, x) in plan.cables.iter().enumerate() {
        for y in &plan.cables[i + 1..] {
            if x.subnet.overlaps(y.subnet) {
                problems.push(format!("{} overlaps {}", x.subnet, y.subnet));
            }
        }
    }
    let expected: Vec<(String, String)> = match plan.backend {
        Backend::Jaccl => (0..n)
            .flat_map(|i| (i + 1..n).map(move |j| (i, j)))
            .map(|(i, j)| (names[i].clone(), names[j].clone()))
            .collect(),
        Backend::JacclRing if n == 2 => vec![(names[0].clone(), names[1].clone())],
        Backend::JacclRing => (0..n)
            .map(|i| {
                let (x, y) = (names[i].clone(), names[(i + 1) % n].clone());
                if x < y { (x, y) } else { (y, x) }
            })
            .collect(),
    };
    let mut sorted_pairs = pairs.clone();
    sorted_pairs.sort();
    let mut sorted_expected = expected;
    sorted_expected.sort();
    if sorted_pairs != sorted_expected {
        problems.push(format!("pairs {sorted_pairs:?} ≠ {sorted_expected:?}"));
    }
    problems
}

fn table() -> ModelTable {
    ModelTable::builtin()
}

#[test]
fn five_m4_max_studios_use_all_four_ports_and_warn_about_the_unreliable_one() {
    let table = table();
    let studio = table.by_id("m4-max-studio").unwrap();
    let plan = plan(&[studio; 5], Backend::Jaccl).expect("5 studios fit");
    assert_eq!(plan.cables.len(), 10);
    assert_eq!(plan_problems(&plan, &[studio; 5]), Vec::<String>::new());
    for node in &plan.nodes {
        let ports: BTreeSet<&str> = plan
            .cables
            .iter()
            .flat_map(|c| [&c.a, &c.b])
            .filter(|e| e.node == node.name)
            .map(|e| e.port.as_str())
            .collect();
        assert_eq!(ports.len(), 4, "{}", node.name);
    }
    assert_eq!(plan.warnings.len(), 5);
    assert!(
        plan.warnings[0].starts_with(
            "node1 (m4-max-studio) uses Thunderbolt 1, reported unreliable for RDMA: "
        ),
        "{}",
        plan.warnings[0]
    );
}

#[test]
fn six_m4_max_studios_are_refused_with_the_reason_and_the_ring_suggested() {
    let table = table();
    let studio = table.by_id("m4-max-studio").unwrap();
    let refusal = plan(&[studio; 6], Backend::Jaccl).unwrap_err();
    assert_eq!(
        refusal.to_string(),
        "node1, node2, node3, node4, node5, node6 (m4-max-studio): 4 Thunderbolt 5 ports, \
         3 usable for RDMA; a full mesh of 6 nodes needs 5 per node; a ring fits: use \
         `--backend jaccl-ring` (2 ports per node)"
    );
    let ring = plan(&[studio; 6], Backend::JacclRing).expect("a ring of 6 fits");
    assert_eq!(ring.cables.len(), 6);
    assert!(ring.warnings.is_empty(), "{:?}", ring.warnings);
}

#[test]
fn seven_m3_ultra_studios_plan_21_cables() {
    let table = table();
    let ultra = table.by_id("m3-ultra-studio").unwrap();
    let plan = plan(&[ultra; 7], Backend::Jaccl).unwrap();
    assert_eq!(plan.cables.len(), 21);
    assert_eq!(plan_problems(&plan, &[ultra; 7]), Vec::<String>::new());
    assert_eq!(
        plan.warnings.len(),
        7,
        "each uses its sixth, unreliable port"
    );
}

#[test]
fn every_model_plans_or_refuses_for_2_to_8_nodes() {
    let table = table();
    for model in table.models() {
        for n in 2..=8 {
            let nodes = vec![model; n];
            match plan(&nodes, Backend::Jaccl) {
                Ok(p) => {
                    assert!(model.ports.len() >= n - 1, "{} × {n}", model.id);
                    assert_eq!(p.cables.len(), n * (n - 1) / 2);
                    assert_eq!(
                        plan_problems(&p, &nodes),
                        Vec::<String>::new(),
                        "{} × {n}",
                        model.id
                    );
                    let needs_unreliable = model.usable_port_count() < n - 1;
                    assert_eq!(
                        !p.warnings.is_empty(),
                        needs_unreliable,
                        "{} × {n}",
                        model.id
                    );
                }
                Err(PlanRefusal::NotEnoughPorts {
                    needed,
                    short,
                    ring_fits,
                    ..
                }) => {
                    assert!(model.ports.len() < n - 1, "{} × {n}", model.id);
                    assert_eq!(needed, n - 1);
                    assert_eq!(short.len(), n);
                    assert!(ring_fits);
                }
                Err(other) => panic!("{} × {n}: {other}", model.id),
            }
            let ring = plan(&nodes, Backend::JacclRing).expect("every model has 2 ports");
            assert_eq!(ring.cables.len(), if n == 2 { 1 } else { n });
            assert_eq!(
                plan_problems(&ring, &nodes),
                Vec::<String>::new(),
                "ring {} × {n}",
                model.id
            );
        }
    }
}

#[test]
fn mixed_models_plan_by_the_smallest_port_budget() {
    let table = table();
    let ultra = table.by_id("m3-ultra-studio").unwrap();
    let studio = table.by_id("m4-max-studio").unwrap();
    let mini = table.by_id("m4-pro-mini").unwrap();
    let mbp = table.by_id("m5-max-macbook-pro").unwrap();
    let four = [ultra, studio, mini, mbp];
    let p = plan(&four, Backend::Jaccl).unwrap();
    assert_eq!(plan_problems(&p, &four), Vec::<String>::new());
    assert_eq!(p.nodes[2].model_id, "m4-pro-mini");
    assert!(
        p.warnings.is_empty(),
        "3 usable ports suffice: {:?}",
        p.warnings
    );

    let five = [ultra, ultra, studio, studio, mini];
    match plan(&five, Backend::Jaccl).unwrap_err() {
        PlanRefusal::NotEnoughPorts { short, .. } => {
            assert_eq!(short.len(), 1);
            assert_eq!((short[0].node.as_str(), short[0].ports), ("node5", 3));
        }
        other => panic!("{other}"),
    }
    let p = plan(&five, Backend::JacclRing).unwrap();
    assert_eq!(plan_problems(&p, &five), Vec::<String>::new());
}

#[test]
fn refusals_for_size_and_range() {
    let table = table();
    let ultra = table.by_id("m3-ultra-studio").unwrap();
    assert_eq!(
        plan(&[ultra], Backend::Jaccl),
        Err(PlanRefusal::TooFewNodes(1))
    );
    let refusal = plan(&[ultra; 9], Backend::Jaccl).unwrap_err();
    assert_eq!(refusal, PlanRefusal::TooManyNodes { nodes: 9, max: 8 });
    let small: Ipv4Cidr = "10.1.1.0/28".parse().unwrap();
    let refusal = plan_in_range(&default_names(4), &[ultra; 4], Backend::Jaccl, small).unwrap_err();
    assert_eq!(
        refusal.to_string(),
        "10.1.1.0/28 holds 4 /30s, but the plan has 6 cables; pick a larger range"
    );
}

#[test]
fn node_steps_configure_each_port_with_its_30_and_verify() {
    let table = table();
    let mini = table.by_id("m4-pro-mini").unwrap();
    let p = plan(&[mini; 3], Backend::Jaccl).unwrap();
    assert_eq!(p.address_range, DEFAULT_LINK_RANGE);
    let first = &p.cables[0];
    assert_eq!(
        (
            first.a.node.as_str(),
            first.a.port.as_str(),
            first.a.address.to_string()
        ),
        ("node1", "Thunderbolt 1", "10.254.0.1".to_owned())
    );
    let node1 = &p.nodes[0];
    assert!(matches!(&node1.steps[0], SetupStep::Manual(s) if s.contains("rdma_ctl enable")));
    let commands = |verify: bool| -> Vec<&str> {
        node1
            .steps
            .iter()
            .filter_map(|s| match s {
                SetupStep::Run(cmd) if !verify => Some(cmd.as_str()),
                SetupStep::Verify(cmd) if verify => Some(cmd.as_str()),
                _ => None,
            })
            .collect()
    };
    let runs = commands(false);
    assert!(runs.iter().any(|c| {
        c.starts_with("sudo networksetup -setnetworkserviceenabled \"Thunderbolt Bridge\" off")
    }));
    assert!(runs.contains(&"sudo networksetup -setmanual \"Thunderbolt 1\" 10.254.0.1 255.255.255.252  # cable to node2/Thunderbolt 1"));
    assert!(runs.contains(&"sudo networksetup -setmanual \"Thunderbolt 2\" 10.254.0.5 255.255.255.252  # cable to node3/Thunderbolt 1"));
    let verifies = commands(true);
    assert!(verifies.iter().any(|c| c.starts_with("ibv_devinfo")));
    assert!(verifies.contains(&"ping -c 3 10.254.0.2  # node2/Thunderbolt 1"));
    assert_eq!(verifies.last(), Some(&"meshctl doctor"));
}

#[test]
fn links_config_is_toml_meshd_reads() {
    let table = table();
    let studio = table.by_id("m4-max-studio").unwrap();
    let p = plan(&[studio; 3], Backend::Jaccl).unwrap();
    let parsed: toml::Table = toml::from_str(&p.nodes[1].links_config).expect("valid TOML");
    let links = parsed["links"].as_array().unwrap();
    assert_eq!(links.len(), 2);
    let first = links[0].as_table().unwrap();
    let keys: BTreeSet<&str> = first.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        BTreeSet::from([
            "peer",
            "local_address",
            "peer_address",
            "expected_speed_gbps"
        ])
    );
    assert_eq!(first["peer"].as_str(), Some("node1"));
    assert_eq!(first["local_address"].as_str(), Some("10.254.0.2"));
    assert_eq!(first["peer_address"].as_str(), Some("10.254.0.1"));
    assert_eq!(first["expected_speed_gbps"].as_integer(), Some(80));
    assert!(
        p.nodes[1]
            .links_config
            .contains("# local_iface = \"enX\"  # the Device of \"Thunderbolt 2\"")
    );
}

#[test]
fn a_nodes_hardware_ports_name_its_interfaces_in_its_links() {
    let table = table();
    let mac = table.by_id("m5-max-macbook-pro").unwrap();
    let mut p = plan(&[mac; 3], Backend::Jaccl).unwrap();
    let before = p.nodes[0].links_config.clone();
    // Thunderbolt 1 → en1, 2 → en6, 3 → en2: not in en order.
    let port = |name: &str, device: &str| HardwarePort {
        name: name.to_owned(),
        device: device.to_owned(),
        ethernet_address: String::new(),
    };
    let ports = [port("Thunderbolt 1", "en1"), port("Thunderbolt 2", "en6")];
    let missing = p
        .name_interfaces("node2", &ports)
        .expect("node2 is planned");
    let node2_ends: Vec<(String, Option<String>)> = p
        .cables
        .iter()
        .flat_map(|c| [&c.a, &c.b])
        .filter(|e| e.node == "node2")
        .map(|e| (e.port.clone(), e.iface.clone()))
        .collect();
    for (port, iface) in &node2_ends {
        let expected = match port.as_str() {
            "Thunderbolt 1" => Some("en1"),
            "Thunderbolt 2" => Some("en6"),
            _ => None,
        };
        assert_eq!(iface.as_deref(), expected, "{port}");
        assert_eq!(missing.contains(port), expected.is_none(), "{port}");
    }
    let parsed: toml::Table = toml::from_str(&p.nodes[1].links_config).expect("valid TOML");
    for link in parsed["links"].as_array().unwrap() {
        let written = link.get("local_iface").and_then(|v| v.as_str());
        assert!(matches!(written, Some("en1" | "en6")), "{link:?}");
    }
    // Other nodes are untouched; an unknown node is an error naming them.
    assert_eq!(p.nodes[0].links_config, before);
    let err = p.name_interfaces("node7", &ports).expect_err("no node7");
    assert_eq!(
        err.to_string(),
        "the plan has no node node7; its nodes are node1, node2, node3"
    );
}

#[test]
fn a_plan_names_the_nodes_it_is_given() {
    let table = ModelTable::builtin();
    let studio = table.by_id("m4-max-studio").expect("model");
    let names: Vec<String> = ["studio-1", "studio-2", "studio-3"]
        .map(str::to_owned)
        .to_vec();
    let plan = plan_in_range(&names, &[studio; 3], Backend::Jaccl, DEFAULT_LINK_RANGE)
        .expect("3 studios fit");
    let planned: Vec<&str> = plan.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(planned, ["studio-1", "studio-2", "studio-3"]);
    assert_eq!(plan.cables[0].a.node, "studio-1");
    assert_eq!(plan.cables[2].b.node, "studio-3");
    assert!(plan.nodes[0].links_config.contains("peer = \"studio-2\""));

    let refusal = plan_in_range(
        &names[..2],
        &[studio; 3],
        Backend::Jaccl,
        DEFAULT_LINK_RANGE,
    )
    .unwrap_err();
    assert_eq!(
        refusal.to_string(),
        "2 names for 3 nodes; name every node once"
    );
}
