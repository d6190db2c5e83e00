//! `sw_vers`: `ProductName:\t\tmacOS`, `ProductVersion:\t\t26.5`,
//! `BuildVersion:\t\t25F71`.

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SwVers {
    /// Empty when the line is missing, as are the others.
    pub product_name: String,
    pub product_version: String,
    pub build_version: String,
}

pub fn parse_sw_vers(text: &str) -> SwVers {
    let mut versions = SwVers::default();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let slot = match key.trim() {
            "ProductName" => &mut versions.product_name,
            "ProductVersion" => &mut versions.product_version,
            "BuildVersion" => &mut versions.build_version,
            _ => continue,
        };
        *slot = value.trim().to_owned();
    }
    versions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn space_separated_and_partial_output() {
        let versions = parse_sw_vers("ProductVersion: 27.0 \nBuildExtra: x\n");
        assert_eq!(
            versions,
            SwVers {
                product_version: "27.0".into(),
                ..SwVers::default()
            }
        );
    }
}
