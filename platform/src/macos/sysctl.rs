//! `sysctl -n hw.model`: the model identifier alone ("Mac16,9").

/// `None` when the output is blank.
pub fn parse_hw_model(text: &str) -> Option<String> {
    let model = text.lines().map(str::trim).find(|line| !line.is_empty())?;
    Some(model.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trimmed_first_line_or_nothing() {
        assert_eq!(parse_hw_model("Mac16,9\n").as_deref(), Some("Mac16,9"));
        assert_eq!(
            parse_hw_model("\n  Mac15,14 \n").as_deref(),
            Some("Mac15,14")
        );
        assert_eq!(parse_hw_model(" \n\t\n"), None);
    }
}
