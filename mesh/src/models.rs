//! The Mac models people mesh and their Thunderbolt 5 ports, read from the
//! data file `mesh/models.toml` (port usability is data, not code).

use std::collections::BTreeSet;

use serde::Deserialize;

/// One Mac model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Model {
    /// Stable, kebab-case: "m4-max-studio".
    pub id: String,
    /// "Mac Studio (M4 Max, 2025)".
    pub name: String,
    /// Hardware model identifiers: "Mac16,9".
    pub identifiers: Vec<String>,
    /// Thunderbolt 5 ports in hardware-port order.
    pub ports: Vec<ModelPort>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelPort {
    /// The hardware port name: "Thunderbolt 1".
    pub name: String,
    pub rdma: PortRdma,
}

/// Whether a port can carry RDMA, as users report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortRdma {
    Usable,
    /// Use only when no usable port is left; the reason says why.
    Unreliable {
        reason: String,
    },
}

impl ModelPort {
    pub fn is_usable(&self) -> bool {
        self.rdma == PortRdma::Usable
    }

    pub fn unreliable_reason(&self) -> Option<&str> {
        match &self.rdma {
            PortRdma::Usable => None,
            PortRdma::Unreliable { reason } => Some(reason),
        }
    }
}

impl Model {
    pub fn port(&self, name: &str) -> Option<&ModelPort> {
        self.ports.iter().find(|p| p.name == name)
    }

    pub fn usable_port_count(&self) -> usize {
        self.ports.iter().filter(|p| p.is_usable()).count()
    }

    /// Usable ports first, then unreliable ones, each in hardware order:
    /// the order in which a plan should take them.
    pub fn ports_by_preference(&self) -> Vec<&ModelPort> {
        let (usable, unreliable): (Vec<&ModelPort>, Vec<&ModelPort>) =
            self.ports.iter().partition(|p| p.is_usable());
        usable.into_iter().chain(unreliable).collect()
    }
}

/// Every known model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelTable {
    models: Vec<Model>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelDataError {
    #[error("model data is not valid TOML for the model table: {0}")]
    Syntax(String),
    #[error("model {index}: {problem}")]
    Invalid { index: usize, problem: String },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown Mac model {id:?}; known models: {}", known.join(", "))]
pub struct UnknownModel {
    pub id: String,
    pub known: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelFile {
    model: Vec<ModelEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelEntry {
    id: String,
    name: String,
    identifiers: Vec<String>,
    ports: Vec<PortEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PortEntry {
    name: String,
    unreliable: Option<String>,
}

const BUILTIN_MODELS: &str = include_str!("../models.toml");

impl ModelTable {
    /// The table shipped in `mesh/models.toml`; a test proves it parses.
    pub fn builtin() -> ModelTable {
        ModelTable::from_toml(BUILTIN_MODELS)
            .unwrap_or_else(|e| panic!("mesh/models.toml is checked by tests: {e}"))
    }

    /// Parses and checks model data: ids kebab-case and unique, identifiers
    /// unique across models, at least one port, port names unique, reasons
    /// not empty.
    pub fn from_toml(text: &str) -> Result<ModelTable, ModelDataError> {
        let file: ModelFile =
            toml::from_str(text).map_err(|e| ModelDataError::Syntax(e.to_string()))?;
        let mut ids = BTreeSet::new();
        let mut identifiers = BTreeSet::new();
        let mut models = Vec::with_capacity(file.model.len());
        for (index, entry) in file.model.into_iter().enumerate() {
            let invalid = |problem: String| ModelDataError::Invalid { index, problem };
            let model = model_from_entry(entry).map_err(invalid)?;
            if !ids.insert(model.id.clone()) {
                return Err(invalid(format!("id {:?} appears twice", model.id)));
            }
            if let Some(dup) = model
                .identifiers
                .iter()
                .find(|i| !identifiers.insert((*i).clone()))
            {
                return Err(invalid(format!(
                    "identifier {dup:?} already belongs to another model"
                )));
            }
            models.push(model);
        }
        Ok(ModelTable { models })
    }

    pub fn models(&self) -> &[Model] {
        &self.models
    }

    pub fn ids(&self) -> Vec<String> {
        self.models.iter().map(|m| m.id.clone()).collect()
    }

    pub fn by_id(&self, id: &str) -> Result<&Model, UnknownModel> {
        self.models
            .iter()
            .find(|m| m.id == id)
            .ok_or_else(|| UnknownModel {
                id: id.to_owned(),
                known: self.ids(),
            })
    }

    /// The model with this hardware identifier ("Mac16,9").
    pub fn by_identifier(&self, identifier: &str) -> Option<&Model> {
        self.models
            .iter()
            .find(|m| m.identifiers.iter().any(|i| i == identifier))
    }
}

fn model_from_entry(entry: ModelEntry) -> Result<Model, String> {
    let kebab = !entry.id.is_empty()
        && entry
            .id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !kebab {
        return Err(format!(
            "id {:?} must be lowercase letters, digits and '-'",
            entry.id
        ));
    }
    if entry.name.trim().is_empty() {
        return Err(format!("{}: name is empty", entry.id));
    }
    if entry.identifiers.is_empty() || entry.identifiers.iter().any(|i| i.trim().is_empty()) {
        return Err(format!(
            "{}: identifiers must list at least one non-empty hardware identifier",
            entry.id
        ));
    }
    if entry.ports.is_empty() {
        return Err(format!("{}: has no Thunderbolt ports", entry.id));
    }
    let mut names = BTreeSet::new();
    let mut ports = Vec::with_capacity(entry.ports.len());
    for port in entry.ports {
        if port.name.trim().is_empty() || !names.insert(port.name.clone()) {
            return Err(format!(
                "{}: port name {:?} is empty or appears twice",
                entry.id, port.name
            ));
        }
        let rdma = match port.unreliable {
            None => PortRdma::Usable,
            Some(reason) if reason.trim().is_empty() => {
                return Err(format!(
                    "{}: {} is marked unreliable without a reason",
                    entry.id, port.name
                ));
            }
            Some(reason) => PortRdma::Unreliable { reason },
        };
        ports.push(ModelPort {
            name: port.name,
            rdma,
        });
    }
    Ok(Model {
        id: entry.id,
        name: entry.name,
        identifiers: entry.identifiers,
        ports,
    })
}
